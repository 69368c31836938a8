#include "api/users.h"

#include <gtest/gtest.h>

#include "protocol/credential.h"
#include "store/memory_store.h"

namespace tessera::api {
namespace {

TEST(UserRegistry, CreateStoresOnlyTheHashAndFindsTheUserByToken) {
  store::MemoryStore store{store::Options()};
  UserRegistry users(store);
  auto issued = users.Create("ann", "edit", "team-a", 1000);
  ASSERT_TRUE(issued.ok()) << issued.status().ToString();
  EXPECT_EQ(issued->user.name, "ann");
  const std::string token = issued->token;
  auto stored = store.Get(kUserKind, "ann");
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->body.find(token), std::string::npos);
  EXPECT_NE(stored->body.find(protocol::Sha256Hex(token)), std::string::npos);

  auto found = users.FindByToken(token);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->name, "ann");
  EXPECT_EQ(found->role, authz::Role::kEdit);
  EXPECT_EQ(found->namespace_name, "team-a");
  EXPECT_FALSE(users.FindByToken("not-a-token").has_value());
  EXPECT_EQ(users.FindByCertificateIdentity("user:ann")->name, "ann");
  EXPECT_FALSE(users.FindByCertificateIdentity("host:ann").has_value());

  // A second registry over the same store (a restarted head) knows the user.
  UserRegistry again(store);
  ASSERT_TRUE(again.Load().ok());
  EXPECT_EQ(again.FindByToken(token)->name, "ann");
}

TEST(UserRegistry, RevokeKeepsTheRecordMarkedAndANewCreateIssuesANewToken) {
  store::MemoryStore store{store::Options()};
  UserRegistry users(store);
  auto first_issued = users.Create("bob", "view", "default", 1);
  ASSERT_TRUE(first_issued.ok());
  const std::string first = first_issued->token;
  EXPECT_EQ(users.Create("bob", "view", "default", 2).status().code(), StatusCode::kAlreadyExists);
  ASSERT_TRUE(users.Revoke("bob", 3).ok());
  EXPECT_EQ(users.FindByToken(first)->revoked_ms, 3);
  EXPECT_EQ(users.Revoke("bob", 4).status().code(), StatusCode::kNotFound);
  auto second_issued = users.Create("bob", "edit", "default", 5);
  ASSERT_TRUE(second_issued.ok());
  const std::string second = second_issued->token;
  EXPECT_FALSE(users.FindByToken(first).has_value());
  EXPECT_FALSE(users.FindByToken(second)->revoked_ms.has_value());
}

TEST(UserRegistry, RefusesBadInputNamingTheField) {
  store::MemoryStore store{store::Options()};
  UserRegistry users(store);
  struct Bad {
    const char *name, *role, *ns, *field;
  };
  const Bad cases[] = {{"Ann", "view", "default", "name:"},
                       {"admin", "view", "default", "name:"},
                       {"ann", "root", "default", "role:"},
                       {"ann", "view", "", "namespace:"},
                       {"ann", "cluster-admin", "team-a", "namespace:"},
                       {"ann", "edit", "Team A", "namespace:"}};
  for (const Bad& b : cases) {
    auto r = users.Create(b.name, b.role, b.ns, 1);
    ASSERT_FALSE(r.ok()) << b.name << " " << b.role << " " << b.ns;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message().rfind(b.field, 0), 0u) << r.status().message();
  }
  EXPECT_TRUE(users.List().empty());
}

}  // namespace
}  // namespace tessera::api
