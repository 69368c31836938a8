// The failure lifecycle of the simulator (see simulator_internal.h): with failures on, every job
// is also a TrainJob driven by the head's TrainLifecycle; this file makes its calls and applies
// the Effects it returns through the applier the head uses (workload/effects_applier.h).
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "sim/simulator_internal.h"

namespace tessera::sim::detail {
namespace {

int64_t WholeSeconds(double s) { return std::max<int64_t>(0, static_cast<int64_t>(std::ceil(s))); }

bool IsFailure(const std::string& end_reason) {
  return end_reason == FailureKindName(FailureKind::kHostLost) ||
         end_reason == FailureKindName(FailureKind::kWorkerFailed) ||
         end_reason == FailureKindName(FailureKind::kHang);
}

}  // namespace

bool SimulatorImpl::View::HostLost(const std::string& host) const {
  const HostId h = sim_.HostOf(host);
  return sim_.host_down_[h.value()] > 0 && sim_.detect_at_[h.value()] >= 0 &&
         sim_.detect_at_[h.value()] <= sim_.now_;
}

int SimulatorImpl::View::LargestFitWithoutJob(const TrainJob& job, int lo, int hi) const {
  const JobIndex j = static_cast<JobIndex>(job.uid);
  Inventory without = sim_.inv_;
  for (OwnerId o : sim_.state_[j].owners) without.Release(o);
  return sim_.LargestFit(without, j, lo, hi);
}

const SimJob& SimulatorImpl::Sized(JobIndex j) const {
  if (!lifecycle_) return jobs_[j];
  const TrainJob& tj = train_jobs_[j];
  if (tj.status.restart_min <= 0) return jobs_[j];
  if (sized_version_[j] != inv_version_) {
    const auto [lo, hi] = tj.SizeRange();
    const int fit = lo < hi ? LargestFit(inv_, j, lo, hi) : 0;
    sized_[j].request.num_slices = fit > 0 ? fit : lo;
    sized_version_[j] = inv_version_;
  }
  return sized_[j];
}

int SimulatorImpl::LargestFit(const Inventory& inv, JobIndex j, int lo, int hi) const {
  SliceRequest request = jobs_[j].request;
  for (int n = hi; n >= lo && n > 0; --n) {
    request.num_slices = n;
    if (planner_.Plan(inv, request).placed()) return n;
  }
  return 0;
}

void SimulatorImpl::HostDown(HostId h) {
  if (host_down_[h.value()]++ > 0) return;
  ++down_hosts_;
  ++inv_version_;
  if (Status st = inv_.SetHealth(h, Health::kDown); !st.ok() && error_.ok())
    error_ = Internal("host " + inv_.HostName(h) + ": marking it down: " + st.message());
  const uint32_t count = ++host_failures_[h.value()];
  failed_at_[h.value()] = now_;
  detect_at_[h.value()] = now_ + WholeSeconds(options_.failures.detect_s);
  Push(detect_at_[h.value()], EventType::kDetect, h.value(), count);
  const OwnerId owner = inv_.host(h).owner;
  if (!owner.valid()) return;
  const JobIndex j = JobOfSliceOwner(owner);
  failed_under_[h.value()] = j;
  JobState& s = state_[j];
  if (s.phase != Phase::kRunning || s.broken_at >= 0) return;
  // The run is broken: it makes no more progress, its pending finish, checkpoints and timers
  // are stale, and its workers' last steps are the ones before the failure.
  s.broken_at = now_;
  ++s.epoch;
  if (now_ > s.progress_start) {
    ProgressInput last;
    last.rank = 0;
    last.step = StepAt(j, now_);
    last.time_ms = NowMs();
    Apply(j, train_.Progress(train_jobs_[j], last, view_, NowMs()));
  }
}

void SimulatorImpl::HostUp(HostId h) {
  if (--host_down_[h.value()] > 0) return;
  --down_hosts_;
  ++inv_version_;
  if (Status st = inv_.SetHealth(h, Health::kHealthy); !st.ok() && error_.ok())
    error_ = Internal("host " + inv_.HostName(h) + ": marking it healthy: " + st.message());
}

void SimulatorImpl::PlaceAttempt(JobIndex j, const PlanResult& plan) {
  TrainJob& tj = train_jobs_[j];
  const std::vector<AttemptRecord>& attempts = tj.status.attempts;
  // A restart the lifecycle decided (after a failure, or to grow back) pays the restart costs;
  // first starts and restarts after a preemption do not (runs without failures never pay).
  const bool restart = !attempts.empty() && (IsFailure(attempts.back().end_reason) ||
                                             attempts.back().end_reason == "GrowBack");
  const int before = attempts.empty() ? 0 : attempts.back().slices;
  AttemptPlacement placement;
  for (const SlicePlacement& slice : plan.slices) {
    std::vector<std::string> hosts;
    for (HostId h : slice.hosts) hosts.push_back(HostName(h));
    placement.hosts.push_back(std::move(hosts));
    placement.slice_names.push_back("slice-" + std::to_string(placement.slice_names.size()));
  }
  Effects e = train_.Place(tj, placement, NowMs());
  const int after = tj.slices();
  if (before > 0 && after < before) ++r_.shrinks;
  if (before > 0 && after > before) ++r_.grows;
  const FailureOptions& f = options_.failures;
  const int64_t delay = restart ? WholeSeconds(f.schedule_s + f.start_s + f.restore_s) : 0;
  BeginRun(j, delay);
  Apply(j, std::move(e));
}

void SimulatorImpl::RunStarted(JobIndex j) {
  TrainJob& tj = train_jobs_[j];
  const JobState& s = state_[j];
  Effects e;
  int64_t pid = 1;
  for (const auto& [rank, w] : std::map<int, WorkerStatus>(tj.status.workers))
    e.Merge(train_.WorkerRunning(tj, rank, pid++, NowMs()));
  const std::vector<AttemptRecord>& attempts = tj.status.attempts;
  const bool resumed = s.work_saved > 0;
  if (resumed) {
    ProgressInput restore;
    restore.type = ProgressInput::Type::kRestore;
    restore.rank = 0;
    restore.step = s.work_saved;
    restore.seconds = options_.failures.restore_s;
    e.Merge(train_.Progress(tj, restore, view_, NowMs()));
  }
  // The first step of the attempt: what the head's recovery figures count to.
  ProgressInput first;
  first.rank = 0;
  first.step = s.work_saved;
  first.time_ms = NowMs();
  e.Merge(train_.Progress(tj, first, view_, NowMs()));
  if (attempts.size() >= 2)
    if (auto fig = ComputeRecoveryFigures(attempts[attempts.size() - 2], attempts.back());
        fig && fig->time_to_recover_ms >= 0) {
      ++r_.recoveries;
      ttr_sum_s_ += static_cast<double>(fig->time_to_recover_ms) / 1000.0;
    }
  Apply(j, std::move(e));
}

int64_t SimulatorImpl::StepAt(JobIndex j, int64_t t) const {
  const JobState& s = state_[j];
  const int64_t k = static_cast<int64_t>(s.owners.size());
  return std::min(s.work_total, s.work_saved + k * std::max<int64_t>(0, t - s.progress_start));
}

void SimulatorImpl::Checkpoint(JobIndex j) {
  TrainJob& tj = train_jobs_[j];
  const JobState& s = state_[j];
  ProgressInput p;
  p.type = ProgressInput::Type::kProgress;
  p.rank = 0;
  p.step = StepAt(j, now_);
  p.time_ms = NowMs();
  Effects e = train_.Progress(tj, p, view_, NowMs());
  p.type = ProgressInput::Type::kCheckpoint;
  e.Merge(train_.Progress(tj, p, view_, NowMs()));
  const int64_t next = now_ + options_.failures.checkpoint_interval_s;
  const uint32_t epoch = s.epoch;
  Apply(j, std::move(e));  // may stop the run for a grow-back
  if (state_[j].phase == Phase::kRunning && state_[j].epoch == epoch && next < state_[j].finish_at)
    Push(next, EventType::kCheckpoint, j, epoch);
}

void SimulatorImpl::GrowCheck(JobIndex j) {
  TrainJob& tj = train_jobs_[j];
  const uint32_t epoch = state_[j].epoch;
  Apply(j, train_.Tick(tj, view_, NowMs()));
  if (state_[j].phase != Phase::kRunning || state_[j].epoch != epoch ||
      tj.slices() >= tj.spec.max_slices)
    return;
  // The lifecycle moved its timer unless it skipped the check (the attempt not running yet).
  const int64_t next = (tj.runtime.next_grow_check_ms - kClockOffsetMs + 999) / 1000;
  Push(next > now_ ? next : now_ + std::max<int64_t>(1, options_.failures.grow_back_interval_s),
       EventType::kGrowCheck, j, epoch);
}

void SimulatorImpl::Detect(HostId h) {
  const JobIndex j = failed_under_[h.value()];
  failed_under_[h.value()] = kNoJob;
  if (j == kNoJob || Finished(train_jobs_[j].status.phase)) return;
  TrainJob& tj = train_jobs_[j];
  const int failures = tj.status.failures;
  Effects e = train_.HostLost(tj, HostName(h), failed_at_[h.value()] * 1000 + kClockOffsetMs,
                              "host down (simulated failure)", view_, NowMs());
  if (tj.status.failures > failures) {
    ++r_.interrupted_jobs;
    Mix(0x4641494cull);  // "FAIL"
    Mix(j);
  }
  Apply(j, std::move(e));
}

void SimulatorImpl::Apply(JobIndex j, Effects e) {
  TrainJob& tj = train_jobs_[j];
  JobState& s = state_[j];
  sized_version_[j] = -1;  // the step may have changed the sizes a restart may take
  sink_.Clear();
  auto apply = [&](Effects effects) {
    if (Status st = ApplyEffects(tj, std::move(effects), sink_, NowMs()); !st.ok() && error_.ok())
      error_ = Internal("job " + jobs_[j].spec.name + ": applying a step: " + st.message());
  };
  apply(std::move(e));
  if (tj.status.stopping) {
    // The simulator's hosts confirm a stop at once; a down host cannot, and the stop waits for
    // its loss to be noticed (Detect).
    const std::set<std::string> hosts = tj.runtime.unconfirmed;
    for (const std::string& host : hosts)
      if (host_down_[HostOf(host).value()] == 0) apply(train_.ConfirmStopped(tj, host, NowMs()));
  }
  Mix(static_cast<uint64_t>(tj.status.phase));
  if (tj.status.stopping) {
    if (s.phase == Phase::kRunning) {
      s.phase = Phase::kStopping;
      running_.erase(j);
      ++s.epoch;  // its pending finish, checkpoints and timers are stale
    }
    return;
  }
  if (sink_.released().empty() || s.owners.empty()) return;
  const JobPhase phase = tj.status.phase;
  if (phase == JobPhase::kSucceeded) return;  // Finish releases
  const bool grow_back =
      !tj.status.attempts.empty() && tj.status.attempts.back().end_reason == "GrowBack";
  Interrupt(j, phase == JobPhase::kPending && !grow_back);
  ReleaseAll(j);
  if (phase == JobPhase::kPending) {
    Requeue(j);
  } else if (phase == JobPhase::kFailed) {
    s.phase = Phase::kFailed;
    r_.outcomes[j].state = JobOutcome::State::kFailed;
    r_.outcomes[j].reason = tj.status.message;
    ++settled_;
  } else {
    error_ = Internal("job " + jobs_[j].spec.name + ": the lifecycle released its chips in phase " +
                      JobPhaseName(phase));
  }
}

}  // namespace tessera::sim::detail
