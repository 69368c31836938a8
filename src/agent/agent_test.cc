// The agent against a fake head: workers started, stopped, adopted and reported, progress and
// usage in heartbeats, the log server, the warm pool. Registration and flags:
// agent_registration_test.cc.
#include "agent/agent.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "agent/test_util.h"
#include "net/http_client.h"
#include "protocol/credential.h"

namespace tessera::agent {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using testing::AppendFile;
using testing::FakeHead;
using testing::kToken;
using testing::Options;
using testing::ProcessAlive;
using testing::ReadFile;
using testing::SdkDir;
using testing::SliceDevices;
using testing::TempDir;
using testing::WaitUntil;

constexpr uint64_t kUid = 7;  // the uid of every job in these tests

Assignment Shell(const std::string& job, int rank, const std::string& script,
                 int64_t grace_ms = 10'000) {
  Assignment a;
  a.key = WorkerKey{job, 0, rank, kUid};
  a.worker = rank;
  a.command = {"/bin/sh", "-c", script};
  a.env = {{"RANK", std::to_string(rank)}, {"WORLD_SIZE", "4"}};
  a.grace_ms = grace_ms;
  return a;
}

// The report of `job`/0/`rank` in `workers`, or null.
json FindWorker(const json& workers, const std::string& job, int rank) {
  for (const json& w : workers) {
    if (w["job"] == job && w["rank"] == rank) return w;
  }
  return nullptr;
}

std::string CountLines(const std::string& path) {
  std::string text = ReadFile(path);
  return std::to_string(std::count(text.begin(), text.end(), '\n'));
}

TEST(AgentTest, WorkersRunExitAndReportProgressThenAreNeverRestarted) {
  TempDir dir;
  FakeHead head;
  Agent agent(Options(dir, head.port()), SliceDevices());
  ASSERT_TRUE(agent.Start().ok());
  ASSERT_TRUE(WaitUntil([&] { return head.watch_connects() == 1; }));

  const std::string starts = dir.path() + "/starts";
  const std::string script =
      "echo start >> " + starts +
      "; echo rank=$RANK; for s in 1 2 3; do "
      "printf '{\"type\":\"progress\",\"step\":%d,\"rank\":0,\"attempt\":0,\"time\":1700000000}\\n'"
      " $s >> \"$TESSERA_PROGRESS_FILE\"; done; "
      "printf '{\"type\":\"checkpoint\",\"step\":3,\"seconds\":0.5,\"time\":1700000001}\\n' >> "
      "\"$TESSERA_PROGRESS_FILE\"; exit 7";
  head.SetAssignments({Shell("train", 2, script)});

  ASSERT_TRUE(WaitUntil([&] {
    json w = FindWorker(head.LastWorkers(), "train", 2);
    return !w.is_null() && w["state"] == "Exited";
  }));
  json w = FindWorker(head.LastWorkers(), "train", 2);
  EXPECT_EQ(w["exitCode"], 7);
  EXPECT_EQ(w["signal"], 0);
  EXPECT_EQ(w["attempt"], 0);
  EXPECT_GT(w["pid"].get<int64_t>(), 0);
  EXPECT_GE(w["finishedAtMs"].get<int64_t>(), w["startedAtMs"].get<int64_t>());
  EXPECT_EQ(ReadFile(agent.LogPath(WorkerKey{"train", 0, 2, kUid})), "rank=2\n");
  EXPECT_EQ(agent.LogPath(WorkerKey{"train", 0, 2, kUid}),
            dir.path() + "/state/logs/train/7/0/worker-2.log");

  ASSERT_TRUE(WaitUntil([&] { return head.AllProgress().size() == 4; }));
  std::vector<json> progress = head.AllProgress();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(progress[i]["type"], "progress");
    EXPECT_EQ(progress[i]["step"], i + 1);
    EXPECT_EQ(progress[i]["job"], "train");
    EXPECT_EQ(progress[i]["rank"], 2);
    EXPECT_EQ(progress[i]["timeMs"], 1700000000000);
  }
  EXPECT_EQ(progress[3]["type"], "checkpoint");
  EXPECT_DOUBLE_EQ(progress[3]["seconds"].get<double>(), 0.5);

