// A fourth workload kind, written here and nowhere else, plugged into the controller through
// WorkloadKind (workload_kind.h): a HostHold holds one host (a 2x2 sub-slice of v6e: one host
// of 4 chips) for spec.seconds once its agent runs its placeholder process, then lets it go.
// The test drives it through the admission cycle under a ClusterQueue's quota, placement, the
// Host documents' owners, an agent's assignments and heartbeats, deletion (stopped first, then
// released and removed), a restart from the store, and the refusal of a kind nobody registered.
// Nothing outside this file knows the kind.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "controller/controller_test_util.h"
#include "topology/topology.h"

namespace tessera::controller {
namespace {

constexpr char kHoldKind[] = "HostHold";

// The kind: typed objects, their documents in the store, and the steps of a tiny lifecycle
// (Pending -> Placed -> Running -> Done; Deleting until the agent confirms the process gone).
class HostHoldKind final : public WorkloadKind {
 public:
  const std::string& name() const override { return name_; }

  Status Load() override {
    auto objects = context().ListStored(kHoldKind);
    if (!objects.ok()) return objects.status();
    for (const store::Object& o : *objects) {
      Json doc = Json::parse(o.body, nullptr, /*allow_exceptions=*/false);
      if (doc.is_discarded()) return Internal("stored HostHold " + o.name + " is not JSON");
      Hold h = FromJson(doc);
      context().UidSeen(h.uid);
      holds_[h.name] = h;
    }
    return Status::Ok();
  }

  Result<Json> Apply(const Json& doc) override {
    auto preview = DryRun(doc);
    if (!preview.ok()) return preview.status();
    if (preview->exists) return AlreadyExists("metadata.name: '" + preview->name + "' exists");
    Hold h;
    h.name = preview->name;
    h.uid = context().NextUid();
    h.queue = doc["metadata"].value("queue", std::string(kDefaultLocalQueue));
    h.seconds = doc["spec"]["seconds"].get<int64_t>();
    store::WriteBatch batch;
    batch.Create(kHoldKind, h.name, ToJson(h).dump());
    context().StageUidTaken(batch);
    TESSERA_RETURN_IF_ERROR(
        context().Commit(batch, Object(h), {JobEvent{false, "Created", "accepted"}}).status());
    context().UidTaken();
    holds_[h.name] = h;
    context().Announce(kHoldKind, "ADDED", ToJson(h));
    context().RequestSchedule();
    return ToJson(h);
  }
  Result<Preview> DryRun(const Json& doc) override {
    const Json& spec = doc.value("spec", Json::object());
    if (!spec.contains("seconds") || !spec["seconds"].is_number_integer())
      return InvalidArgument("spec.seconds: required, a whole number of seconds");
    const std::string n = doc["metadata"].value("name", "");
    if (n.empty()) return InvalidArgument("metadata.name: required");
    return Preview{n, holds_.count(n) > 0};
  }
  Result<Json> Get(const std::string& n) const override {
    auto it = holds_.find(n);
    if (it == holds_.end()) return NotFound("hosthold '" + n + "' not found");
    return ToJson(it->second);
  }
  std::function<Json()> CopyList() const override {
    Json items = Json::array();
    for (const auto& [n, h] : holds_) items.push_back(ToJson(h));
    return [items] { return Json{{"kind", "HostHoldList"}, {"items", items}}; };
  }
  Result<Json> Delete(const std::string& n, bool /*force*/) override {
    auto it = holds_.find(n);
    if (it == holds_.end()) return NotFound("hosthold '" + n + "' not found");
    Hold h = it->second;
    if (h.host.empty()) {
      TESSERA_RETURN_IF_ERROR(Remove(h));
      return Json{{"name", n}, {"status", "Deleted"}};
    }
    h.deleting = true;
    h.stop_revision = context().BumpAssignments();  // its assignment is withdrawn
    TESSERA_RETURN_IF_ERROR(Persist(h, "Deleting", "stopping its process"));
    context().NotifyHosts({h.host});
    return Json{{"name", n}, {"status", "Terminating"}};
  }

