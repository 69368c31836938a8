#include "sim/simulator.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <queue>
#include <set>

#include "common/rng.h"
#include "workload/train_lifecycle.h"

namespace tessera::sim {
namespace {

// Appended only: the values are folded into the event hash.
enum class EventType : uint8_t {
  kArrival,
  kFinish,
  kHostFail,
  kHostRepair,
  kCubeFail,
  kCubeRepair,
  kSample,
  // With failures on (the lifecycle drives the jobs):
  kDetect,      // a host's failure is noticed (a: host, b: its failure count)
  kStarted,     // a restarted run's start-up delay is over (a: job, b: run epoch)
  kCheckpoint,  // a running job checkpoints (a: job, b: run epoch)
  kGrowCheck,   // a shrunk job's grow-back timer (a: job, b: run epoch)
};

struct Event {
  int64_t time;
  uint64_t seq;
  EventType type;
  uint32_t a;  // job, host or cube
  // A job's run epoch (events of an interrupted run are stale), a host's failure count, or
  // 1 + the index of a scripted fault (kHostFail, kHostRepair; 0: a random one).
  uint32_t b;
  bool operator>(const Event& o) const { return std::tie(time, seq) > std::tie(o.time, o.seq); }
};

// kStopping: the lifecycle stopped the job's attempt and waits for a lost host to be noticed
// before its chips are released (TrainJobStatus::stopping); it is neither running nor queued.
enum class Phase : uint8_t { kNotArrived, kQueued, kRunning, kStopping, kDone, kNever, kFailed };

struct JobState {
  Phase phase = Phase::kNotArrived;
  std::vector<OwnerId> owners;  // one per slice held
  uint32_t next_slot = 0;
  uint32_t epoch = 0;
  int64_t work_total = 0;      // slice-seconds
  int64_t work_saved = 0;      // at the last checkpoint
  int64_t run_start = 0;       // start of the current run segment (chips reserved)
  int64_t progress_start = 0;  // the run makes progress from here (after the start-up delay)
  int64_t finish_at = 0;       // when the current run will finish
  int64_t broken_at = -1;      // a host of the current run failed then: no progress after it
};

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;
// The lifecycle's clock is milliseconds, and it reads 0 as "unknown": trace time 0 is 1 s.
constexpr int64_t kClockOffsetMs = 1000;

double Exponential(Rng& rng, double mean) { return -std::log(1.0 - rng.UniformDouble()) * mean; }
int64_t Seconds(double s) { return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(s))); }
int64_t WholeSeconds(double s) { return std::max<int64_t>(0, static_cast<int64_t>(std::ceil(s))); }

double Percentile(const std::vector<int64_t>& sorted, double p) {
  if (sorted.empty()) return 0;
  // Nearest rank: the smallest value with at least p of the values at or below it.
  const size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return static_cast<double>(sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1]);
}

bool IsFailure(const std::string& end_reason) {
  return end_reason == FailureKindName(FailureKind::kHostLost) ||
         end_reason == FailureKindName(FailureKind::kWorkerFailed) ||
         end_reason == FailureKindName(FailureKind::kHang);
}

class SimulatorImpl final : public Simulator, public SchedulingContext {
 public:
  SimulatorImpl(const Inventory& cluster, const std::vector<SimJob>& jobs, const SimOptions& o,
                const SlicePlanner& planner)
      : inv_(cluster),
        jobs_(jobs),
        options_(o),
        planner_(planner),
        scheduler_(o.admission == AdmissionKind::kKueue ||
                           o.admission == AdmissionKind::kKueueStrict
                       ? MakeAdmissionScheduler(o.admission, planner.options(), o.kueue)
                       : MakeScheduler(o.admission)),
        lifecycle_(o.failures.enabled()),
        train_(TrainLifecycleOptions{static_cast<int64_t>(o.failures.detect_s * 1000)}),
        view_(*this),
        state_(jobs.size()),
        host_down_(cluster.hosts().size(), 0) {
    if (lifecycle_) {
      train_jobs_.resize(jobs.size());
      sized_ = jobs;
      sized_version_.assign(jobs.size(), -1);
      host_failures_.assign(cluster.hosts().size(), 0);
      failed_at_.assign(cluster.hosts().size(), -1);
      detect_at_.assign(cluster.hosts().size(), -1);
      failed_under_.assign(cluster.hosts().size(), kNoJob);
      permanent_.assign(cluster.hosts().size(), false);
    }
  }

