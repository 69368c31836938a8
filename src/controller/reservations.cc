// Controller: SliceReservations (workload/reservation.h, docs/reservations.md). The user API
// (apply, get, list, delete with or without force), RunReservationStep (the driver for
// ReservationLifecycle), the reservations' part of every scheduling pass, and the placement of
// TrainJobs that name a reservation: they are planned only on the reservation's hosts that its
// other users do not hold, and never reserve chips of their own (the reservation's owner keeps
// every host, so quota is charged once and the hosts stay held when the jobs end). Services
// inside reservations are placed the same way by reservation_services.cc.
//
// Hooked in by one line each: Apply and DryRunApply (jobs.cc), NewJobRefusalLocked (jobs.cc),
// Load and Tick (controller.cc), Schedule and the admission cycle (scheduling.cc), the
// inventory rebuild (host_registry.cc).
#include <algorithm>

#include "codec/manifest.h"
#include "codec/reservation_manifest.h"
#include "controller/controller.h"

namespace tessera::controller {
namespace {

std::string Object(const std::string& name) { return "slicereservation/" + name; }

bool WaitingJob(const TrainJob& job) {
  return job.status.phase == JobPhase::kPending && !job.status.deleting && !job.status.stopping;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The user API

std::vector<std::string> Controller::ReservationUsers(const std::string& name) const {
  std::vector<std::string> users;
  for (const auto& [job_name, job] : jobs_)
    if (job.spec.reservation == name && job.HoldsChips()) users.push_back("trainjob/" + job_name);
  std::vector<const Service*> services;
  for (const auto& [svc_name, svc] : services_)
    if (svc.spec.reservation == name && svc.PlacedReplicas() > 0) services.push_back(&svc);
  std::sort(services.begin(), services.end(),
            [](const Service* a, const Service* b) { return a->uid < b->uid; });
  for (const Service* svc : services) users.push_back("service/" + svc->name());
  return users;
}

Json Controller::ReservationJsonLocked(const SliceReservation& r) const {
  return codec::SliceReservationJson(r);
}

Status Controller::ReservationRefusalLocked(const SliceReservationSpec& spec) {
  if (Status s = RefreshInventory(); !s.ok()) return s;
  if (inventory_ready_) {
    if (spec.accelerator != inventory_.generation())
      return InvalidArgument("spec.accelerator: this cluster has " +
                             std::string(GenerationName(inventory_.generation())) + " hosts; a " +
                             std::string(GenerationName(spec.accelerator)) +
                             " reservation can never be held here");
    // Larger than the cluster even when empty and healthy: it could never be Ready.
    Inventory empty = inventory_;
    for (OwnerId owner : inventory_.Owners()) empty.Release(owner);
    for (const Host& h : empty.hosts())
      if (Status s = empty.SetHealth(h.id, Health::kHealthy); !s.ok()) return s;
    PlanResult p = planner_.Plan(empty, {spec.accelerator, spec.topology, spec.num_slices});
    if (!p.placed() && p.reason != NoFit::kNoFreeBox && p.reason != NoFit::kNoFreeSlice)
      return InvalidArgument("spec.slices: " + std::to_string(spec.num_slices) + " x " +
                             spec.topology.ToString() +
                             " can never fit this cluster: " + p.message);
  }
  if (!spec.priority.empty() && !priority_classes_.count(spec.priority)) {
    std::string known;
    for (const auto& [n, pc] : priority_classes_) known += (known.empty() ? "" : ", ") + n;
    return InvalidArgument("spec.priority: PriorityClass '" + spec.priority +
                           "' does not exist; known: " + (known.empty() ? "none" : known));
  }
  return Status::Ok();
}

Status Controller::JobInReservationRefusalLocked(const TrainJobSpec& spec) {
  if (spec.reservation.empty()) return Status::Ok();
  auto it = reservations_.find(spec.reservation);
  if (it == reservations_.end()) return Status::Ok();  // it waits for the reservation
  const SliceReservation& r = it->second;
  const std::string what = std::to_string(spec.min_slices) + " x " +
                           std::string(GenerationName(spec.accelerator)) + " " +
                           spec.topology.ToString();
  const std::string holds = std::to_string(r.spec.num_slices) + " x " +
                            std::string(GenerationName(r.spec.accelerator)) + " " +
                            r.spec.topology.ToString();
  auto refuse = [&](const std::string& why) {
    return InvalidArgument("spec.reservation: " + what +
                           " can never run inside slicereservation '" + r.name() + "' (" + holds +
                           "): " + why + "; ask for less, or reserve more");
  };
  if (spec.accelerator != r.spec.accelerator) return refuse("another accelerator");
  if (spec.topology.chips() * spec.min_slices > r.chips()) return refuse("more chips");
  // Held whole now (not Rescheduling): plan on its slices as if it had no other users.
  if (r.status.phase == ReservationPhase::kReady && r.HoldsChips() && inventory_ready_) {
    auto inside = InsideReservation(inventory_, OwnerId(r.uid), ReservationLostHosts(r));
    if (!inside.ok()) return inside.status();
    PlanResult p = planner_.Plan(*inside, {spec.accelerator, spec.topology, spec.min_slices});
    if (!p.placed()) return refuse(p.message);
  }
  return Status::Ok();
}

Result<Json> Controller::ApplyReservationLocked(const Json& doc) {
  auto spec = codec::ParseSliceReservation(doc);
  if (!spec.ok()) return spec.status();
  const std::string name = spec->name;
  const Json spec_doc = codec::SliceReservationSpecJson(*spec, doc["spec"]);
  if (auto it = reservations_.find(name); it != reservations_.end()) {
    // Applying the same document again changes nothing (kubectl apply); another spec would
    // change what is held under running work.
    Json same = Json::parse(it->second.spec_document, nullptr, false);
    if (same == spec_doc && it->second.spec.queue == spec->queue &&
        it->second.spec.labels == spec->labels) {
      Json out = ReservationJsonLocked(it->second);
      out["created"] = false;
      return out;
    }
    return AlreadyExists("spec: slicereservation '" + name +
                         "' exists with another spec; a held reservation cannot be changed: "
                         "delete it first (tessera delete slicereservation " +
                         name + ") or choose another name");
  }
  if (Status refused = ReservationRefusalLocked(*spec); !refused.ok()) return refused;
  SliceReservation r =
      ReservationLifecycle::Create(std::move(*spec), spec_doc.dump(), next_uid_, NowMs());
  store::WriteBatch batch;
  batch.Create(codec::kSliceReservationKind, name, ReservationJsonLocked(r).dump());
  batch.Put(kUidCounterKind, kUidCounterName, Json{{"next", next_uid_ + 1}}.dump());
  auto committed = CommitWithEvents(batch, Object(name), {JobEvent{false, "Created", "accepted"}});
  if (!committed.ok()) {
    if (committed.status().code() == StatusCode::kAlreadyExists)
      return AlreadyExists("metadata.name: '" + name + "' already exists");
    return Unavailable(committed.status().message());
  }
  ++next_uid_;
  r.version = *committed;
  Json out = ReservationJsonLocked(r);
  Emit(codec::kSliceReservationKind, "ADDED", out);
  AnnounceEvents();
  reservations_[name] = std::move(r);
  schedule_requested_ = true;
  ScheduleAfterRequest();
  out = ReservationJsonLocked(reservations_.at(name));
  out["created"] = true;
  return out;
}

Status Controller::DryRunReservationLocked(const SliceReservationSpec& spec) {
  return reservations_.count(spec.name) ? Status::Ok() : ReservationRefusalLocked(spec);
}

Result<Json> Controller::GetReservationLocked(const std::string& name) const {
  auto it = reservations_.find(name);
  if (it == reservations_.end()) return NotFound("slicereservation '" + name + "' not found");
  return ReservationJsonLocked(it->second);
}

Json Controller::ListReservationsLocked() const {
  std::vector<const SliceReservation*> all;
  for (const auto& [name, r] : reservations_) all.push_back(&r);
  std::sort(all.begin(), all.end(),
            [](const SliceReservation* a, const SliceReservation* b) { return a->uid < b->uid; });
  Json items = Json::array();
  for (const SliceReservation* r : all) items.push_back(ReservationJsonLocked(*r));
  return {{"kind", "SliceReservationList"}, {"items", items}};
}

Json Controller::ListReservations() const {
  auto lock = Hold();
  return ListReservationsLocked();
}

Result<Json> Controller::DeleteReservationLocked(const std::string& name, bool force) {
  if (!reservations_.count(name)) return NotFound("slicereservation '" + name + "' not found");
  const std::vector<std::string> users = ReservationUsers(name);
  Status refused = Status::Ok();
  Status s = RunReservationStep(name, [&](SliceReservation& r) {
    auto e = ReservationLifecycle::Delete(r, users, force, NowMs());
    if (!e.ok()) {
      refused = e.status();
      return ReservationEffects{};
    }
    return *e;
  });
  if (!refused.ok()) return FailedPrecondition(refused.message());
  if (!s.ok()) return s;
  ScheduleAfterRequest();
  Json out = {{"name", name}, {"status", reservations_.count(name) ? "Deleting" : "Deleted"}};
  if (!users.empty()) out["stopped"] = users;
  return out;
}

// ---------------------------------------------------------------------------------------------
// The driver

Status Controller::RunReservationStep(const std::string& name, const ReservationStep& step) {
  auto it = reservations_.find(name);
  if (it == reservations_.end()) return NotFound("slicereservation '" + name + "' not found");
  SliceReservation& r = it->second;
  SliceReservation before = r;
  ReservationEffects e = step(r);
  if (e.empty()) return Status::Ok();
  store::WriteBatch batch;
  if (e.remove)
    batch.Delete(codec::kSliceReservationKind, name);
  else if (e.persist)
    batch.Update(codec::kSliceReservationKind, name, ReservationJsonLocked(r).dump(), r.version);
  auto committed = CommitWithEvents(batch, Object(name), e.events);
  if (!committed.ok()) {
    r = std::move(before);
    return Unavailable(committed.status().message());
  }
  if (e.persist && !e.remove) r.version = *committed;
  Status stopped = e.stop_users ? StopReservationUsers(name) : Status::Ok();
  if (e.release_chips && inventory_ready_) inventory_.Release(OwnerId(r.uid));
  if (!e.release_hosts.empty() && inventory_ready_)
    ReleaseReservationHosts(r, e.release_hosts);  // reservation_health.cc
  if (e.remove) {
    Emit(codec::kSliceReservationKind, "DELETED", ReservationJsonLocked(r));
    reservations_.erase(it);
  } else if (e.persist) {
    Emit(codec::kSliceReservationKind, "MODIFIED", ReservationJsonLocked(r));
  }
  AnnounceEvents();
  if (e.schedule) schedule_requested_ = true;
  return stopped;
}

Status Controller::StopReservationUsers(const std::string& name) {
  const View view(*this);
  const int64_t now = NowMs();
  std::vector<std::string> names;
  for (const auto& [job_name, job] : jobs_)
    if (job.spec.reservation == name && job.HoldsChips() && !job.status.stopping)
      names.push_back(job_name);
  for (const std::string& job_name : names) {
    TrainJob& job = jobs_.at(job_name);
    Eviction eviction;
    eviction.workload = WorkloadId(job.uid);
    eviction.cause = EvictionCause::kPreempted;
    eviction.grace_ms = job.spec.grace_ms;
    eviction.start_guard = job.status.start_guard;
    eviction.message = "its slicereservation '" + name + "' is being released";
    TESSERA_RETURN_IF_ERROR(
        RunStep(job_name, [&](TrainJob& j) { return train_.Evict(j, eviction, view, now); }));
  }
  return StopReservationServices(name);  // reservation_services.cc
}

Status Controller::TickReservations(int64_t now) {
  std::vector<std::string> names;
  for (const auto& [name, r] : reservations_) names.push_back(name);
  Status first = Status::Ok();
  for (const std::string& name : names) {
    Status s = RunReservationStep(
        name, [&](SliceReservation& r) { return ReservationLifecycle::Tick(r, now); });
    if (first.ok()) first = s;
  }
  Status lost = ReservationHostsLost(now);  // reservation_health.cc: lost hosts, users
  return first.ok() ? lost : first;
}

Status Controller::LoadReservations() {
  auto objects = store_.List(codec::kSliceReservationKind);
  if (!objects.ok()) return objects.status();
  for (const auto& obj : *objects) {
    Json doc = Json::parse(obj.body, nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded()) return Internal("stored SliceReservation " + obj.name + " is not JSON");
    auto r = codec::SliceReservationFromJson(doc);
    if (!r.ok()) return r.status();
    r->version = obj.resource_version;
    next_uid_ = std::max(next_uid_, r->uid + 1);
    reservations_[obj.name] = std::move(*r);
  }
  return Status::Ok();
}

void Controller::ReserveReservations() {
  for (const auto& [name, r] : reservations_) {
    std::vector<HostId> ids = ReservationLostHosts(r);  // still held (reservation_health.cc)
    for (const ReservedSlice& s : r.status.slices)
      for (const std::string& host : s.hosts)
        if (auto it = host_ids_.find(host); it != host_ids_.end()) ids.push_back(it->second);
    HoldReservationHosts(r, std::move(ids));
  }
}

std::string Controller::ReservationOwnerOf(uint64_t owner, const std::string& host) const {
  for (const auto& [name, r] : reservations_) {
    if (r.uid != owner) continue;
    for (const auto& [job_name, job] : jobs_)
      if (job.spec.reservation == name && job.HoldsChips() && job.OnHost(host)) return job_name;
    for (const auto& [svc_name, svc] : services_)
      if (svc.spec.reservation == name && svc.OnHost(host)) return svc_name;
    return Object(name);
  }
  return "";
}

// ---------------------------------------------------------------------------------------------
// Scheduling

Status Controller::PlaceReservation(const std::string& name, const PlanResult& plan) {
  SliceReservation& r = reservations_.at(name);
  if (!ApplyPlan(inventory_, OwnerId(r.uid), plan).ok()) return Status::Ok();
  std::vector<ReservedSlice> slices;
  for (size_t s = 0; s < plan.slices.size(); ++s) {
    const SlicePlacement& p = plan.slices[s];
    ReservedSlice slice;
    slice.name = p.fixed_slice.valid() ? slice_names_[p.fixed_slice.value()]
                                       : name + "-s" + std::to_string(s);
    for (HostId id : p.hosts) slice.hosts.push_back(host_names_[id.value()]);
    slices.push_back(std::move(slice));
  }
  const int64_t now = NowMs();
  Status placed = RunReservationStep(
      name, [&](SliceReservation& x) { return ReservationLifecycle::Place(x, slices, now); });
  if (!placed.ok()) inventory_.Release(OwnerId(r.uid));  // Pending again, as it was
  return placed;
}

Status Controller::ScheduleReservations() {
  const int64_t now = NowMs();
  // Releases whose users have all stopped.
  std::vector<std::string> names;
  for (const auto& [name, r] : reservations_) names.push_back(name);
  for (const std::string& name : names) {
    if (!reservations_.at(name).status.releasing || !ReservationUsers(name).empty()) continue;
    TESSERA_RETURN_IF_ERROR(RunReservationStep(
        name, [&](SliceReservation& r) { return ReservationLifecycle::UsersStopped(r, now); }));
  }
  // Lost slices released, lost ones replaced, ahead of everything pending (reservation_health.cc).
  TESSERA_RETURN_IF_ERROR(ScheduleLostSlices());
  // Without ClusterQueues: pending reservations first come, first served (before the jobs'
  // pass, which cannot take their hosts afterwards). With queues the admission cycle admits
  // them (AddReservationWorkloads).
  if (cluster_queues_.empty()) {
    std::vector<const SliceReservation*> pending;
    for (const auto& [name, r] : reservations_)
      if (r.status.phase == ReservationPhase::kPending && !r.status.releasing && !r.status.deleting)
        pending.push_back(&r);
    std::sort(pending.begin(), pending.end(),
              [](const SliceReservation* a, const SliceReservation* b) { return a->uid < b->uid; });
    std::vector<std::string> order;
    for (const SliceReservation* r : pending) order.push_back(r->name());
    int position = 0;
    for (const std::string& name : order) {
      ++position;
      const SliceReservation& r = reservations_.at(name);
      PlanResult plan =
          planner_.Plan(inventory_, {r.spec.accelerator, r.spec.topology, r.spec.num_slices});
      if (plan.placed()) {
        TESSERA_RETURN_IF_ERROR(PlaceReservation(name, plan));
        if (reservations_.at(name).HoldsChips()) {
          --position;
          continue;
        }
      }
      TESSERA_RETURN_IF_ERROR(RunReservationStep(name, [&](SliceReservation& x) {
        return ReservationLifecycle::SetPending(
            x, NoFitName(plan.reason), plan.message + "; largest free: " + plan.largest_free,
            position, {});
      }));
    }
  }
  return ScheduleReservationUsers();
}

Status Controller::ScheduleReservationUsers() {
  // SliceReservations run first in the pass: their users' Secrets are checked here too.
  TESSERA_RETURN_IF_ERROR(HoldJobsMissingSecrets());  // secrets.cc
  std::vector<TrainJob*> waiting;
  ForEachUnsettledJob([&](std::string_view name, TrainJob& job) {  // waiting: never settled
    if (!job.spec.reservation.empty() && WaitingJob(job) && !jobs_missing_secrets_.count(name))
      waiting.push_back(&job);
  });
  std::sort(waiting.begin(), waiting.end(),
            [](const TrainJob* a, const TrainJob* b) { return a->uid < b->uid; });
  std::vector<std::string> order;
  for (TrainJob* job : waiting) order.push_back(job->name());
  for (const std::string& job_name : order) {
    if (!jobs_.count(job_name)) continue;
    TrainJob& job = jobs_.at(job_name);
    const std::string& rname = job.spec.reservation;
    std::string reason, message;
    // Missing, Pending, Expired or being released: reason and message say which.
    if (!ReservationUnusable(rname, reason, message)) {  // reservation_services.cc
      if (!inventory_ready_) continue;
      auto it = reservations_.find(rname);
      const std::vector<std::string> users = ReservationUsers(rname);
      auto inside = InsideReservation(inventory_, OwnerId(it->second.uid),
                                      ReservationHostsInUse(rname, job.uid));
      if (!inside.ok()) return inside.status();
      const auto [lo, hi] = job.SizeRange();
      PlanResult plan = PlanLargest(*inside, job, lo, hi);
      if (plan.placed()) {
        auto admitted = Admit(job, plan);
        if (!admitted.ok()) return admitted.status();
        if (*admitted) continue;
      }
      std::string names;
      for (const std::string& u : users) names += (names.empty() ? "" : ", ") + u;
      reason = "ReservationFull";
      message = "slicereservation '" + rname + "' has no room for it now: " + plan.message +
                (names.empty() ? "" : "; in use by " + names);
      if (it->second.status.phase == ReservationPhase::kRescheduling)
        message += "; it is Rescheduling (" + it->second.status.message + ")";
    }
    TESSERA_RETURN_IF_ERROR(RunStep(
        job_name, [&](TrainJob& j) { return train_.SetPending(j, reason, message, 0, {}); }));
  }
  return ScheduleReservationServices();  // reservation_services.cc
}

int Controller::LargestFitInReservation(const TrainJob& job, int lo, int hi) const {
  auto it = reservations_.find(job.spec.reservation);
  if (it == reservations_.end() || !inventory_ready_ || !it->second.HoldsChips()) return 0;
  auto inside = InsideReservation(inventory_, OwnerId(it->second.uid),
                                  ReservationHostsInUse(job.spec.reservation, job.uid));
  if (!inside.ok()) return 0;
  PlanResult plan = PlanLargest(*inside, job, lo, hi);
  return plan.placed() ? static_cast<int>(plan.slices.size()) : 0;
}

// ---------------------------------------------------------------------------------------------
// Through admission (with ClusterQueues): every reservation is one workload of the cycle

std::map<uint64_t, std::string> Controller::AddReservationWorkloads(
    Snapshot& snap, const std::vector<PriorityClass>& classes) {
  std::map<uint64_t, std::string> by_uid;
  for (const auto& [name, r] : reservations_) {
    const SliceReservationStatus& st = r.status;
    // Hosts being released count as free for planning, as a stopping job's do; an admission
    // placed on them waits until they are.
    if (st.releasing) snap.inventory.Release(OwnerId(r.uid));
    if (st.deleting || st.releasing || st.phase == ReservationPhase::kExpired) continue;
    Workload w;
    w.id = WorkloadId(r.uid);
    w.name = Object(name);
    w.local_queue = LocalQueueKeyOf(name, r.spec.queue);
    if (!r.spec.priority.empty()) {
      auto priority = ResolvePriority(classes, r.spec.priority);
      if (priority.ok()) w.priority = *priority;
    }
    w.request = {r.spec.accelerator, r.spec.topology, r.spec.num_slices};
    w.creation_order = static_cast<int64_t>(r.uid);
    // Rescheduling keeps its admission (and quota) while it re-acquires a lost slice.
    w.state = st.phase == ReservationPhase::kReady || st.phase == ReservationPhase::kRescheduling
                  ? WorkloadState::kRunning
                  : WorkloadState::kPending;
    w.admitted_at_ms = st.ready_ms;
    snap.workloads.push_back(std::move(w));
    by_uid[r.uid] = name;
  }
  return by_uid;
}

Status Controller::AdmitReservation(const std::string& name, const Admission& admission) {
  auto it = reservations_.find(name);
  if (it == reservations_.end() || it->second.HoldsChips()) return Status::Ok();
  TESSERA_RETURN_IF_ERROR(PlaceReservation(name, admission.placement));
  if (reservations_.at(name).HoldsChips()) return Status::Ok();
  // Its hosts are still held by workloads being stopped: placed by a later pass.
  return RunReservationStep(name, [&](SliceReservation& r) {
    return ReservationLifecycle::SetPending(
        r, "WaitingForPreemption",
        "admitted to " + admission.cluster_queue +
            "; held once the workloads on its hosts have stopped",
        0, {});
  });
}

Status Controller::EvictReservation(const std::string& name, const Eviction& eviction) {
  if (!reservations_.count(name)) return Status::Ok();
  const int64_t now = NowMs();
  return RunReservationStep(name, [&](SliceReservation& r) {
    return ReservationLifecycle::Evict(r, eviction.message, now);
  });
}

Status Controller::SetReservationPending(const std::string& name, const PendingStatus& pending) {
  if (!reservations_.count(name)) return Status::Ok();
  std::vector<WouldHelp> help;
  for (const Blocker& b : pending.would_help)
    help.push_back({b.name, b.cluster_queue, b.priority, b.chips, b.preemptible});
  return RunReservationStep(name, [&](SliceReservation& r) {
    return ReservationLifecycle::SetPending(r, PendingReasonName(pending.reason),
                                            pending.message.str(), pending.position,
                                            std::move(help));
  });
}

}  // namespace tessera::controller
