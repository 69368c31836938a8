// SliceReservations in the controller (reservations.cc), through its public API with a FakeClock
// and a MemoryStore on two v6e 4x4 slices: a reservation holds whole slices all or nothing; jobs
// that name it run only on its hosts, are not charged quota again and leave it held when they
// end; delete in use is a 409 naming the users unless forced; a ttl releases it; a restarted
// head keeps holding it.
#include <gtest/gtest.h>

#include <set>

#include "controller/controller_test_util.h"

namespace tessera::controller {
namespace {

Json ReservationDoc(const std::string& name, int slices, const std::string& ttl = "") {
  Json doc = {{"apiVersion", "tessera/v1"},
              {"kind", "SliceReservation"},
              {"metadata", {{"name", name}}},
              {"spec", {{"accelerator", "v6e"}, {"topology", "4x4"}, {"numSlices", slices}}}};
  if (!ttl.empty()) doc["spec"]["ttl"] = ttl;
  return doc;
}

Json InsideDoc(const std::string& name, const std::string& reservation, int slices = 1) {
  Json doc = JobDoc(name, slices);
  doc["spec"]["reservation"] = reservation;
  return doc;
}

class ReservationTest : public ControllerTest {
 protected:
  void SetUp() override {
    ControllerTest::SetUp();
    RegisterTwoSlices();
  }
  Json Get(const std::string& name) {
    auto r = c_->GetReservation(name);
    if (std::holds_alternative<ApiError>(r)) return Json{{"gone", true}};
    return std::get<Json>(r);
  }
  Json Job(const std::string& name) { return Ok(c_->GetJob(name)); }
  std::set<std::string> JobHosts(const std::string& name) {
    std::set<std::string> hosts;
    const Json job = Job(name);
    for (const Json& slice : job["status"]["placement"])
      for (const Json& h : slice["hosts"]) hosts.insert(h.get<std::string>());
    return hosts;
  }
  static std::set<std::string> Hosts(const Json& reservation) {
    std::set<std::string> hosts;
    for (const Json& h : reservation["status"]["hosts"]) hosts.insert(h.get<std::string>());
    return hosts;
  }
  std::string OwnerOfHost(const std::string& host) {
    const Json hosts = c_->ListHosts();
    for (const Json& h : hosts["items"])
      if (h["metadata"]["name"] == host) return h["status"].value("job", "");
    return "?";
  }
  // Each host reports `job`'s workers exited with `exit_code` (and nothing else running);
  // a second call confirms that nothing runs any more.
  void ReportExited(const std::string& job, int exit_code = 0) {
    for (int s = 0; s < 2; ++s)
      for (int w = 0; w < 4; ++w) {
        Json a = Ok(c_->Assignments(HostName(s, w)));
        Json workers = Json::array();
        for (const Json& x : a["assignments"])
          if (x["job"] == job)
            workers.push_back({{"job", job},
                               {"uid", x["uid"]},
                               {"attempt", x["attempt"]},
                               {"rank", x["rank"]},
                               {"pid", 100},
                               {"startedAtMs", 0},
                               {"state", "Exited"},
                               {"exitCode", exit_code},
                               {"signal", 0},
                               {"finishedAtMs", 0}});
        Ok(Beat(*c_, HostName(s, w), {{"workers", workers}, {"revision", a["revision"]}}));
      }
  }
  // Every host reports that it runs nothing at its current revision: stops are confirmed.
  void ConfirmAllStopped() {
    for (int s = 0; s < 2; ++s)
      for (int w = 0; w < 4; ++w) {
        Json a = Ok(c_->Assignments(HostName(s, w)));
        Ok(Beat(*c_, HostName(s, w), {{"workers", Json::array()}, {"revision", a["revision"]}}));
      }
  }
};

TEST_F(ReservationTest, ReadyWithHostsAndAJobInsideRunsOnlyThere) {
  Json created = Ok(c_->Apply(ReservationDoc("pool", 1)));
  EXPECT_TRUE(created["created"].get<bool>());
  Json r = Get("pool");
  ASSERT_EQ(r["status"]["phase"], "Ready") << r.dump();
  const std::set<std::string> held = Hosts(r);
  ASSERT_EQ(held.size(), 4u);
  ASSERT_EQ(r["status"]["slices"].size(), 1u);
  EXPECT_EQ(r["status"]["chips"], 16);
  for (const std::string& h : held) EXPECT_EQ(OwnerOfHost(h), "slicereservation/pool");
  // The same document again changes nothing; another spec under the name is refused.
  EXPECT_FALSE(Ok(c_->Apply(ReservationDoc("pool", 1)))["created"].get<bool>());
  EXPECT_EQ(Err(c_->Apply(ReservationDoc("pool", 2))).http_status, 409);

  Ok(c_->Apply(InsideDoc("inside", "pool")));
  ASSERT_EQ(Phase("inside"), "Starting") << Job("inside")["status"].dump();
  EXPECT_EQ(JobHosts("inside"), held);
  EXPECT_EQ(Get("pool")["status"]["users"], Json({"trainjob/inside"}));
  for (const std::string& h : held) EXPECT_EQ(OwnerOfHost(h), "inside");  // hosts show the job

  // A job outside gets the other slice, never the reserved one; a second waits.
  Ok(c_->Apply(JobDoc("outside", 1)));
  ASSERT_EQ(Phase("outside"), "Starting");
  for (const std::string& h : JobHosts("outside")) EXPECT_FALSE(held.count(h)) << h;
  Ok(c_->Apply(JobDoc("waits", 1)));
  EXPECT_EQ(Phase("waits"), "Pending");

  // The job inside ends: the reservation still holds its slice, and the waiting job still waits.
  ReportExited("inside");
  EXPECT_EQ(Phase("inside"), "Succeeded");
  ConfirmAllStopped();
  ASSERT_TRUE(c_->Tick().ok());
  r = Get("pool");
  EXPECT_EQ(r["status"]["phase"], "Ready");
  EXPECT_EQ(Hosts(r), held);
  EXPECT_TRUE(r["status"]["users"].empty());
  for (const std::string& h : held) EXPECT_EQ(OwnerOfHost(h), "slicereservation/pool");
  EXPECT_EQ(Phase("waits"), "Pending");
  // A new job inside starts there again.
  Ok(c_->Apply(InsideDoc("again", "pool")));
  EXPECT_EQ(Phase("again"), "Starting");
  EXPECT_EQ(JobHosts("again"), held);
}

TEST_F(ReservationTest, SharedWhileTheyFitThenFull) {
  Ok(c_->Apply(ReservationDoc("pool", 2)));
  ASSERT_EQ(Get("pool")["status"]["phase"], "Ready");
  const std::set<std::string> held = Hosts(Get("pool"));
  Ok(c_->Apply(InsideDoc("a", "pool")));
  Ok(c_->Apply(InsideDoc("b", "pool")));
  EXPECT_EQ(Phase("a"), "Starting");
  EXPECT_EQ(Phase("b"), "Starting");
  std::set<std::string> both = JobHosts("a");
  for (const std::string& h : JobHosts("b")) EXPECT_TRUE(both.insert(h).second) << h;  // disjoint
  EXPECT_EQ(both, held);
  Ok(c_->Apply(InsideDoc("c", "pool")));
  Json st = Job("c")["status"];
  EXPECT_EQ(st["phase"], "Pending");
  EXPECT_EQ(st["reason"], "ReservationFull");
  EXPECT_NE(st["message"].get<std::string>().find("trainjob/a"), std::string::npos) << st.dump();
  // c starts once a leaves room.
  ReportExited("a");
  ConfirmAllStopped();
  ASSERT_TRUE(c_->Tick().ok());
  EXPECT_EQ(Phase("c"), "Starting");
}

TEST_F(ReservationTest, BadInputIsRefusedOrWaitsWithAReason) {
  // Larger than the cluster: it could never be Ready.
  ApiError e = Err(c_->Apply(ReservationDoc("huge", 3)));
  EXPECT_EQ(e.http_status, 422);
  EXPECT_EQ(e.field, "spec.numSlices");
  e = Err(c_->Apply(ReservationDoc("bad-ttl", 1, "soon")));
  EXPECT_EQ(e.http_status, 422);
  EXPECT_EQ(e.field, "spec.ttl");
  Json other = ReservationDoc("tpu7", 1);
  other["spec"]["accelerator"] = "7x";
  other["spec"]["topology"] = "2x2x2";
  EXPECT_EQ(Err(c_->Apply(other)).field, "spec.accelerator");
  Json prio = ReservationDoc("prio", 1);
  prio["spec"]["priority"] = "missing";
  EXPECT_EQ(Err(c_->Apply(prio)).field, "spec.priority");

  // A job naming a reservation that does not exist waits, saying so, and starts once it does.
  Ok(c_->Apply(InsideDoc("early", "later")));
  Json st = Job("early")["status"];
  EXPECT_EQ(st["phase"], "Pending");
  EXPECT_EQ(st["reason"], "ReservationNotFound");
  Ok(c_->Apply(ReservationDoc("later", 1)));
  EXPECT_EQ(Phase("early"), "Starting");
  EXPECT_EQ(JobHosts("early"), Hosts(Get("later")));

  // Larger than its reservation: 422 at apply, naming spec.reservation.
  e = Err(c_->Apply(InsideDoc("toobig", "later", 2)));
  EXPECT_EQ(e.http_status, 422);
  EXPECT_EQ(e.field, "spec.reservation");
  // A dry run makes the same checks and stores nothing.
  EXPECT_EQ(Err(c_->DryRunApply(ReservationDoc("huge", 3))).field, "spec.numSlices");
  EXPECT_TRUE(Ok(c_->DryRunApply(ReservationDoc("fine", 1)))["dryRun"].get<bool>());
  EXPECT_TRUE(Get("fine").contains("gone"));
}

TEST_F(ReservationTest, DeleteInUseIs409UnlessForcedWhichStopsTheUsers) {
  Ok(c_->Apply(ReservationDoc("pool", 1)));
  const std::set<std::string> held = Hosts(Get("pool"));
  Ok(c_->Apply(InsideDoc("user", "pool")));
  ASSERT_EQ(Phase("user"), "Starting");
  ApiError e = Err(c_->DeleteReservation("pool", false));
  EXPECT_EQ(e.http_status, 409);
  EXPECT_NE(e.message.find("trainjob/user"), std::string::npos) << e.message;
  EXPECT_EQ(Get("pool")["status"]["phase"], "Ready");
  EXPECT_EQ(Err(c_->DeleteReservation("nope", false)).http_status, 404);

  Json out = Ok(c_->DeleteReservation("pool", true));
  EXPECT_EQ(out["status"], "Deleting");
  EXPECT_EQ(out["stopped"], Json({"trainjob/user"}));
  // Held until the job's workers have stopped: nobody else gets those hosts meanwhile.
  Ok(c_->Apply(JobDoc("next", 2)));
  EXPECT_EQ(Phase("next"), "Pending");
  EXPECT_EQ(Get("pool")["status"]["releasing"], true);
  for (const std::string& h : held) EXPECT_EQ(OwnerOfHost(h), "user");  // its workers stopping
  ConfirmAllStopped();
  ASSERT_TRUE(c_->Tick().ok());
  EXPECT_TRUE(Get("pool").contains("gone"));
  Json st = Job("user")["status"];
  EXPECT_EQ(st["phase"], "Pending");
  EXPECT_EQ(st["reason"], "ReservationNotFound");
  EXPECT_EQ(Phase("next"), "Starting");  // the released slice and the free one
}

TEST_F(ReservationTest, TtlExpiresReleasesAndStopsItsUsers) {
  Ok(c_->Apply(ReservationDoc("short", 1, "60s")));
  Json r = Get("short");
  ASSERT_EQ(r["status"]["phase"], "Ready");
  EXPECT_EQ(r["status"]["expiresAtMs"], r["status"]["readyTimeMs"].get<int64_t>() + 60'000);
  Ok(c_->Apply(InsideDoc("user", "short")));
  ASSERT_EQ(Phase("user"), "Starting");
  clock_.AdvanceMs(30'000);
  HeartbeatAll("Running");
  ASSERT_TRUE(c_->Tick().ok());
  EXPECT_EQ(Get("short")["status"]["phase"], "Ready");
  clock_.AdvanceMs(31'000);
  HeartbeatAll("Running");
  ASSERT_TRUE(c_->Tick().ok());
  r = Get("short");
  EXPECT_EQ(r["status"]["phase"], "Expired");
  EXPECT_TRUE(r["status"]["releasing"].get<bool>());
  ConfirmAllStopped();
  ASSERT_TRUE(c_->Tick().ok());
  r = Get("short");
  EXPECT_EQ(r["status"]["phase"], "Expired");
  EXPECT_FALSE(r["status"]["releasing"].get<bool>());
  EXPECT_TRUE(r["status"]["hosts"].empty());
  EXPECT_EQ(Job("user")["status"]["reason"], "ReservationExpired");
  // Both slices are free again.
  Ok(c_->Apply(JobDoc("big", 2)));
  EXPECT_EQ(Phase("big"), "Starting");
}

TEST_F(ReservationTest, ARestartedHeadKeepsHoldingIt) {
  Ok(c_->Apply(ReservationDoc("pool", 1)));
  Ok(c_->Apply(InsideDoc("user", "pool")));
  const std::set<std::string> held = Hosts(Get("pool"));
  ASSERT_EQ(JobHosts("user"), held);
  Start();  // a new controller on the same store
  ASSERT_TRUE(c_->Tick().ok());
  EXPECT_EQ(Get("pool")["status"]["phase"], "Ready");
  EXPECT_EQ(Hosts(Get("pool")), held);
  EXPECT_EQ(JobHosts("user"), held);
  for (const std::string& h : held) EXPECT_EQ(OwnerOfHost(h), "user");
  Ok(c_->Apply(JobDoc("outside", 2)));
  EXPECT_EQ(Phase("outside"), "Pending");
  // uids are never given twice across kinds.
  EXPECT_NE(Uid("outside"), Get("pool")["metadata"]["uid"].get<uint64_t>());
}

TEST_F(ReservationTest, AdmittedThroughQueuesAndChargedOnce) {
  Ok(c_->Apply({{"apiVersion", "tessera/v1"},
                {"kind", "ClusterQueue"},
                {"metadata", {{"name", "research"}}},
                {"spec", {{"quotas", {{{"generation", "v6e"}, {"nominalQuota", 16}}}}}}}));
  Ok(c_->Apply(LocalQueueDoc("team-a", "research")));
  Json doc = ReservationDoc("pool", 1);
  doc["metadata"]["queue"] = "team-a";
  Ok(c_->Apply(doc));
  ASSERT_EQ(Get("pool")["status"]["phase"], "Ready") << Get("pool").dump();
  // The queue's quota is the reservation's now: a second reservation waits over quota ...
  Json second = ReservationDoc("second", 1);
  second["metadata"]["queue"] = "team-a";
  Ok(c_->Apply(second));
  Json st = Get("second")["status"];
  EXPECT_EQ(st["phase"], "Pending");
  EXPECT_FALSE(st["pendingReason"].get<std::string>().empty());
  EXPECT_FALSE(st["message"].get<std::string>().empty());
  // ... and so does a job outside it, while a job inside runs without being charged again.
  Json outside = JobDoc("outside", 1);
  outside["metadata"]["queue"] = "team-a";
  Ok(c_->Apply(outside));
  EXPECT_EQ(Phase("outside"), "Pending");
  Json inside = InsideDoc("inside", "pool");
  inside["metadata"]["queue"] = "team-a";
  Ok(c_->Apply(inside));
  EXPECT_EQ(Phase("inside"), "Starting");
  EXPECT_EQ(JobHosts("inside"), Hosts(Get("pool")));
}

}  // namespace
}  // namespace tessera::controller
