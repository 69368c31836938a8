// Controller: the TrainJob kind's part of the scheduling pass. Without ClusterQueues, pending
// jobs (outside reservations) are placed first come, first served through the SlicePlanner, or
// by EASY backfill (easy_scheduling.cc). With them, every job outside a reservation is one
// workload of the admission cycle (scheduling.cc): admitted jobs are placed (or wait for the
// hosts of preemption victims to be released), victims and start-guard evictions are stopped
// and requeued (TrainLifecycle::Evict), and every waiting job says why.
#include <algorithm>
#include <map>
#include <tuple>

#include "controller/controller.h"

namespace tessera::controller {
namespace {

// GPU jobs wait in their own line (gpu_jobs.cc).
bool Waiting(const TrainJob& job) {
  return !job.spec.gpu && job.status.phase == JobPhase::kPending && !job.status.deleting &&
         !job.status.stopping;
}

}  // namespace

Status Controller::ScheduleJobs() {
  TESSERA_RETURN_IF_ERROR(HoldJobsMissingSecrets());  // secrets.cc
  TESSERA_RETURN_IF_ERROR(ScheduleGpuJobs());         // gpu_jobs.cc
  if (!cluster_queues_.empty()) return Status::Ok();  // the admission cycle places them
  return options_.backfill_easy ? ScheduleEasy() : ScheduleFirstComeFirstServed();
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

Status Controller::ServeInArrivalOrder(const std::function<bool(const TrainJob&)>& waiting,
                                       const std::function<Result<LineTry>(TrainJob&)>& try_place) {
  // Waiting jobs are Pending, so never settled: the unsettled ones are enough.
  std::vector<TrainJob*> pending;
  ForEachUnsettledJob([&](std::string_view name, TrainJob& job) {
    if (waiting(job) && !jobs_missing_secrets_.count(name)) pending.push_back(&job);
  });
  std::sort(pending.begin(), pending.end(),
            [](TrainJob* a, TrainJob* b) { return a->uid < b->uid; });
  std::string blocked_by;
  int position = 0;
  for (TrainJob* job : pending) {
    ++position;
    LineTry t;
    if (!blocked_by.empty()) {
      t.reason = "Queued";
      t.message = "waiting behind trainjob " + blocked_by + " (first come, first served)";
    } else {
      auto tried = try_place(*job);
      if (!tried.ok()) return tried.status();
      t = std::move(*tried);
      if (t.placed) {
        --position;
        continue;
      }
      if (t.holds_line) blocked_by = job->name();
    }
    TESSERA_RETURN_IF_ERROR(RunStep(
        job->name(),
        [&](TrainJob& j) { return train_.SetPending(j, t.reason, t.message, position, {}); },
        StatusWrite::kBatched));
  }
  return Status::Ok();
}

Status Controller::ScheduleFirstComeFirstServed() {
  // What the planner answered, this pass, to requests it found no room for: the inventory
  // changes only when a job is placed (then this is emptied), so 10,000 waiting jobs of one
  // shape get the answer of one plan instead of 10,000 (issue 35: a new leader's first pass
  // over 10,000 pending jobs planned every one, as did every tick after).
  std::map<std::tuple<Generation, Shape, int, int>, PlanResult> no_room;
  return ServeInArrivalOrder(
      [](const TrainJob& job) { return Waiting(job) && job.spec.reservation.empty(); },
      [&](TrainJob& job) -> Result<LineTry> {
        LineTry t;
        const auto [lo, hi] = job.SizeRange();
        const auto request = std::tuple(job.spec.accelerator, job.spec.topology, lo, hi);
        auto known = no_room.find(request);
        PlanResult plan =
            known != no_room.end() ? known->second : PlanLargest(inventory_, job, lo, hi);
        if (plan.placed()) {
          no_room.clear();
          auto admitted = Admit(job, plan);
          if (!admitted.ok()) return admitted.status();
          if (*admitted) {
            t.placed = true;
            return t;
          }
        } else if (known == no_room.end()) {
          no_room.emplace(request, plan);
        }
        t.reason = NoFitName(plan.reason);
        t.message = WithPartialSlices(job, plan.message);
        // A job that can never fit waits with its reason but does not hold up the line.
        t.holds_line = plan.reason != NoFit::kNeverFits && plan.reason != NoFit::kInvalidRequest;
        return t;
      });
}

std::map<uint64_t, std::string> Controller::AddJobWorkloads(
    Snapshot& snap, const std::vector<PriorityClass>& classes) {
  std::map<uint64_t, std::string> by_uid;
  for (auto& [name, job] : jobs_) {
    const TrainJobStatus& st = job.status;
    if (st.deleting || !job.spec.reservation.empty()) continue;
    if (job.spec.gpu) continue;  // a cycle of its own per GPU system (gpu_jobs.cc)
    if (jobs_missing_secrets_.count(name)) continue;  // waits with SecretNotFound (secrets.cc)
    // Workers being stopped still hold their chips until the agents confirm; for planning the
    // chips count as free, and an admission placed on them waits (AdmitJob).
    // A restarting job keeps its chips for its next attempt.
    if (st.stopping && st.phase != JobPhase::kRestarting) snap.inventory.Release(OwnerId(job.uid));
    const std::optional<WorkloadState> state = AdmissionStateOf(st);
    if (!state) continue;  // finished, or stopping after it finished
    Workload w;
    w.id = WorkloadId(job.uid);
    w.name = job.name();
    w.local_queue = LocalQueueKeyOf(job.name(), job.spec.queue);
    if (!job.spec.priority.empty()) {
      auto priority = ResolvePriority(classes, job.spec.priority);
      if (priority.ok()) w.priority = *priority;
    }
    // An elastic job asks for the largest size in its range that physically fits now, so it
    // starts as soon as its minimum fits; it grows back later (TrainLifecycle::Tick).
    const auto [lo, hi] = job.SizeRange();
    int slices = *state == WorkloadState::kPending ? lo : job.slices();
    if (*state == WorkloadState::kPending && lo < hi) {
      PlanResult fit = PlanLargest(snap.inventory, job, lo, hi);
      if (fit.placed()) slices = static_cast<int>(fit.slices.size());
    }
    w.request = {job.spec.accelerator, job.spec.topology, slices};
    w.creation_order = static_cast<int64_t>(job.uid);
    w.state = *state;
    w.admitted_at_ms = st.start_ms;
    if (st.last_checkpoint_ms > 0 && st.last_checkpoint_ms >= st.start_ms)
      w.last_checkpoint_ms = st.last_checkpoint_ms;
    w.start_guard = st.start_guard;
    snap.workloads.push_back(std::move(w));
    by_uid[job.uid] = name;
  }
  return by_uid;
}

Status Controller::AdmitJob(const std::string& name, const Admission& a) {
  if (!jobs_.count(name)) return Status::Ok();
  TrainJob& job = jobs_.at(name);
  // Hosts still held (by workers being stopped): start once they are released.
  const std::set<std::string> holders = HoldersOf(a.placement);
  if (holders.empty()) {
    auto placed = Admit(job, a.placement);
    if (!placed.ok()) return placed.status();
    if (*placed) return Status::Ok();
  }
  std::string names;
  for (const auto& n : holders) names += (names.empty() ? "" : ", ") + n;
  const std::string message = "admitted to " + a.cluster_queue + "; starts once the workers of " +
                              (names.empty() ? std::string("the preempted jobs") : names) +
                              " have stopped";
  return RunStep(
      name,
      [&](TrainJob& j) { return train_.SetPending(j, "WaitingForPreemption", message, 0, {}); },
      StatusWrite::kBatched);
}

Status Controller::EvictJob(const std::string& name, const Eviction& eviction) {
  if (!jobs_.count(name)) return Status::Ok();
  const View view(*this);
  const int64_t now = NowMs();
  return RunStep(name, [&](TrainJob& j) { return train_.Evict(j, eviction, view, now); });
}

Status Controller::SetJobPending(const std::string& name, const PendingStatus& p) {
  if (!jobs_.count(name)) return Status::Ok();
  std::vector<WouldHelp> help;
  for (const Blocker& b : p.would_help)
    help.push_back({b.name, b.cluster_queue, b.priority, b.chips, b.preemptible});
  const std::string message = WithPartialSlices(jobs_.at(name), p.message.str());
  return RunStep(
      name,
      [&](TrainJob& j) {
        return train_.SetPending(j, PendingReasonName(p.reason), message, p.position,
                                 std::move(help));
      },
      StatusWrite::kBatched);
}

std::optional<WorkloadState> Controller::AdmissionStateOf(const TrainJobStatus& st) {
  if (st.phase == JobPhase::kPending)
    return st.deactivated ? WorkloadState::kDeactivated : WorkloadState::kPending;
  if (st.phase == JobPhase::kStarting && !st.stopping) return WorkloadState::kAdmitted;
  if (st.phase == JobPhase::kRunning && !st.stopping) return WorkloadState::kRunning;
  return std::nullopt;
}

}  // namespace tessera::controller
