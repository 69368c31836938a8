// The continue token and the limit of paginated lists (list_pages.h): a token round-trips,
// is opaque (base64url), and every wrong one is refused naming the field and the fix.
#include "api/list_pages.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace tessera::api {
namespace {

TEST(ListPages, ATokenRoundTrips) {
  const ContinueToken token{"TrainJob", "team-a", 1733380000000042, "00000000000000000017"};
  const std::string text = EncodeContinue(token);
  EXPECT_EQ(
      text.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"),
      std::string::npos)
      << text << " needs no escaping in a query";
  auto back = DecodeContinue(text, "TrainJob", "team-a");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->kind, token.kind);
  EXPECT_EQ(back->namespace_name, token.namespace_name);
  EXPECT_EQ(back->resource_version, token.resource_version);
  EXPECT_EQ(back->after, token.after);
  // Every length of position, so every base64 tail (0, 1 and 2 bytes) is decoded.
  for (std::string after : {"h", "ho", "hos", "host", "host-0"}) {
    auto again = DecodeContinue(EncodeContinue({"Host", "", 7, after}), "Host", "");
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(again->after, after);
  }
}

TEST(ListPages, AWrongTokenNamesContinueAndTheFix) {
  const std::string jobs = EncodeContinue({"TrainJob", "", 5, "00000000000000000001"});
  for (const auto& [text, kind, ns] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"not a token!", "TrainJob", ""},
           {"bm90IGpzb24", "TrainJob", ""},  // base64url of "not json"
           {"e30", "TrainJob", ""},          // "{}"
           {jobs, "Host", ""},               // another kind's
           {jobs, "TrainJob", "team-a"}}) {  // another namespace's
    auto refused = DecodeContinue(text, kind, ns);
    ASSERT_FALSE(refused.ok()) << text;
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(refused.status().message().rfind("continue: ", 0), 0u) << refused.status().message();
    EXPECT_NE(refused.status().message().find("list again without continue"), std::string::npos);
  }
}

TEST(ListPages, LimitIsANumber) {
  EXPECT_EQ(*ParseLimit(std::nullopt), 0u);
  EXPECT_EQ(*ParseLimit(std::string("500")), 500u);
  for (std::string bad : {"", "-1", "5x", " 5", "1e3"}) {
    auto refused = ParseLimit(bad);
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_EQ(refused.status().message().rfind("limit: ", 0), 0u);
  }
}

}  // namespace
}  // namespace tessera::api
