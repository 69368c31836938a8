#include "controller/controller.h"

#include <algorithm>
#include <utility>

#include "workload/effects_applier.h"

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

struct StoredDocument {
  store::Object object;
  Json doc;
};

// Every stored document of `kind`; kInternal naming the object when one is not JSON.
Result<std::vector<StoredDocument>> ListDocuments(store::Store& store, const char* kind) {
  auto objects = store.List(kind);
  if (!objects.ok()) return objects.status();
  std::vector<StoredDocument> out;
  for (auto& obj : *objects) {
    Json doc = Json::parse(obj.body, nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded())
      return Internal("stored " + std::string(kind) + " " + obj.name + " is not JSON");
    out.push_back({std::move(obj), std::move(doc)});
  }
  return out;
}

}  // namespace

bool Controller::View::HostLost(const std::string& host) const {
  auto it = c_.hosts_.find(host);
  return it == c_.hosts_.end() || it->second.status.lost;
}

int Controller::View::LargestFitWithoutJob(const TrainJob& job, int lo, int hi) const {
  if (!c_.inventory_ready_) return 0;
  if (!job.spec.reservation.empty()) return c_.LargestFitInReservation(job, lo, hi);
  Inventory free_of_job = c_.inventory_;
  free_of_job.Release(OwnerId(job.uid));
  PlanResult plan = c_.PlanLargest(free_of_job, job, lo, hi);
  return plan.placed() ? static_cast<int>(plan.slices.size()) : 0;
}

Controller::Controller(store::Store& store, const Clock& clock, ControllerOptions options)
    : store_(store),
      clock_(clock),
      options_(std::move(options)),
      planner_(options_.planner),
      admitter_(MakeAdmissionOptions(options_)),
      train_(TrainLifecycleOptions{options_.lease_ms}),
      rng_(options_.seed),
      events_(options_.max_events),
      term_(options_.term) {}

void Controller::SetChangeListener(ChangeListener listener) {
  std::lock_guard lock(mu_);
  on_change_ = std::move(listener);
  EmitDerivedChangesLocked(/*announce=*/false);  // what a list taken now shows
}

void Controller::SetAssignmentListener(AssignmentListener listener) {
  std::lock_guard lock(mu_);
  on_assignments_ = std::move(listener);
}

void Controller::SetPassListener(PassListener listener) {
  std::lock_guard lock(mu_);
  on_pass_wanted_ = std::move(listener);
}

Inventory Controller::InventorySnapshot() const {
  std::lock_guard lock(mu_);
  return inventory_;
}

// ---------------------------------------------------------------------------------------------
// The driver

TrainJob* Controller::FindJob(const std::string& name) {
  auto it = jobs_.find(name);
  return it == jobs_.end() ? nullptr : &it->second;
}

Json Controller::JobJson(const TrainJob& job) const { return codec::TrainJobJson(job, NowMs()); }

void Controller::Emit(const std::string& kind, const std::string& type, const Json& object) {
  if (!on_change_) return;
  ++changes_emitted_;
  on_change_(kind, type, object);
  // What a watcher was shown, so the derived fields are emitted again only when they move.
  if (kind == codec::kHostKind || kind == "ClusterQueue") {
    const std::string name = object.value("metadata", Json::object()).value("name", "");
    if (kind == codec::kHostKind) {
      if (type == "DELETED")
        shown_host_owner_.erase(name);
      else
        shown_host_owner_[name] = object.value("status", Json::object()).value("job", "");
    } else {
      if (type == "DELETED")
        shown_queue_status_.erase(name);
      else
        shown_queue_status_[name] = object.value("status", Json::object());
    }
  }
  if (kind != codec::kEventKind) derived_stale_ = true;
}

void Controller::EmitDerivedChangesLocked(bool announce) {
  if (!on_change_ || (announce && !derived_stale_)) return;
  derived_stale_ = false;
  // A host's owner: a TrainJob by uid (one lookup), else what OwnerOf finds.
  std::map<uint64_t, const std::string*> job_of;
  for (const auto& [name, job] : jobs_) job_of[job.uid] = &name;
  std::vector<std::string> moved;
  for (const auto& [name, h] : hosts_) {
    std::string owner;
    auto id = host_ids_.find(name);
    if (id != host_ids_.end() && inventory_ready_) {
      const OwnerId o = inventory_.host(id->second).owner;
      if (o.valid()) {
        auto job = job_of.find(o.value());
        owner = job != job_of.end() ? *job->second : OwnerOf(name);
      }
    }
    auto shown = shown_host_owner_.find(name);
    if (!announce || shown == shown_host_owner_.end()) {
      shown_host_owner_[name] = owner;
    } else if (shown->second != owner) {
      moved.push_back(name);
    }
  }
  for (const std::string& name : moved)
    Emit(codec::kHostKind, "MODIFIED", HostJsonLocked(hosts_.at(name)));
  for (const auto& [name, q] : cluster_queues_) {
    Json doc = QueueObjectJson("ClusterQueue", q);
    auto shown = shown_queue_status_.find(name);
    if (!announce || shown == shown_queue_status_.end()) {
      shown_queue_status_[name] = doc["status"];
    } else if (shown->second != doc["status"]) {
      Emit("ClusterQueue", "MODIFIED", doc);
    }
  }
  derived_stale_ = false;  // the emits above are the derived changes themselves
}