  // The exit stays in every heartbeat while the worker is assigned, and it is not restarted.
  size_t seen = head.heartbeat_count();
  ASSERT_TRUE(WaitUntil([&] { return head.heartbeat_count() >= seen + 3; }));
  EXPECT_EQ(FindWorker(head.LastWorkers(), "train", 2)["state"], "Exited");
  EXPECT_EQ(CountLines(starts), "1");

  // Unassigned: gone from heartbeats. Assigned again: its old exit is reported, no new start.
  head.SetAssignments({});
  ASSERT_TRUE(WaitUntil([&] { return head.LastWorkers().empty(); }));
  head.SetAssignments({Shell("train", 2, script)});
  ASSERT_TRUE(WaitUntil([&] { return !FindWorker(head.LastWorkers(), "train", 2).is_null(); }));
  EXPECT_EQ(FindWorker(head.LastWorkers(), "train", 2)["exitCode"], 7);
  EXPECT_EQ(CountLines(starts), "1");
  EXPECT_EQ(head.AllProgress().size(), 4u);  // each line relayed once
}

// With a head that serves the channel, the agent's heartbeats go up it and its assignments
// come down it: after the channel opens, no POST and no watch stream, one connection.
TEST(AgentTest, HeartbeatsAndAssignmentsTravelOnOneChannel) {
  TempDir dir;
  FakeHead head(0, 50, /*channel=*/true);
  Agent agent(Options(dir, head.port()), SliceDevices());
  ASSERT_TRUE(agent.Start().ok());
  ASSERT_TRUE(WaitUntil([&] { return head.channel_connects() == 1; }));
  // The POSTs before the agent took the channel up: one may still be on its way as the channel
  // opens (the head counts the connection before the agent has read its first line), and none
  // follows the first beat on the channel (the agent sends one beat at a time).
  ASSERT_TRUE(WaitUntil([&] { return head.heartbeat_count() > head.posted_heartbeats(); }));
  const size_t posted = head.posted_heartbeats();
  ASSERT_TRUE(WaitUntil([&] { return head.heartbeat_count() >= posted + 5; }));

  head.SetAssignments({Shell("train", 0, "exit 3")});
  ASSERT_TRUE(WaitUntil([&] {
    json w = FindWorker(head.LastWorkers(), "train", 0);
    return !w.is_null() && w["state"] == "Exited";
  }));
  EXPECT_EQ(FindWorker(head.LastWorkers(), "train", 0)["exitCode"], 3);
  EXPECT_EQ(head.posted_heartbeats(), posted);
  EXPECT_EQ(head.watch_connects(), 0);
  EXPECT_EQ(head.channel_connects(), 1);
  EXPECT_EQ(head.credentials().size(), 1u);  // the host's own, on the channel too
}

// Against a head without the channel (404 "no route"), the agent uses the watch and POSTs.
TEST(AgentTest, AHeadWithoutTheChannelGetsTheWatchAndPosts) {
  TempDir dir;
  FakeHead head;  // no channel route
  Agent agent(Options(dir, head.port()), SliceDevices());
  ASSERT_TRUE(agent.Start().ok());
  ASSERT_TRUE(WaitUntil([&] { return head.watch_connects() == 1; }));
  ASSERT_TRUE(WaitUntil([&] { return head.posted_heartbeats() >= 3; }));
  head.SetAssignments({Shell("train", 0, "exit 4")});
  ASSERT_TRUE(WaitUntil([&] {
    json w = FindWorker(head.LastWorkers(), "train", 0);
    return !w.is_null() && w["state"] == "Exited";
  }));
}