  Status Tick(int64_t now) override {
    for (auto& [n, h] : holds_)
      if (h.phase == "Running" && !h.deleting && now - h.started_ms >= h.seconds * 1000) {
        Hold done = h;
        TESSERA_RETURN_IF_ERROR(Unplace(done, "Done"));
      }
    return Status::Ok();
  }
  // Placement comes from the admission cycle only: this test always defines a ClusterQueue.
  Status Schedule() override { return Status::Ok(); }

  void Offer(Snapshot& snap, const std::vector<PriorityClass>& /*classes*/) override {
    for (const auto& [n, h] : holds_) {
      if (h.deleting || h.phase == "Done") continue;
      Workload w;
      w.id = WorkloadId(h.uid);
      w.name = Object(h);
      w.local_queue = h.queue;
      w.request = {Generation::kV6e, *ParseShape("2x2"), 1};
      w.creation_order = static_cast<int64_t>(h.uid);
      w.state = h.phase == "Pending" ? WorkloadState::kPending : WorkloadState::kRunning;
      snap.workloads.push_back(w);
    }
  }
  Status Admitted(const Admission& a) override {
    Hold* h = ByUid(a.workload.value());
    if (h == nullptr || h->phase != "Pending") return Status::Ok();
    if (!ApplyPlan(context().inventory(), OwnerId(h->uid), a.placement).ok()) return Status::Ok();
    Hold placed = *h;
    placed.host = context().HostName(a.placement.slices[0].hosts[0]);
    Status s = Persist(placed, "Placed", "admitted to " + a.cluster_queue);
    if (!s.ok()) {
      context().inventory().Release(OwnerId(placed.uid));
      return s;
    }
    context().BumpAssignments();
    context().NotifyHosts({placed.host});
    return Status::Ok();
  }
  Status Evicted(const Eviction& e) override {
    Hold* h = ByUid(e.workload.value());
    return h == nullptr ? Status::Ok() : Unplace(Hold(*h), "Pending");
  }
  Status Waiting(const PendingStatus& p) override {
    Hold* h = ByUid(p.workload.value());
    if (h == nullptr || h->phase != "Pending" || h->message == p.message) return Status::Ok();
    return Persist(Hold(*h), "Pending", p.message.str());
  }
  Status CycleFailed(const std::string& message) override {
    for (auto& [n, h] : holds_)
      if (h.phase == "Pending") TESSERA_RETURN_IF_ERROR(Persist(Hold(h), "Pending", message));
    return Status::Ok();
  }

  void ReserveHosts(std::vector<std::string>& conflicts) override {
    for (const auto& [n, h] : holds_) {
      if (h.host.empty()) continue;
      auto id = context().HostIdOf(h.host);
      if (!id) continue;
      if (Status s = context().inventory().Reserve(OwnerId(h.uid), {*id}); !s.ok())
        conflicts.push_back(Object(h) + ": " + s.message());
    }
  }
  std::string OwnerOf(uint64_t owner, const std::string& /*host*/) const override {
    for (const auto& [n, h] : holds_)
      if (h.uid == owner) return Object(h);
    return "";
  }
  std::vector<std::string> HostUsers(const std::string& host) const override {
    std::vector<std::string> users;
    for (const auto& [n, h] : holds_)
      if (h.host == host) users.push_back(Object(h));
    return users;
  }
  void AppendAssignments(const std::string& host, std::vector<protocol::Assignment>& out,
                         std::vector<protocol::StopRequest>& /*stop*/) const override {
    for (const auto& [n, h] : holds_)
      if (h.host == host && !h.deleting)
        out.push_back({{h.name, 0, 0, h.uid}, 0, {"sleep", "infinity"}, {}, "", 1000});
  }
  void TakeHeartbeat(const std::string& host, const protocol::Heartbeat& beat, int64_t now,
                     Status& failed) override {
    for (auto& [n, h] : holds_) {
      if (h.host != host) continue;
      bool running = false;
      for (const protocol::WorkerReport& w : beat.workers)
        running |=
            w.key.job == h.name && w.key.uid == h.uid && w.state == protocol::WorkerState::kRunning;
      Status s = Status::Ok();
      if (h.deleting && !running && beat.revision >= h.stop_revision) {
        s = Remove(Hold(h));  // erases h: stop here
        if (failed.ok()) failed = s;
        return;
      }
      if (running && h.phase == "Placed") {
        Hold started = h;
        started.started_ms = now;
        s = Persist(started, "Running", "its process runs");
      }
      if (failed.ok()) failed = s;
    }
  }
  Status HostLost(const std::string& host, int64_t /*last_heard_ms*/, const std::string& why,
                  int64_t /*now*/) override {
    for (auto& [n, h] : holds_)
      if (h.host == host) TESSERA_RETURN_IF_ERROR(Unplace(Hold(h), "Pending", why));
    return Status::Ok();
  }
  void AddHeldPorts(std::set<int>& /*held*/) const override {}

