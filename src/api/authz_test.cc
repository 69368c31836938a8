#include "api/authz.h"

#include <gtest/gtest.h>

#include <vector>

namespace tessera::api::authz {
namespace {

const Principal kClusterAdmin{"admin", Role::kClusterAdmin, ""};
const Principal kViewA{"vera", Role::kView, "team-a"};
const Principal kEditA{"eddie", Role::kEdit, "team-a"};
const Principal kAdminA{"ada", Role::kAdmin, "team-a"};

struct Case {
  const Principal* who;
  Verb verb;
  Target target;
  bool allowed;
};

// Every role against every kind of call it may and may not make, including an attacker's: a
// view user writing; a user of namespace team-a reading, changing or deleting in team-b; a
// namespace user touching what only a cluster admin may.
TEST(Authorize, TableOfRolesVerbsAndObjects) {
  const std::vector<Case> cases = {
      // cluster-admin: everything, everywhere.
      {&kClusterAdmin, Verb::kDelete, {"TrainJob", "team-b", "x"}, true},
      {&kClusterAdmin, Verb::kList, {"TrainJob", "", ""}, true},
      {&kClusterAdmin, Verb::kDelete, {"Host", "", "h1"}, true},
      {&kClusterAdmin, Verb::kCreate, {"User", "", "u"}, true},
      {&kClusterAdmin, Verb::kList, {"AuditLog", "", ""}, true},
      // view: reads its namespace and the cluster-wide queues, writes nothing.
      {&kViewA, Verb::kGet, {"TrainJob", "team-a", "x"}, true},
      {&kViewA, Verb::kList, {"Event", "team-a", ""}, true},
      {&kViewA, Verb::kWatch, {"LocalQueue", "team-a", ""}, true},
      {&kViewA, Verb::kLogs, {"Service", "team-a", "s"}, true},
      {&kViewA, Verb::kList, {"ClusterQueue", "", ""}, true},
      {&kViewA, Verb::kCreate, {"TrainJob", "team-a", "x"}, false},
      {&kViewA, Verb::kApply, {"Service", "team-a", "s"}, false},
      {&kViewA, Verb::kDelete, {"TrainJob", "team-a", "x"}, false},
      {&kViewA, Verb::kScale, {"Service", "team-a", "s"}, false},
      {&kViewA, Verb::kApply, {"LocalQueue", "team-a", "q"}, false},
      // edit: writes its namespace's workloads, not its queues.
      {&kEditA, Verb::kCreate, {"TrainJob", "team-a", "x"}, true},
      {&kEditA, Verb::kScale, {"Service", "team-a", "s"}, true},
      {&kEditA, Verb::kDelete, {"SliceReservation", "team-a", "r"}, true},
      {&kEditA, Verb::kApply, {"LocalQueue", "team-a", "q"}, false},
      // Secrets: view lists their keys (values are served to no one), edit writes them.
      {&kViewA, Verb::kList, {"Secret", "team-a", ""}, true},
      {&kViewA, Verb::kGet, {"Secret", "team-a", "db"}, true},
      {&kViewA, Verb::kApply, {"Secret", "team-a", "db"}, false},
      {&kViewA, Verb::kDelete, {"Secret", "team-a", "db"}, false},
      {&kEditA, Verb::kApply, {"Secret", "team-a", "db"}, true},
      {&kEditA, Verb::kDelete, {"Secret", "team-a", "db"}, true},
      {&kAdminA, Verb::kCreate, {"Secret", "team-a", "db"}, true},
      {&kEditA, Verb::kGet, {"Secret", "team-b", "db"}, false},
      {&kAdminA, Verb::kApply, {"Secret", "team-b", "db"}, false},
      {&kAdminA, Verb::kList, {"Secret", "", ""}, false},
      // admin: also its namespace's LocalQueues.
      {&kAdminA, Verb::kApply, {"LocalQueue", "team-a", "q"}, true},
      {&kAdminA, Verb::kDelete, {"LocalQueue", "team-a", "q"}, true},
      // Another namespace: nothing, whatever the role.
      {&kViewA, Verb::kGet, {"TrainJob", "team-b", "x"}, false},
      {&kViewA, Verb::kList, {"Event", "team-b", ""}, false},
      {&kEditA, Verb::kDelete, {"TrainJob", "team-b", "x"}, false},
      {&kEditA, Verb::kApply, {"TrainJob", "team-b", "x"}, false},
      {&kAdminA, Verb::kApply, {"LocalQueue", "team-b", "q"}, false},
      {&kAdminA, Verb::kLogs, {"TrainJob", "team-b", "x"}, false},
      // Every namespace at once: only a cluster admin.
      {&kAdminA, Verb::kList, {"TrainJob", "", ""}, false},
      // Cluster-wide objects beyond reading queues: only a cluster admin.
      {&kAdminA, Verb::kApply, {"ClusterQueue", "", "cq"}, false},
      {&kAdminA, Verb::kDelete, {"PriorityClass", "", "high"}, false},
      {&kAdminA, Verb::kList, {"Host", "", ""}, false},
      {&kAdminA, Verb::kDelete, {"Host", "", "h1"}, false},
      {&kAdminA, Verb::kCreate, {"User", "", "u"}, false},
      {&kAdminA, Verb::kList, {"AuditLog", "", ""}, false},
      {&kAdminA, Verb::kGet, {"Metrics", "", ""}, false},
  };
  for (const Case& c : cases) {
    const Decision d = Authorize(*c.who, c.verb, c.target);
    EXPECT_EQ(d.allowed, c.allowed) << c.who->name << " " << VerbName(c.verb) << " "
                                    << DescribeTarget(c.target) << ": " << d.reason;
    EXPECT_EQ(d.reason.empty(), c.allowed) << d.reason;
  }
}

TEST(Authorize, RefusalNamesUserVerbObjectAndTheRoleThatWouldAllowIt) {
  EXPECT_EQ(Authorize(kViewA, Verb::kDelete, {"TrainJob", "team-a", "llama"}).reason,
            "user 'vera' (view in namespace 'team-a') may not delete TrainJob team-a/llama: "
            "that needs role edit in namespace 'team-a' (or cluster-admin)");
  EXPECT_EQ(Authorize(kEditA, Verb::kGet, {"Service", "team-b", "chat"}).reason,
            "user 'eddie' (edit in namespace 'team-a') may not get Service team-b/chat: that "
            "needs role view in namespace 'team-b' (or cluster-admin)");
  EXPECT_EQ(Authorize(kAdminA, Verb::kDelete, {"Host", "", "h1"}).reason,
            "user 'ada' (admin in namespace 'team-a') may not delete Host h1: that needs role "
            "cluster-admin");
  EXPECT_EQ(Authorize(kViewA, Verb::kList, {"TrainJob", "", ""}).reason,
            "user 'vera' (view in namespace 'team-a') may not list TrainJobs in every "
            "namespace: that needs role cluster-admin; a user of one namespace lists it with "
            "--namespace team-a");
}

TEST(Authorize, LeastRoleIsTheSmallestThatAllowsInItsNamespace) {
  EXPECT_EQ(LeastRole(Verb::kGet, "TrainJob"), Role::kView);
  EXPECT_EQ(LeastRole(Verb::kApply, "TrainJob"), Role::kEdit);
  EXPECT_EQ(LeastRole(Verb::kApply, "LocalQueue"), Role::kAdmin);
  EXPECT_EQ(LeastRole(Verb::kApply, "ClusterQueue"), Role::kClusterAdmin);
  EXPECT_EQ(LeastRole(Verb::kLogs, "Host"), Role::kClusterAdmin);
  // Monotone: whatever a role may do, every greater role in the same namespace may too.
  const char* kinds[] = {"TrainJob",      "Service", "SliceReservation",
                         "LocalQueue",    "Event",   "ClusterQueue",
                         "PriorityClass", "Host",    "User",
                         "AuditLog",      "Secret"};
  for (const char* kind : kinds)
    for (int v = 0; v <= static_cast<int>(Verb::kReportLoad); ++v)
      for (int r = 0; r < 3; ++r) {
        const Verb verb = static_cast<Verb>(v);
        const Target t{kind, "ns", "x"};
        if (Authorize({"u", static_cast<Role>(r), "ns"}, verb, t).allowed) {
          EXPECT_TRUE(Authorize({"u", static_cast<Role>(r + 1), "ns"}, verb, t).allowed)
              << kind << " " << VerbName(verb);
          EXPECT_FALSE(IsNamespaced(kind) &&
                       Authorize({"u", static_cast<Role>(r), "other"}, verb, t).allowed)
              << kind << " " << VerbName(verb);
        }
      }
}

TEST(Roles, NamesRoundTripAndUnknownIsRefused) {
  for (Role r : {Role::kView, Role::kEdit, Role::kAdmin, Role::kClusterAdmin})
    EXPECT_EQ(ParseRole(RoleName(r)), r);
  EXPECT_FALSE(ParseRole("root").has_value());
  EXPECT_FALSE(ParseRole("").has_value());
  EXPECT_TRUE(IsWrite(Verb::kScale));
  EXPECT_FALSE(IsWrite(Verb::kLogs));
}

}  // namespace
}  // namespace tessera::api::authz
