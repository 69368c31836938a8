// The controller against what agents send: reports of an earlier job of the same name (uids),
// and messages the wire decoder refuses (nothing is applied).
#include <gtest/gtest.h>

#include "controller/controller.h"
#include "controller/controller_test_util.h"
#include "protocol/credential.h"

namespace tessera::controller {
namespace {

using LogLocation = Controller::LogLocation;

// A fake agent on `host` that reports, for every worker the host has of the job, an exit by
// SIGTERM of the attempt of an earlier job of the same name (`uid`): what an agent remembers
// of a deleted job and replays.
Json ReplayedExit(const std::string& job, uint64_t uid, const Json& assignments) {
  Json workers = Json::array();
  for (const Json& a : assignments)
    workers.push_back({{"job", job},
                       {"uid", uid},
                       {"attempt", a["attempt"]},
                       {"rank", a["rank"]},
                       {"pid", 100},
                       {"startedAtMs", 0},
                       {"state", "Exited"},
                       {"exitCode", 143},
                       {"signal", 15},
                       {"finishedAtMs", 0}});
  return workers;
}

TEST_F(ControllerTest, DeleteAndReapplyOfOneNameNeverMixesTheTwoJobs) {
  RegisterTwoSlices();
  std::set<uint64_t> seen;
  uint64_t previous = 0;
  for (int round = 0; round < 100; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    Ok(c_->CreateJob(JobDoc("x", 1)));
    const uint64_t uid = Uid("x");
    ASSERT_TRUE(seen.insert(uid).second) << "uid " << uid << " given twice";
    ASSERT_GT(uid, previous);
    // Every host that runs a worker of the new job first replays the old job's exits (the
    // agent still remembers them), then reports the new workers running.
    for (int s = 0; s < 2; ++s)
      for (int w = 0; w < 4; ++w) {
        const std::string h = HostName(s, w);
        Json a = Ok(c_->Assignments(h));
        for (const Json& x : a["assignments"]) ASSERT_EQ(x["uid"], uid);
        if (previous != 0 && !a["assignments"].empty())
          Ok(Beat(*c_, h,
                  {{"workers", ReplayedExit("x", previous, a["assignments"])},
                   {"revision", a["revision"]}}));
      }
    ASSERT_EQ(Phase("x"), "Starting") << Ok(c_->GetJob("x")).dump();
    HeartbeatAll("Running");
    ASSERT_EQ(Phase("x"), "Running");
    // The old job's exits are still ignored while it runs.
    for (int w = 0; w < 4; ++w) {
      const std::string h = HostName(0, w);
      Json a = Ok(c_->Assignments(h));
      if (previous != 0 && !a["assignments"].empty())
        Ok(Beat(*c_, h, {{"workers", ReplayedExit("x", previous, a["assignments"])}}));
    }
    ASSERT_EQ(Phase("x"), "Running");
    const Json job = Ok(c_->GetJob("x"));
    for (const Json& w : job["status"]["workers"]) ASSERT_EQ(w["state"], "Running");
    // Delete: every host confirms; the job is gone and its chips free.
    Ok(c_->DeleteJob("x"));
    for (int s = 0; s < 2; ++s)
      for (int w = 0; w < 4; ++w)
        Ok(Beat(*c_, HostName(s, w), {{"workers", Json::array()}, {"revision", 1'000'000'000}}));
    ASSERT_EQ(Phase("x"), "Gone");
    ASSERT_EQ(c_->InventorySnapshot().owned_chips(), 0);
    previous = uid;
    if (round % 25 == 24) Start();  // a head restart now and then: uids still never repeat
  }
}

TEST_F(ControllerTest, AUidIsNeverGivenAgainEvenAfterTheNewestJobIsDeletedAndTheHeadRestarts) {
  RegisterTwoSlices();
  Ok(c_->CreateJob(JobDoc("a", 1)));
  Ok(c_->CreateJob(JobDoc("b", 1)));
  const uint64_t b = Uid("b");
  EXPECT_GT(b, Uid("a"));
  Ok(c_->DeleteJob("b"));
  for (int s = 0; s < 2; ++s)
    for (int w = 0; w < 4; ++w)
      Ok(Beat(*c_, HostName(s, w), {{"workers", Json::array()}, {"revision", 1'000'000'000}}));
  ASSERT_EQ(Phase("b"), "Gone");
  Start();  // max(uid) + 1 of the stored jobs would give b's uid again
  Ok(c_->CreateJob(JobDoc("b", 1)));
  EXPECT_GT(Uid("b"), b);
  EXPECT_EQ(Ok(c_->GetJob("b"))["metadata"]["uid"], Uid("b"));
}

TEST_F(ControllerTest, ProgressOfAnEarlierJobOfTheSameNameIsIgnored) {
  RegisterTwoSlices();
  Ok(c_->CreateJob(JobDoc("x", 1)));
  HeartbeatAll("Running");
  const uint64_t uid = Uid("x");
  const std::string h = Ok(c_->GetJob("x"))["status"]["workers"][0]["host"];
  auto progress = [&](uint64_t from_uid, int64_t step) {
    return Json{{"progress",
                 {{{"job", "x"},
                   {"uid", from_uid},
                   {"attempt", 0},
                   {"rank", 0},
                   {"type", "progress"},
                   {"step", step},
                   {"timeMs", clock_.NowMs()}}}}};
  };
  Ok(Beat(*c_, h, progress(uid + 1000, 99)));
  EXPECT_EQ(Ok(c_->GetJob("x"))["status"]["lastStep"], -1);
  Ok(Beat(*c_, h, progress(uid, 3)));
  EXPECT_EQ(Ok(c_->GetJob("x"))["status"]["lastStep"], 3);
}

TEST_F(ControllerTest, ARefusedHeartbeatChangesNothingNotEvenALostHost) {
  RegisterTwoSlices();
  Ok(c_->CreateJob(JobDoc("train", 1)));
  HeartbeatAll("Running");
  const std::string h = Ok(c_->GetJob("train"))["status"]["workers"][0]["host"];
  // h goes silent past its lease and is lost; the job is failed (onHostLoss: fail).
  for (int i = 0; i < 6; ++i) {
    clock_.AdvanceMs(1000);
    for (int s = 0; s < 2; ++s)
      for (int w = 0; w < 4; ++w)
        if (HostName(s, w) != h)
          Ok(Beat(*c_, HostName(s, w), {{"workers", Json::array()}, {"revision", 1'000'000}}));
    EXPECT_TRUE(c_->Tick().ok());
  }
  Json a = Ok(c_->Assignments(h));
  const Json hosts = c_->ListHosts(), events = c_->ListEvents(), jobs = c_->ListJobs();
  const int64_t revision = store_->Revision();
  Json lost_state;
  for (const Json& x : hosts["items"])
    if (x["metadata"]["name"] == h) lost_state = x["status"]["state"];
  ASSERT_EQ(lost_state, "Lost");

  // A valid report followed by bad ones, and bad numbers: each is refused whole, naming the
  // field, and nothing changes (the host stays Lost, no event, no usage, no job change).
  Json good = {{"job", "train"}, {"uid", Uid("train")}, {"attempt", 0},      {"rank", 0},
               {"pid", 100},     {"startedAtMs", 0},    {"state", "Exited"}, {"exitCode", 0},
               {"signal", 0},    {"finishedAtMs", 0}};
  Json bad_attempt = good;
  bad_attempt["rank"] = 1;
  bad_attempt["attempt"] = "x";
  const std::vector<std::pair<Json, std::string>> refused = {
      {{{"workers", {good, bad_attempt}}, {"usage", {{"cpuPercent", 50}}}}, "workers[1].attempt"},
      {{{"workers", {good}}, {"revision", "x"}}, "revision"},
      {{{"workers", {good}}, {"usage", {{"cpuPercent", 1e300}}}}, "usage.cpuPercent"},
      {{{"workers", {good, good}}}, "workers[1]"},
  };
  for (const auto& [body, field] : refused) {
    Status e = Err(Beat(*c_, h, body));
    EXPECT_EQ(FieldOf(e), field) << e.message();
    EXPECT_EQ(e.message().rfind(field + ": ", 0), 0u) << e.message();
  }
  EXPECT_EQ(c_->ListHosts(), hosts);
  EXPECT_EQ(c_->ListEvents(), events);
  EXPECT_EQ(c_->ListJobs(), jobs);
  EXPECT_EQ(store_->Revision(), revision);
  EXPECT_EQ(Ok(c_->Assignments(h)), a);
}

TEST_F(ControllerTest, OnlyTheAgentThatRegisteredAHostSpeaksForIt) {
  RegisterTwoSlices();
  const std::string h = HostName(0, 1), other = HostName(1, 2);
  EXPECT_TRUE(Ok(c_->HostCredentialMatches(h, CredentialOf(h))));
  // Another host's credential, a made-up one, none: no match (the head answers 403).
  for (const std::string& wrong : {CredentialOf(other), std::string(64, 'e'), std::string()})
    EXPECT_FALSE(Ok(c_->HostCredentialMatches(h, wrong))) << "'" << wrong << "'";
  EXPECT_EQ(c_->HostCredentialMatches("nobody", CredentialOf(h)).status().code(),
            StatusCode::kNotFound);

  // Taking the name over with a new address and another credential is refused; the host's
  // own agent (a restart) registers again with its credential.
  Json takeover = {{"name", h},
                   {"generation", "v6e"},
                   {"chips", 4},
                   {"address", "10.6.6.6"},
                   {"agentPort", 6666},
                   {"slice", {{"name", "slice-0"}, {"topology", "4x4"}, {"worker", 1}}},
                   {"credential", std::string(64, 'e')}};
  Status e = Err(Register(*c_, takeover));
  EXPECT_EQ(e.code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(FieldOf(e), "credential");
  EXPECT_NE(e.message().find("tessera delete host " + h), std::string::npos) << e.message();
  const Json hosts = c_->ListHosts();
  for (const Json& x : hosts["items"]) {
    if (x["metadata"]["name"] == h) {
      EXPECT_NE(x.dump().find("127.0.0.1"), std::string::npos);
    }
  }
  Json own = takeover;
  own["credential"] = CredentialOf(h);
  own["address"] = "127.0.0.1";
  Ok(Register(*c_, own));

  // The credential survives a head restart (only its hash is stored, and never shown).
  Start();
  EXPECT_TRUE(Ok(c_->HostCredentialMatches(h, CredentialOf(h))));
  EXPECT_FALSE(Ok(c_->HostCredentialMatches(h, CredentialOf(other))));
  EXPECT_EQ(c_->ListHosts().dump().find(protocol::CredentialHash(CredentialOf(h))),
            std::string::npos);
  EXPECT_EQ(c_->ListHosts().dump().find(CredentialOf(h)), std::string::npos);
  EXPECT_EQ(Err(Register(*c_, takeover)).code(), StatusCode::kAlreadyExists);

  // The head reads a host's logs with that host's own token.
  Ok(c_->CreateJob(JobDoc("train", 2)));
  HeartbeatAll("Running");
  auto where = c_->LocateLog("train", 0);
  ASSERT_TRUE(where.ok()) << where.status().ToString();
  const LogLocation& loc = *where;
  const std::string host = Ok(c_->GetJob("train"))["status"]["workers"][0]["host"];
  EXPECT_EQ(loc.token, protocol::LogTokenFromHash(protocol::CredentialHash(CredentialOf(host))));
  EXPECT_EQ(loc.path, "/logs/train/" + std::to_string(Uid("train")) + "/0/0");
}

TEST_F(ControllerTest, AnAdminDeletesAHostSoThatANewAgentMayTakeItsName) {
  RegisterTwoSlices();
  Ok(c_->CreateJob(JobDoc("train", 1)));
  HeartbeatAll("Running");
  const std::string h = Ok(c_->GetJob("train"))["status"]["workers"][0]["host"];
  Status busy = Err(c_->DeleteHost(h));
  EXPECT_EQ(busy.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(busy.message().find("train"), std::string::npos) << busy.message();
  EXPECT_EQ(Err(c_->DeleteHost("nobody")).code(), StatusCode::kNotFound);

  // A host without workers goes at once; a new agent registers the name with its own
  // credential, and the old one's is refused.
  const std::string idle = HostName(1, 3);
  EXPECT_EQ(Ok(c_->DeleteHost(idle))["status"], "Deleted");
  EXPECT_EQ(c_->HostCredentialMatches(idle, CredentialOf(idle)).status().code(),
            StatusCode::kNotFound);
  Start();  // the delete is stored
  EXPECT_EQ(c_->HostCredentialMatches(idle, CredentialOf(idle)).status().code(),
            StatusCode::kNotFound);
  Ok(Register(*c_, {{"name", idle},
                    {"generation", "v6e"},
                    {"chips", 4},
                    {"agentPort", 7000},
                    {"slice", {{"name", "slice-1"}, {"topology", "4x4"}, {"worker", 3}}},
                    {"credential", std::string(64, 'f')}}));
  EXPECT_TRUE(Ok(c_->HostCredentialMatches(idle, std::string(64, 'f'))));
  EXPECT_FALSE(Ok(c_->HostCredentialMatches(idle, CredentialOf(idle))));
  bool deleted_event = false;
  const Json events = c_->ListEvents();
  for (const Json& ev : events["items"]) deleted_event |= ev["reason"] == "HostDeleted";
  EXPECT_TRUE(deleted_event);

  // The busy host once Lost may be deleted too.
  for (int i = 0; i < 7; ++i) {
    clock_.AdvanceMs(1000);
    EXPECT_TRUE(c_->Tick().ok());
  }
  EXPECT_EQ(Ok(c_->DeleteHost(h))["status"], "Deleted");
}

}  // namespace
}  // namespace tessera::controller