 private:
  struct Hold {
    std::string name, queue, phase = "Pending", message, host;
    uint64_t uid = 0;
    int64_t seconds = 0, started_ms = 0, stop_revision = 0;
    bool deleting = false;
  };
  static std::string Object(const Hold& h) { return "hosthold/" + h.name; }
  static Json ToJson(const Hold& h) {
    return {{"apiVersion", "tessera/v1"},
            {"kind", kHoldKind},
            {"metadata", {{"name", h.name}, {"uid", h.uid}, {"queue", h.queue}}},
            {"spec", {{"seconds", h.seconds}}},
            {"status",
             {{"phase", h.phase},
              {"message", h.message},
              {"host", h.host},
              {"startedMs", h.started_ms},
              {"deleting", h.deleting},
              {"stopRevision", h.stop_revision}}}};
  }
  static Hold FromJson(const Json& doc) {
    Hold h;
    h.name = doc["metadata"]["name"];
    h.uid = doc["metadata"]["uid"];
    h.queue = doc["metadata"]["queue"];
    h.seconds = doc["spec"]["seconds"];
    const Json& st = doc["status"];
    h.phase = st["phase"];
    h.message = st["message"];
    h.host = st["host"];
    h.started_ms = st["startedMs"];
    h.deleting = st["deleting"];
    h.stop_revision = st["stopRevision"];
    return h;
  }
  Hold* ByUid(uint64_t uid) {
    for (auto& [n, h] : holds_)
      if (h.uid == uid) return &h;
    return nullptr;
  }
  // One store write with its event, then memory and watchers.
  Status Persist(Hold h, const std::string& phase, const std::string& message) {
    h.phase = phase;
    h.message = message;
    store::WriteBatch batch;
    batch.Put(kHoldKind, h.name, ToJson(h).dump());
    TESSERA_RETURN_IF_ERROR(
        context().Commit(batch, Object(h), {JobEvent{false, phase, message}}).status());
    holds_[h.name] = h;
    context().Announce(kHoldKind, "MODIFIED", ToJson(h));
    return Status::Ok();
  }
  // Gives its host back (phase Pending to be admitted again, or Done).
  Status Unplace(Hold h, const std::string& phase, const std::string& why = "") {
    const std::string host = h.host;
    h.host.clear();
    TESSERA_RETURN_IF_ERROR(Persist(h, phase, why.empty() ? "released its host" : why));
    context().inventory().Release(OwnerId(h.uid));
    context().BumpAssignments();
    if (!host.empty()) context().NotifyHosts({host});
    context().RequestSchedule();
    return Status::Ok();
  }
  Status Remove(Hold h) {
    store::WriteBatch batch;
    batch.Delete(kHoldKind, h.name);
    TESSERA_RETURN_IF_ERROR(
        context().Commit(batch, Object(h), {JobEvent{false, "Deleted", "removed"}}).status());
    holds_.erase(h.name);
    context().inventory().Release(OwnerId(h.uid));
    context().Announce(kHoldKind, "DELETED", ToJson(h));
    context().RequestSchedule();
    return Status::Ok();
  }

