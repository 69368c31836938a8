// The rules agents and the CLI use to follow the leader among several heads (head_list.h,
// head_follower.h).
#include "ha/head_list.h"

#include <gtest/gtest.h>

#include "ha/head_follower.h"

namespace tessera::ha {
namespace {

TEST(HeadListTest, SplitsTrimsAndDropsEmptyItems) {
  EXPECT_EQ(SplitHeadList(" http://a:1, http://b:2,,c:3 "),
            (std::vector<std::string>{"http://a:1", "http://b:2", "c:3"}));
  EXPECT_TRUE(SplitHeadList("").empty());
  EXPECT_TRUE(SplitHeadList(" , ").empty());
  EXPECT_EQ(SplitHeadList("http://a:1"), (std::vector<std::string>{"http://a:1"}));
}

// The named leader, "" for none (a plain string keeps GCC's -Wmaybe-uninitialized quiet).
std::string Named(std::string_view text) { return LeaderNamedIn(text).value_or(""); }

TEST(HeadListTest, FindsTheLeaderAStandbyNames) {
  EXPECT_EQ(Named("this head (127.0.0.1:1) is a standby; the leader is at "
                  "127.0.0.1:8081 (term 7)"),
            "127.0.0.1:8081");
  // In a JSON body and in a status message built from one.
  EXPECT_EQ(Named(R"({"error":"...; the leader is at h:9","leader":"h:9"})"), "h:9");
  EXPECT_EQ(Named("HTTP 503: the leader is at h:9; retry"), "h:9");
  EXPECT_EQ(Named("no leader is elected yet, retry shortly"), "");
  EXPECT_EQ(Named("connection refused"), "");
  EXPECT_EQ(Named("the leader is at nowhere"), "");  // no port: not an address
}

TEST(HeadListTest, NextHeadGoesToTheNamedLeaderOrRoundTheList) {
  const std::vector<std::string> heads = {"a:1", "b:2", "c:3"};
  EXPECT_EQ(NextHead(heads, 0, ""), 1u);
  EXPECT_EQ(NextHead(heads, 2, ""), 0u);
  EXPECT_EQ(NextHead(heads, 0, "c:3"), 2u);
  EXPECT_EQ(NextHead(heads, 0, "elsewhere:4"), 1u);  // not ours: the next one
  EXPECT_EQ(NextHead({"a:1"}, 0, ""), 0u);           // one head: stays
}

TEST(HeadListTest, AFollowerMovesOnOnceWhenSeveralCallersSeeOneHeadFail) {
  HeadFollower follower;
  follower.SetHeads({"a:1", "b:2", "c:3"});
  EXPECT_EQ(follower.current(), 0u);
  // A standby's 503 names the leader: straight there.
  auto moved = follower.Failed(0, "{\"error\":\"... the leader is at c:3 (term 7)\"}");
  ASSERT_TRUE(moved.has_value());
  EXPECT_EQ(moved->Describe(follower.heads()), "from=a:1 to=c:3 reason=leader_named");
  EXPECT_EQ(follower.current(), 2u);
  // Another thread saw head 0 fail too, after the move: no second move.
  EXPECT_FALSE(follower.Failed(0, "connection refused").has_value());
  EXPECT_EQ(follower.current(), 2u);
  // The leader is down: the next one round the list.
  moved = follower.Failed(2, "connection refused");
  ASSERT_TRUE(moved.has_value());
  EXPECT_EQ(moved->Describe(follower.heads()), "from=c:3 to=a:1 reason=unavailable");
  // One head: nowhere to go.
  HeadFollower one({"a:1"});
  EXPECT_FALSE(one.Failed(0, "connection refused").has_value());
  EXPECT_EQ(one.current(), 0u);
}

}  // namespace
}  // namespace tessera::ha
