// Quiet and steady heartbeats (quiet_beats.cc): an idle host's beat, or a running host's that
// reports the same workers, is answered without the controller's lock with exactly what
// Heartbeat would answer, its lease and its progress count, and any change that could make the
// answer differ sends the host's beats through Heartbeat again. And hosts lost in one
// tick are written a chunk to a commit (leases.cc). The store is a store::CountingStore.
#include <gtest/gtest.h>

#include "controller/controller_test_util.h"
#include "store/counting_store.h"

namespace tessera::controller {
namespace {

class QuietBeatsTest : public CountingStoreTest {
 protected:
  static protocol::Heartbeat Idle() { return protocol::Heartbeat{}; }
  // The answer of a beat taken from memory, parsed; nullopt when it needs Heartbeat.
  static std::optional<Json> Parsed(const std::optional<std::string>& text) {
    if (!text) return std::nullopt;
    return Json::parse(*text);
  }
  std::optional<Json> Quiet(const std::string& host) {
    return Parsed(c_->QuietHeartbeat(host, CredentialOf(host), Idle()));
  }
  // Job `name` of one slice placed and its workers reported running (full heartbeats): its
  // hosts, in rank order.
  std::vector<std::string> StartJob(const std::string& name) {
    Ok(c_->CreateJob(JobDoc(name, 1)));
    EXPECT_TRUE(c_->RunPass().ok());
    std::vector<std::string> hosts;
    const Json st = Ok(c_->GetJob(name))["status"];
    for (const Json& w : st["workers"]) hosts.push_back(w["host"]);
    for (const std::string& h : hosts)
      Ok(Beat(*c_, h, {{"workers", WorkerReports(Ok(c_->Assignments(h)), "Running")}}));
    EXPECT_EQ(Ok(c_->GetJob(name))["status"]["phase"], "Running");
    return hosts;
  }
  // `host`'s beat: its assigned workers in `state` (pid 100 unless given), and a progress line
  // at `step` for each when step >= 0.
  static Json BeatBody(const Json& assignments, int64_t step, const std::string& state = "Running",
                       int exit_code = 0) {
    Json body = {{"workers", WorkerReports(assignments, state, exit_code)}};
    if (step >= 0) body["progress"] = ProgressReports(assignments, step, 1000 + step);
    return body;
  }
  std::optional<Json> SteadyBeat(const std::string& host, const Json& body) {
    auto beat = protocol::ParseHeartbeat(body.dump());
    EXPECT_TRUE(beat.ok()) << beat.status().ToString();
    if (!beat.ok()) return std::nullopt;
    return Parsed(c_->QuietHeartbeat(host, CredentialOf(host), *beat));
  }
  std::string HostField(const std::string& host, const std::string& field) {
    Json list = c_->ListHosts();
    for (const Json& h : list["items"])
      if (h["metadata"]["name"] == host) return h["status"][field].dump();
    return "";
  }
};

TEST_F(QuietBeatsTest, AnIdleHostIsAnsweredWithoutTheLockAsHeartbeatWouldAnswer) {
  RegisterTwoSlices();
  const std::string host = HostName(0, 0);
  // Registered and idle: its first beat is quiet already (a fleet that starts at once).
  auto quiet = Quiet(host);
  ASSERT_TRUE(quiet);
  EXPECT_EQ(*quiet, Ok(c_->Assignments(host)));
  const Json full = Ok(Beat(*c_, host, Json::object()));
  quiet = Quiet(host);
  ASSERT_TRUE(quiet);
  EXPECT_EQ(*quiet, full);

  // Another agent's credential, or a beat that reports something, needs the full path.
  EXPECT_FALSE(c_->QuietHeartbeat(host, CredentialOf("someone-else"), Idle()));
  EXPECT_FALSE(c_->QuietHeartbeat(host, "not hex", Idle()));
  protocol::Heartbeat refusing;
  refusing.refused.push_back({0, "", 0, 0, "fenced"});
  EXPECT_FALSE(c_->QuietHeartbeat(host, CredentialOf(host), refusing));
  EXPECT_FALSE(c_->QuietHeartbeat(HostName(0, 1), CredentialOf(host), Idle()))
      << "another host's memory is its own";

  Start();  // the head restarts (or another takes over): the idle fleet's beats are quiet
  quiet = Quiet(HostName(1, 1));
  ASSERT_TRUE(quiet);
  EXPECT_EQ(*quiet, Ok(c_->Assignments(HostName(1, 1))));
}

TEST_F(QuietBeatsTest, QuietBeatsHoldTheLeaseAndShowInTheHost) {
  RegisterTwoSlices();
  for (int s = 0; s < 2; ++s)
    for (int w = 0; w < 4; ++w) Ok(Beat(*c_, HostName(s, w), Json::object()));
  const std::string host = HostName(1, 2);
  // 20 s of quiet beats from one host, none from the others (lease 5 s).
  for (int second = 0; second < 20; ++second) {
    clock_.AdvanceMs(1000);
    ASSERT_TRUE(Quiet(host)) << "second " << second;
    ASSERT_TRUE(c_->Tick().ok());
  }
  EXPECT_EQ(HostField(host, "state"), "\"Ready\"");
  EXPECT_EQ(HostField(HostName(0, 0), "state"), "\"Lost\"");
  EXPECT_EQ(HostField(host, "lastHeartbeatMs"), std::to_string(clock_.NowMs()));
  // A quiet beat between ticks shows at once.
  clock_.AdvanceMs(300);
  ASSERT_TRUE(Quiet(host));
  EXPECT_EQ(HostField(host, "lastHeartbeatMs"), std::to_string(clock_.NowMs()));
}

TEST_F(QuietBeatsTest, ABeatThatArrivedHoldsTheLeaseWhileItWaitsToBeHandled) {
  RegisterTwoSlices();
  for (int s = 0; s < 2; ++s)
    for (int w = 0; w < 4; ++w) Ok(Beat(*c_, HostName(s, w), Json::object()));
  const std::string waiting = HostName(0, 1);
  const std::string handled = HostName(0, 2);
  // 20 s: one host's beats arrive and wait (the head's channel worker behind a long tick),
  // another's are handled; the rest are silent (lease 5 s).
  for (int second = 0; second < 20; ++second) {
    clock_.AdvanceMs(1000);
    c_->HeartbeatArrived(waiting);
    c_->HeartbeatArrived("no-such-host");  // nothing to renew
    Ok(Beat(*c_, handled, Json::object()));
    ASSERT_TRUE(c_->Tick().ok());
  }
  EXPECT_EQ(HostField(waiting, "state"), "\"Ready\"");
  EXPECT_EQ(HostField(waiting, "lastHeartbeatMs"), std::to_string(clock_.NowMs()));
  EXPECT_EQ(HostField(handled, "state"), "\"Ready\"");
  EXPECT_EQ(HostField(HostName(0, 0), "state"), "\"Lost\"");

  // Silent once its beats stop arriving: lost after the lease.
  clock_.AdvanceMs(5001);
  ASSERT_TRUE(c_->Tick().ok());
  EXPECT_EQ(HostField(waiting, "state"), "\"Lost\"");
  // A Lost host's beat that arrives does not bring it back; handled, it does.
  clock_.AdvanceMs(1000);
  c_->HeartbeatArrived(waiting);
  ASSERT_TRUE(c_->Tick().ok());
  EXPECT_EQ(HostField(waiting, "state"), "\"Lost\"");
  Ok(Beat(*c_, waiting, Json::object()));
  EXPECT_EQ(HostField(waiting, "state"), "\"Ready\"");
}

TEST_F(QuietBeatsTest, APlacementOrALossSendsOnlyTheirHostsBeatsThroughHeartbeatAgain) {
  RegisterTwoSlices();
  for (int s = 0; s < 2; ++s)
    for (int w = 0; w < 4; ++w) Ok(Beat(*c_, HostName(s, w), Json::object()));
  ASSERT_TRUE(Quiet(HostName(0, 0)));
  ASSERT_TRUE(Quiet(HostName(1, 0)));

  // A job placed on one slice: its hosts' memories no longer hold; the other slice's hosts
  // stay quiet, answered at the new revision exactly as Heartbeat would answer them.
  const Json before = *Quiet(HostName(1, 0));
  Ok(c_->CreateJob(JobDoc("a", 1)));
  ASSERT_TRUE(c_->RunPass().ok());
  int placed_slice = -1, idle_slice = -1;
  for (int s = 0; s < 2; ++s) {
    const Json assignments = Ok(c_->Assignments(HostName(s, 0)));
    (assignments["assignments"].empty() ? idle_slice : placed_slice) = s;
  }
  ASSERT_GE(placed_slice, 0);
  ASSERT_GE(idle_slice, 0);
  for (int w = 0; w < 4; ++w) {
    EXPECT_FALSE(Quiet(HostName(placed_slice, w))) << "placed on: host " << w;
    const std::string idle = HostName(idle_slice, w);
    auto quiet = Quiet(idle);
    ASSERT_TRUE(quiet) << "a placement elsewhere leaves host " << w << " quiet";
    EXPECT_EQ(*quiet, Ok(c_->Assignments(idle)));
    EXPECT_EQ(*quiet, Ok(Beat(*c_, idle, Json::object())));
    EXPECT_GT((*quiet)["revision"].get<int64_t>(), before["revision"].get<int64_t>());
  }
  // The full path answers with the job's workers: a host with workers to run is never quiet.
  const Json answer = Ok(Beat(*c_, HostName(placed_slice, 0), Json::object()));
  EXPECT_FALSE(answer["assignments"].empty());
  EXPECT_FALSE(Quiet(HostName(placed_slice, 0)));

  // A lost host comes back through Heartbeat (HostRecovered), not a remembered answer.
  const std::string host = HostName(idle_slice, 3);
  Ok(Beat(*c_, host, Json::object()));
  ASSERT_TRUE(Quiet(host));
  clock_.AdvanceMs(6000);
  ASSERT_TRUE(c_->Tick().ok());
  ASSERT_EQ(HostField(host, "state"), "\"Lost\"");
  EXPECT_FALSE(Quiet(host));
  Ok(Beat(*c_, host, Json::object()));
  EXPECT_EQ(HostField(host, "state"), "\"Ready\"");
  EXPECT_TRUE(Quiet(host));
}

TEST_F(QuietBeatsTest, ARunningHostsSteadyBeatIsAnsweredFromMemoryAndItsProgressCounts) {
  RegisterTwoSlices();
  const std::vector<std::string> hosts = StartJob("a");
  ASSERT_EQ(hosts.size(), 4u);
  const std::string host = hosts[0];
  const Json assigned = Ok(c_->Assignments(host));
  ASSERT_FALSE(assigned["assignments"].empty());

  // The same running workers and a new step: answered from memory with what Heartbeat would
  // answer, and the step counts for whatever reads the job next.
  auto answer = SteadyBeat(host, BeatBody(assigned, 5));
  ASSERT_TRUE(answer);
  EXPECT_EQ(*answer, Ok(c_->Assignments(host)));
  EXPECT_EQ(Ok(c_->GetJob("a"))["status"]["lastStep"], 5);

  // A placement elsewhere leaves it steady, answered at the new revision.
  const std::vector<std::string> other = StartJob("b");
  answer = SteadyBeat(host, BeatBody(assigned, 6));
  ASSERT_TRUE(answer);
  EXPECT_EQ(*answer, Ok(c_->Assignments(host)));
  EXPECT_GT((*answer)["revision"].get<int64_t>(), assigned["revision"].get<int64_t>());
  EXPECT_EQ(Ok(c_->GetJob("a"))["status"]["lastStep"], 6);

  // Workers that are not the ones remembered (another process, an exit, none) need Heartbeat.
  Json restarted = BeatBody(assigned, 7);
  restarted["workers"][0]["pid"] = 101;
  EXPECT_FALSE(SteadyBeat(host, restarted));
  EXPECT_FALSE(SteadyBeat(host, BeatBody(assigned, 7, "Exited", 1)));
  EXPECT_FALSE(SteadyBeat(host, Json::object()));
  EXPECT_FALSE(SteadyBeat(other[0], BeatBody(assigned, 7))) << "another host's workers";
  EXPECT_EQ(Ok(c_->GetJob("a"))["status"]["lastStep"], 6) << "refused beats count for nothing";

  // Order holds: a step answered from memory counts before the exit the next full beat reports.
  ASSERT_TRUE(SteadyBeat(host, BeatBody(assigned, 9)));
  Ok(Beat(*c_, host, BeatBody(assigned, -1, "Exited", 1)));
  const Json st = Ok(c_->GetJob("a"))["status"];
  EXPECT_NE(st["phase"], "Running");
  ASSERT_FALSE(st["attempts"].empty());
  EXPECT_EQ(st["attempts"][0]["lastStep"], 9) << st.dump();
  EXPECT_FALSE(SteadyBeat(host, BeatBody(assigned, 10))) << "its assignments moved";
}

TEST_F(QuietBeatsTest, SteadyBeatsHoldTheLeaseWhileTheirStepsAdvance) {
  RegisterTwoSlices();
  const std::vector<std::string> hosts = StartJob("a");
  std::map<std::string, Json> assigned;
  for (const std::string& h : hosts) assigned[h] = Ok(c_->Assignments(h));
  // 20 s of steady beats from the job's hosts, none from the others (lease 5 s).
  for (int second = 1; second <= 20; ++second) {
    clock_.AdvanceMs(1000);
    for (const std::string& h : hosts)
      ASSERT_TRUE(SteadyBeat(h, BeatBody(assigned[h], second))) << h << " second " << second;
    ASSERT_TRUE(c_->Tick().ok());
  }
  const Json st = Ok(c_->GetJob("a"))["status"];
  EXPECT_EQ(st["phase"], "Running");
  EXPECT_EQ(st["lastStep"], 20);
  EXPECT_EQ(st["attempts"].size(), 1u);
  for (const std::string& h : hosts) EXPECT_EQ(HostField(h, "state"), "\"Ready\"") << h;
  EXPECT_EQ(LostHosts(), 4) << "the idle slice's silent hosts";
}

TEST_F(QuietBeatsTest, AHostRegisteredAgainIsRememberedAgainAndADeletedOneIsForgotten) {
  RegisterTwoSlices();
  const std::string host = HostName(0, 1);
  Ok(Beat(*c_, host, Json::object()));
  ASSERT_TRUE(Quiet(host));
  Ok(Register(*c_, SliceHostDoc(0, 1)));  // the agent restarted
  auto quiet = Quiet(host);
  ASSERT_TRUE(quiet);
  EXPECT_EQ(*quiet, Ok(c_->Assignments(host)));
  clock_.AdvanceMs(6000);  // lost, so that an admin may delete it
  ASSERT_TRUE(c_->Tick().ok());
  Ok(c_->DeleteHost(host));
  EXPECT_FALSE(Quiet(host));
  EXPECT_EQ(Err(c_->HostCredentialMatches(host, CredentialOf(host))).code(), StatusCode::kNotFound);
}

TEST_F(QuietBeatsTest, HostsLostOrBackInOneTickAreWrittenAChunkToACommit) {
  // 300 hosts: 75 v6e 4x4 slices of 4.
  const int slices = 75;
  for (int s = 0; s < slices; ++s)
    for (int w = 0; w < 4; ++w) Ok(Register(*c_, SliceHostDoc(s, w)));
  ASSERT_TRUE(c_->Tick().ok());
  const uint64_t commits = counting_->counts().commits;
  const uint64_t host_writes = counting_->counts().writes_by_kind["Host"];
  clock_.AdvanceMs(6000);
  ASSERT_TRUE(c_->Tick().ok());
  const int hosts = slices * 4;
  EXPECT_EQ(counting_->counts().writes_by_kind["Host"] - host_writes, static_cast<uint64_t>(hosts));
  const uint64_t chunks =
      (hosts + Controller::kLostHostsPerCommit - 1) / Controller::kLostHostsPerCommit;
  EXPECT_EQ(counting_->counts().commits - commits, chunks)
      << hosts << " hosts lost at once: one commit per " << Controller::kLostHostsPerCommit;
  int events = 0;
  const Json event_list = c_->ListEvents();
  for (const Json& e : event_list["items"]) events += e["reason"] == "HostLost";
  EXPECT_EQ(LostHosts(), hosts);
  EXPECT_EQ(events, hosts) << "one HostLost event per host";

  // They all come back within a second: each is Ready at once, and none is a commit of its
  // own; the next tick writes them a chunk to a commit, with one HostRecovered event each.
  const uint64_t before_beats = counting_->counts().commits;
  for (int s = 0; s < slices; ++s)
    for (int w = 0; w < 4; ++w) Ok(Beat(*c_, HostName(s, w), Json::object()));
  EXPECT_EQ(counting_->counts().commits, before_beats) << "a recovery waits for the lease check";
  EXPECT_EQ(LostHosts(), 0);
  EXPECT_EQ(HostField(HostName(0, 0), "state"), "\"Ready\"");
  clock_.AdvanceMs(1000);
  ASSERT_TRUE(c_->Tick().ok());
  EXPECT_EQ(counting_->counts().commits - before_beats, chunks);
  int recovered = 0;
  const Json after = c_->ListEvents();
  for (const Json& e : after["items"]) recovered += e["reason"] == "HostRecovered";
  EXPECT_EQ(recovered, hosts) << "one HostRecovered event per host";
  Start();  // another head loads them: Ready, as written
  EXPECT_EQ(LostHosts(), 0);
  EXPECT_EQ(HostField(HostName(slices - 1, 3), "state"), "\"Ready\"");
}

}  // namespace
}  // namespace tessera::controller