  const std::string name_ = kHoldKind;
  std::map<std::string, Hold> holds_;
};

Json HoldDoc(const std::string& name, int seconds) {
  return {{"apiVersion", "tessera/v1"},
          {"kind", kHoldKind},
          {"metadata", {{"name", name}}},
          {"spec", {{"seconds", seconds}}}};
}

class KindPluginTest : public ControllerTest {
 protected:
  void SetUp() override {
    store_ = OpenMemoryStore();
    ASSERT_NE(store_, nullptr);
    StartWithHolds();
    RegisterAll();
    // One host's worth of quota (4 chips): a second hold waits for the first.
    Ok(c_->Apply({{"apiVersion", "tessera/v1"},
                  {"kind", "ClusterQueue"},
                  {"metadata", {{"name", "holds"}}},
                  {"spec", {{"quotas", {{{"generation", "v6e"}, {"nominalQuota", 4}}}}}}}));
    Ok(c_->Apply(LocalQueueDoc(kDefaultLocalQueue, "holds")));
  }
  // Two 4x4 slices of four hosts, and two one-host 2x2 slices, "h0" and "h1", which a hold fits.
  void RegisterAll() {
    RegisterTwoSlices();
    for (int i = 0; i < 2; ++i)
      Ok(Register(
          *c_, {{"name", "h" + std::to_string(i)},
                {"generation", "v6e"},
                {"chips", 4},
                {"address", "127.0.0.1"},
                {"agentPort", 9100 + i},
                {"slice",
                 {{"name", "small-" + std::to_string(i)}, {"topology", "2x2"}, {"worker", 0}}}}));
  }
  void StartWithHolds() {
    c_ = std::make_unique<Controller>(*store_, clock_, ControllerOptions{});
    ASSERT_TRUE(c_->RegisterKind(std::make_unique<HostHoldKind>()).ok());
    ASSERT_TRUE(c_->Load().ok());
  }
  Json Hold(const std::string& name) { return Ok(c_->Get(kHoldKind, name)); }
  // The owner a Host document shows for `host` (status.job).
  std::string OwnerShown(const std::string& host) {
    const Json hosts = c_->ListHosts();
    for (const Json& h : hosts["items"])
      if (h["metadata"]["name"] == host) return h["status"].value("job", "");
    return "?";
  }
  // What `host`'s agent would report: every assigned worker running.
  void BeatRunning(const std::string& host) {
    Json a = Ok(c_->Assignments(host));
    Ok(Beat(*c_, host, {{"workers", WorkerReports(a, "Running")}, {"revision", a["revision"]}}));
  }
  std::vector<std::string> AssignedJobs(const std::string& host) {
    std::vector<std::string> jobs;
    const Json a = Ok(c_->Assignments(host));
    for (const Json& x : a["assignments"]) jobs.push_back(x["job"]);
    return jobs;
  }
};

TEST_F(KindPluginTest, AFourthKindRunsThroughAdmissionPlacementHeartbeatsAndDeletion) {
  Ok(c_->Apply(HoldDoc("a", 60)));
  Ok(c_->Apply(HoldDoc("b", 60)));
  ASSERT_TRUE(c_->RunPass().ok());

  // Admission: the quota admits one; the other waits and says why, in the cycle's words.
  const Json a = Hold("a");
  ASSERT_EQ(a["status"]["phase"], "Placed") << a.dump();
  const std::string host = a["status"]["host"];
  EXPECT_EQ(Hold("b")["status"]["phase"], "Pending");
  EXPECT_NE(Hold("b")["status"]["message"].get<std::string>().find("holds"), std::string::npos)
      << Hold("b").dump();

  // Placement: the inventory and the Host document name it; the agent is assigned its process.
  EXPECT_EQ(OwnerShown(host), "hosthold/a");
  EXPECT_EQ(AssignedJobs(host), std::vector<std::string>{"a"});
  // A host in use is not deleted: the kind names its user.
  auto refused = Err(c_->DeleteHost(host));
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("hosthold/a"), std::string::npos) << refused.message();