Json Controller::ListJobs() const {
  std::unique_lock lock(mu_);
  const JobsCopy copy = CopyJobsLocked();
  lock.unlock();
  return JobListJson(copy);
}

std::vector<TrainJob> Controller::CopyJobs() const {
  std::lock_guard lock(mu_);
  return CopyJobsLocked().jobs;
}

Json Controller::ListHosts() const {
  std::lock_guard lock(mu_);
  return ListHostsLocked();
}

Json Controller::ListEvents() const {
  std::unique_lock lock(mu_);
  const std::deque<Event> events = events_.events();
  lock.unlock();
  return EventListJson(events);
}

std::optional<Controller::VersionedList> Controller::ListWithVersion(
    const std::string& kind) const {
  std::unique_lock lock(mu_);
  const uint64_t changes = changes_emitted_;  // the version of what is copied below
  if (kind == codec::kTrainJobKind) {
    const JobsCopy copy = CopyJobsLocked();
    lock.unlock();
    return VersionedList{JobListJson(copy), changes};
  }
  if (kind == codec::kEventKind) {
    const std::deque<Event> events = events_.events();
    lock.unlock();
    return VersionedList{EventListJson(events), changes};
  }
  Json list;
  if (kind == codec::kHostKind) {
    list = ListHostsLocked();
  } else if (kind == "Service") {
    list = ListServicesLocked();
  } else if (kind == "SliceReservation") {
    list = ListReservationsLocked();
  } else if (kind == "ClusterQueue" || kind == "LocalQueue" || kind == "PriorityClass") {
    list = ListQueueObjectsLocked(kind);
  } else {
    return std::nullopt;
  }
  return VersionedList{std::move(list), changes};
}

Result<int64_t> Controller::CommitWithEvents(store::WriteBatch& batch, const std::string& object,
                                             const std::vector<JobEvent>& events) {
  std::vector<Event> staged;
  for (const JobEvent& e : events)
    staged.push_back(Event{"", e.warning, e.reason, object, e.message, NowMs()});
  staged = events_.Stage(std::move(staged), batch);
  if (batch.empty()) return store_.Revision();
  auto r = store_.Commit(batch);
  if (!r.ok()) return r.status();
  for (const Event& e : staged) unannounced_.push_back(codec::EventJson(e));
  events_.Publish(std::move(staged));
  return r;
}

void Controller::AnnounceEvents() {
  std::vector<Json> events;
  events.swap(unannounced_);
  for (const Json& e : events) Emit(codec::kEventKind, "ADDED", e);
}

Status Controller::RecordEvent(const std::string& object, bool warning, const std::string& reason,
                               const std::string& message) {
  store::WriteBatch batch;
  Status s = CommitWithEvents(batch, object, {JobEvent{warning, reason, message}}).status();
  AnnounceEvents();
  return s;
}

