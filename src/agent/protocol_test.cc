#include "agent/protocol.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace tessera::agent {
namespace {

using nlohmann::json;

TEST(ProtocolTest, StopEntriesAreParsedAndMalformedOnesAreReportedNotFatal) {
  auto snapshot = ParseAssignmentSnapshot(R"({"revision": 4, "assignments": [],
      "stop": [{"job": "j", "attempt": 3, "graceMs": 0},
               {"job": "k", "attempt": 0, "graceMs": 2500},
               {"job": "../x", "attempt": 0, "graceMs": 0},
               {"job": "j", "attempt": -1, "graceMs": 0},
               {"job": "j", "attempt": 1},
               {"job": "j", "attempt": 1, "graceMs": "soon"},
               7]})");
  ASSERT_TRUE(snapshot.ok()) << snapshot.status().ToString();
  EXPECT_EQ(snapshot->stop, (std::vector<StopRequest>{{"j", 3, 0}, {"k", 0, 2500}}));
  ASSERT_EQ(snapshot->unreadable.size(), 5u);
  EXPECT_EQ(snapshot->unreadable[0].rfind("stop[].job:", 0), 0u);
  EXPECT_EQ(snapshot->unreadable[1].rfind("stop[].attempt:", 0), 0u);
  EXPECT_EQ(snapshot->unreadable[2].rfind("stop[].graceMs:", 0), 0u);
  EXPECT_EQ(snapshot->unreadable[3].rfind("stop[].graceMs:", 0), 0u);
  EXPECT_EQ(snapshot->unreadable[4], "stop[]: not an object");

  auto not_a_list = ParseAssignmentSnapshot(R"({"revision": 1, "stop": {"job": "j"}})");
  ASSERT_TRUE(not_a_list.ok());
  EXPECT_TRUE(not_a_list->stop.empty());
  EXPECT_EQ(not_a_list->unreadable, (std::vector<std::string>{"stop: must be a list"}));

  auto absent = ParseAssignmentSnapshot(R"({"revision": 1, "assignments": []})");
  ASSERT_TRUE(absent.ok());
  EXPECT_TRUE(absent->stop.empty());
  EXPECT_TRUE(absent->unreadable.empty());
}

TEST(ProtocolTest, SnapshotJsonRoundTripsStopEntries) {
  std::string text = AssignmentSnapshotJson(9, {}, {{"j", 2, 0}});
  EXPECT_EQ(json::parse(text)["stop"], json::parse(R"([{"job":"j","attempt":2,"graceMs":0}])"));
  auto parsed = ParseAssignmentSnapshot(text);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->stop, (std::vector<StopRequest>{{"j", 2, 0}}));
  EXPECT_FALSE(json::parse(AssignmentSnapshotJson(9, {})).contains("stop"));
}

TEST(ProtocolTest, HeartbeatCarriesSecondsForCheckpointAndRestoreRecordsOnly) {
  Heartbeat h;
  h.progress = {{WorkerKey{"j", 1, 0}, ProgressRecord{"restore", 40, 0.5, 1000}},
                {WorkerKey{"j", 1, 0}, ProgressRecord{"progress", 41, 0, 2000}},
                {WorkerKey{"j", 1, 0}, ProgressRecord{"checkpoint", 50, 0.25, 3000}}};
  json j = json::parse(HeartbeatJson(h));
  ASSERT_EQ(j["progress"].size(), 3u);
  EXPECT_EQ(j["progress"][0]["type"], "restore");
  EXPECT_EQ(j["progress"][0]["step"], 40);
  EXPECT_DOUBLE_EQ(j["progress"][0]["seconds"].get<double>(), 0.5);
  EXPECT_FALSE(j["progress"][1].contains("seconds"));
  EXPECT_DOUBLE_EQ(j["progress"][2]["seconds"].get<double>(), 0.25);
}

}  // namespace
}  // namespace tessera::agent
