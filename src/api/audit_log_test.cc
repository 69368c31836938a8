#include "api/audit_log.h"

#include <gtest/gtest.h>

namespace tessera::api {
namespace {

TEST(AuditLog, KeepsTheLatestEntriesUpToItsCapacity) {
  AuditLog log(3);
  for (int i = 0; i < 5; ++i) log.Record({i, "ann", "delete", "TrainJob", "default", "j", 200, ""});
  EXPECT_EQ(log.recorded(), 5u);
  const auto all = log.Latest(10);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all.front().time_ms, 2);
  EXPECT_EQ(all.back().time_ms, 4);
  const auto last = log.Latest(1);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].time_ms, 4);
}

TEST(AuditLog, JsonNamesWhoWhatWhichWhenAndTheOutcome) {
  const auto j = AuditEntryToJson({7, "vera", "delete", "TrainJob", "team-a", "x", 403, "no"});
  EXPECT_EQ(j["user"], "vera");
  EXPECT_EQ(j["verb"], "delete");
  EXPECT_EQ(j["kind"], "TrainJob");
  EXPECT_EQ(j["namespace"], "team-a");
  EXPECT_EQ(j["name"], "x");
  EXPECT_EQ(j["timeMs"], 7);
  EXPECT_EQ(j["code"], 403);
  EXPECT_EQ(j["message"], "no");
  EXPECT_FALSE(
      AuditEntryToJson({1, "admin", "delete", "Host", "", "h", 200, ""}).contains("namespace"));
}

}  // namespace
}  // namespace tessera::api
