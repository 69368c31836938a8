// Controller: the registry of workload kinds (workload_kind.h) and the KindContext each is
// given; the routing of apply, get, list and delete by kind name; the public calls of the
// built-in kinds, which lock and call their kind's part.
#include <algorithm>

#include "codec/manifest.h"
#include "controller/controller.h"

namespace tessera::controller {
namespace {

AdmissionOptions MakeAdmissionOptions(const ControllerOptions& o) {
  AdmissionOptions a;
  a.planner = o.planner;
  a.start_guard = o.start_guard;
  a.fair_sharing = o.fair_sharing;
  a.preemption_grace_ms = o.preemption_grace_ms;
  return a;
}

}  // namespace

// What a kind may use of the controller. Called with the controller's lock held (every kind's
// call is), so it reads and writes the controller's fields directly.
class Controller::Context final : public KindContext {
 public:
  explicit Context(Controller& c) : c_(c) {}

  int64_t NowMs() const override { return c_.NowMs(); }
  Result<std::vector<store::Object>> ListStored(const std::string& kind) override {
    return c_.store_.List(kind);
  }
  Result<int64_t> Commit(store::WriteBatch& batch, const std::string& object,
                         const std::vector<JobEvent>& events) override {
    auto committed = c_.CommitWithEvents(batch, object, events);
    if (!committed.ok() && committed.status().code() != StatusCode::kAlreadyExists)
      return Unavailable(committed.status().message());
    return committed;
  }
  void Announce(const std::string& kind, const std::string& type, const Json& object) override {
    c_.Emit(kind, type, object);
    c_.AnnounceEvents();
  }
  uint64_t NextUid() const override { return c_.next_uid_; }
  void StageUidTaken(store::WriteBatch& batch) const override {
    batch.Put(kUidCounterKind, kUidCounterName, Json{{"next", c_.next_uid_ + 1}}.dump());
  }
  void UidTaken() override { ++c_.next_uid_; }
  void UidSeen(uint64_t uid) override { c_.next_uid_ = std::max(c_.next_uid_, uid + 1); }
  bool InventoryReady() const override { return c_.inventory_ready_; }
  Inventory& inventory() override { return c_.inventory_; }
  const SlicePlanner& planner() const override { return c_.planner_; }
  std::string HostName(HostId id) const override {
    auto it = c_.host_names_.find(id.value());
    return it == c_.host_names_.end() ? "" : it->second;
  }
  std::optional<HostId> HostIdOf(const std::string& host) const override {
    auto it = c_.host_ids_.find(host);
    if (it == c_.host_ids_.end()) return std::nullopt;
    return it->second;
  }
  std::string HostAddress(const std::string& host) const override {
    auto it = c_.hosts_.find(host);
    return it == c_.hosts_.end() ? "" : it->second.spec.address;
  }
  bool HostLost(const std::string& host) const override { return View(c_).HostLost(host); }
  std::set<std::string> HoldersOf(const PlanResult& plan) const override {
    return c_.HoldersOf(plan);
  }
  int64_t BumpAssignments() override { return ++c_.assignment_revision_; }
  void NotifyHosts(const std::set<std::string>& hosts) override { c_.NotifyHosts(hosts); }
  void RequestSchedule() override { c_.schedule_requested_ = true; }
  bool QueuesDefined() const override { return !c_.cluster_queues_.empty(); }
  uint64_t term() const override { return c_.term_; }

