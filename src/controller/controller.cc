#include "controller/controller.h"

#include <algorithm>
#include <utility>

namespace tessera::controller {
namespace {

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

void Controller::SetChangeListener(ChangeListener listener) {
  auto lock = Hold();
  on_change_ = std::move(listener);
  EmitDerivedChangesLocked(/*announce=*/false);  // what a list taken now shows
}

void Controller::SetAssignmentListener(AssignmentListener listener) {
  auto lock = Hold();
  on_assignments_ = std::move(listener);
}

void Controller::SetPassListener(PassListener listener) {
  auto lock = Hold();
  on_pass_wanted_ = std::move(listener);
}

Inventory Controller::InventorySnapshot() const {
  auto lock = Hold();
  return inventory_;
}

// ---------------------------------------------------------------------------------------------
// Watchers

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
  std::vector<std::string> moved;
  // Inside a SliceReservation the inventory's owner stays the reservation while the host's
  // shown owner is the workload running there (ReservationOwnerOf): walk every time then.
  const std::pair ownership{inventory_builds_, inventory_.ownership_changes()};
  if (!announce || ownership != shown_ownership_ || !reservations_.empty()) {
    // Every comparison records the owner ids: those in shown_owner_ids_ are from the build of
    // the last one.
    const uint64_t ids_build = shown_ownership_.first;
    shown_ownership_ = ownership;
    auto compare = [&](const std::string& name) {
      const std::string owner = OwnerOf(name);
      auto shown = shown_host_owner_.find(name);
      if (!announce || shown == shown_host_owner_.end()) {
        shown_host_owner_[name] = owner;
      } else if (shown->second != owner) {
        moved.push_back(name);
      }
    };
    // A host's shown owner can differ from OwnerOf only if its inventory owner moved since
    // the last comparison (outside reservations, within one build): compare those hosts, found
    // by a walk of the inventory's owner ids, not every host by name (a lookup and a string
    // each: at 10,000 hosts a millisecond or two, at every Reserve or Release).
    const std::vector<Host>& held = inventory_.hosts();
    if (announce && reservations_.empty() && inventory_ready_ && ids_build == inventory_builds_ &&
        shown_owner_ids_.size() == held.size()) {
      for (size_t i = 0; i < held.size(); ++i) {
        const uint64_t id = held[i].owner.value();
        if (id == shown_owner_ids_[i]) continue;
        shown_owner_ids_[i] = id;
        auto name = host_names_.find(static_cast<uint32_t>(i));
        if (name != host_names_.end() && hosts_.count(name->second)) compare(name->second);
      }
    } else {
      for (const auto& [name, h] : hosts_) compare(name);
      shown_owner_ids_.resize(held.size());
      for (size_t i = 0; i < held.size(); ++i) shown_owner_ids_[i] = held[i].owner.value();
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
  auto lock = Hold();
  const JobsCopy copy = CopyJobsLocked();
  lock.unlock();
  return JobListJson(copy);
}

std::vector<TrainJob> Controller::CopyJobs() const {
  auto lock = Hold();
  return CopyJobsLocked().jobs;
}

void Controller::VisitJobs(const std::function<void(const TrainJob&)>& visit) const {
  auto lock = Hold();
  for (const auto& [name, job] : jobs_) visit(job);
}

Json Controller::ListHosts() const {
  auto lock = Hold();
  return ListHostsLocked();
}

Json Controller::ListEvents() const {
  auto lock = Hold();
  const std::deque<Event> events = events_.events();
  lock.unlock();
  return EventListJson(events);
}

std::optional<Controller::VersionedList> Controller::ListWithVersion(
    const std::string& kind) const {
  auto lock = Hold();
  const uint64_t changes = changes_emitted_;  // the version of what is copied below
  if (const WorkloadKind* k = FindKind(kind)) {
    const std::function<Json()> list = k->CopyList();
    lock.unlock();
    return VersionedList{list(), changes};
  }
  if (kind == codec::kEventKind) {
    const std::deque<Event> events = events_.events();
    lock.unlock();
    return VersionedList{EventListJson(events), changes};
  }
  Json list;
  if (kind == codec::kHostKind) {
    list = ListHostsLocked();
  } else if (kind == "ClusterQueue" || kind == "LocalQueue" || kind == "PriorityClass") {
    list = ListQueueObjectsLocked(kind);
  } else if (kind == codec::kSecretKind) {
    list = ListSecretsLocked();  // keys and lengths only
  } else {
    return std::nullopt;
  }
  return VersionedList{std::move(list), changes};
}

Result<int64_t> Controller::CommitWithEvents(store::WriteBatch& batch, const std::string& object,
                                             const std::vector<JobEvent>& events) {
  std::vector<std::pair<std::string, JobEvent>> of_object;
  for (const JobEvent& e : events) of_object.emplace_back(object, e);
  return CommitWithEvents(batch, of_object);
}

Result<int64_t> Controller::CommitWithEvents(
    store::WriteBatch& batch, const std::vector<std::pair<std::string, JobEvent>>& events) {
  std::vector<Event> staged;
  for (const auto& [object, e] : events)
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

// ---------------------------------------------------------------------------------------------
// Loading

Status Controller::Load() {
  auto lock = Hold();
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
    h.claim = ClaimOf(h.spec);
    h.status.lost = false;
    RenewLease(h, now);  // a fresh lease: agents reconnect, workers are adopted
    if (h.status.registered_ms == 0) h.status.registered_ms = now;
    PutHostLocked(std::move(h));
  }
  // The leases just given start a lease check: until the first tick the head is loading (a new
  // leader reads 100,000 stored jobs for seconds, longer than a lease) and then starting to
  // serve, so no agent could have reached it; that gap counts as the head's own stall
  // (ExpireLeases), not as the hosts' silence. Without this a new leader declared every host
  // lost at its first tick, one commit each (issue 35, bench/README.md "Failover at fleet
  // scale"). Declaring a host lost later than its agent's fence is safe: the agent stopped its
  // workers on its own.
  last_lease_check_ms_ = now;
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
  for (const auto& kind : kinds_) TESSERA_RETURN_IF_ERROR(kind->Load());
  for (const char* kind : {"ClusterQueue", "LocalQueue", "PriorityClass"})
    TESSERA_RETURN_IF_ERROR(LoadQueueObjects(kind));
  TESSERA_RETURN_IF_ERROR(LoadSecrets());
  TESSERA_RETURN_IF_ERROR(events_.Load(store_));
  RebuildInventory();
  // Every agent of the fleet beats again at once after a restart or a failover: the idle ones'
  // beats need no lock (quiet_beats.cc).
  for (const auto& [name, h] : hosts_)
    RememberQuietLocked(name, h, protocol::Heartbeat{}, AssignmentsLocked(name));
  EmitDerivedChangesLocked(/*announce=*/false);  // what the first list shows
  return ReportInventoryConflicts();
}

// ---------------------------------------------------------------------------------------------
// Timers

Status Controller::Tick() {
  std::lock_guard lock(mu_);  // not Hold(): ExpireLeases applies the steady beats and fails on it
  const int64_t now = NowMs();
  Status first = ExpireLeases(now);
  for (const auto& kind : kinds_) {
    Status s = kind->Tick(now);
    if (first.ok()) first = s;
  }
  Status scheduled = Schedule();
  if (first.ok()) first = scheduled;
  Status flushed = FlushStatusWrites();  // the statuses this tick and the requests changed
  if (first.ok()) first = flushed;
  // Hosts whose owner and ClusterQueues whose usage moved with this tick's or the requests'
  // changes (a placement, a release, an admission cycle): one MODIFIED each for watchers.
  EmitDerivedChangesLocked(/*announce=*/true);
  Status deferred = std::exchange(deferred_error_, Status::Ok());
  return first.ok() ? deferred : first;
}

}  // namespace tessera::controller