  // A heartbeat: the agent runs it.
  BeatRunning(host);
  EXPECT_EQ(Hold("a")["status"]["phase"], "Running");

  // Watches and lists see the kind like any other.
  auto listed = c_->ListWithVersion(kHoldKind);
  ASSERT_TRUE(listed.has_value());
  EXPECT_EQ(listed->list["items"].size(), 2u);

  // Deletion: the assignment is withdrawn, and once the agent no longer runs it the host is
  // free, the object gone, and the waiting hold admitted in the pass that follows.
  EXPECT_EQ(Ok(c_->Delete(kHoldKind, "a"))["status"], "Terminating");
  EXPECT_TRUE(AssignedJobs(host).empty());
  EXPECT_EQ(Hold("a")["status"]["phase"], "Deleting");
  BeatRunning(host);  // runs nothing now
  EXPECT_EQ(Err(c_->Get(kHoldKind, "a")).code(), StatusCode::kNotFound);
  ASSERT_TRUE(c_->RunPass().ok());
  const Json b = Hold("b");
  ASSERT_EQ(b["status"]["phase"], "Placed") << b.dump();
  const std::string b_host = b["status"]["host"];
  EXPECT_EQ(OwnerShown(b_host), "hosthold/b");

  // A restart: the kind loads its objects back and reserves the host it holds.
  StartWithHolds();
  RegisterAll();
  EXPECT_EQ(Hold("b")["status"]["host"], b_host);
  EXPECT_EQ(OwnerShown(b_host), "hosthold/b");
  EXPECT_EQ(AssignedJobs(b_host), std::vector<std::string>{"b"});

  // Its timer: once running for spec.seconds it lets the host go.
  BeatRunning(b_host);
  clock_.AdvanceMs(61'000);
  for (int s = 0; s < 2; ++s)
    for (int w = 0; w < 4; ++w) BeatRunning(HostName(s, w));  // keep every lease
  for (const char* h : {"h0", "h1"}) BeatRunning(h);
  ASSERT_TRUE(c_->Tick().ok());
  EXPECT_EQ(Hold("b")["status"]["phase"], "Done");
  EXPECT_EQ(OwnerShown(b_host), "");
}

TEST_F(KindPluginTest, AKindNobodyRegisteredIsRefusedNamingTheKindsThereAre) {
  Json doc = HoldDoc("x", 1);
  doc["kind"] = "Nope";
  Status refused = Err(c_->Apply(doc));
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FieldOf(refused), "kind");
  EXPECT_NE(refused.message().find("HostHold"), std::string::npos) << refused.message();
  EXPECT_NE(refused.message().find("TrainJob"), std::string::npos) << refused.message();
  // A kind's name is its own: a second registration under it is refused.
  EXPECT_EQ(c_->RegisterKind(std::make_unique<HostHoldKind>()).code(), StatusCode::kAlreadyExists);
  // A TrainJob goes through the same cycle beside the new kind: 16 chips over a 4-chip quota.
  Ok(c_->Apply(JobDoc("train", 1)));
  ASSERT_TRUE(c_->RunPass().ok());
  const Json train = Ok(c_->GetJob("train"));
  EXPECT_EQ(train["status"]["phase"], "Pending");
  EXPECT_EQ(train["status"]["reason"], "OverQuota") << train.dump();
}

}  // namespace
}  // namespace tessera::controller
