#include "sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "common/rng.h"
#include "sim/simulator_internal.h"

namespace tessera::sim {
namespace {

int64_t Seconds(double s) { return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(s))); }

double Percentile(const std::vector<int64_t>& sorted, double p) {
  if (sorted.empty()) return 0;
  // Nearest rank: the smallest value with at least p of the values at or below it.
  const size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return static_cast<double>(sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1]);
}

}  // namespace

namespace detail {

bool SimulatorImpl::Reserve(JobIndex j, const PlanResult& plan) {
  JobState& s = state_[j];
  ++inv_version_;
  for (const SlicePlacement& slice : plan.slices) {
    const OwnerId owner = SliceOwner(j, s.next_slot++);
    Status st = inv_.Reserve(owner, slice.hosts);
    if (!st.ok()) {
      error_ = Internal("job " + jobs_[j].spec.name +
                        ": reserving a planned slice failed: " + st.message());
      return false;
    }
    s.owners.push_back(owner);
    Mix(owner.value() & ~kSliceOwnerTag);  // the event hash of the ids before the tag
    for (HostId h : slice.hosts) Mix(h.value());
  }
  return true;
}

void SimulatorImpl::BeginRun(JobIndex j, int64_t delay_s) {
  JobState& s = state_[j];
  s.run_start = now_;
  s.progress_start = now_ + delay_s;
  s.broken_at = -1;
  ++s.epoch;
  const int64_t k = static_cast<int64_t>(s.owners.size());
  const int64_t left = s.work_total - s.work_saved;
  s.finish_at = s.progress_start + std::max<int64_t>(1, (left + k - 1) / k);
  Push(s.finish_at, EventType::kFinish, j, s.epoch);
  if (!lifecycle_) return;
  // Checkpoints are reported to the lifecycle only where they decide something: a grow-back
  // waits for one. Elsewhere the work they keep is computed when a run is interrupted, which
  // saves an event per job and interval.
  const TrainJob& tj = train_jobs_[j];
  const bool may_grow =
      tj.spec.on_host_loss == HostLossPolicy::kResize && tj.spec.min_slices < tj.spec.max_slices;
  const int64_t interval = options_.failures.checkpoint_interval_s;
  if (may_grow && interval > 0 && s.progress_start + interval < s.finish_at)
    Push(s.progress_start + interval, EventType::kCheckpoint, j, s.epoch);
  if (may_grow && tj.slices() < tj.spec.max_slices)
    Push(now_ + std::max<int64_t>(1, options_.failures.grow_back_interval_s), EventType::kGrowCheck,
         j, s.epoch);
  if (delay_s > 0)
    Push(s.progress_start, EventType::kStarted, j, s.epoch);
  else
    RunStarted(j);
}

void SimulatorImpl::Start(JobIndex j, const PlanResult& plan) {
  JobState& s = state_[j];
  Mix(0x5354415254ull);  // "START"
  Mix(j);
  if (!Reserve(j, plan)) return;
  s.phase = Phase::kRunning;
  running_.insert(j);
  JobOutcome& out = r_.outcomes[j];
  if (out.first_start_s < 0) {
    out.first_start_s = now_;
    r_.waits_s.push_back(now_ - jobs_[j].spec.submit_s);
  }
  if (lifecycle_) {
    PlaceAttempt(j, plan);
    return;
  }
  BeginRun(j);
}

void SimulatorImpl::Interrupt(JobIndex j, bool count_restart) {
  JobState& s = state_[j];
  const int64_t stop = s.broken_at >= 0 ? std::min(s.broken_at, now_) : now_;
  const int64_t elapsed = std::max<int64_t>(0, stop - s.progress_start);
  const int64_t interval = options_.failures.checkpoint_interval_s;
  const int64_t kept = interval > 0 ? (elapsed / interval) * interval : 0;
  const int64_t k = static_cast<int64_t>(s.owners.size());
  s.work_saved = std::min(s.work_total, s.work_saved + k * kept);
  // Chips held without kept progress: work since the checkpoint, and the start-up and detection
  // delays (both 0 without failures).
  lost_chip_s_ +=
      static_cast<double>(HeldChips(j)) * static_cast<double>(now_ - s.run_start - kept);
  asked_chip_s_ -= static_cast<double>(jobs_[j].spec.accelerators) * static_cast<double>(k) *
                   static_cast<double>(elapsed - kept);
  ++s.epoch;  // the pending finish event is now stale
  if (count_restart) ++r_.outcomes[j].restarts;
}

void SimulatorImpl::ReleaseAll(JobIndex j) {
  JobState& s = state_[j];
  ++inv_version_;
  for (OwnerId o : s.owners) inv_.Release(o);
  s.owners.clear();
  running_.erase(j);
  scheduler_->OnDeparture(j);
}

void SimulatorImpl::Requeue(JobIndex j) {
  state_[j].phase = Phase::kQueued;
  scheduler_->OnArrival(j, Sized(j));
}

void SimulatorImpl::Preempt(JobIndex victim, JobIndex for_job) {
  Mix(0x505245454d50ull);  // "PREEMP"
  Mix(victim);
  Mix(for_job);
  ++r_.preemptions;
  ++r_.outcomes[victim].preemptions;
  if (lifecycle_) {
    TrainJob& tj = train_jobs_[victim];
    Eviction eviction;
    eviction.workload = WorkloadId(victim);
    eviction.cause = EvictionCause::kPreempted;
    eviction.preemptor = WorkloadId(for_job);
    eviction.message = "preempted by " + jobs_[for_job].spec.name;
    Effects e = train_.Evict(tj, eviction, view_, NowMs());
    // The simulator does not model the grace period: every worker stops at once, down hosts too.
    const std::set<std::string> hosts = tj.runtime.unconfirmed;
    for (const std::string& host : hosts) e.Merge(train_.ConfirmStopped(tj, host, NowMs()));
    if (!e.release_chips || tj.status.phase != JobPhase::kPending)
      error_ = Internal("job " + jobs_[victim].spec.name + ": an eviction left it " +
                        JobPhaseName(tj.status.phase) + " with its chips");
  }
  Interrupt(victim);
  ReleaseAll(victim);
  Requeue(victim);
}

std::vector<RunningJobView> SimulatorImpl::Running() const {
  std::vector<RunningJobView> out;
  out.reserve(running_.size());
  const int64_t interval = options_.failures.checkpoint_interval_s;
  for (JobIndex j : running_) {
    const JobState& s = state_[j];
    const int64_t start = s.run_start;
    const int64_t from = s.progress_start;
    const int64_t until = s.broken_at >= 0 ? s.broken_at : now_;
    const int64_t ckpt =
        interval > 0 && until >= from ? from + ((until - from) / interval) * interval : start;
    out.push_back({j, jobs_[j].spec.priority, start, HeldChips(j), ckpt});
  }
  return out;
}

void SimulatorImpl::Finish(JobIndex j) {
  JobState& s = state_[j];
  if (lifecycle_) {
    TrainJob& tj = train_jobs_[j];
    Effects e;
    for (const auto& [rank, w] : std::map<int, WorkerStatus>(tj.status.workers))
      e.Merge(train_.WorkerExited(tj, rank, 0, 0, 0, NowMs(), view_, NowMs()));
    // Every worker exited 0: the job succeeded and nothing is left to stop; the release is
    // below.
    if (tj.status.phase != JobPhase::kSucceeded || !e.release_chips)
      error_ = Internal("job " + jobs_[j].spec.name + ": finished, but the lifecycle says " +
                        JobPhaseName(tj.status.phase));
    // The start-up delay of a restarted run held chips without progress.
    lost_chip_s_ +=
        static_cast<double>(HeldChips(j)) * static_cast<double>(s.progress_start - s.run_start);
  }
  s.work_saved = s.work_total;
  ReleaseAll(j);
  s.phase = Phase::kDone;
  r_.outcomes[j].state = JobOutcome::State::kFinished;
  r_.outcomes[j].finish_s = now_;
  ++settled_;
}

void SimulatorImpl::Arrive(JobIndex j) {
  const SimJob& job = jobs_[j];
  JobState& s = state_[j];
  s.work_total = job.spec.duration_s * job.request.num_slices;
  // Asked chip-time counts the run time at full size; interruptions subtract what they lose.
  asked_chip_s_ += static_cast<double>(job.spec.accelerators) * static_cast<double>(s.work_total);
  if (!job.never_reason.empty()) {
    s.phase = Phase::kNever;
    r_.outcomes[j].state = JobOutcome::State::kNeverPlaced;
    r_.outcomes[j].reason = job.never_reason;
    asked_chip_s_ -= static_cast<double>(job.spec.accelerators) * static_cast<double>(s.work_total);
    ++settled_;
    return;
  }
  if (lifecycle_) {
    const FailureOptions& f = options_.failures;
    TrainJobSpec spec;
    spec.name = job.spec.name;
    spec.accelerator = job.request.generation;
    spec.topology = job.request.shape;
    spec.max_slices = job.request.num_slices;
    spec.min_slices = std::clamp(job.spec.min_slices, 1, spec.max_slices);
    spec.max_failures = f.max_failures;
    spec.on_host_loss =
        f.on_host_loss == OnHostLoss::kShrink ? HostLossPolicy::kResize : HostLossPolicy::kPause;
    spec.grow_back_interval_ms = std::max<int64_t>(1, f.grow_back_interval_s) * 1000;
    train_jobs_[j] = TrainLifecycle::Create(std::move(spec), "", j, NowMs());
  }
  Requeue(j);
}

void SimulatorImpl::TakeSample() {
  const double total = static_cast<double>(r_.total_chips);
  r_.series.push_back({now_, static_cast<double>(inv_.owned_chips()) / total,
                       planner_.Fragmentation(inv_),
                       static_cast<int64_t>(scheduler_->QueueLength()),
                       static_cast<int64_t>(running_.size()), down_hosts_});
}

Status SimulatorImpl::CheckInvariants() const {
  if (!error_.ok()) return error_;
  int64_t held = 0;
  for (JobIndex j = 0; j < jobs_.size(); ++j) {
    const JobState& s = state_[j];
    const SimJob& job = jobs_[j];
    const std::string who = "job " + job.spec.name + ": ";
    if (s.phase != Phase::kRunning && s.phase != Phase::kStopping) {
      if (!s.owners.empty()) return Internal(who + "holds chips but is not running");
      continue;
    }
    const int k = static_cast<int>(s.owners.size());
    if (k < job.spec.min_slices || k > job.request.num_slices)
      return Internal(who + "holds " + std::to_string(k) + " slices, outside [min, max]");
    for (OwnerId o : s.owners) {
      int64_t chips = 0;
      for (HostId h : inv_.HostsOf(o)) {
        const Host& host = inv_.host(h);
        if (host.owner != o)
          return Internal(who + "host " + inv_.HostName(h) + " has another owner");
        // A failure takes detect_s to be noticed; a stopping job keeps its hosts until the last
        // lost one is noticed.
        if (host.health == Health::kDown && s.phase == Phase::kRunning &&
            (!lifecycle_ || detect_at_[h.value()] <= now_))
          return Internal(who + "runs on down host " + inv_.HostName(h) +
                          " after its failure was noticed");
        chips += host.chips;
      }
      if (chips != job.slice_chips)
        return Internal(who + "a slice holds " + std::to_string(chips) + " chips, not " +
                        std::to_string(job.slice_chips) + " (gang not whole)");
      held += chips;
    }
  }
  if (held != inv_.owned_chips())
    return Internal("running jobs hold " + std::to_string(held) + " chips, the inventory says " +
                    std::to_string(inv_.owned_chips()) +
                    " are owned (a chip is double-booked "
                    "or leaked)");
  for (const Host& h : inv_.hosts()) {
    if (!h.owner.valid()) continue;
    if (!IsSliceOwner(h.owner))
      return Internal("host " + inv_.HostName(h.id) + " is owned by " +
                      std::to_string(h.owner.value()) + ", not a slice of a job");
    const JobIndex j = JobOfSliceOwner(h.owner);
    if (j >= jobs_.size() ||
        (state_[j].phase != Phase::kRunning && state_[j].phase != Phase::kStopping))
      return Internal("host " + inv_.HostName(h.id) + " is owned by a job that is not running");
  }
  return Status::Ok();
}

Result<SimResult> SimulatorImpl::Run() {
  r_.policy = planner_.options().Name();
  r_.admission = AdmissionName(options_.admission);
  r_.total_chips = inv_.total_chips();
  r_.jobs = static_cast<int64_t>(jobs_.size());
  r_.outcomes.resize(jobs_.size());
  for (size_t i = 1; i < jobs_.size(); ++i)
    if (jobs_[i].spec.submit_s < jobs_[i - 1].spec.submit_s)
      return InvalidArgument("jobs: not sorted by submission time at job " + jobs_[i].spec.name);
  if (jobs_.empty()) return r_;
  const int64_t start = jobs_.front().spec.submit_s;
  const int64_t span = jobs_.back().spec.submit_s - start;
  const int64_t sample_every = options_.sample_interval_s > 0 ? options_.sample_interval_s
                                                              : std::max<int64_t>(60, span / 500);
  now_ = start;
  r_.start_s = start;

  // Failure processes: one Rng per host and per cube, so all policies see the same faults.
  std::vector<Rng> host_rng, cube_rng;
  const FailureOptions& f = options_.failures;
  if (f.host_mtbf_hours > 0)
    for (const Host& h : inv_.hosts()) {
      host_rng.emplace_back(options_.seed ^ (0x9E3779B97F4A7C15ull * (h.id.value() + 1)));
      Push(start + Seconds(Exponential(host_rng.back(), f.host_mtbf_hours * 3600)),
           EventType::kHostFail, h.id.value());
    }
  if (f.cube_mtbf_hours > 0)
    for (const Cube& c : inv_.cubes()) {
      cube_rng.emplace_back(options_.seed ^ (0xC2B2AE3D27D4EB4Full * (c.id.value() + 1)));
      Push(start + Seconds(Exponential(cube_rng.back(), f.cube_mtbf_hours * 3600)),
           EventType::kCubeFail, c.id.value());
    }
  for (size_t i = 0; i < f.scripted.size(); ++i) {
    const HostFault& fault = f.scripted[i];
    if (fault.host.value() >= inv_.hosts().size() || fault.down_s < 0)
      return InvalidArgument("failures.scripted[" + std::to_string(i) +
                             "]: no such host, or a negative down time");
    Push(std::max(start, fault.at_s), EventType::kHostFail, fault.host.value(),
         static_cast<uint32_t>(i + 1));
  }
  Push(start, EventType::kArrival, 0);
  Push(start, EventType::kSample, 0);

  int64_t applied = 0, next_progress = 0;
  while (!events_.empty() && !Settled() && error_.ok()) {
    const int64_t t = events_.top().time;
    if (options_.horizon_s > 0 && t > start + options_.horizon_s) break;
    Advance(t);
    // Apply every event at this instant, then make one scheduling pass.
    bool sample = false;
    while (!events_.empty() && events_.top().time == t) {
      const Event e = events_.top();
      events_.pop();
      ++applied;
      Mix(static_cast<uint64_t>(e.time));
      Mix((uint64_t{static_cast<uint8_t>(e.type)} << 32) | e.a);
      switch (e.type) {
        case EventType::kArrival:
          Arrive(e.a);
          if (++next_arrival_ < jobs_.size())
            Push(jobs_[next_arrival_].spec.submit_s, EventType::kArrival,
                 static_cast<uint32_t>(next_arrival_));
          break;
        case EventType::kFinish:
          if (state_[e.a].phase == Phase::kRunning && state_[e.a].epoch == e.b) Finish(e.a);
          break;
        case EventType::kHostFail:
          ++r_.host_failures;
          HostDown(HostId(e.a));
          if (e.b > 0) {  // scripted
            if (const HostFault& fault = f.scripted[e.b - 1]; fault.down_s > 0) {
              Push(t + fault.down_s, EventType::kHostRepair, e.a, e.b);
            } else if (!permanent_[e.a]) {
              permanent_[e.a] = true;
              ++permanent_down_;
            }
          } else {
            Push(t + Seconds(Exponential(host_rng[e.a], f.host_repair_hours * 3600)),
                 EventType::kHostRepair, e.a);
          }
          break;
        case EventType::kHostRepair:
          HostUp(HostId(e.a));
          if (e.b == 0)
            Push(t + Seconds(Exponential(host_rng[e.a], f.host_mtbf_hours * 3600)),
                 EventType::kHostFail, e.a);
          break;
        case EventType::kCubeFail:
          ++r_.cube_failures;
          for (HostId h : inv_.cube(CubeId(e.a)).hosts) HostDown(h);
          Push(t + Seconds(Exponential(cube_rng[e.a], f.cube_repair_hours * 3600)),
               EventType::kCubeRepair, e.a);
          break;
        case EventType::kCubeRepair:
          for (HostId h : inv_.cube(CubeId(e.a)).hosts) HostUp(h);
          Push(t + Seconds(Exponential(cube_rng[e.a], f.cube_mtbf_hours * 3600)),
               EventType::kCubeFail, e.a);
          break;
        case EventType::kSample:
          sample = true;
          Push(t + sample_every, EventType::kSample, 0);
          break;
        case EventType::kDetect:
          if (host_failures_[e.a] == e.b) Detect(HostId(e.a));
          break;
        case EventType::kStarted:
          if (state_[e.a].phase == Phase::kRunning && state_[e.a].epoch == e.b) RunStarted(e.a);
          break;
        case EventType::kCheckpoint:
          if (state_[e.a].phase == Phase::kRunning && state_[e.a].epoch == e.b) Checkpoint(e.a);
          break;
        case EventType::kGrowCheck:
          if (state_[e.a].phase == Phase::kRunning && state_[e.a].epoch == e.b) GrowCheck(e.a);
          break;
      }
    }
    scheduler_->Schedule(now_, *this);
    if (Status st = scheduler_->status(); !st.ok() && error_.ok()) error_ = st;
    if (sample) TakeSample();
    if (options_.after_event) options_.after_event(*this);
    if (options_.progress && applied >= next_progress) {
      next_progress = applied + 4096;
      options_.progress(static_cast<double>(settled_) / static_cast<double>(jobs_.size()));
    }
    // Nothing runs or stops, nothing is left to arrive, and no failure will heal: the queue is
    // stuck.
    if (running_.empty() && next_arrival_ == jobs_.size() && down_hosts_ == permanent_down_ &&
        scheduler_->QueueLength() > 0 &&
        std::none_of(state_.begin(), state_.end(),
                     [](const JobState& s) { return s.phase == Phase::kStopping; }))
      break;
  }
  if (!error_.ok()) return error_;
  r_.events = applied;
  r_.event_hash = hash_;
  r_.end_s = now_;
  r_.makespan_s = now_ - start;
  TakeSample();

  // Jobs still waiting or running when the run stopped.
  for (JobIndex j = 0; j < jobs_.size(); ++j) {
    JobOutcome& out = r_.outcomes[j];
    const JobState& s = state_[j];
    if (s.phase == Phase::kDone || s.phase == Phase::kNever || s.phase == Phase::kFailed) continue;
    out.state = JobOutcome::State::kUnfinished;
    if (s.phase == Phase::kRunning || s.phase == Phase::kStopping) {
      out.reason = "still running when the run stopped";
    } else if (s.phase == Phase::kQueued) {
      const PlanResult p = Plan(j);
      const std::string said = scheduler_->PendingReason(j);
      out.reason = "still waiting when the run stopped: " +
                   (!said.empty() ? said
                    : p.placed()  ? std::string("it fits now but the queue never reached it")
                                  : p.message);
    } else {
      out.reason = "had not arrived when the run stopped";
    }
  }
  if (lifecycle_)
    for (JobIndex j = 0; j < jobs_.size(); ++j)
      r_.outcomes[j].attempts = train_jobs_[j].status.attempts;
  for (const JobOutcome& out : r_.outcomes) {
    if (out.state == JobOutcome::State::kFinished) ++r_.finished;
    if (out.state == JobOutcome::State::kFailed) ++r_.failed;
    if (out.first_start_s < 0) ++r_.never_placed;
  }

  double jct = 0;
  for (JobIndex j = 0; j < jobs_.size(); ++j)
    if (r_.outcomes[j].state == JobOutcome::State::kFinished)
      jct += static_cast<double>(r_.outcomes[j].finish_s - jobs_[j].spec.submit_s);
  r_.mean_jct_s = r_.finished > 0 ? jct / static_cast<double>(r_.finished) : 0;
  std::sort(r_.waits_s.begin(), r_.waits_s.end());
  r_.wait_p50_s = Percentile(r_.waits_s, 0.50);
  r_.wait_p95_s = Percentile(r_.waits_s, 0.95);
  r_.wait_p99_s = Percentile(r_.waits_s, 0.99);
  std::vector<JobTimes> times(jobs_.size());
  for (JobIndex j = 0; j < jobs_.size(); ++j) {
    const JobOutcome& out = r_.outcomes[j];
    times[j] = {jobs_[j].spec.submit_s, out.first_start_s,
                out.state == JobOutcome::State::kFinished ? out.finish_s : -1, out.preemptions};
  }
  r_.moves = scheduler_->moves();
  r_.moved_chip_hours = scheduler_->moved_chip_hours();
  r_.by_size = BySize(jobs_, times);
  r_.whole_cubes = WholeCubes(jobs_, times);
  r_.by_priority = ByPriority(jobs_, times);
  const double capacity = static_cast<double>(r_.total_chips) * static_cast<double>(r_.makespan_s);
  r_.utilization = capacity > 0 ? allocated_chip_s_ / capacity : 0;
  r_.allocated_chip_hours = allocated_chip_s_ / 3600;
  r_.lost_chip_hours = lost_chip_s_ / 3600;
  r_.goodput = allocated_chip_s_ > 0 ? (allocated_chip_s_ - lost_chip_s_) / allocated_chip_s_ : 1;
  // Chip-time on kept work that the trace did not ask for: the shape map's rounding.
  const double kept = allocated_chip_s_ - lost_chip_s_;
  r_.rounding_waste = kept > 0 ? std::max(0.0, kept - asked_chip_s_) / kept : 0;
  r_.mean_time_to_recover_s =
      r_.recoveries > 0 ? ttr_sum_s_ / static_cast<double>(r_.recoveries) : 0;
  double frag = 0;
  for (const Sample& s : r_.series) frag += s.fragmentation;
  r_.mean_fragmentation = r_.series.empty() ? 0 : frag / static_cast<double>(r_.series.size());
  if (options_.progress) options_.progress(1.0);
  return std::move(r_);
}

}  // namespace detail