 private:
  Controller& c_;
};

Controller::Controller(store::Store& store, const Clock& clock, ControllerOptions options)
    : store_(store),
      clock_(clock),
      options_(std::move(options)),
      planner_(options_.planner),
      admitter_(MakeAdmissionOptions(options_)),
      train_(TrainLifecycleOptions{options_.lease_ms, options_.progress_write_interval_ms}),
      rng_(options_.seed),
      events_(options_.max_events),
      term_(options_.term) {
  RegisterBuiltinKinds();  // builtin_kinds.cc
}

Controller::~Controller() = default;

Status Controller::RegisterKind(std::unique_ptr<WorkloadKind> kind) {
  auto lock = Hold();
  const std::string& name = kind->name();
  if (FindKind(name) != nullptr || name == "ClusterQueue" || name == "LocalQueue" ||
      name == "PriorityClass" || name == codec::kSecretKind || name == codec::kHostKind ||
      name == codec::kEventKind)
    return AlreadyExists("kind: '" + name + "' is taken");
  AddKind(std::move(kind));
  return Status::Ok();
}

void Controller::AddKind(std::unique_ptr<WorkloadKind> kind) {
  if (context_ == nullptr) context_ = std::make_unique<Context>(*this);
  kind->Attach(*context_);
  WorkloadKind* k = kind.get();
  kinds_.push_back(std::move(kind));
  // Stable: kinds of one pass order keep their registration order.
  pass_order_.insert(std::upper_bound(pass_order_.begin(), pass_order_.end(), k,
                                      [](const WorkloadKind* a, const WorkloadKind* b) {
                                        return a->pass_order() < b->pass_order();
                                      }),
                     k);
}

WorkloadKind* Controller::FindKind(const std::string& name) const {
  for (const auto& kind : kinds_)
    if (kind->name() == name) return kind.get();
  return nullptr;
}

Status Controller::UnknownKind(const std::string& kind) const {
  std::string known;
  for (const auto& k : kinds_) known += k->name() + ", ";
  return InvalidArgument("kind: '" + kind + "' is unknown here; valid: " + known +
                         "ClusterQueue, LocalQueue, PriorityClass, Secret");
}

Result<Json> Controller::DryRunApply(const Json& doc) {
  auto kind = codec::DocumentKindName(doc);
  if (!kind.ok()) return kind.status();
  auto lock = Hold();
  if (WorkloadKind* k = FindKind(*kind)) {
    auto preview = k->DryRun(doc);
    if (!preview.ok()) return preview.status();
    return Json{{"kind", *kind},
                {"metadata", {{"name", preview->name}}},
                {"created", !preview->exists},
                {"dryRun", true}};
  }
  if (*kind == codec::kSecretKind) return DryRunSecret(doc);
  if (*kind != "ClusterQueue" && *kind != "LocalQueue" && *kind != "PriorityClass")
    return UnknownKind(*kind);
  Status parsed = *kind == "ClusterQueue" ? codec::ParseClusterQueue(doc).status()
                  : *kind == "LocalQueue" ? codec::ParseLocalQueue(doc).status()
                                          : codec::ParsePriorityClass(doc).status();
  if (!parsed.ok()) return parsed;
  const std::string name = doc["metadata"].value("name", "");
  return Json{{"kind", *kind},
              {"metadata", {{"name", name}}},
              {"created", QueueObjects(*kind).count(name) == 0},
              {"dryRun", true}};
}

Result<Json> Controller::Apply(const Json& doc) {
  auto kind = codec::DocumentKindName(doc);
  if (!kind.ok()) return kind.status();
  {
    auto lock = Hold();
    if (WorkloadKind* k = FindKind(*kind)) return k->Apply(doc);
    if (*kind == codec::kSecretKind) return ApplySecret(doc);
    if (*kind != "ClusterQueue" && *kind != "LocalQueue" && *kind != "PriorityClass")
      return UnknownKind(*kind);
  }
  return ApplyQueueObject(*kind, doc);
}

Result<Json> Controller::Get(const std::string& kind, const std::string& name) const {
  auto lock = Hold();
  const WorkloadKind* k = FindKind(kind);
  if (k == nullptr) return NotFound("kind '" + kind + "' is not registered");
  return k->Get(name);
}

Result<Json> Controller::Delete(const std::string& kind, const std::string& name, bool force) {
  auto lock = Hold();
  WorkloadKind* k = FindKind(kind);
  if (k == nullptr) return NotFound("kind '" + kind + "' is not registered");
  return k->Delete(name, force);
}

// The built-in kinds' calls.

Result<Json> Controller::CreateJob(const Json& doc) {
  auto lock = Hold();
  return CreateJobLocked(doc);
}

Result<Json> Controller::GetJob(const std::string& name) const {
  auto lock = Hold();
  return GetJobLocked(name);
}

Result<Json> Controller::DeleteJob(const std::string& name) {
  auto lock = Hold();
  return DeleteJobLocked(name);
}

Result<Json> Controller::ApplyService(const Json& doc) {
  auto lock = Hold();
  return ApplyServiceLocked(doc);
}

Result<Json> Controller::GetService(const std::string& name) const {
  auto lock = Hold();
  return GetServiceLocked(name);
}

Result<Json> Controller::DeleteService(const std::string& name) {
  auto lock = Hold();
  return DeleteServiceLocked(name);
}

Result<Json> Controller::ApplyReservation(const Json& doc) {
  auto lock = Hold();
  return ApplyReservationLocked(doc);
}

Result<Json> Controller::GetReservation(const std::string& name) const {
  auto lock = Hold();
  return GetReservationLocked(name);
}

Result<Json> Controller::DeleteReservation(const std::string& name, bool force) {
  auto lock = Hold();
  return DeleteReservationLocked(name, force);
}

}  // namespace tessera::controller