  Result<SimResult> Run();

  // Simulator
  int64_t now() const override { return now_; }
  const Inventory& inventory() const override { return inv_; }
  Status CheckInvariants() const override;

  // SchedulingContext
  const SimJob& job(JobIndex j) const override { return Sized(j); }
  PlanResult Plan(JobIndex j) const override { return planner_.Plan(inv_, Sized(j).request); }
  PlanResult PlanOn(const Inventory& scratch, JobIndex j) const override {
    return planner_.Plan(scratch, Sized(j).request);
  }
  void Start(JobIndex j, const PlanResult& plan) override;
  void Preempt(JobIndex victim, JobIndex for_job) override;
  std::vector<RunningJobView> Running() const override;
  std::vector<OwnerId> OwnersOf(JobIndex j) const override { return state_[j].owners; }

 private:
  static constexpr JobIndex kNoJob = ~JobIndex{0};

  // The lifecycle's view of the simulated cluster.
  class View final : public ClusterView {
   public:
    explicit View(const SimulatorImpl& sim) : sim_(sim) {}
    // Lost: down, and its failure has been noticed (the head's lease ran out).
    bool HostLost(const std::string& host) const override {
      const HostId h = sim_.HostOf(host);
      return sim_.host_down_[h.value()] > 0 && sim_.detect_at_[h.value()] >= 0 &&
             sim_.detect_at_[h.value()] <= sim_.now_;
    }
    int LargestFitWithoutJob(const TrainJob& job, int lo, int hi) const override {
      const JobIndex j = static_cast<JobIndex>(job.uid);
      Inventory without = sim_.inv_;
      for (OwnerId o : sim_.state_[j].owners) without.Release(o);
      return sim_.LargestFit(without, j, lo, hi);
    }

   private:
    const SimulatorImpl& sim_;
  };