TEST(AgentTest, RemovingAnAssignmentStopsTheWholeWorker) {
  TempDir dir;
  FakeHead head;
  Agent agent(Options(dir, head.port()), SliceDevices());
  ASSERT_TRUE(agent.Start().ok());
  const std::string child = dir.path() + "/child.pid";
  head.SetAssignments({Shell("serve", 0, "sleep 1000 & echo $! > " + child + "; wait"),
                       Shell("other", 1, "exec sleep 1000")});
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(child).find('\n') != std::string::npos; }));
  ASSERT_TRUE(WaitUntil([&] { return head.LastWorkers().size() == 2; }));
  const pid_t grandchild = std::stoi(ReadFile(child));
  const auto leader = FindWorker(head.LastWorkers(), "serve", 0)["pid"].get<pid_t>();
  EXPECT_EQ(FindWorker(head.LastWorkers(), "serve", 0)["state"], "Running");

  head.SetAssignments({Shell("other", 1, "exec sleep 1000")});
  ASSERT_TRUE(WaitUntil([&] { return !ProcessAlive(leader) && !ProcessAlive(grandchild); }));
  ASSERT_TRUE(WaitUntil([&] { return head.LastWorkers().size() == 1; }));
  EXPECT_EQ(head.LastWorkers()[0]["job"], "other");
  EXPECT_EQ(head.LastWorkers()[0]["state"], "Running");

  // Shutdown stops the rest.
  const auto other = FindWorker(head.LastWorkers(), "other", 1)["pid"].get<pid_t>();
  agent.Shutdown();
  EXPECT_FALSE(ProcessAlive(other));
}

TEST(AgentTest, GraceEscalatesToSigkillWhenAWorkerIgnoresSigterm) {
  TempDir dir;
  FakeHead head;
  Agent agent(Options(dir, head.port()), SliceDevices());
  ASSERT_TRUE(agent.Start().ok());
  const std::string ready = dir.path() + "/ready";
  head.SetAssignments({Shell(
      "stubborn", 0, "trap '' TERM; touch " + ready + "; while :; do sleep 0.05; done", 100)});
  ASSERT_TRUE(WaitUntil([&] { return std::filesystem::exists(ready); }));
  ASSERT_TRUE(WaitUntil([&] { return head.LastWorkers().size() == 1; }));
  const auto pid = head.LastWorkers()[0]["pid"].get<pid_t>();
  head.SetAssignments({});
  ASSERT_TRUE(WaitUntil([&] { return !ProcessAlive(pid); }));
  ASSERT_TRUE(WaitUntil([&] { return head.LastWorkers().empty(); }));
}

TEST(AgentTest, ADroppedStreamReconnectsAndRunningWorkersAreAdoptedNotRestarted) {
  TempDir dir;
  FakeHead head;
  Agent agent(Options(dir, head.port()), SliceDevices());
  ASSERT_TRUE(agent.Start().ok());
  // The stream must be up before it is dropped (the workers may start from a heartbeat reply
  // before it connects).
  ASSERT_TRUE(WaitUntil([&] { return head.watch_connects() == 1; }));
  const std::string starts = dir.path() + "/starts";
  std::vector<Assignment> work = {Shell("long", 0, "echo x >> " + starts + "; exec sleep 1000"),
                                  Shell("long", 1, "echo x >> " + starts + "; exec sleep 1000")};
  head.SetAssignments(work);
  ASSERT_TRUE(WaitUntil([&] { return CountLines(starts) == "2"; }));
  // Launched outside the agent's lock: a worker may write before the agent records it.
  ASSERT_TRUE(WaitUntil([&] { return agent.Workers().size() == 2; }));
  std::vector<WorkerReport> before = agent.Workers();
  ASSERT_EQ(before.size(), 2u);

  // The head "restarts" with a history that begins again at revision 1.
  head.DropStreams(/*revision=*/1);
  ASSERT_TRUE(WaitUntil([&] { return head.watch_connects() == 2; }));
  ASSERT_TRUE(WaitUntil([&] { return agent.revision() == 1; }));
  head.DropStreams();
  ASSERT_TRUE(WaitUntil([&] { return head.watch_connects() == 3; }));
  size_t seen = head.heartbeat_count();
  ASSERT_TRUE(WaitUntil([&] { return head.heartbeat_count() >= seen + 2; }));

  std::vector<WorkerReport> after = agent.Workers();
  ASSERT_EQ(after.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(after[i].pid, before[i].pid);
    EXPECT_EQ(after[i].state, WorkerState::kRunning);
    EXPECT_TRUE(ProcessAlive(static_cast<pid_t>(after[i].pid)));
  }
  EXPECT_EQ(CountLines(starts), "2");
}

