// The agent reports a worker's exit only after every line the worker wrote to its progress
// file is relayed: the exit and the lines arrive at the head in that order, whatever the batch
// size and whenever the worker died (docs/elastic.md, "Recovery figures": steps lost must be
// exact).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "agent/agent.h"
#include "agent/test_util.h"

namespace tessera::agent {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using testing::FakeHead;
using testing::Options;
using testing::SliceDevices;
using testing::TempDir;
using testing::WaitUntil;

constexpr uint64_t kExitUid = 7;
constexpr int kLines = 40;

Assignment Worker(const std::string& script) {
  Assignment a;
  a.key = WorkerKey{"train", 0, 1, kExitUid};
  a.worker = 1;
  a.command = {"/bin/sh", "-c", script};
  a.env = {{"RANK", "1"}, {"WORLD_SIZE", "4"}};
  a.grace_ms = 0;
  return a;
}

// Writes kLines progress lines, then dies (SIGKILL of itself, as kill -9 would).
std::string WriteThenDie() {
  return "i=1; while [ $i -le " + std::to_string(kLines) +
         " ]; do printf '{\"type\":\"progress\",\"step\":%d,\"time\":1700000000}\\n' $i "
         ">> \"$TESSERA_PROGRESS_FILE\"; i=$((i+1)); done; kill -9 $$";
}

// The race, made deterministic: heartbeats only when the worker exits (the interval is a
// minute) and a batch of 5 lines, so the heartbeat that first sees the exit has 35 lines left
// to read. Before the fix that heartbeat reported the exit with 5 of 40 lines, and the head
// ended the attempt at step 5.
TEST(AgentExitProgressTest, AnExitIsReportedOnlyAfterEveryLineTheWorkerWrote) {
  TempDir dir;
  FakeHead head(0, /*heartbeat_interval_ms=*/60'000);
  AgentOptions options = Options(dir, head.port());
  options.max_progress_batch = 5;
  Agent agent(options, SliceDevices());
  ASSERT_TRUE(agent.Start().ok());
  ASSERT_TRUE(WaitUntil([&] { return head.heartbeat_count() == 1 && head.watch_connects() == 1; }));
  head.SetAssignments({Worker(WriteThenDie())});

  auto exited_in = [](const json& beat) {
    for (const json& w : beat["workers"])
      if (w["rank"] == 1 && w["state"] == "Exited") return true;
    return false;
  };
  // Every heartbeat after the exit goes out at once (no interval): the exit arrives soon.
  ASSERT_TRUE(WaitUntil(
      [&] {
        for (const json& beat : head.heartbeats())
          if (exited_in(beat)) return true;
        return false;
      },
      20s));
  size_t lines = 0;
  int last_step = 0;
  for (const json& beat : head.heartbeats()) {
    for (const json& p : beat["progress"]) {
      ++lines;
      EXPECT_EQ(p["step"], last_step + 1);  // in order, each once
      last_step = p["step"];
    }
    EXPECT_LE(beat["progress"].size(), 5u);
    if (exited_in(beat)) {
      EXPECT_EQ(lines, static_cast<size_t>(kLines)) << "the exit came before the last lines";
      json w = beat["workers"][0];
      EXPECT_EQ(w["signal"], 9);
      break;
    }
    // Until then the worker is reported running, even though it is gone.
    for (const json& w : beat["workers"]) EXPECT_EQ(w["state"], "Running");
  }
  EXPECT_EQ(last_step, kLines);
}

// A worker that exited with lines unread and is then withdrawn is not forgotten before they
// are relayed (its tailer would go with it).
TEST(AgentExitProgressTest, AWithdrawnWorkerThatExitedHasItsLastLinesRelayedFirst) {
  TempDir dir;
  FakeHead head(0, /*heartbeat_interval_ms=*/60'000);
  AgentOptions options = Options(dir, head.port());
  options.max_progress_batch = 5;
  Agent agent(options, SliceDevices());
  ASSERT_TRUE(agent.Start().ok());
  ASSERT_TRUE(WaitUntil([&] { return head.heartbeat_count() == 1 && head.watch_connects() == 1; }));
  head.SetAssignments({Worker(WriteThenDie())});
  ASSERT_TRUE(WaitUntil([&] { return head.heartbeat_count() >= 2; }, 20s));
  head.SetAssignments({}, {StopRequest{"train", 0, 0, kExitUid}});
  ASSERT_TRUE(
      WaitUntil([&] { return head.AllProgress().size() == static_cast<size_t>(kLines); }, 20s))
      << head.AllProgress().size() << " of " << kLines << " lines";
  ASSERT_TRUE(WaitUntil([&] { return head.LastWorkers().empty(); }, 20s));
}

}  // namespace
}  // namespace tessera::agent
