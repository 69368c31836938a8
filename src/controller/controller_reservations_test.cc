// SliceReservations in the controller (reservations.cc), through its public API with a FakeClock
// and a MemoryStore on two v6e 4x4 slices: a reservation holds whole slices all or nothing; jobs
// that name it run only on its hosts, are not charged quota again and leave it held when they
// end; delete in use is a 409 naming the users unless forced; a ttl releases it; a restarted
// head keeps holding it. Services inside reservations the same way (reservation_services.cc).
#include <gtest/gtest.h>

#include <set>

#include "controller/controller_test_util.h"

namespace tessera::controller {
namespace {

Json ReservationDoc(const std::string& name, int slices, const std::string& ttl = "") {
  Json doc = {{"apiVersion", "tessera/v1"},
              {"kind", "SliceReservation"},
              {"metadata", {{"name", name}}},
              {"spec", {{"accelerator", "v6e"}, {"topology", "4x4"}, {"slices", slices}}}};
  if (!ttl.empty()) doc["spec"]["ttl"] = ttl;
  return doc;
}

Json InsideDoc(const std::string& name, const std::string& reservation, int slices = 1) {
  Json doc = JobDoc(name, slices);
  doc["spec"]["reservation"] = reservation;
  return doc;
}

Json ServiceInsideDoc(const std::string& name, const std::string& reservation, int replicas,
                      const std::string& topology = "4x4") {
  return {{"apiVersion", "tessera/v1"},
          {"kind", "Service"},
          {"metadata", {{"name", name}}},
          {"spec",
           {{"accelerator", "v6e"},
            {"topology", topology},
            {"command", {"python3", "server.py"}},
            {"replicas", replicas},
            {"reservation", reservation}}}};
}

class ReservationTest : public ControllerTest {
 protected:
  void SetUp() override {
    ControllerTest::SetUp();
    RegisterTwoSlices();
  }
  Json Get(const std::string& name) {
    auto r = c_->GetReservation(name);
    if (!r.ok()) return Json{{"gone", true}};
    return *r;
  }
  Json Job(const std::string& name) { return Ok(c_->GetJob(name)); }
  const Json Group(const std::string& service, int replica) {
    return Ok(c_->GetService(service))["status"]["roles"][0]["replicas"][replica];
  }
  static std::set<std::string> GroupHosts(const Json& group) {
    std::set<std::string> hosts;
    for (const Json& h : group["hosts"]) hosts.insert(h.get<std::string>());
    return hosts;
  }
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
  EXPECT_EQ(Err(c_->Apply(ReservationDoc("pool", 2))).code(), StatusCode::kAlreadyExists);

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
  Status e = Err(c_->Apply(ReservationDoc("huge", 3)));
  EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FieldOf(e), "spec.slices");
  e = Err(c_->Apply(ReservationDoc("bad-ttl", 1, "soon")));
  EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FieldOf(e), "spec.ttl");
  Json other = ReservationDoc("tpu7", 1);
  other["spec"]["accelerator"] = "7x";
  other["spec"]["topology"] = "2x2x2";
  EXPECT_EQ(FieldOf(Err(c_->Apply(other))), "spec.accelerator");
  Json prio = ReservationDoc("prio", 1);
  prio["spec"]["priority"] = "missing";
  EXPECT_EQ(FieldOf(Err(c_->Apply(prio))), "spec.priority");

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
  EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FieldOf(e), "spec.reservation");
  // A dry run makes the same checks and stores nothing.
  EXPECT_EQ(FieldOf(Err(c_->DryRunApply(ReservationDoc("huge", 3)))), "spec.slices");
  EXPECT_TRUE(Ok(c_->DryRunApply(ReservationDoc("fine", 1)))["dryRun"].get<bool>());
  EXPECT_TRUE(Get("fine").contains("gone"));
}