TEST(AgentTest, LogsAreServedFromAnOffsetAndFollowedUntilTheWorkerExits) {
  TempDir dir;
  FakeHead head;
  Agent agent(Options(dir, head.port()), SliceDevices());
  ASSERT_TRUE(agent.Start().ok());
  const std::string go = dir.path() + "/go";
  head.SetAssignments(
      {Shell("logs", 0,
             "echo first; while [ ! -e " + go + " ]; do sleep 0.01; done; echo second; exit 0")});
  const std::string log = agent.LogPath(WorkerKey{"logs", 0, 0, kUid});
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(log) == "first\n"; }));

  net::ClientOptions o;
  o.port = agent.port();
  // The join token opens no agent's logs; the host's own log token does.
  o.bearer_token = kToken;
  auto joined = net::HttpClient(o).Request(net::Method::kGet, "/logs/logs/7/0/0");
  ASSERT_TRUE(joined.ok());
  EXPECT_EQ(joined->status, 401);
  o.bearer_token = protocol::LogTokenFromHash(protocol::CredentialHash(agent.credential()));
  net::HttpClient client(o);
  auto all = client.Request(net::Method::kGet, "/logs/logs/7/0/0");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->status, 200);
  EXPECT_EQ(all->body, "first\n");
  EXPECT_EQ(all->headers["X-Next-Offset"], "6");
  auto tail = client.Request(net::Method::kGet, "/logs/logs/7/0/0?offset=2");
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ(tail->body, "rst\n");
  auto missing = client.Request(net::Method::kGet, "/logs/nope/7/0/0");
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->status, 404);
  missing = client.Request(net::Method::kGet, "/logs/logs/8/0/0");  // another job's uid
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->status, 404);
  auto bad = client.Request(net::Method::kGet, "/logs/..%2F..%2Fetc/7/0/0");
  ASSERT_TRUE(bad.ok());
  EXPECT_NE(bad->status, 200);

  net::HttpClient follower(o);
  std::vector<std::string> lines;
  std::atomic<bool> got_first{false};
  std::thread release([&] {
    WaitUntil([&] { return got_first.load(); });
    testing::AppendFile(go, "");
  });
  Status status = follower.Stream(net::Method::kGet, "/logs/logs/7/0/0?follow=true",
                                  [&](std::string_view line) {
                                    lines.emplace_back(line);
                                    got_first = true;
                                    return true;
                                  });
  release.join();
  EXPECT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(lines, (std::vector<std::string>{"first", "second"}));
}

TEST(AgentTest, AnAssignmentThatCannotStartIsReportedAsFailed) {
  TempDir dir;
  FakeHead head;
  Agent agent(Options(dir, head.port()), SliceDevices());
  ASSERT_TRUE(agent.Start().ok());
  Assignment missing = Shell("broken", 0, "");
  missing.command = {"no-such-program-tessera"};
  head.SetAssignments({missing});
  ASSERT_TRUE(WaitUntil([&] { return !FindWorker(head.LastWorkers(), "broken", 0).is_null(); }));
  json w = FindWorker(head.LastWorkers(), "broken", 0);
  EXPECT_EQ(w["state"], "Exited");
  EXPECT_EQ(w["exitCode"], 127);
  EXPECT_NE(w["error"].get<std::string>().find("no-such-program-tessera"), std::string::npos);
}

TEST(AgentTest, HeartbeatsCarryUsageOfRunningWorkers) {
  TempDir dir;
  FakeHead head;
  Agent agent(Options(dir, head.port()), SliceDevices());
  ASSERT_TRUE(agent.Start().ok());
  head.SetAssignments({Shell("busy", 0, "while :; do :; done")});
  ASSERT_TRUE(WaitUntil([&] {
    auto hb = head.heartbeats();
    return !hb.empty() && hb.back()["usage"]["memoryBytes"].get<int64_t>() > 0 &&
           hb.back()["usage"]["cpuPercent"].get<double>() > 0;
  }));
}

