// The simulator's implementation class, shared by the files that define its members; not part
// of the API (simulator.h is) and not to be included from outside src/sim.
//
// SimulatorImpl is one run: the event queue and its hash, the inventory copy, the per-job run
// state, the scheduler and, with failures on, the TrainJob of every job and the per-host failure
// records. Its members live in two files:
//   simulator.cc     the event loop (Run), starting, preempting, finishing and requeueing jobs,
//                    run segments and their accounting, samples, metrics and invariants
//   sim_failures.cc  the failure lifecycle: the ClusterView over the simulated inventory, host
//                    failures and repairs, the TrainLifecycle steps (Place, HostLost, Progress,
//                    Tick) and their Effects, restart sizes and restart costs
//
// Thread-safety: none; a run owns its inventory copy.
#pragma once

#include <charconv>
#include <cstdint>
#include <functional>
#include <memory>
#include <queue>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "sim/sim_effects.h"
#include "sim/simulator.h"
#include "workload/train_lifecycle.h"

namespace tessera::sim::detail {

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

// Each slice a job holds is held under an owner of its own: the job's index and a slot. The tag
// bit keeps these ids apart from OwnerOf(WorkloadId(j)) (admission/model.h), under which the
// admission code holds workloads in its scratch inventories (the easy pass: the ones it starts,
// and the running ones it re-owns for the victim search); without it, job 0's second slice
// (owner 1) was OwnerOf(job 1).
constexpr uint64_t kSliceOwnerTag = uint64_t{1} << 62;
inline OwnerId SliceOwner(JobIndex j, uint32_t slot) {
  return OwnerId(kSliceOwnerTag | (uint64_t{j} << 16) | (slot & 0xFFFF));
}
inline bool IsSliceOwner(OwnerId o) { return (o.value() & kSliceOwnerTag) != 0; }
inline JobIndex JobOfSliceOwner(OwnerId o) {
  return static_cast<JobIndex>((o.value() & ~kSliceOwnerTag) >> 16);
}

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

inline std::unique_ptr<SimScheduler> MakeEasy(EasyOptions o, const PlannerOptions& placement) {
  o.placement = placement;
  return MakeEasyScheduler(o);
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
                   : o.admission == AdmissionKind::kEasy ? MakeEasy(o.easy, planner.options())
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
    bool HostLost(const std::string& host) const override;
    int LargestFitWithoutJob(const TrainJob& job, int lo, int hi) const override;

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
  // Applies the step's effects (workload/effects_applier.h), then every host that is up confirms
  // a stop at once.
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
  SimEffectsSink<TrainJob> sink_;  // what the last Apply's steps released
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

}  // namespace tessera::sim::detail
