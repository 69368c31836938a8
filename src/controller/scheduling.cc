// Controller: the scheduling pass. Each registered kind runs its part, in pass order
// (WorkloadKind::Schedule): with no ClusterQueue defined each places its own waiting workloads
// (SliceReservations and Services' replica groups first come, first served; TrainJobs first come,
// first served or by EASY backfill). Once a ClusterQueue exists, every pass then runs one
// Admitter cycle (admission/admission.h) over a snapshot of every kind's workloads
// (WorkloadKind::Offer) and hands each decision to the kind that offered the workload:
// admissions are placed, preemption victims and start-guard evictions are stopped and requeued,
// and every waiting workload says why; GPU jobs then go through one cycle per GPU system, with
// the same queues and quotas in GPUs (gpu_jobs.cc). Chips of workers being stopped stay held until
// the agents confirm; an admission placed on them starts after that. docs/admission.md "In the
// head".
#include <set>

#include "controller/controller.h"

namespace tessera::controller {
void Controller::ScheduleAfterRequest() {
  Status s = Schedule();
  // The statuses the request's pass changed are stored, and watchers hear of them, with the
  // request, as when each had its own commit (status_writes.cc: only a backlog beyond one
  // flush waits for the next ticks).
  Status flushed = FlushStatusWrites();
  if (s.ok()) s = flushed;
  if (!s.ok()) deferred_error_ = s;
  // The request's placements and releases move host owners and queue usage: watchers hear of
  // them with the request, so a later tick (perhaps with the store down) emits nothing old.
  EmitDerivedChangesLocked(/*announce=*/true);
}

Status Controller::RunPass() {
  auto lock = Hold();
  Status scheduled = Schedule();
  Status flushed = FlushStatusWrites();  // status_writes.cc
  return scheduled.ok() ? flushed : scheduled;
}

void Controller::RequestPass() {
  if ((schedule_requested_ || InventoryBuildDueLocked()) && on_pass_wanted_) on_pass_wanted_();
}

Status Controller::Schedule() {
  TESSERA_RETURN_IF_ERROR(RefreshInventoryPaced());
  if (!inventory_ready_) return Status::Ok();
  // Applying a decision may finish a stop at once and ask for another pass: run it as the next
  // pass instead of re-entering.
  for (int pass = 0; pass < 4; ++pass) {
    schedule_requested_ = false;
    for (WorkloadKind* kind : pass_order_) TESSERA_RETURN_IF_ERROR(kind->Schedule());
    if (!cluster_queues_.empty()) {
      TESSERA_RETURN_IF_ERROR(ScheduleThroughQueues());
      TESSERA_RETURN_IF_ERROR(ScheduleGpuThroughQueues());  // gpu_jobs.cc
    }
    if (!schedule_requested_) break;
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
  // Every kind's workloads, in pass order; which kind offered each.
  std::map<uint64_t, WorkloadKind*> offered_by;
  for (WorkloadKind* kind : pass_order_) {
    const size_t before = snap.workloads.size();
    kind->Offer(snap, classes);
    for (size_t i = before; i < snap.workloads.size(); ++i)
      offered_by[snap.workloads[i].id.value()] = kind;
  }
  const Explain full = admitter_.options().explain;
  const bool with_help = full == Explain::kReasonsAndWhatHelps && now >= help_due_ms_;
  const Explain level =
      full == Explain::kReasonsAndWhatHelps && !with_help ? Explain::kReasons : full;
  auto cycle = admitter_.Run(snap, now, level);
  if (cycle.ok() && with_help) {
    // At most a tenth of the head's time: the next such cycle after nine times this one's.
    const int64_t took = std::max<int64_t>(0, NowMs() - now);
    help_due_ms_ = now + std::max(10 * took, options_.what_helps_interval_ms);
    carried_help_.clear();
    for (const PendingStatus& p : cycle->pending)
      if (!p.would_help.empty()) carried_help_[p.workload.value()] = {p.reason, p.would_help};
  } else if (cycle.ok() && full == Explain::kReasonsAndWhatHelps) {
    CarryWhatHelps(snap, *cycle);
  }
  if (!cycle.ok()) {
    // Bad queue configuration (e.g. a LocalQueue naming a missing ClusterQueue): nothing is
    // admitted; every waiting workload says why.
    for (WorkloadKind* kind : pass_order_)
      TESSERA_RETURN_IF_ERROR(kind->CycleFailed(cycle.status().message()));
    return Status::Ok();
  }
  usage_.clear();
  for (const ClusterQueueUsage& u : cycle->usage) usage_[u.name] = u;
  derived_stale_ = true;  // ClusterQueue status comes from usage_: compare it at the next emit
  auto kind_of = [&](WorkloadId id) -> WorkloadKind* {
    auto it = offered_by.find(id.value());
    return it == offered_by.end() ? nullptr : it->second;
  };
  for (const Eviction& e : cycle->evictions)
    if (WorkloadKind* kind = kind_of(e.workload)) TESSERA_RETURN_IF_ERROR(kind->Evicted(e));
  std::set<uint64_t> admitted;
  for (const Admission& a : cycle->admissions) {
    WorkloadKind* kind = kind_of(a.workload);
    if (kind == nullptr) continue;
    admitted.insert(a.workload.value());
    TESSERA_RETURN_IF_ERROR(kind->Admitted(a));
  }
  for (const PendingStatus& p : cycle->pending) {
    if (admitted.count(p.workload.value())) continue;
    if (WorkloadKind* kind = kind_of(p.workload)) TESSERA_RETURN_IF_ERROR(kind->Waiting(p));
  }
  return Status::Ok();
}

void Controller::CarryWhatHelps(const Snapshot& snap, AdmissionCycle& cycle) const {
  if (carried_help_.empty()) return;
  // Running now: in the snapshot as admitted or running, and not evicted by this cycle.
  std::set<uint64_t> gone;
  for (const Eviction& e : cycle.evictions) gone.insert(e.workload.value());
  std::set<uint64_t> running;
  for (const Workload& w : snap.workloads)
    if ((w.state == WorkloadState::kAdmitted || w.state == WorkloadState::kRunning) &&
        !gone.count(w.id.value()))
      running.insert(w.id.value());
  for (PendingStatus& p : cycle.pending) {
    auto carried = carried_help_.find(p.workload.value());
    if (carried == carried_help_.end() || carried->second.reason != p.reason) continue;
    const SharedList<Blocker>& carried_list = carried->second.would_help;
    std::vector<Blocker> still;
    for (const Blocker& b : carried_list)
      if (running.count(b.workload.value())) still.push_back(b);
    if (still.size() == carried_list.size())
      p.would_help = carried_list;  // all still running: the same list, shared
    else
      p.would_help = std::move(still);
  }
}

}  // namespace tessera::controller
