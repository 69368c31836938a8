// Fencing on the agent (agent/fence.h, agent_fence.cc): the term and attempt refusals, the
// fence clock (a fake one), the per-kind policy, and an agent against a fake head: a snapshot
// of an older term is refused and the head hears of it, a training worker is stopped once no
// head has answered for the fence time while a serving replica keeps running.
#include "agent/fence.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "agent/agent.h"
#include "agent/test_util.h"

namespace tessera::agent {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using testing::FakeHead;
using testing::Options;
using testing::ProcessAlive;
using testing::ReadFile;
using testing::SliceDevices;
using testing::TempDir;
using testing::WaitUntil;

constexpr uint64_t kUid = 9;

protocol::WorkerKey Key(int attempt, uint64_t uid = kUid) { return {"train", attempt, 0, uid}; }

TEST(AgentFenceTest, ASnapshotOfAnOlderTermIsRefusedAndANewerOneRaisesIt) {
  AgentFence fence(0);
  EXPECT_EQ(fence.CheckTerm(0), "");  // an older head, and nothing newer seen yet
  EXPECT_EQ(fence.CheckTerm(3), "");
  EXPECT_EQ(fence.term(), 3u);
  const std::string older = fence.CheckTerm(2);
  EXPECT_NE(older.find("stale term: the snapshot is of term 2 but this agent has seen term 3"),
            std::string::npos)
      << older;
  EXPECT_NE(fence.CheckTerm(0).find("sends no term"), std::string::npos);
  EXPECT_EQ(fence.CheckTerm(3), "");  // the same head again
  EXPECT_EQ(fence.CheckTerm(7), "");
  EXPECT_NE(fence.CheckTerm(3), "");
  EXPECT_EQ(fence.term(), 7u);
}

TEST(AgentFenceTest, AnAttemptOlderThanOneSeenForTheSameUidIsRefused) {
  AgentFence fence(0);
  EXPECT_EQ(fence.CheckAttempt(Key(1)), "");
  const std::string refused = fence.CheckAttempt(Key(0));
  EXPECT_NE(refused.find("stale attempt: attempt 0 of train is older than attempt 1"),
            std::string::npos)
      << refused;
  EXPECT_EQ(fence.CheckAttempt(Key(1)), "");            // the same attempt (another rank)
  EXPECT_EQ(fence.CheckAttempt(Key(2)), "");            // a newer one
  EXPECT_NE(fence.CheckAttempt(Key(1)), "");            // now older
  EXPECT_EQ(fence.CheckAttempt(Key(0, kUid + 1)), "");  // another job: its own count
}

TEST(AgentFenceTest, TheFenceIsOverOnceNoHeadAnsweredForTheFenceTime) {
  AgentFence fence(3000);
  EXPECT_FALSE(fence.Over(1'000'000));  // never contacted: nothing to count from
  EXPECT_EQ(fence.deadline_ms(), 0);
  fence.Contact(1000);
  EXPECT_EQ(fence.deadline_ms(), 4000);
  EXPECT_FALSE(fence.Over(3999));
  EXPECT_TRUE(fence.Over(4000));
  fence.Contact(4500);  // a head answered again: the fence starts over
  EXPECT_FALSE(fence.Over(5000));
  EXPECT_TRUE(fence.Over(7500));

  AgentFence off(0);
  off.Contact(1);
  EXPECT_FALSE(off.enabled());
  EXPECT_FALSE(off.Over(1'000'000'000));
}

TEST(AgentFenceTest, RefusalsAreKeptForTheNextHeartbeatAtMost64) {
  AgentFence fence(1000);
  for (int i = 0; i < 70; ++i) fence.Refuse({0, "j", kUid, i, "why " + std::to_string(i)});
  std::vector<protocol::Refusal> sent = fence.TakeRefusals();
  ASSERT_EQ(sent.size(), 64u);
  EXPECT_EQ(sent.front().attempt, 6);  // the oldest were dropped
  EXPECT_TRUE(fence.TakeRefusals().empty());
  fence.Refuse({0, "j", kUid, 100, "newer"});
  fence.Restore({sent.begin(), sent.begin() + 2});  // a heartbeat that failed: in front again
  sent = fence.TakeRefusals();
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_EQ(sent[0].attempt, 6);
  EXPECT_EQ(sent[2].reason, "newer");
  fence.Refuse({0, "j", kUid, 1, std::string(5000, 'x')});
  EXPECT_EQ(fence.TakeRefusals()[0].reason.size(), 1024u);
}

TEST(AgentFenceTest, TrainingIsStoppedWhenFencedAndServingKeepsRunning) {
  Assignment a;
  a.kind = protocol::WorkloadKind::kService;
  EXPECT_EQ(KindOf(a), protocol::WorkloadKind::kService);
  EXPECT_EQ(FencePolicyFor(KindOf(a)), FenceAction::kKeepRunning);
  a.kind = protocol::WorkloadKind::kUnknown;  // a head older than fencing: by the environment
  EXPECT_EQ(KindOf(a), protocol::WorkloadKind::kTrainJob);
  EXPECT_EQ(FencePolicyFor(KindOf(a)), FenceAction::kStop);
  a.env["TESSERA_SERVICE"] = "chat";
  EXPECT_EQ(KindOf(a), protocol::WorkloadKind::kService);
  a.kind = protocol::WorkloadKind::kTrainJob;
  EXPECT_EQ(FencePolicyFor(KindOf(a)), FenceAction::kStop);
}

TEST(AgentFenceTest, TheContactFileIsReplacedWhole) {
  TempDir dir;
  const std::string path = dir.path() + "/contact";
  ASSERT_TRUE(WriteContactFile(path, 12345).ok());
  EXPECT_EQ(ReadFile(path), "12345\n");
  ASSERT_TRUE(WriteContactFile(path, 7).ok());
  EXPECT_EQ(ReadFile(path), "7\n");
  Status missing = WriteContactFile(dir.path() + "/no/such/dir/contact", 1);
  EXPECT_EQ(missing.code(), StatusCode::kUnavailable);
  EXPECT_NE(missing.message().find("no/such/dir"), std::string::npos);
  EXPECT_GT(MonotonicNowMs(), 0);
}

Assignment Sleeper(const std::string& job, int attempt, protocol::WorkloadKind kind,
                   const std::string& env_file = "") {
  Assignment a;
  a.key = WorkerKey{job, attempt, 0, kUid + (job == "serve" ? 1 : 0)};
  a.command = {"/bin/sh", "-c",
               env_file.empty() ? "exec sleep 1000" : "env > " + env_file + "; exec sleep 1000"};
  a.kind = kind;
  return a;
}

json FindWorker(const json& workers, const std::string& job) {
  for (const json& w : workers)
    if (w["job"] == job) return w;
  return nullptr;
}

// Every refusal the head has heard of, in order.
std::vector<json> Refusals(const FakeHead& head) {
  std::vector<json> out;
  for (const json& h : head.heartbeats())
    if (h.contains("refused"))
      for (const json& r : h["refused"]) out.push_back(r);
  return out;
}

TEST(AgentFenceTest, TheAgentRefusesAReplacedHeadsSnapshotAndTellsTheHead) {
  TempDir dir;
  FakeHead head;
  head.SetTerm(5);
  Agent agent(Options(dir, head.port()), SliceDevices());
  ASSERT_TRUE(agent.Start().ok());
  head.SetAssignments({Sleeper("train", 0, protocol::WorkloadKind::kTrainJob)});
  ASSERT_TRUE(WaitUntil([&] { return FindWorker(head.LastWorkers(), "train") != nullptr; }));
  const auto pid = FindWorker(head.LastWorkers(), "train")["pid"].get<pid_t>();
  ASSERT_TRUE(WaitUntil([&] { return head.heartbeats().back().value("term", 0) == 5; }));

  // A head of term 4 (replaced by the one of term 5) withdraws the worker: nothing happens.
  head.SetTerm(4);
  head.SetAssignments({});
  ASSERT_TRUE(WaitUntil([&] { return !Refusals(head).empty(); }));
  const json refusal = Refusals(head)[0];
  EXPECT_EQ(refusal["term"], 4);
  EXPECT_FALSE(refusal.contains("job"));  // the whole snapshot
  EXPECT_NE(refusal["reason"].get<std::string>().find("stale term"), std::string::npos) << refusal;
  EXPECT_TRUE(ProcessAlive(pid));
  EXPECT_EQ(FindWorker(head.LastWorkers(), "train")["state"], "Running");
  // Refused once, not in every heartbeat after.
  const size_t beats = head.heartbeat_count();
  ASSERT_TRUE(WaitUntil([&] { return head.heartbeat_count() > beats + 3; }));
  EXPECT_EQ(Refusals(head).size(), 1u);

  // The newer head's own withdrawal is applied.
  head.SetTerm(6);
  head.SetAssignments({});
  ASSERT_TRUE(WaitUntil([&] { return !ProcessAlive(pid); }));
}

TEST(AgentFenceTest, AnOlderAttemptThanOneAlreadyGivenIsNotStarted) {
  TempDir dir;
  FakeHead head;
  Agent agent(Options(dir, head.port()), SliceDevices());
  ASSERT_TRUE(agent.Start().ok());
  head.SetAssignments({Sleeper("train", 1, protocol::WorkloadKind::kTrainJob)});
  ASSERT_TRUE(WaitUntil([&] { return FindWorker(head.LastWorkers(), "train") != nullptr; }));
  head.SetAssignments({Sleeper("train", 0, protocol::WorkloadKind::kTrainJob)});
  ASSERT_TRUE(WaitUntil([&] { return !Refusals(head).empty(); }));
  const json refusal = Refusals(head)[0];
  EXPECT_EQ(refusal["job"], "train");
  EXPECT_EQ(refusal["attempt"], 0);
  EXPECT_NE(refusal["reason"].get<std::string>().find("stale attempt"), std::string::npos);
  for (const WorkerReport& w : agent.Workers()) EXPECT_NE(w.key.attempt, 0) << w.key.ToString();
}

TEST(AgentFenceTest, NoHeadForTheFenceTimeStopsTrainingButNotServing) {
  TempDir dir;
  FakeHead head;
  AgentOptions options = Options(dir, head.port());
  options.fence_ms = 1000;
  Agent agent(options, SliceDevices());
  ASSERT_TRUE(agent.Start().ok());
  const std::string env_file = dir.path() + "/train.env";
  head.SetAssignments({Sleeper("train", 0, protocol::WorkloadKind::kTrainJob, env_file),
                       Sleeper("serve", 0, protocol::WorkloadKind::kService)});
  ASSERT_TRUE(WaitUntil([&] { return head.LastWorkers().size() == 2; }));
  const auto train = FindWorker(head.LastWorkers(), "train")["pid"].get<pid_t>();
  const auto serve = FindWorker(head.LastWorkers(), "serve")["pid"].get<pid_t>();
  // The training worker is told where its agent's last contact is (the SDK's watchdog).
  ASSERT_TRUE(WaitUntil(
      [&] { return ReadFile(env_file).find("TESSERA_FENCE_MS=1000") != std::string::npos; }));
  const std::string contact = options.state_dir + "/fence/contact";
  EXPECT_NE(ReadFile(env_file).find("TESSERA_AGENT_CONTACT_FILE=" + contact), std::string::npos);
  EXPECT_FALSE(ReadFile(contact).empty());

  const auto cut = std::chrono::steady_clock::now();
  head.FailHeartbeats(503);
  ASSERT_TRUE(WaitUntil([&] { return !ProcessAlive(train); }));
  // Not before the fence time (counted from the last answered heartbeat, before the cut).
  EXPECT_GE(std::chrono::steady_clock::now() - cut, 1000ms - 100ms);
  EXPECT_TRUE(ProcessAlive(serve));
  // While fenced, a new training assignment (on the watch stream) waits for a head to answer.
  const int64_t applied = agent.revision();
  head.SetAssignments({Sleeper("train", 0, protocol::WorkloadKind::kTrainJob),
                       Sleeper("serve", 0, protocol::WorkloadKind::kService),
                       Sleeper("next", 0, protocol::WorkloadKind::kTrainJob)});
  ASSERT_TRUE(WaitUntil([&] { return agent.revision() > applied; }));  // the snapshot was seen
  for (const WorkerReport& w : agent.Workers()) EXPECT_NE(w.key.job, "next");

  head.FailHeartbeats(0);
  ASSERT_TRUE(WaitUntil([&] { return FindWorker(head.LastWorkers(), "next") != nullptr; }));
  const json exited = FindWorker(head.LastWorkers(), "train");
  EXPECT_EQ(exited["state"], "Exited");
  EXPECT_EQ(exited["signal"], SIGKILL);
  bool told = false;
  for (const json& r : Refusals(head))
    if (r.value("job", "") == "train" &&
        r["reason"].get<std::string>().find("fenced") != std::string::npos)
      told = true;
  EXPECT_TRUE(told) << "the head never heard that the fence stopped train";
  EXPECT_TRUE(ProcessAlive(serve));
}

TEST(AgentFenceTest, TheMemoryOfTermsAndAttemptsIsSavedWholeAndReadBack) {
  TempDir dir;
  const std::string path = dir.path() + "/seen";
  auto none = LoadFenceMemory(path);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(*none, FenceMemory{});  // a new agent has seen nothing

  AgentFence fence(0);
  EXPECT_FALSE(fence.TakeChanged());
  EXPECT_EQ(fence.CheckTerm(7), "");
  EXPECT_EQ(fence.CheckAttempt(Key(2)), "");
  EXPECT_EQ(fence.CheckAttempt(Key(0, kUid + 1)), "");
  EXPECT_TRUE(fence.TakeChanged());
  EXPECT_FALSE(fence.TakeChanged());
  EXPECT_EQ(fence.CheckTerm(7), "");          // the same term again: nothing new to save
  EXPECT_EQ(fence.CheckAttempt(Key(2)), "");  // the same attempt (another rank)
  EXPECT_FALSE(fence.TakeChanged());
  ASSERT_TRUE(SaveFenceMemory(path, fence.Memory()).ok());
  EXPECT_EQ(ReadFile(path), "tessera-agent-fence 1\nterm 7\nattempt 9 2\nattempt 10 0\n");

  auto read = LoadFenceMemory(path);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  AgentFence restarted(0);
  restarted.Remember(*read);
  EXPECT_EQ(restarted.term(), 7u);
  EXPECT_NE(restarted.CheckTerm(6).find("stale term"), std::string::npos);
  EXPECT_NE(restarted.CheckAttempt(Key(1)).find("stale attempt"), std::string::npos);
  EXPECT_EQ(restarted.CheckAttempt(Key(2)), "");
}

TEST(AgentFenceTest, AFenceMemoryFileTheAgentDidNotWriteIsRefusedNamingIt) {
  TempDir dir;
  const std::string path = dir.path() + "/seen";
  for (const std::string& text :
       {std::string("term 3\n"), std::string("tessera-agent-fence 2\nterm 3\n"),
        std::string("tessera-agent-fence 1\nterm x\n"),
        std::string("tessera-agent-fence 1\nterm 3\nattempt 9\n"),
        std::string("tessera-agent-fence 1\nterm 3 4\n"),
        std::string("tessera-agent-fence 1\nattempt 9 1\n"), std::string("")}) {
    std::ofstream(path, std::ios::trunc) << text;
    auto read = LoadFenceMemory(path);
    ASSERT_FALSE(read.ok()) << text;
    EXPECT_EQ(read.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(read.status().message().find(path), std::string::npos) << read.status().message();
    EXPECT_NE(read.status().message().find("delete it"), std::string::npos)
        << read.status().message();
  }
  // The agent does not start on it: it would not know which heads are deposed.
  FakeHead head;
  Agent agent(Options(dir, head.port()), SliceDevices());
  std::filesystem::create_directories(dir.path() + "/state/fence");
  std::ofstream(dir.path() + "/state/fence/seen") << "garbage\n";
  Status started = agent.Start();
  EXPECT_EQ(started.code(), StatusCode::kInvalidArgument) << started.ToString();
  EXPECT_NE(started.message().find("fence/seen:1"), std::string::npos) << started.ToString();
}

TEST(AgentFenceTest, ARestartedAgentStillRefusesADeposedHeadAndAnOlderAttempt) {
  TempDir dir;
  FakeHead head;
  head.SetTerm(5);
  {
    Agent agent(Options(dir, head.port()), SliceDevices());
    ASSERT_TRUE(agent.Start().ok());
    head.SetAssignments({Sleeper("train", 2, protocol::WorkloadKind::kTrainJob)});
    ASSERT_TRUE(WaitUntil([&] { return FindWorker(head.LastWorkers(), "train") != nullptr; }));
  }  // stopped: its worker with it
  ASSERT_TRUE(Refusals(head).empty());

  // A deposed head of term 4 gives the restarted agent work: nothing of it starts.
  head.SetTerm(4);
  head.SetAssignments({Sleeper("other", 0, protocol::WorkloadKind::kTrainJob)});
  Agent agent(Options(dir, head.port()), SliceDevices());
  ASSERT_TRUE(agent.Start().ok());
  ASSERT_TRUE(WaitUntil([&] { return !Refusals(head).empty(); }));
  json refusal = Refusals(head)[0];
  EXPECT_EQ(refusal["term"], 4);
  EXPECT_NE(refusal["reason"].get<std::string>().find("has seen term 5"), std::string::npos)
      << refusal;
  EXPECT_TRUE(agent.Workers().empty());
  EXPECT_EQ(head.heartbeats().back().value("term", 0), 5);  // told the head what it has seen

  // The leader (term 5) again, with an attempt older than the one given before the restart.
  head.SetTerm(5);
  head.SetAssignments({Sleeper("train", 1, protocol::WorkloadKind::kTrainJob)});
  ASSERT_TRUE(WaitUntil([&] { return Refusals(head).size() >= 2; }));
  refusal = Refusals(head)[1];
  EXPECT_EQ(refusal["job"], "train");
  EXPECT_EQ(refusal["attempt"], 1);
  EXPECT_NE(refusal["reason"].get<std::string>().find("older than attempt 2"), std::string::npos)
      << refusal;
  EXPECT_TRUE(agent.Workers().empty());
}

}  // namespace
}  // namespace tessera::agent