TEST_F(ReservationTest, DeleteInUseIs409UnlessForcedWhichStopsTheUsers) {
  Ok(c_->Apply(ReservationDoc("pool", 1)));
  const std::set<std::string> held = Hosts(Get("pool"));
  Ok(c_->Apply(InsideDoc("user", "pool")));
  ASSERT_EQ(Phase("user"), "Starting");
  Status e = Err(c_->DeleteReservation("pool", false));
  EXPECT_EQ(e.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(e.message().find("trainjob/user"), std::string::npos) << e.message();
  EXPECT_EQ(Get("pool")["status"]["phase"], "Ready");
  EXPECT_EQ(Err(c_->DeleteReservation("nope", false)).code(), StatusCode::kNotFound);

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

// A reservation a head stored before spec.numSlices was renamed spec.slices: a restarted head
// loads it, keeps holding it, serves it with spec.slices, takes the same reservation applied
// with spec.slices as unchanged, and stores spec.slices at its next change.
TEST_F(ReservationTest, ARestartedHeadLoadsAReservationStoredWithNumSlices) {
  Ok(c_->Apply(ReservationDoc("pool", 1)));
  const std::set<std::string> held = Hosts(Get("pool"));
  ASSERT_EQ(held.size(), 4u);
  {
    auto stored = store_->Get("SliceReservation", "pool");
    ASSERT_TRUE(stored.ok()) << stored.status().ToString();
    Json doc = Json::parse(stored->body);
    doc["spec"].erase("slices");
    doc["spec"]["numSlices"] = 1;
    store::WriteBatch old;
    old.Put("SliceReservation", "pool", doc.dump());
    ASSERT_TRUE(store_->Commit(old).ok());
  }
  Start();  // a new controller on the same store
  ASSERT_TRUE(c_->Tick().ok());
  const Json pool = Get("pool");
  EXPECT_EQ(pool["status"]["phase"], "Ready");
  EXPECT_EQ(Hosts(pool), held);
  EXPECT_EQ(pool["spec"]["slices"], 1);
  EXPECT_FALSE(pool["spec"].contains("numSlices")) << pool["spec"].dump();
  EXPECT_FALSE(Ok(c_->Apply(ReservationDoc("pool", 1)))["created"].get<bool>());
  // The old name in a new document is refused, naming the new one.
  Json old_doc = ReservationDoc("other", 1);
  old_doc["spec"].erase("slices");
  old_doc["spec"]["numSlices"] = 1;
  Status e = Err(c_->Apply(old_doc));
  EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FieldOf(e), "spec.numSlices");
  EXPECT_NE(e.message().find("spec.slices"), std::string::npos) << e.message();
  // Its next change stores the new name.
  Ok(c_->Apply(InsideDoc("user", "pool")));
  ASSERT_EQ(Get("pool")["status"]["users"], Json({"trainjob/user"}));
  auto stored = store_->Get("SliceReservation", "pool");
  ASSERT_TRUE(stored.ok());
  const Json now = Json::parse(stored->body);
  EXPECT_EQ(now["spec"]["slices"], 1);
  EXPECT_FALSE(now["spec"].contains("numSlices"));
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

// Services inside a reservation (reservation_services.cc): each replica group is placed only on
// the reservation's free hosts, shares it with jobs while they fit, and waits with a reason.
TEST_F(ReservationTest, AServiceInsideRunsOnlyOnItsHostsAndWaitsWhenFull) {
  Ok(c_->Apply(ReservationDoc("pool", 1)));
  const std::set<std::string> held = Hosts(Get("pool"));
  ASSERT_EQ(held.size(), 4u);
  Ok(c_->Apply(ServiceInsideDoc("llm", "pool", 2)));
  Json g0 = Group("llm", 0);
  ASSERT_EQ(g0["phase"], "Starting") << g0.dump();
  EXPECT_EQ(GroupHosts(g0), held);
  // The second group finds no room inside, and never takes the free slice outside.
  Json g1 = Group("llm", 1);
  EXPECT_EQ(g1["phase"], "Pending");
  EXPECT_EQ(g1["reason"], "ReservationFull");
  EXPECT_NE(g1["message"].get<std::string>().find("service/llm"), std::string::npos) << g1.dump();
  EXPECT_EQ(Get("pool")["status"]["users"], Json({"service/llm"}));
  for (const std::string& h : held) EXPECT_EQ(OwnerOfHost(h), "llm");
  Ok(c_->Apply(JobDoc("outside", 1)));
  EXPECT_EQ(Phase("outside"), "Starting");
  for (const std::string& h : JobHosts("outside")) EXPECT_FALSE(held.count(h)) << h;
  // A job inside finds the reservation full too, naming the service.
  Ok(c_->Apply(InsideDoc("inside", "pool")));
  Json st = Job("inside")["status"];
  EXPECT_EQ(st["reason"], "ReservationFull");
  EXPECT_NE(st["message"].get<std::string>().find("service/llm"), std::string::npos) << st.dump();

  // A restarted head keeps the group on the reservation's hosts, the reservation holding them.
  Start();
  ASSERT_TRUE(c_->Tick().ok());
  EXPECT_EQ(Hosts(Get("pool")), held);
  EXPECT_EQ(GroupHosts(Group("llm", 0)), held);
  EXPECT_EQ(Group("llm", 1)["reason"], "ReservationFull");
  EXPECT_EQ(Get("pool")["status"]["users"], Json({"service/llm"}));

  // Scaled to zero and its hosts confirmed free: the reservation stays held
  // and the job inside starts there.
  Ok(c_->ScaleService("llm", "server", 0));
  ConfirmAllStopped();
  ASSERT_TRUE(c_->Tick().ok());
  EXPECT_EQ(Get("pool")["status"]["phase"], "Ready");
  EXPECT_EQ(Hosts(Get("pool")), held);
  EXPECT_EQ(Phase("inside"), "Starting");
  EXPECT_EQ(JobHosts("inside"), held);
}

TEST_F(ReservationTest, AServiceNamingAMissingReservationWaitsAndCannotMoveOut) {
  Ok(c_->Apply(ServiceInsideDoc("early", "later", 1)));
  Json g = Group("early", 0);
  EXPECT_EQ(g["phase"], "Pending");
  EXPECT_EQ(g["reason"], "ReservationNotFound");
  EXPECT_NE(g["message"].get<std::string>().find("later"), std::string::npos) << g.dump();
  // Only the reservation's slice, never the two free ones.
  Ok(c_->Apply(ReservationDoc("later", 1)));
  g = Group("early", 0);
  EXPECT_EQ(g["phase"], "Starting");
  EXPECT_EQ(GroupHosts(g), Hosts(Get("later")));
  // Its groups cannot move out of the reservation while they run.
  Json moved = ServiceInsideDoc("early", "later", 1);
  moved["spec"].erase("reservation");
  EXPECT_EQ(Err(c_->Apply(moved)).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(FieldOf(Err(c_->Apply(moved))), "spec.reservation");

  // A role naming a reservation of its own is refused with the Service-level field.
  Json per_role = ServiceInsideDoc("roles", "later", 1);
  per_role["spec"] = {{"reservation", "later"},
                      {"roles",
                       {{{"name", "server"},
                         {"accelerator", "v6e"},
                         {"topology", "4x4"},
                         {"command", {"python3", "server.py"}},
                         {"reservation", "later"}}}}};
  Status e = Err(c_->Apply(per_role));
  EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(e.message().find("spec.reservation"), std::string::npos) << e.message();
}

TEST_F(ReservationTest, DeletingAReservationAServiceUsesIs409UnlessForcedWhichStopsIt) {
  Ok(c_->Apply(ReservationDoc("pool", 1)));
  const std::set<std::string> held = Hosts(Get("pool"));
  Ok(c_->Apply(ServiceInsideDoc("llm", "pool", 1)));
  ASSERT_EQ(Group("llm", 0)["phase"], "Starting");
  HeartbeatAll("Running");
  Status e = Err(c_->DeleteReservation("pool", false));
  EXPECT_EQ(e.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(e.message().find("service/llm"), std::string::npos) << e.message();
  EXPECT_EQ(Get("pool")["status"]["phase"], "Ready");

  Json out = Ok(c_->DeleteReservation("pool", true));
  EXPECT_EQ(out["status"], "Deleting");
  EXPECT_EQ(out["stopped"], Json({"service/llm"}));
  // Held until the group's processes have stopped: nobody else gets those hosts meanwhile.
  Json g = Group("llm", 0);
  EXPECT_EQ(g["reason"], "Preempted") << g.dump();
  EXPECT_NE(g["message"].get<std::string>().find("pool"), std::string::npos) << g.dump();
  Ok(c_->Apply(JobDoc("next", 2)));
  EXPECT_EQ(Phase("next"), "Pending");
  EXPECT_EQ(Get("pool")["status"]["releasing"], true);
  ConfirmAllStopped();
  ASSERT_TRUE(c_->Tick().ok());
  EXPECT_TRUE(Get("pool").contains("gone"));
  g = Group("llm", 0);
  EXPECT_EQ(g["phase"], "Pending");
  EXPECT_EQ(g["reason"], "ReservationNotFound");
  EXPECT_EQ(Phase("next"), "Starting");  // the released slice and the free one
}

TEST_F(ReservationTest, AServiceInsideIsNotAdmittedOrChargedAgainThroughQueues) {
  Ok(c_->Apply({{"apiVersion", "tessera/v1"},
                {"kind", "ClusterQueue"},
                {"metadata", {{"name", "research"}}},
                {"spec", {{"quotas", {{{"generation", "v6e"}, {"nominalQuota", 16}}}}}}}));
  Ok(c_->Apply(LocalQueueDoc("team-a", "research")));
  Json doc = ReservationDoc("pool", 1);
  doc["metadata"]["queue"] = "team-a";
  Ok(c_->Apply(doc));
  ASSERT_EQ(Get("pool")["status"]["phase"], "Ready") << Get("pool").dump();
  // The quota is the reservation's: a Service outside waits, one inside runs on its hosts.
  Json outside = ServiceInsideDoc("outside", "pool", 1);
  outside["spec"].erase("reservation");
  outside["metadata"]["queue"] = "team-a";
  Ok(c_->Apply(outside));
  EXPECT_EQ(Group("outside", 0)["phase"], "Pending");
  Json inside = ServiceInsideDoc("inside", "pool", 1);
  inside["metadata"]["queue"] = "team-a";
  Ok(c_->Apply(inside));
  Json g = Group("inside", 0);
  EXPECT_EQ(g["phase"], "Starting") << g.dump();
  EXPECT_EQ(GroupHosts(g), Hosts(Get("pool")));
  ASSERT_TRUE(c_->Tick().ok());
  EXPECT_EQ(Group("outside", 0)["phase"], "Pending");
  EXPECT_EQ(GroupHosts(Group("inside", 0)), Hosts(Get("pool")));
}

// On one 7x cube (16 hosts of 4 chips, 2x2x4 hosts), where sub-slices can be reserved: a
// Service whose one replica needs more than its reservation holds is a 422 at apply.
class ReservationCubeTest : public ControllerTest {
 protected:
  void SetUp() override {
    ControllerTest::SetUp();
    for (int z = 0; z < 4; ++z)
      for (int y = 0; y < 2; ++y)
        for (int x = 0; x < 2; ++x)
          Ok(Register(*c_,
                      {{"name", "h" + std::to_string(z * 4 + y * 2 + x)},
                       {"generation", "7x"},
                       {"chips", 4},
                       {"cube", {{"name", "c0"}, {"block", "block-00"}, {"coord", {x, y, z}}}}}));
  }
  static Json Doc7x(const std::string& name, const std::string& reservation,
                    const std::string& topology) {
    Json doc = ServiceInsideDoc(name, reservation, 1);
    doc["spec"]["accelerator"] = "7x";
    doc["spec"]["topology"] = topology;
    return doc;
  }
};

TEST_F(ReservationCubeTest, AServiceWithAReplicaLargerThanItsReservationIsRefused) {
  Json small = ReservationDoc("small", 1);
  small["spec"]["accelerator"] = "7x";
  small["spec"]["topology"] = "2x2x1";
  Ok(c_->Apply(small));
  Json r = Ok(c_->GetReservation("small"));
  ASSERT_EQ(r["status"]["phase"], "Ready") << r.dump();
  ASSERT_EQ(r["status"]["hosts"].size(), 1u);
  Status e = Err(c_->Apply(Doc7x("big", "small", "2x2x2")));
  EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FieldOf(e), "spec.reservation");
  EXPECT_NE(e.message().find("slicereservation 'small'"), std::string::npos) << e.message();
  EXPECT_EQ(FieldOf(Err(c_->DryRunApply(Doc7x("big", "small", "2x2x2")))), "spec.reservation");
  EXPECT_EQ(c_->GetService("big").status().code(), StatusCode::kNotFound);
  // A replica of its size runs on its one host.
  Ok(c_->Apply(Doc7x("tiny", "small", "2x2x1")));
  Json g = Ok(c_->GetService("tiny"))["status"]["roles"][0]["replicas"][0];
  EXPECT_EQ(g["phase"], "Starting") << g.dump();
  EXPECT_EQ(g["hosts"], r["status"]["hosts"]);
}

}  // namespace
}  // namespace tessera::controller

namespace tessera::controller {
namespace {

// status.users is written when users come and go, so a watch sees each change
// (reservation_health.cc), and a restarted head reads it back.
TEST_F(ReservationTest, WatchersSeeUsersComeAndGo) {
  std::vector<std::pair<std::string, Json>> seen;  // type, status.users of each change
  c_->SetChangeListener([&](const std::string& kind, const std::string& type, const Json& obj) {
    if (kind == "SliceReservation") seen.push_back({type, obj["status"]["users"]});
  });
  auto users_seen = [&] {
    std::vector<Json> out;
    for (const auto& [type, users] : seen)
      if (out.empty() || out.back() != users) out.push_back(users);
    return out;
  };
  Ok(c_->Apply(ReservationDoc("pool", 2)));
  Ok(c_->Apply(InsideDoc("a", "pool")));
  Ok(c_->Apply(ServiceInsideDoc("llm", "pool", 1)));
  ASSERT_EQ(Phase("a"), "Starting");
  ASSERT_EQ(Group("llm", 0)["phase"], "Starting");
  HeartbeatAll("Running");
  EXPECT_EQ(users_seen(), (std::vector<Json>{Json::array(), Json({"trainjob/a"}),
                                             Json({"trainjob/a", "service/llm"})}));
  EXPECT_EQ(seen.back().first, "MODIFIED");
  EXPECT_EQ(Get("pool")["status"]["users"], Json({"trainjob/a", "service/llm"}));
  // The job ends (its slice stays held), the service is scaled to zero.
  ReportExited("a");
  ASSERT_EQ(Phase("a"), "Succeeded");
  Ok(c_->ScaleService("llm", "server", 0));
  ConfirmAllStopped();
  ASSERT_TRUE(c_->Tick().ok());
  EXPECT_EQ(users_seen(), (std::vector<Json>{Json::array(), Json({"trainjob/a"}),
                                             Json({"trainjob/a", "service/llm"}),
                                             Json({"service/llm"}), Json::array()}));
  // Each change once, not on every pass.
  const size_t changes = seen.size();
  ASSERT_TRUE(c_->Tick().ok());
  ASSERT_TRUE(c_->Tick().ok());
  EXPECT_EQ(seen.size(), changes);
  // Stored, so a restarted head serves the same.
  Ok(c_->Apply(InsideDoc("b", "pool")));
  Start();
  EXPECT_EQ(Get("pool")["status"]["users"], Json({"trainjob/b"}));
}

// A reserved host's owner (status.job) is the workload running inside the reservation, else the
// reservation: it moves with no change of the inventory's owner, and watchers of hosts still
// see every move (EmitDerivedChangesLocked walks the hosts whenever a reservation exists).
TEST_F(ReservationTest, HostWatchersSeeTheWorkloadInsideAReservation) {
  std::map<std::string, std::string> shown;  // host -> status.job of its last change
  c_->SetChangeListener([&](const std::string& kind, const std::string& type, const Json& obj) {
    if (kind == codec::kHostKind && type != "DELETED")
      shown[obj["metadata"]["name"].get<std::string>()] = obj["status"].value("job", "");
  });
  auto listed = [&] {
    std::map<std::string, std::string> out;
    const Json hosts = c_->ListHosts();
    for (const Json& h : hosts["items"])
      out[h["metadata"]["name"].get<std::string>()] = h["status"].value("job", "");
    return out;
  };
  auto holding = [](const std::map<std::string, std::string>& owners, const std::string& what) {
    return std::count_if(owners.begin(), owners.end(),
                         [&](const auto& kv) { return kv.second == what; });
  };
  Ok(c_->Apply(ReservationDoc("pool", 2)));
  ASSERT_TRUE(c_->Tick().ok());
  Ok(c_->Apply(InsideDoc("a", "pool")));
  ASSERT_EQ(Phase("a"), "Starting");
  ASSERT_TRUE(c_->Tick().ok());
  for (const auto& [host, owner] : listed()) EXPECT_EQ(shown[host], owner) << host;
  EXPECT_EQ(holding(listed(), "a"), 4);  // one 4x4 slice: 4 hosts
  HeartbeatAll("Running");
  ReportExited("a");
  ASSERT_EQ(Phase("a"), "Succeeded");
  ASSERT_TRUE(c_->Tick().ok());
  for (const auto& [host, owner] : listed()) EXPECT_EQ(shown[host], owner) << host;
  EXPECT_EQ(holding(listed(), "a"), 0);
  EXPECT_EQ(holding(listed(), "slicereservation/pool"), 8);  // both slices held again
}

// A reserved host that is lost (docs/reservations.md "A lost host"), on the two slices of the
// fixture, both reserved: the reservation is Rescheduling and names the host, keeps the other
// slice and its job, holds the broken slice's hosts until its job's workers have stopped, then
// releases them, and takes the slice back once it is whole again.
class ReservationLostHostTest : public ReservationTest {
 protected:
  // Every registered host except `silent` heartbeats (its workers Running), at `now`.
  void BeatAllBut(const std::string& silent, int slices = 2) {
    for (int s = 0; s < slices; ++s)
      for (int w = 0; w < 4; ++w) {
        const std::string h = HostName(s, w);
        if (h == silent) continue;
        Json a = Ok(c_->Assignments(h));
        Ok(Beat(*c_, h, {{"workers", WorkerReports(a, "Running")}, {"revision", a["revision"]}}));
      }
  }
  // `host` stops heartbeating; the lease (5 s) passes while the others beat.
  void Lose(const std::string& host, int slices = 2) {
    BeatAllBut("", slices);
    clock_.AdvanceMs(3000);
    BeatAllBut(host, slices);
    clock_.AdvanceMs(2500);
    ASSERT_TRUE(c_->Tick().ok());
  }
  // Hosts that hold nothing any more confirm it, except `silent`.
  void ConfirmStoppedBut(const std::string& silent, int slices = 2) {
    for (int s = 0; s < slices; ++s)
      for (int w = 0; w < 4; ++w) {
        const std::string h = HostName(s, w);
        if (h == silent) continue;
        Json a = Ok(c_->Assignments(h));
        if (!a["assignments"].empty()) continue;
        Ok(Beat(*c_, h, {{"workers", Json::array()}, {"revision", a["revision"]}}));
      }
  }
  std::set<std::string> SliceHosts(const Json& slice) {
    std::set<std::string> hosts;
    for (const Json& h : slice["hosts"]) hosts.insert(h.get<std::string>());
    return hosts;
  }
};

TEST_F(ReservationLostHostTest, ReschedulesTheLostSliceKeepsTheOtherAndTakesItBackWhenWhole) {
  Ok(c_->Apply(ReservationDoc("pool", 2, "1h")));
  Ok(c_->Apply(InsideDoc("a", "pool")));
  Ok(c_->Apply(InsideDoc("b", "pool")));
  ASSERT_EQ(Phase("a"), "Starting");
  ASSERT_EQ(Phase("b"), "Starting");
  HeartbeatAll("Running");
  const int64_t expires = Get("pool")["status"]["expiresAtMs"].get<int64_t>();
  const std::set<std::string> a_hosts = JobHosts("a"), b_hosts = JobHosts("b");
  const std::string lost = *a_hosts.begin();

  Lose(lost);
  Json r = Get("pool");
  EXPECT_EQ(r["status"]["phase"], "Rescheduling") << r.dump();
  EXPECT_EQ(r["status"]["reason"], "SliceLost");
  const std::string message = r["status"]["message"];
  EXPECT_NE(message.find("host " + lost), std::string::npos) << message;
  EXPECT_NE(message.find("holding 1 of 2"), std::string::npos) << message;
  EXPECT_FALSE(r["status"]["pendingReason"].get<std::string>().empty()) << r.dump();
  EXPECT_EQ(Hosts(r), b_hosts);  // the other slice stays held
  EXPECT_EQ(r["status"]["chips"], 16);
  ASSERT_EQ(r["status"]["lostSlices"].size(), 1u);
  EXPECT_EQ(r["status"]["lostSlices"][0]["lostHost"], lost);
  EXPECT_EQ(SliceHosts(r["status"]["lostSlices"][0]), a_hosts);
  EXPECT_TRUE(r["status"]["lostSlices"][0]["held"].get<bool>());
  EXPECT_EQ(r["status"]["expiresAtMs"], expires);  // its ttl keeps counting
  // b runs on; a is handled by its own recovery (the attempt failed: its workers are stopped).
  EXPECT_EQ(Phase("b"), "Running");
  EXPECT_EQ(Job("a")["status"]["reason"], "HostLost") << Job("a").dump();
  // Nothing new goes on the broken slice, whose stopping workers still run.
  Ok(c_->Apply(InsideDoc("c", "pool")));
  Json c = Job("c")["status"];
  EXPECT_EQ(c["reason"], "ReservationFull") << c.dump();
  EXPECT_NE(c["message"].get<std::string>().find("Rescheduling"), std::string::npos) << c.dump();
  Ok(c_->Apply(JobDoc("outside", 1)));
  EXPECT_EQ(Phase("outside"), "Pending");
  EXPECT_EQ(c_->InventorySnapshot().owned_chips(), 32);  // both slices still held

  // a's workers on the healthy hosts have stopped: the broken slice's hosts are released (the
  // lost one stays down); a job outside still cannot take a slice with a lost host.
  ConfirmStoppedBut(lost);
  ASSERT_TRUE(c_->Tick().ok());
  r = Get("pool");
  EXPECT_EQ(r["status"]["phase"], "Rescheduling");
  EXPECT_FALSE(r["status"]["lostSlices"][0]["held"].get<bool>()) << r.dump();
  for (const std::string& h : a_hosts) EXPECT_EQ(OwnerOfHost(h), "") << h;
  EXPECT_EQ(c_->InventorySnapshot().owned_chips(), 16);
  EXPECT_EQ(Phase("outside"), "Pending");

  // The host is back: the slice is whole and free, and the reservation takes it first (ahead of
  // the pending job outside); Ready again with the ttl it had, and a job inside starts there.
  BeatAllBut("");
  ASSERT_TRUE(c_->Tick().ok());
  r = Get("pool");
  EXPECT_EQ(r["status"]["phase"], "Ready") << r.dump();
  EXPECT_EQ(r["status"]["reason"], "Ready");
  EXPECT_EQ(r["status"]["lostSlices"], Json::array());
  EXPECT_EQ(Hosts(r).size(), 8u);
  EXPECT_EQ(r["status"]["expiresAtMs"], expires);
  EXPECT_NE(r["status"]["message"].get<std::string>().find("replacing lost"), std::string::npos)
      << r.dump();
  EXPECT_EQ(Phase("outside"), "Pending");
  const std::set<std::string> held = Hosts(r);
  for (const char* job : {"a", "c"})
    for (const std::string& h : JobHosts(job)) EXPECT_TRUE(held.count(h)) << job << " on " << h;
  // a failed (onHostLoss: fail, the default); c, waiting inside, starts on the slice taken back.
  EXPECT_EQ(Phase("a"), "Failed");
  EXPECT_EQ(Phase("c"), "Starting") << Job("c").dump();
  EXPECT_EQ(JobHosts("c"), a_hosts);
  // A restarted head holds the same.
  Start();
  ASSERT_TRUE(c_->Tick().ok());
  EXPECT_EQ(Hosts(Get("pool")), held);
  EXPECT_EQ(c_->InventorySnapshot().owned_chips(), 32);
}

// With a free slice elsewhere, a third one registered: the lost slice is replaced in the same
// pass, while its hosts stay held (unplannable) until the job on them has stopped.
TEST_F(ReservationLostHostTest, ReplacedAtOnceByAFreeSliceAndReleasedOnceItsJobStopped) {
  for (int w = 0; w < 4; ++w)
    Ok(Register(*c_, {{"name", HostName(2, w)},
                      {"generation", "v6e"},
                      {"chips", 4},
                      {"address", "127.0.0.1"},
                      {"agentPort", 9100 + w},
                      {"slice", {{"name", "slice-2"}, {"topology", "4x4"}, {"worker", w}}}}));
  Ok(c_->Apply(ReservationDoc("pool", 1)));
  Json a = InsideDoc("a", "pool");
  a["spec"]["failurePolicy"] = {{"maxFailures", 3}, {"onHostLoss", "pause"}};  // restarts
  Ok(c_->Apply(a));
  ASSERT_EQ(Phase("a"), "Starting");
  HeartbeatAll("Running");
  const std::set<std::string> a_hosts = JobHosts("a");
  const std::string lost = *a_hosts.begin();
  Lose(lost, 3);
  Json r = Get("pool");
  EXPECT_EQ(r["status"]["phase"], "Ready") << r.dump();
  const std::set<std::string> now_held = Hosts(r);
  ASSERT_EQ(now_held.size(), 4u);
  for (const std::string& h : now_held) EXPECT_FALSE(a_hosts.count(h)) << h;
  ASSERT_EQ(r["status"]["lostSlices"].size(), 1u);  // still held: a's workers are stopping
  EXPECT_TRUE(r["status"]["lostSlices"][0]["held"].get<bool>());
  EXPECT_EQ(c_->InventorySnapshot().owned_chips(), 32);  // the new slice and the broken one
  ConfirmStoppedBut(lost, 3);
  ASSERT_TRUE(c_->Tick().ok());
  r = Get("pool");
  EXPECT_EQ(r["status"]["lostSlices"], Json::array()) << r.dump();
  EXPECT_EQ(Hosts(r), now_held);
  EXPECT_EQ(c_->InventorySnapshot().owned_chips(), 16);
  // a, restarted by its own recovery (onHostLoss: pause), runs inside on the new slice only.
  EXPECT_EQ(Phase("a"), "Starting") << Job("a").dump();
  EXPECT_EQ(JobHosts("a"), now_held);
}

}  // namespace
}  // namespace tessera::controller