  void Push(int64_t time, EventType type, uint32_t a, uint32_t b = 0) {
    events_.push(Event{time, seq_++, type, a, b});
  }
  void Mix(uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      hash_ ^= (v >> (8 * i)) & 0xff;
      hash_ *= kFnvPrime;
    }
  }
  void Advance(int64_t t) {
    allocated_chip_s_ += static_cast<double>(inv_.owned_chips()) * static_cast<double>(t - now_);
    now_ = t;
  }
  int64_t HeldChips(JobIndex j) const {
    return static_cast<int64_t>(state_[j].owners.size()) * jobs_[j].slice_chips;
  }
  int64_t NowMs() const { return now_ * 1000 + kClockOffsetMs; }
  static std::string HostName(HostId h) { return std::to_string(h.value()); }
  // Names are the simulator's own (HostName), so they always parse.
  static HostId HostOf(const std::string& name) {
    uint32_t v = 0;
    std::from_chars(name.data(), name.data() + name.size(), v);
    return HostId(v);
  }
  // The job's request as the scheduler should see it: after a restart the lifecycle may allow a
  // range of sizes, and the job asks for the largest that fits now (as the head's scheduler
  // does), or the smallest when none fits.
  const SimJob& Sized(JobIndex j) const;
  // The largest n in [lo, hi] such that n slices of j's shape fit `inv`; 0 when none does.
  int LargestFit(const Inventory& inv, JobIndex j, int lo, int hi) const;
  // Reserves each slice of `plan` under a new owner of `j`. Plans come from the planner on the
  // live inventory, so a failure here is a bug; it is recorded and ends the run.
  bool Reserve(JobIndex j, const PlanResult& plan);
  // Starts a run segment at now_ that makes progress after `delay_s`.
  void BeginRun(JobIndex j, int64_t delay_s = 0);
  // Ends the current run segment at now_: keeps work up to the last checkpoint (before the run
  // broke, if it did), counts the rest and the chip-time held without progress as lost.
  void Interrupt(JobIndex j, bool count_restart = true);
  void ReleaseAll(JobIndex j);
  void Requeue(JobIndex j);
  void Finish(JobIndex j);
  void Arrive(JobIndex j);
  void HostDown(HostId h);
  void HostUp(HostId h);
  void TakeSample();
  bool Settled() const { return settled_ == jobs_.size(); }

  // The lifecycle driver (failures on).
  void PlaceAttempt(JobIndex j, const PlanResult& plan);
  void RunStarted(JobIndex j);  // the start-up delay is over: workers run, progress begins
  void Detect(HostId h);
  void Checkpoint(JobIndex j);
  void GrowCheck(JobIndex j);
  // Confirms the stop on every host that is up, then applies the step's effects.
  void Apply(JobIndex j, Effects effects);
  int64_t StepAt(JobIndex j, int64_t t) const;  // work done by time t, in slice-seconds

  Inventory inv_;
  const std::vector<SimJob>& jobs_;
  const SimOptions& options_;
  const SlicePlanner& planner_;
  std::unique_ptr<SimScheduler> scheduler_;
  const bool lifecycle_;
  const TrainLifecycle train_;
  const View view_;
  std::vector<JobState> state_;
  std::vector<int> host_down_;  // failures in effect on each host (host and cube failures)
  // Lifecycle only.
  std::vector<TrainJob> train_jobs_;
  mutable std::vector<SimJob> sized_;           // jobs_ with the restart size
  mutable std::vector<int64_t> sized_version_;  // inventory version sized_[j] was planned at
  int64_t inv_version_ = 0;                     // bumped on every reserve, release, health change
  std::vector<uint32_t> host_failures_;         // per host: failures so far
  std::vector<int64_t> failed_at_;              // per host: its last failure
  std::vector<int64_t> detect_at_;              // per host: when that failure is noticed
  std::vector<JobIndex> failed_under_;          // per host: the job on it when it failed
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  uint64_t seq_ = 0;
  uint64_t hash_ = kFnvOffset;
  int64_t now_ = 0;
  size_t next_arrival_ = 0;
  size_t settled_ = 0;
  std::set<JobIndex> running_;
  int64_t down_hosts_ = 0;  // down because of an injected failure (not unhealthy from the start)
  int64_t permanent_down_ = 0;   // of those, down for good (scripted faults without a repair)
  std::vector<bool> permanent_;  // per host (lifecycle only)
  Status error_;
  double allocated_chip_s_ = 0;
  double lost_chip_s_ = 0;
  double asked_chip_s_ = 0;  // what the trace asked (accelerators x run time)
  double ttr_sum_s_ = 0;
  SimResult r_;
};

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

bool SimulatorImpl::Reserve(JobIndex j, const PlanResult& plan) {
  JobState& s = state_[j];
  ++inv_version_;
  for (const SlicePlacement& slice : plan.slices) {
    const OwnerId owner((uint64_t{j} << 16) | (s.next_slot++ & 0xFFFF));
    Status st = inv_.Reserve(owner, slice.hosts);
    if (!st.ok()) {
      error_ = Internal("job " + jobs_[j].spec.name +
                        ": reserving a planned slice failed: " + st.message());
      return false;
    }
    s.owners.push_back(owner);
    Mix(owner.value());
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
  if (tj.status.stopping) {
    // The simulator's hosts confirm a stop at once; a down host cannot, and the stop waits for
    // its loss to be noticed (Detect).
    const std::set<std::string> hosts = tj.runtime.unconfirmed;
    for (const std::string& host : hosts)
      if (host_down_[HostOf(host).value()] == 0) e.Merge(train_.ConfirmStopped(tj, host, NowMs()));
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
  if (!e.release_chips || s.owners.empty()) return;
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
  const JobIndex j = static_cast<JobIndex>(owner.value() >> 16);
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
    const JobIndex j = static_cast<JobIndex>(h.owner.value() >> 16);
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

}  // namespace

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
  SimulatorImpl sim(cluster, jobs, options, planner);
  return sim.Run();
}

}  // namespace tessera::sim