std::vector<SimJob> MapJobs(const Workload& workload, const Inventory& cluster,
                            const ShapeMap& map) {
  return MapJobs(workload, cluster, map, SlicePlanner(PlannerOptions::Tessera()));
}

std::vector<SimJob> MapJobs(const Workload& workload, const Inventory& cluster,
                            const ShapeMap& map_in, const SlicePlanner& planner) {
  const ShapeMap map = map_in.entries.empty() ? ShapeMap::Default(cluster.generation()) : map_in;
  std::map<std::pair<Shape, int>, std::string> never;  // request -> reason ("" = fits)
  std::vector<SimJob> out;
  out.reserve(workload.jobs.size());
  for (const JobSpec& spec : workload.jobs) {
    SimJob j;
    j.spec = spec;
    j.request.generation = cluster.generation();
    j.request.num_slices = spec.num_slices;
    const ShapeMap::Entry* e = map.Find(spec.accelerators);
    if (e == nullptr) {
      j.never_reason = "asks for " + std::to_string(spec.accelerators) +
                       " accelerators; the largest mapped shape holds " +
                       std::to_string(map.entries.empty() ? 0 : map.entries.back().accelerators) +
                       " (shape map " + map.ToString() + ")";
      j.slice_chips = spec.accelerators;
      out.push_back(std::move(j));
      continue;
    }
    j.request.shape = e->shape;
    j.slice_chips = e->shape.chips();
    auto [it, inserted] = never.try_emplace({e->shape, spec.num_slices});
    if (inserted) {
      // The cluster is never emptier or healthier than at the start (hosts unhealthy from the
      // start stay down; injected failures heal), so what does not fit now never will.
      const PlanResult p = planner.Plan(cluster, j.request);
      if (!p.placed())
        it->second =
            std::string("never fits this cluster (") + NoFitName(p.reason) + "): " + p.message;
    }
    j.never_reason = it->second;
    out.push_back(std::move(j));
  }
  return out;
}

Result<SimResult> RunSimulation(const Inventory& cluster, const std::vector<SimJob>& jobs,
                                const SimOptions& options) {
  const SlicePlanner planner(options.placement);
  return RunSimulation(cluster, jobs, options, planner);
}

Result<SimResult> RunSimulation(const Inventory& cluster, const std::vector<SimJob>& jobs,
                                const SimOptions& options, const SlicePlanner& planner) {
  detail::SimulatorImpl sim(cluster, jobs, options, planner);
  return sim.Run();
}

}  // namespace tessera::sim