TEST(AgentTest, AStopEntryOverridesTheGraceOfWithdrawnWorkersOfThatAttempt) {
  TempDir dir;
  FakeHead head;
  Agent agent(Options(dir, head.port()), SliceDevices());
  ASSERT_TRUE(agent.Start().ok());
  const std::string ready = dir.path() + "/ready";
  const std::string stubborn =
      "trap '' TERM; touch " + ready + "-$RANK; while :; do sleep 0.05; done";
  // Both ignore SIGTERM and have an hour of grace; only attempt 0 of "a" gets graceMs 0.
  Assignment a = Shell("a", 0, stubborn, 3'600'000);
  Assignment b = Shell("b", 1, stubborn, 3'600'000);
  head.SetAssignments({a, b});
  ASSERT_TRUE(WaitUntil([&] {
    return std::filesystem::exists(ready + "-0") && std::filesystem::exists(ready + "-1");
  }));
  ASSERT_TRUE(WaitUntil([&] { return head.LastWorkers().size() == 2; }));
  const auto pid_a = FindWorker(head.LastWorkers(), "a", 0)["pid"].get<pid_t>();
  const auto pid_b = FindWorker(head.LastWorkers(), "b", 1)["pid"].get<pid_t>();

  const auto start = std::chrono::steady_clock::now();
  head.SetAssignments({}, {StopRequest{"a", 0, 0, kUid}, StopRequest{"b", 7, 0, kUid}});
  ASSERT_TRUE(WaitUntil([&] { return !ProcessAlive(pid_a); }, 10s));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  // "b" attempt 0 keeps its own grace: still running (being stopped, reported Running).
  EXPECT_TRUE(ProcessAlive(pid_b));
  ASSERT_TRUE(WaitUntil([&] { return head.LastWorkers().size() == 1; }));
  EXPECT_EQ(head.LastWorkers()[0]["job"], "b");
  EXPECT_EQ(head.LastWorkers()[0]["state"], "Running");

  // A later stop entry hurries a stop already under way.
  head.SetAssignments({}, {StopRequest{"b", 0, 0, kUid}});
  ASSERT_TRUE(WaitUntil([&] { return !ProcessAlive(pid_b); }, 10s));
  ASSERT_TRUE(WaitUntil([&] { return head.LastWorkers().empty(); }));
}

TEST(AgentTest, HeartbeatsGoOutAtOnceAfterAnExitAndOnceWithdrawnWorkersAreGone) {
  TempDir dir;
  FakeHead head(0, /*heartbeat_interval_ms=*/60'000);  // only prompt heartbeats can pass
  Agent agent(Options(dir, head.port()), SliceDevices());
  ASSERT_TRUE(agent.Start().ok());
  ASSERT_TRUE(WaitUntil([&] { return head.heartbeat_count() == 1 && head.watch_connects() == 1; }));
  const std::string go = dir.path() + "/go";
  head.SetAssignments({Shell("j", 0, "while [ ! -e " + go + " ]; do sleep 0.01; done; exit 3"),
                       Shell("j", 1, "exec sleep 1000")});
  ASSERT_TRUE(WaitUntil([&] { return agent.Workers().size() == 2; }));
  // (a) A worker exits: the next heartbeat reports it without waiting for the interval.
  AppendFile(go, "");
  ASSERT_TRUE(WaitUntil(
      [&] {
        json w = FindWorker(head.LastWorkers(), "j", 0);
        return !w.is_null() && w["state"] == "Exited" && w["exitCode"] == 3;
      },
      10s));
  // (b) The head withdraws the attempt (one worker already exited, one running, grace 0):
  // a heartbeat confirms that none is left.
  head.SetAssignments({}, {StopRequest{"j", 0, 0, kUid}});
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto hb = head.heartbeats();
        return hb.back()["revision"] == 3 && hb.back()["workers"].empty();
      },
      10s));
  // And a withdrawal of workers that had all exited is confirmed at once too.
  head.SetAssignments({Shell("k", 0, "exit 0")});
  ASSERT_TRUE(WaitUntil([&] { return !FindWorker(head.LastWorkers(), "k", 0).is_null(); }, 10s));
  ASSERT_TRUE(
      WaitUntil([&] { return FindWorker(head.LastWorkers(), "k", 0)["state"] == "Exited"; }, 10s));
  head.SetAssignments({});
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto hb = head.heartbeats();
        return hb.back()["revision"] == 5 && hb.back()["workers"].empty();
      },
      10s));
}

