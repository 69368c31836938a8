#include "agent/agent.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <thread>

#include "agent/test_util.h"
#include "net/http_client.h"
#include "net/http_server.h"

namespace tessera::agent {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using testing::AppendFile;
using testing::ProcessAlive;
using testing::ReadFile;
using testing::TempDir;
using testing::WaitUntil;

constexpr char kToken[] = "join-secret";

// A head that speaks the agent protocol and records what it hears.
class FakeHead {
 public:
  explicit FakeHead(uint16_t port = 0, int64_t heartbeat_interval_ms = 50)
      : heartbeat_interval_ms_(heartbeat_interval_ms) {
    net::ServerOptions options;
    options.port = port;
    options.auth.tokens = {kToken};
    server_ = std::make_unique<net::HttpServer>(options);
    EXPECT_TRUE(server_
                    ->Handle(net::Method::kPost, "/api/v1/agents/register",
                             [this](const net::Request& r) {
                               json body = json::parse(r.body);
                               std::lock_guard<std::mutex> lock(mu_);
                               registrations_.push_back(body);
                               if (refuse_status_ != 0) {
                                 return net::Response::Error(refuse_status_, refuse_error_);
                               }
                               known_ = true;
                               return net::Response::Json(
                                   200, json{{"host", body["name"]},
                                             {"heartbeatIntervalMs", heartbeat_interval_ms_},
                                             {"leaseMs", 5000}}
                                            .dump());
                             })
                    .ok());
    EXPECT_TRUE(server_
                    ->Handle(net::Method::kPost, "/api/v1/agents/{name}/heartbeat",
                             [this](const net::Request& r) {
                               std::lock_guard<std::mutex> lock(mu_);
                               names_.insert(r.params.at("name"));
                               if (!known_) return net::Response::Error(404, "unknown host");
                               heartbeats_.push_back(json::parse(r.body));
                               return net::Response::Json(200, SnapshotLocked());
                             })
                    .ok());
    EXPECT_TRUE(server_
                    ->Handle(net::Method::kGet, "/api/v1/agents/{name}/assignments",
                             [this](const net::Request& r) {
                               {
                                 std::lock_guard<std::mutex> lock(mu_);
                                 names_.insert(r.params.at("name"));
                               }
                               return net::Response::Stream(
                                   [this](std::shared_ptr<net::StreamWriter> w) {
                                     std::lock_guard<std::mutex> lock(mu_);
                                     ++watch_connects_;
                                     w->Write(SnapshotLocked() + "\n");
                                     writers_.push_back(std::move(w));
                                   });
                             })
                    .ok());
    EXPECT_TRUE(server_->Start().ok());
  }
  ~FakeHead() { server_->Stop(); }

  uint16_t port() const { return server_->port(); }

  void SetAssignments(std::vector<Assignment> assignments, std::vector<StopRequest> stop = {}) {
    std::lock_guard<std::mutex> lock(mu_);
    ++revision_;
    assignments_ = std::move(assignments);
    stop_ = std::move(stop);
    for (auto& w : writers_) w->Write(SnapshotLocked() + "\n");
  }
  // Ends every watch stream (as a head restart would); `revision` restarts the history.
  void DropStreams(std::optional<int64_t> revision = std::nullopt) {
    std::lock_guard<std::mutex> lock(mu_);
    if (revision) revision_ = *revision;
    for (auto& w : writers_) w->Close();
    writers_.clear();
  }
  void ForgetHost() {
    std::lock_guard<std::mutex> lock(mu_);
    known_ = false;
  }
  // Registrations are answered `status` with `error` (the head's error reply) from now on;
  // 0 accepts them again.
  void RefuseRegistrations(int status, std::string error = "") {
    std::lock_guard<std::mutex> lock(mu_);
    refuse_status_ = status;
    refuse_error_ = std::move(error);
  }
  // The host names of the heartbeat and assignment URLs the agent used.
  std::set<std::string> names() const {
    std::lock_guard<std::mutex> lock(mu_);
    return names_;
  }
  std::vector<json> registrations() const {
    std::lock_guard<std::mutex> lock(mu_);
    return registrations_;
  }
  std::vector<json> heartbeats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return heartbeats_;
  }
  int watch_connects() const {
    std::lock_guard<std::mutex> lock(mu_);
    return watch_connects_;
  }
  size_t heartbeat_count() const {
    std::lock_guard<std::mutex> lock(mu_);
    return heartbeats_.size();
  }
  // The workers of the newest heartbeat.
  json LastWorkers() const {
    std::lock_guard<std::mutex> lock(mu_);
    return heartbeats_.empty() ? json::array() : heartbeats_.back()["workers"];
  }
  // Every progress record received so far.
  std::vector<json> AllProgress() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<json> out;
    for (const json& h : heartbeats_) {
      for (const json& p : h["progress"]) out.push_back(p);
    }
    return out;
  }

 private:
  std::string SnapshotLocked() const {
    return protocol::AssignmentSnapshotJson(revision_, assignments_, stop_);
  }

  const int64_t heartbeat_interval_ms_;
  std::unique_ptr<net::HttpServer> server_;
  mutable std::mutex mu_;
  bool known_ = true;
  int refuse_status_ = 0;
  std::string refuse_error_;
  std::set<std::string> names_;
  int64_t revision_ = 1;
  std::vector<Assignment> assignments_;
  std::vector<StopRequest> stop_;
  std::vector<std::shared_ptr<net::StreamWriter>> writers_;
  std::vector<json> registrations_;
  std::vector<json> heartbeats_;
  int watch_connects_ = 0;
};

