// Controller: the scheduling pass. With no ClusterQueue defined, pending jobs are placed first
// come, first served through the SlicePlanner (after Services' groups). Once a ClusterQueue
// exists, every pass runs one Admitter cycle (admission/admission.h) over a snapshot of the jobs
// and the Services' replica groups (service_admission.cc) and applies it:
// admissions are placed, preemption victims and start-guard evictions are stopped and requeued
// (TrainLifecycle::Evict), and every waiting job says why. Chips of workers being stopped stay
// held until the agents confirm; an admission placed on them starts after that.
// docs/admission.md "In the head".
#include <algorithm>

#include "controller/controller.h"
#include "workload/service_admission.h"

namespace tessera::controller {
namespace {

bool Waiting(const TrainJob& job) {
  return job.status.phase == JobPhase::kPending && !job.status.deleting && !job.status.stopping;
}

}  // namespace

void Controller::ScheduleAfterRequest() {
  Status s = Schedule();
  if (!s.ok()) deferred_error_ = s;
  // The request's placements and releases move host owners and queue usage: watchers hear of
  // them with the request, so a later tick (perhaps with the store down) emits nothing old.
  EmitDerivedChangesLocked(/*announce=*/true);
}

Status Controller::RunPass() {
  std::lock_guard lock(mu_);
  return Schedule();
}

void Controller::RequestPass() {
  if ((schedule_requested_ || inventory_dirty_) && on_pass_wanted_) on_pass_wanted_();
}

Status Controller::Schedule() {
  TESSERA_RETURN_IF_ERROR(RefreshInventory());
  if (!inventory_ready_) return Status::Ok();
  // Applying a decision may finish a stop at once and ask for another pass: run it as the next
  // pass instead of re-entering.
  for (int pass = 0; pass < 4; ++pass) {
    schedule_requested_ = false;
    TESSERA_RETURN_IF_ERROR(ScheduleReservations());  // reservations.cc
    TESSERA_RETURN_IF_ERROR(ScheduleServices());      // services.cc
    TESSERA_RETURN_IF_ERROR(!cluster_queues_.empty() ? ScheduleThroughQueues()
                            : options_.backfill_easy ? ScheduleEasy()  // easy_scheduling.cc
                                                     : ScheduleFirstComeFirstServed());
    if (!schedule_requested_) break;
  }
  return Status::Ok();
}

PlanResult Controller::PlanLargest(const Inventory& inventory, const TrainJob& job, int lo,
                                   int hi) const {
  PlanResult plan;
  for (int n = hi; n >= lo; --n) {
    plan = planner_.Plan(inventory, {job.spec.accelerator, job.spec.topology, n});
    if (plan.placed()) return plan;
  }
  return plan;
}

Result<bool> Controller::Admit(TrainJob& job, const PlanResult& plan) {
  // A job inside a SliceReservation runs on hosts its reservation keeps (reservations.cc).
  if (job.spec.reservation.empty() && !ApplyPlan(inventory_, OwnerId(job.uid), plan).ok())
    return false;
  AttemptPlacement placement;
  for (size_t s = 0; s < plan.slices.size(); ++s) {
    const SlicePlacement& p = plan.slices[s];
    std::vector<std::string> names;
    for (HostId id : p.hosts) names.push_back(host_names_[id.value()]);
    placement.hosts.push_back(std::move(names));
    placement.slice_names.push_back(p.fixed_slice.valid() ? slice_names_[p.fixed_slice.value()]
                                                          : job.name() + "-s" + std::to_string(s));
  }
  const auto chief = hosts_.find(placement.hosts[0][0]);  // worker 0 listens on MASTER_PORT
  placement.master_port =
      TrainJobMasterPort(job, chief == hosts_.end() ? std::string() : chief->second.spec.address);
  placement.jax_port = placement.master_port + 1;
  const int64_t now = NowMs();
  Status placed = RunStep(job.name(), [&](TrainJob& j) { return train_.Place(j, placement, now); });
  if (!placed.ok()) {
    inventory_.Release(OwnerId(job.uid));  // the job is Pending again, as it was
    return placed;
  }
  return true;
}

Status Controller::ScheduleFirstComeFirstServed() {
  std::vector<TrainJob*> pending;
  for (auto& [name, job] : jobs_)
    if (Waiting(job) && job.spec.reservation.empty()) pending.push_back(&job);
  std::sort(pending.begin(), pending.end(),
            [](TrainJob* a, TrainJob* b) { return a->uid < b->uid; });
  std::string blocked_by;
  int position = 0;
  for (TrainJob* job : pending) {
    ++position;
    std::string reason, message;
    if (!blocked_by.empty()) {
      reason = "Queued";
      message = "waiting behind trainjob " + blocked_by + " (first come, first served)";
    } else {
      const auto [lo, hi] = job->SizeRange();
      PlanResult plan = PlanLargest(inventory_, *job, lo, hi);
      if (plan.placed()) {
        auto admitted = Admit(*job, plan);
        if (!admitted.ok()) return admitted.status();
        if (*admitted) {
          --position;
          continue;
        }
      }
      reason = NoFitName(plan.reason);
      message = plan.message;
      // A job that can never fit waits with its reason but does not hold up the line.
      if (plan.reason != NoFit::kNeverFits && plan.reason != NoFit::kInvalidRequest)
        blocked_by = job->name();
    }
    TESSERA_RETURN_IF_ERROR(RunStep(job->name(), [&](TrainJob& j) {
      return train_.SetPending(j, reason, message, position, {});
    }));
  }
  return Status::Ok();
}

Status Controller::ScheduleThroughQueues() {
  const int64_t now = NowMs();
  Snapshot snap;
  snap.inventory = inventory_;
  for (const auto& [name, o] : cluster_queues_)
    snap.cluster_queues.push_back(std::get<ClusterQueueSpec>(o.spec));
  for (const auto& [name, o] : local_queues_)
    snap.local_queues.push_back(std::get<LocalQueueSpec>(o.spec));
  std::vector<PriorityClass> classes;
  for (const auto& [name, o] : priority_classes_)
    classes.push_back(std::get<PriorityClass>(o.spec));
  // Service replica groups, one workload each (service_admission.cc); first, so that the chips
  // of groups being stopped are free before elastic jobs size their requests.
  const std::map<uint64_t, GroupRef> groups = AddServiceWorkloads(snap, classes);
  // SliceReservations, one workload each; the jobs inside them are not charged again.
  const std::map<uint64_t, std::string> reserved = AddReservationWorkloads(snap, classes);
  std::map<uint64_t, std::string> by_uid;
  for (auto& [name, job] : jobs_) {
    const TrainJobStatus& st = job.status;
    if (st.deleting || !job.spec.reservation.empty()) continue;
    // Workers being stopped still hold their chips until the agents confirm; for planning the
    // chips count as free, and an admission placed on them waits (below).
    // A restarting job keeps its chips for its next attempt.
    if (st.stopping && st.phase != JobPhase::kRestarting) snap.inventory.Release(OwnerId(job.uid));
    WorkloadState state;
    if (st.phase == JobPhase::kPending)
      state = st.deactivated ? WorkloadState::kDeactivated : WorkloadState::kPending;
    else if (st.phase == JobPhase::kStarting && !st.stopping)
      state = WorkloadState::kAdmitted;
    else if (st.phase == JobPhase::kRunning && !st.stopping)
      state = WorkloadState::kRunning;
    else
      continue;  // finished, or stopping after it finished
    Workload w;
    w.id = WorkloadId(job.uid);
    w.name = job.name();
    w.local_queue = job.spec.queue.empty() ? kDefaultLocalQueue : job.spec.queue;
    if (!job.spec.priority.empty()) {
      auto priority = ResolvePriority(classes, job.spec.priority);
      if (priority.ok()) w.priority = *priority;
    }
    // An elastic job asks for the largest size in its range that physically fits now, so it
    // starts as soon as its minimum fits; it grows back later (TrainLifecycle::Tick).
    const auto [lo, hi] = job.SizeRange();
    int slices = state == WorkloadState::kPending ? lo : job.slices();
    if (state == WorkloadState::kPending && lo < hi) {
      PlanResult fit = PlanLargest(snap.inventory, job, lo, hi);
      if (fit.placed()) slices = static_cast<int>(fit.slices.size());
    }
    w.request = {job.spec.accelerator, job.spec.topology, slices};
    w.creation_order = static_cast<int64_t>(job.uid);
    w.state = state;
    w.admitted_at_ms = st.start_ms;
    if (st.last_checkpoint_ms > 0 && st.last_checkpoint_ms >= st.start_ms)
      w.last_checkpoint_ms = st.last_checkpoint_ms;
    w.start_guard = st.start_guard;
    snap.workloads.push_back(std::move(w));
    by_uid[job.uid] = name;
  }
  auto cycle = admitter_.Run(snap, now);
  if (!cycle.ok()) {
    // Bad queue configuration (e.g. a LocalQueue naming a missing ClusterQueue): nothing is
    // admitted; every waiting job says why.
    for (const auto& [uid, name] : by_uid)
      if (jobs_.at(name).status.phase == JobPhase::kPending)
        TESSERA_RETURN_IF_ERROR(RunStep(name, [&](TrainJob& j) {
          return train_.SetPending(j, "AdmissionError", cycle.status().message(), 0, {});
        }));
    for (const auto& [id, group] : groups)
      TESSERA_RETURN_IF_ERROR(SetGroupPending(group, "AdmissionError", cycle.status().message()));
    return Status::Ok();
  }
  usage_.clear();
  for (const ClusterQueueUsage& u : cycle->usage) usage_[u.name] = u;
  derived_stale_ = true;  // ClusterQueue status comes from usage_: compare it at the next emit
  const View view(*this);
  for (const Eviction& e : cycle->evictions) {
    if (auto it = by_uid.find(e.workload.value()); it != by_uid.end())
      TESSERA_RETURN_IF_ERROR(
          RunStep(it->second, [&](TrainJob& j) { return train_.Evict(j, e, view, now); }));
    else if (auto g = groups.find(e.workload.value()); g != groups.end())
      TESSERA_RETURN_IF_ERROR(EvictGroup(g->second, e));
    else if (auto r = reserved.find(e.workload.value()); r != reserved.end())
      TESSERA_RETURN_IF_ERROR(EvictReservation(r->second, e));
  }
  std::set<uint64_t> admitted;
  for (const Admission& a : cycle->admissions) {
    if (auto g = groups.find(a.workload.value()); g != groups.end()) {
      admitted.insert(a.workload.value());
      TESSERA_RETURN_IF_ERROR(AdmitGroup(g->second, a));
      continue;
    }
    if (auto r = reserved.find(a.workload.value()); r != reserved.end()) {
      admitted.insert(a.workload.value());
      TESSERA_RETURN_IF_ERROR(AdmitReservation(r->second, a));
      continue;
    }
    auto it = by_uid.find(a.workload.value());
    if (it == by_uid.end() || !jobs_.count(it->second)) continue;
    TrainJob& job = jobs_.at(it->second);
    admitted.insert(job.uid);
    // Hosts still held (by workers being stopped): start once they are released.
    const std::set<std::string> holders = HoldersOf(a.placement);
    if (holders.empty()) {
      auto placed = Admit(job, a.placement);
      if (!placed.ok()) return placed.status();
      if (*placed) continue;
    }
    std::string names;
    for (const auto& n : holders) names += (names.empty() ? "" : ", ") + n;
    const std::string message = "admitted to " + a.cluster_queue + "; starts once the workers of " +
                                (names.empty() ? std::string("the preempted jobs") : names) +
                                " have stopped";
    TESSERA_RETURN_IF_ERROR(RunStep(job.name(), [&](TrainJob& j) {
      return train_.SetPending(j, "WaitingForPreemption", message, 0, {});
    }));
  }
  for (const PendingStatus& p : cycle->pending) {
    if (admitted.count(p.workload.value())) continue;
    if (auto g = groups.find(p.workload.value()); g != groups.end()) {
      TESSERA_RETURN_IF_ERROR(
          SetGroupPending(g->second, PendingReasonName(p.reason), GroupPendingMessage(p)));
      continue;
    }
    if (auto r = reserved.find(p.workload.value()); r != reserved.end()) {
      TESSERA_RETURN_IF_ERROR(SetReservationPending(r->second, p));
      continue;
    }
    auto it = by_uid.find(p.workload.value());
    if (it == by_uid.end() || !jobs_.count(it->second)) continue;
    std::vector<WouldHelp> help;
    for (const Blocker& b : p.would_help)
      help.push_back({b.name, b.cluster_queue, b.priority, b.chips, b.preemptible});
    TESSERA_RETURN_IF_ERROR(RunStep(it->second, [&](TrainJob& j) {
      return train_.SetPending(j, PendingReasonName(p.reason), p.message, p.position,
                               std::move(help));
    }));
  }
  return Status::Ok();
}

}  // namespace tessera::controller