Status Controller::RunStep(std::string name, const Step& step) {
  TrainJob* job = FindJob(name);
  if (job == nullptr) return NotFound("trainjob '" + name + "' not found");
  // The head's side of the applier (workload/effects_applier.h): its store, inventory, agents
  // and watchers.
  class HeadSink final : public TrainEffectsSink {
   public:
    HeadSink(Controller& c, const std::string& name) : c_(c), name_(name) {}
    Result<int64_t> Commit(const TrainJob& job, const Effects& e) override {
      store::WriteBatch batch;
      if (e.remove) {
        batch.Delete(codec::kTrainJobKind, name_);
      } else if (e.persist) {
        // The document is built once: stored, then announced with the version the store gave
        // it.
        doc_ = c_.JobJson(job);
        batch.Update(codec::kTrainJobKind, name_, doc_.dump(), job.runtime.version);
      }
      auto committed = c_.CommitWithEvents(batch, "trainjob/" + name_, e.events);
      if (!committed.ok()) return Unavailable(committed.status().message());
      return committed;
    }
    void Release(uint64_t owner) override {
      if (c_.inventory_ready_) c_.inventory_.Release(OwnerId(owner));
    }
    int64_t BumpAssignments() override { return ++c_.assignment_revision_; }
    void NotifyHosts(const std::set<std::string>& hosts) override { c_.NotifyHosts(hosts); }
    void Announce(TrainJob& job, const Effects& e) override {
      applied_ = true;
      if (e.remove) {
        c_.Emit(codec::kTrainJobKind, "DELETED", c_.JobJson(job));
        c_.jobs_.erase(name_);
      } else if (e.persist) {
        doc_["metadata"]["resourceVersion"] = job.runtime.version;
        c_.Emit(codec::kTrainJobKind, "MODIFIED", doc_);
      }
      c_.AnnounceEvents();
    }
    void Schedule() override { c_.schedule_requested_ = true; }
    bool applied() const { return applied_; }

   private:
    Controller& c_;
    const std::string name_;  // a copy: the object may be erased under a reference to its name
    Json doc_;
    bool applied_ = false;
  };
  const std::string reservation = job->spec.reservation;
  HeadSink sink(*this, name);
  TESSERA_RETURN_IF_ERROR(ApplyStep(*job, step, sink, NowMs()));
  if (sink.applied()) NoteReservationUsers(reservation);  // reservation_health.cc: status.users
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// Loading

Status Controller::Load() {
  std::lock_guard lock(mu_);
  const int64_t now = NowMs();
  auto hosts = ListDocuments(store_, codec::kHostKind);
  if (!hosts.ok()) return hosts.status();
  for (const auto& [obj, doc] : *hosts) {
    auto stored = codec::HostFromJson(doc);
    if (!stored.ok()) return stored.status();
    RegisteredHost h;
    h.spec = std::move(stored->spec);
    h.status = std::move(stored->status);
    h.version = obj.resource_version;
    if (auto hash = doc.find(kCredentialHashField); hash != doc.end() && hash->is_string())
      h.credential_hash = hash->get<std::string>();
    if (auto fence = doc.find(kAgentFenceField); fence != doc.end() && fence->is_number_unsigned())
      h.fence_ms = fence->get<int64_t>();
    h.spec.name = obj.name;
    h.status.lost = false;
    RenewLease(h, now);  // a fresh lease: agents reconnect, workers are adopted
    if (h.status.registered_ms == 0) h.status.registered_ms = now;
    hosts_[obj.name] = std::move(h);
  }
  auto jobs = ListDocuments(store_, codec::kTrainJobKind);
  if (!jobs.ok()) return jobs.status();
  for (const auto& [obj, doc] : *jobs) {
    auto job = codec::TrainJobFromJson(doc);
    if (!job.ok()) return job.status();
    job->runtime.version = obj.resource_version;
    job->runtime.progress_epoch_ms = now;  // progress was not persisted: hang timers restart
    if (job->status.stopping)
      for (const auto& [rank, w] : job->status.workers)
        if (MayRun(w.phase)) job->runtime.unconfirmed.insert(w.host);
    next_uid_ = std::max(next_uid_, job->uid + 1);
    jobs_[obj.name] = std::move(*job);
  }
  auto counter = store_.Get(kUidCounterKind, kUidCounterName);
  if (counter.ok()) {
    Json doc = Json::parse(counter->body, nullptr, /*allow_exceptions=*/false);
    auto next = doc.is_object() ? doc.find("next") : doc.end();
    if (next == doc.end() || !next->is_number_unsigned())
      return Internal("stored " + std::string(kUidCounterKind) + " " + kUidCounterName +
                      " is not {\"next\": N}");
    next_uid_ = std::max(next_uid_, next->get<uint64_t>());
  } else if (counter.status().code() != StatusCode::kNotFound) {
    return counter.status();
  }
  TESSERA_RETURN_IF_ERROR(LoadServices());
  TESSERA_RETURN_IF_ERROR(LoadReservations());  // reservations.cc
  for (const char* kind : {"ClusterQueue", "LocalQueue", "PriorityClass"})
    TESSERA_RETURN_IF_ERROR(LoadQueueObjects(kind));
  TESSERA_RETURN_IF_ERROR(events_.Load(store_));
  RebuildInventory();
  EmitDerivedChangesLocked(/*announce=*/false);  // what the first list shows
  return ReportInventoryConflicts();
}

// ---------------------------------------------------------------------------------------------
// Timers

Status Controller::Tick() {
  std::lock_guard lock(mu_);
  const int64_t now = NowMs();
  Status first = ExpireLeases(now);
  const View view(*this);
  std::vector<std::string> names;
  for (const auto& [name, job] : jobs_) names.push_back(name);
  for (const auto& name : names) {
    if (!jobs_.count(name)) continue;
    Status s = RunStep(name, [&](TrainJob& job) { return train_.Tick(job, view, now); });
    if (first.ok()) first = s;
  }
  Status services = TickServices(now);
  if (first.ok()) first = services;
  Status reservations = TickReservations(now);  // reservations.cc: ttl
  if (first.ok()) first = reservations;
  Status scheduled = Schedule();
  if (first.ok()) first = scheduled;
  // Hosts whose owner and ClusterQueues whose usage moved with this tick's or the requests'
  // changes (a placement, a release, an admission cycle): one MODIFIED each for watchers.
  EmitDerivedChangesLocked(/*announce=*/true);
  Status deferred = std::exchange(deferred_error_, Status::Ok());
  return first.ok() ? deferred : first;
}

}  // namespace tessera::controller