AgentOptions Options(const TempDir& dir, uint16_t head_port, std::string token = kToken) {
  AgentOptions o;
  o.head_port = head_port;
  o.join_token = std::move(token);
  o.name = "host-1";
  o.state_dir = dir.path() + "/state";
  o.generation = "v6e";
  o.slice = SliceMembership{"slice-000", "4x4", 1};
  o.labels = {{"pool", "a"}};
  o.backoff_initial = 20ms;
  o.backoff_max = 200ms;
  o.log_poll_interval = 10ms;
  return o;
}

std::unique_ptr<DeviceDiscovery> SliceDevices() {
  auto d = EmulatedDevices::ForSliceWorker(Generation::kV6e, Shape::Of(4, 4), 1);
  EXPECT_TRUE(d.ok());
  return std::make_unique<EmulatedDevices>(*d);
}

Assignment Shell(const std::string& job, int rank, const std::string& script,
                 int64_t grace_ms = 10'000) {
  Assignment a;
  a.key = WorkerKey{job, 0, rank};
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

TEST(AgentTest, RegistersOnceTheHeadAppearsWithDevicesAndLabels) {
  TempDir dir;
  // Reserve a port, free it, and start the agent against it before the head is up.
  uint16_t port;
  {
    FakeHead probe;
    port = probe.port();
  }
  Agent agent(Options(dir, port), SliceDevices());
  ASSERT_TRUE(agent.Start().ok());
  EXPECT_FALSE(agent.registered());
  FakeHead head(port);
  ASSERT_TRUE(WaitUntil([&] { return agent.registered(); }));
  json r = head.registrations().at(0);
  EXPECT_EQ(r["name"], "host-1");
  EXPECT_EQ(r["generation"], "v6e");
  EXPECT_EQ(r["chips"], 4);
  EXPECT_EQ(r["address"], "127.0.0.1");
  EXPECT_EQ(r["agentPort"], agent.port());
  EXPECT_EQ(r["slice"], (json{{"name", "slice-000"}, {"topology", "4x4"}, {"worker", 1}}));
  EXPECT_FALSE(r.contains("cube"));
  EXPECT_EQ(r["labels"], (json{{"pool", "a"}}));
  // Worker 1 of a 4x4 slice holds chips x in 2..3, y in 0..1.
  EXPECT_EQ(r["devices"], json::parse(R"([{"index":0,"coords":[2,0,0]},
      {"index":1,"coords":[3,0,0]},{"index":2,"coords":[2,1,0]},{"index":3,"coords":[3,1,0]}])"));
  ASSERT_TRUE(WaitUntil([&] { return head.heartbeat_count() >= 3; }));
  EXPECT_EQ(head.heartbeats().back()["workers"], json::array());
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
  EXPECT_EQ(ReadFile(agent.LogPath(WorkerKey{"train", 0, 2})), "rank=2\n");
  EXPECT_EQ(agent.LogPath(WorkerKey{"train", 0, 2}),
            dir.path() + "/state/logs/train/0/worker-2.log");

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

TEST(AgentTest, AnUnknownHostReregisters) {
  TempDir dir;
  FakeHead head;
  Agent agent(Options(dir, head.port()), SliceDevices());
  ASSERT_TRUE(agent.Start().ok());
  ASSERT_TRUE(WaitUntil([&] { return head.heartbeat_count() >= 1; }));
  head.ForgetHost();
  ASSERT_TRUE(WaitUntil([&] { return head.registrations().size() == 2; }));
  size_t seen = head.heartbeat_count();
  ASSERT_TRUE(WaitUntil([&] { return head.heartbeat_count() > seen; }));
}

TEST(AgentTest, AWrongJoinTokenIsFatalAndTheLogServerRequiresTheToken) {
  TempDir dir;
  FakeHead head;
  Agent agent(Options(dir, head.port(), "wrong-token"), SliceDevices());
  ASSERT_TRUE(agent.Start().ok());
  ASSERT_TRUE(WaitUntil([&] { return !agent.fatal_error().ok(); }));
  EXPECT_EQ(agent.fatal_error().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(agent.fatal_error().message().find("join token"), std::string::npos);
  EXPECT_FALSE(agent.registered());
  EXPECT_TRUE(head.registrations().empty());

  net::ClientOptions o;
  o.port = agent.port();
  net::HttpClient anonymous(o);
  auto response = anonymous.Request(net::Method::kGet, "/logs/a/0/0");
  ASSERT_TRUE(response.ok());
  EXPECT_EQ(response->status, 401);
}

TEST(AgentTest, ARegistrationTheHeadRefusesEndsTheAgentWithTheHeadsReasonNotARetry) {
  TempDir dir;
  FakeHead head;
  head.RefuseRegistrations(422, "slice.worker: worker 1 of slice-000 is already host host-0");
  AgentSetup setup;
  setup.options = Options(dir, head.port());
  setup.devices = SliceDevices();
  // RunAgent, as `tessera agent` runs it (a non-OK Status there is exit status 1), in a thread
  // of its own: it blocks SIGTERM in the thread that calls it.
  std::atomic<bool> returned{false};
  Status result;
  std::thread runner([&] {
    result = RunAgent(std::move(setup));
    returned = true;
  });
  const bool stopped = WaitUntil([&] { return returned.load(); });
  if (!stopped) ::pthread_kill(runner.native_handle(), SIGTERM);  // still retrying: end it
  runner.join();
  ASSERT_TRUE(stopped) << "the agent kept retrying a registration refused with HTTP 422";
  EXPECT_EQ(result.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(result.message().find("HTTP 422"), std::string::npos) << result.message();
  EXPECT_NE(result.message().find("slice.worker: worker 1 of slice-000 is already host host-0"),
            std::string::npos)
      << result.message();
  // RunAgent has returned, so the agent and its threads are gone: this count is final.
  EXPECT_EQ(head.registrations().size(), 1u);
}

TEST(AgentTest, BadRequestAndConflictAtRegistrationAreFatalToo) {
  for (int status : {400, 409}) {
    SCOPED_TRACE(status);
    TempDir dir;
    FakeHead head;
    head.RefuseRegistrations(status, "name: refused");
    Agent agent(Options(dir, head.port()), SliceDevices());
    ASSERT_TRUE(agent.Start().ok());
    ASSERT_TRUE(WaitUntil([&] { return !agent.fatal_error().ok(); }));
    agent.Shutdown();  // joins the threads: no registration can follow
    EXPECT_EQ(agent.fatal_error().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(agent.fatal_error().message().find("name: refused"), std::string::npos);
    EXPECT_FALSE(agent.registered());
    EXPECT_EQ(head.registrations().size(), 1u);
  }
}

TEST(AgentTest, ServerErrorsAtRegistrationAreRetriedUntilAccepted) {
  TempDir dir;
  FakeHead head;
  head.RefuseRegistrations(503, "store: unavailable");
  Agent agent(Options(dir, head.port()), SliceDevices());
  ASSERT_TRUE(agent.Start().ok());
  ASSERT_TRUE(WaitUntil([&] { return head.registrations().size() >= 3; }));
  EXPECT_TRUE(agent.fatal_error().ok());
  EXPECT_FALSE(agent.registered());
  head.RefuseRegistrations(0);
  ASSERT_TRUE(WaitUntil([&] { return agent.registered(); }));
  EXPECT_TRUE(agent.fatal_error().ok());
}

TEST(AgentTest, TheAgentUsesTheNormalisedNameTheHeadRegisters) {
  TempDir dir;
  FakeHead head;
  AgentOptions options = Options(dir, head.port());
  options.name = "Host-1.Example.COM";
  Agent agent(options, SliceDevices());
  ASSERT_TRUE(agent.Start().ok());
  ASSERT_TRUE(WaitUntil([&] { return head.heartbeat_count() >= 1 && head.watch_connects() >= 1; }));
  EXPECT_EQ(head.registrations().at(0)["name"], "host-1.example.com");
  EXPECT_EQ(head.names(), (std::set<std::string>{"host-1.example.com"}));
}

TEST(AgentTest, StartRefusesANameTheHeadWouldRefuse) {
  TempDir dir;
  FakeHead head;
  AgentOptions options = Options(dir, head.port());
  options.name = "host_1";
  Agent agent(options, SliceDevices());
  Status started = agent.Start();
  EXPECT_EQ(started.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(started.message().rfind("name: 'host_1' contains '_'", 0), 0u) << started.message();
  EXPECT_TRUE(head.registrations().empty());
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
  const std::string log = agent.LogPath(WorkerKey{"logs", 0, 0});
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(log) == "first\n"; }));

  net::ClientOptions o;
  o.port = agent.port();
  o.bearer_token = kToken;
  net::HttpClient client(o);
  auto all = client.Request(net::Method::kGet, "/logs/logs/0/0");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->status, 200);
  EXPECT_EQ(all->body, "first\n");
  EXPECT_EQ(all->headers["X-Next-Offset"], "6");
  auto tail = client.Request(net::Method::kGet, "/logs/logs/0/0?offset=2");
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ(tail->body, "rst\n");
  auto missing = client.Request(net::Method::kGet, "/logs/nope/0/0");
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->status, 404);
  auto bad = client.Request(net::Method::kGet, "/logs/..%2F..%2Fetc/0/0");
  ASSERT_TRUE(bad.ok());
  EXPECT_NE(bad->status, 200);

  net::HttpClient follower(o);
  std::vector<std::string> lines;
  std::atomic<bool> got_first{false};
  std::thread release([&] {
    WaitUntil([&] { return got_first.load(); });
    testing::AppendFile(go, "");
  });
  Status status =
      follower.Stream(net::Method::kGet, "/logs/logs/0/0?follow=true", [&](std::string_view line) {
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
  head.SetAssignments({}, {StopRequest{"a", 0, 0}, StopRequest{"b", 7, 0}});
  ASSERT_TRUE(WaitUntil([&] { return !ProcessAlive(pid_a); }, 10s));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  // "b" attempt 0 keeps its own grace: still running (being stopped, reported Running).
  EXPECT_TRUE(ProcessAlive(pid_b));
  ASSERT_TRUE(WaitUntil([&] { return head.LastWorkers().size() == 1; }));
  EXPECT_EQ(head.LastWorkers()[0]["job"], "b");
  EXPECT_EQ(head.LastWorkers()[0]["state"], "Running");

  // A later stop entry hurries a stop already under way.
  head.SetAssignments({}, {StopRequest{"b", 0, 0}});
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
  head.SetAssignments({}, {StopRequest{"j", 0, 0}});
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

// The repository's python/ directory (this file is src/agent/agent_test.cc).
std::string SdkDir() {
  return (std::filesystem::path(__FILE__).parent_path().parent_path().parent_path() / "python")
      .string();
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
  py.key = WorkerKey{"py", 0, 0};
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

// ----- flags -----

class FlagsTest : public ::testing::Test {
 protected:
  FlagsTest() {
    token_file_ = dir_.path() + "/token";
    testing::AppendFile(token_file_, "  secret\n");
    flags_.head = "http://127.0.0.1:7600";
    flags_.join_token_file = token_file_;
    flags_.name = "h0";
    flags_.state_dir = dir_.path() + "/s";
    flags_.generation = "v6e";
    flags_.slice = "slice-000";
    flags_.topology = "4x4";
    flags_.worker = "3";
  }
  // The message of the error MakeAgentSetup gives for `flags`, or "" when it accepts them.
  std::string Error(const AgentFlags& flags) {
    auto setup = MakeAgentSetup(flags);
    if (setup.ok()) return "";
    EXPECT_EQ(setup.status().code(), StatusCode::kInvalidArgument);
    return setup.status().message();
  }
  TempDir dir_;
  std::string token_file_;
  AgentFlags flags_;
};

TEST_F(FlagsTest, AValidSliceHost) {
  flags_.labels = {"zone=a", "tier=gold"};
  auto setup = MakeAgentSetup(flags_);
  ASSERT_TRUE(setup.ok()) << setup.status().ToString();
  EXPECT_EQ(setup->options.head_port, 7600);
  EXPECT_EQ(setup->options.join_token, "secret");
  EXPECT_EQ(setup->options.slice->worker, 3);
  EXPECT_EQ(setup->options.labels.at("tier"), "gold");
  auto devices = setup->devices->Discover();
  ASSERT_TRUE(devices.ok());
  EXPECT_EQ(devices->at(0).coords, (Coord{2, 2, 0}));
}

TEST_F(FlagsTest, TheNameIsNormalisedAsTheHeadWillRegisterIt) {
  AgentFlags f = flags_;
  f.name = "Node-1.Example.COM";
  f.state_dir = "";
  auto setup = MakeAgentSetup(f);
  ASSERT_TRUE(setup.ok()) << setup.status().ToString();
  EXPECT_EQ(setup->options.name, "node-1.example.com");
  EXPECT_EQ(std::filesystem::path(setup->options.state_dir).filename(), "agent-node-1.example.com");
  f.name = "node_1";
  EXPECT_EQ(Error(f).rfind("--name: 'node_1' contains '_'", 0), 0u) << Error(f);
  EXPECT_NE(Error(f).find("--name NAME"), std::string::npos) << Error(f);
}

TEST_F(FlagsTest, AValidCubeHost) {
  AgentFlags f = flags_;
  f.slice = f.topology = f.worker = "";
  f.generation = "7x";
  f.cube = "cube-000";
  f.block = "block-00";
  f.coord = "1,0,3";
  auto setup = MakeAgentSetup(f);
  ASSERT_TRUE(setup.ok()) << setup.status().ToString();
  auto devices = setup->devices->Discover();
  ASSERT_TRUE(devices.ok());
  ASSERT_EQ(devices->size(), 4u);
  EXPECT_EQ(devices->at(3).coords, (Coord{3, 1, 3}));
}

TEST_F(FlagsTest, EachErrorNamesItsFlag) {
  auto check = [&](AgentFlags f, const std::string& flag) {
    std::string error = Error(f);
    EXPECT_EQ(error.rfind(flag + ":", 0), 0u) << "want " << flag << ", got: " << error;
  };
  AgentFlags f = flags_;
  f.head = "127.0.0.1:7600";
  check(f, "--head");
  f = flags_;
  f.head = "http://127.0.0.1:99999";
  check(f, "--head");
  f = flags_;
  f.join_token_file = dir_.path() + "/missing";
  check(f, "--join-token-file");
  f = flags_;
  f.name = "a/b";
  check(f, "--name");
  f = flags_;
  f.port = "x";
  check(f, "--port");
  f = flags_;
  f.generation = "v9";
  check(f, "--generation");
  f = flags_;
  f.topology = "3x3";
  check(f, "--topology");
  f = flags_;
  f.worker = "4";
  check(f, "--worker");
  f = flags_;
  f.chips = "8";
  check(f, "--chips");
  f = flags_;
  f.labels = {"novalue"};
  check(f, "--label");
  f = flags_;
  f.cube = "c";
  check(f, "--cube");
  f = flags_;
  f.slice = "";
  check(f, "--slice");
  f = flags_;
  f.slice = f.topology = f.worker = "";
  f.generation = "v4";
  f.cube = "c";
  f.block = "b";
  f.coord = "2,0,0";
  check(f, "--coord");
  f.coord = "1,1";
  check(f, "--coord");
  f = flags_;
  f.warm_preload = "torch";
  check(f, "--warm-preload");
  f.warm_python = dir_.path() + "/no-python";
  check(f, "--warm-python");
  f.warm_python = "/usr/bin/python3";
  f.warm_pool = "x";
  check(f, "--warm-pool");
  f.warm_pool = "1";
  f.warm_sdk_dir = dir_.path();
  check(f, "--warm-sdk-dir");
  f.warm_preload = "torch;rm";
  check(f, "--warm-preload");
  f.warm_preload = "torch";
  f.warm_sdk_dir = "";
  f.warm_refill_delay_ms = "-1";
  check(f, "--warm-refill-delay-ms");
}

TEST_F(FlagsTest, WarmPoolFlags) {
  AgentFlags f = flags_;
  auto setup = MakeAgentSetup(f);
  ASSERT_TRUE(setup.ok());
  EXPECT_EQ(setup->options.warm.python, "");  // off by default
  f.warm_python = "/usr/bin/python3";
  f.warm_preload = "torch,numpy";
  f.warm_pool = "2";
  f.warm_sdk_dir = SdkDir();
  f.warm_refill_delay_ms = "2500";
  setup = MakeAgentSetup(f);
  ASSERT_TRUE(setup.ok()) << setup.status().ToString();
  EXPECT_EQ(setup->options.warm.python, "/usr/bin/python3");
  EXPECT_EQ(setup->options.warm.preload, (std::vector<std::string>{"torch", "numpy"}));
  EXPECT_EQ(setup->options.warm.size, 2);
  EXPECT_EQ(setup->options.warm.refill_delay, std::chrono::milliseconds(2500));
  EXPECT_TRUE(std::filesystem::exists(setup->options.warm.sdk_dir + "/tessera/_warm.py"));
}

}  // namespace
}  // namespace tessera::agent