TEST(AgentTest, RestoreRecordsAreRelayedWithTheirSeconds) {
  TempDir dir;
  FakeHead head;
  Agent agent(Options(dir, head.port()), SliceDevices());
  ASSERT_TRUE(agent.Start().ok());
  head.SetAssignments(
      {Shell("r", 0,
             "printf '{\"type\":\"restore\",\"step\":40,\"seconds\":0.25,\"rank\":0,\"attempt\":1,"
             "\"time\":1700000002}\\n' >> \"$TESSERA_PROGRESS_FILE\"; exec sleep 1000")});
  ASSERT_TRUE(WaitUntil([&] { return head.AllProgress().size() == 1; }));
  json p = head.AllProgress()[0];
  EXPECT_EQ(p["type"], "restore");
  EXPECT_EQ(p["step"], 40);
  EXPECT_DOUBLE_EQ(p["seconds"].get<double>(), 0.25);
  EXPECT_EQ(p["timeMs"], 1700000002000);
}

TEST(AgentTest, APythonWorkerStartsInAWarmProcessAndOthersStartCold) {
  TempDir dir;
  FakeHead head;
  AgentOptions o = Options(dir, head.port());
  o.warm.python = "/usr/bin/python3";
  o.warm.sdk_dir = SdkDir();
  o.warm.size = 1;
  Agent agent(o, SliceDevices());
  ASSERT_TRUE(agent.Start().ok());
  ASSERT_NE(agent.warm_pool(), nullptr);
  ASSERT_TRUE(WaitUntil([&] { return agent.warm_pool()->ready() == 1; }))
      << ReadFile(dir.path() + "/state/warm/warm.log");
  const pid_t warm_pid = agent.warm_pool()->idle_pids().at(0);

  const std::string script = dir.path() + "/job.py";
  AppendFile(script, "import os\nprint('rank', os.environ['RANK'])\nraise SystemExit(5)\n");
  Assignment py;
  py.key = WorkerKey{"py", 0, 0, kUid};
  py.command = {"/usr/bin/python3", script};
  py.env = {{"RANK", "0"}};
  head.SetAssignments({py, Shell("sh", 1, "echo cold; exit 4")});
  ASSERT_TRUE(WaitUntil([&] {
    json p = FindWorker(head.LastWorkers(), "py", 0);
    json c = FindWorker(head.LastWorkers(), "sh", 1);
    return !p.is_null() && p["state"] == "Exited" && !c.is_null() && c["state"] == "Exited";
  }));
  json p = FindWorker(head.LastWorkers(), "py", 0);
  EXPECT_EQ(p["pid"], warm_pid);
  EXPECT_EQ(p["exitCode"], 5);
  EXPECT_EQ(ReadFile(agent.LogPath(py.key)), "rank 0\n");
  json c = FindWorker(head.LastWorkers(), "sh", 1);
  EXPECT_EQ(c["exitCode"], 4);
  EXPECT_NE(c["pid"], warm_pid);
  EXPECT_EQ(agent.warm_pool()->handed_out(), 1);

  // Refilled; shutting the agent down kills the idle process.
  ASSERT_TRUE(WaitUntil([&] { return agent.warm_pool()->ready() == 1; }));
  const pid_t refill = agent.warm_pool()->idle_pids().at(0);
  EXPECT_NE(refill, warm_pid);
  agent.Shutdown();
  EXPECT_FALSE(ProcessAlive(refill));
}

}  // namespace
}  // namespace tessera::agent
