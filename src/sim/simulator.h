// The discrete-event simulator: replays a workload on a simulated cluster with one placement
// policy and one admission scheduler, injects host and cube failures, and measures.
//
// The loop: an event queue ordered by (time, sequence number). Events at one instant are all
// applied, then the scheduler makes one pass. Nothing reads the wall clock, starts a thread or
// sleeps; randomness comes only from the seed. Every applied event and every decision is
// folded into an FNV-1a 64 hash (SimResult::event_hash), so two runs with the same inputs and
// seed can be compared bit for bit.
//
// Time is integer seconds from the start of the trace. Work is counted in slice-seconds: a job
// of N slices and duration D needs N*D; running on k slices it makes k per second (a shrunk
// job runs slower). Training jobs checkpoint every checkpoint_interval_s of run time; a failure
// or a preemption loses the run time since the last checkpoint (all of it when the interval is
// 0) and the job restarts from there.
//
// Failures (all optional): each host fails after an exponential time of mean host_mtbf and is
// repaired after repair time; each cube fails as a whole (all 16 hosts) after an exponential time
// of mean cube_mtbf; tests may script host faults at given times. Draws come from a per-host
// (per-cube) Rng derived from the seed, so every policy in a comparison sees the same failures at
// the same times. A failed host is marked down in the inventory at once.
//
// With failures on, every job is also a TrainJob driven by the head's own lifecycle
// (workload/train_lifecycle.h), so a failure takes the head's decisions: the simulator calls
// Place when the scheduler starts a job, HostLost when a host's failure is noticed (detect_s
// after it happened: the head's lease), ConfirmStopped at once for every host that is up (a down
// host cannot confirm; its loss does), Progress(kCheckpoint) at every checkpoint of a job that
// may grow back (elsewhere checkpoints decide nothing) and Tick every grow-back interval, and
// applies the Effects: chips released, the job requeued when it goes back to Pending (asking
// for the sizes the lifecycle allows: the same size under pause, the largest fit under resize,
// the grown size after a grow-back), or failed when it runs out of its failure budget. A
// restarted job makes no progress for schedule_s + start_s + restore_s after it is placed. Runs
// without failures use none of this, so their event hashes do not change.
//
// Thread-safety: none; a run owns its inventory copy.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "inventory/inventory.h"
#include "placement/planner.h"
#include "sim/admission_scheduler.h"
#include "sim/classes.h"
#include "sim/easy_scheduler.h"
#include "sim/scheduler.h"
#include "sim/workload.h"
#include "workload/recovery.h"

namespace tessera::sim {

// spec.failurePolicy.onHostLoss of every simulated job (HostLossPolicy, workload/recovery.h).
enum class OnHostLoss {
  kRestart,  // kPause: stop, requeue, restart at the same size once it fits again
  kShrink,   // kResize: restart at once at the largest size in [min, max] that fits, and grow
             // back at the first checkpoint after the capacity returns
};

// A host fault at a given time, for tests and scripted scenarios.
struct HostFault {
  int64_t at_s = 0;  // trace time
  HostId host;
  int64_t down_s = 0;  // repaired this long after; 0: stays down
};

// Restart costs default to tessera's own measurements (bench/recovery/README.md; the figures and
// their sources are in docs/simulator.md, "Failures and training jobs").
struct FailureOptions {
  double host_mtbf_hours = 0;  // 0: hosts do not fail
  double host_repair_hours = 4;
  double cube_mtbf_hours = 0;  // 0: cubes do not fail as a whole
  double cube_repair_hours = 24;
  std::vector<HostFault> scripted;       // on top of the random failures
  int64_t checkpoint_interval_s = 3600;  // 0: no checkpoints, a restart loses all the work
  OnHostLoss on_host_loss = OnHostLoss::kRestart;
  int max_failures = -1;  // spec.failurePolicy.maxFailures of every job; -1: unlimited
  // Resize: how often a shrunk job looks for room to grow (spec.growBackInterval; the head's
  // default).
  int64_t grow_back_interval_s = 60;
  // Restart costs, in seconds. Time in the simulator is whole seconds: the detection delay and
  // the start-up delay (schedule + start + restore) are each rounded up to a whole second.
  double detect_s = 5;      // failure -> the head notices (a lost host: its lease)
  double schedule_s = 0.1;  // the head places the next attempt
  double start_s = 1.28;    // workers start (warm) until they can load the checkpoint
  double restore_s = 0.02;  // checkpoint load
  bool enabled() const { return host_mtbf_hours > 0 || cube_mtbf_hours > 0 || !scripted.empty(); }
};

class Simulator;

struct SimOptions {
  PlannerOptions placement = PlannerOptions::Tessera();
  AdmissionKind admission = AdmissionKind::kBackfill;
  FailureOptions failures;
  // kueue and kueue-strict: the queues. Default: one queue holding every chip
  // (admission_scheduler.h).
  KueueConfig kueue;
  // easy: estimates, reservation and defragmentation (easy_scheduler.h); placement is set
  // from `placement`.
  EasyOptions easy;
  ShapeMap shape_map;  // empty: ShapeMap::Default(generation)
  uint64_t seed = 1;
  // Fragmentation and utilization are sampled at this period. 0: the trace's span / 500.
  int64_t sample_interval_s = 0;
  // Stop at this time even if work remains (jobs left are reported as not finished). 0: none.
  int64_t horizon_s = 0;
  // Tests: called after every applied event and scheduling pass.
  std::function<void(const Simulator&)> after_event;
  // The shell: called now and then with the fraction of jobs settled, in [0, 1].
  std::function<void(double)> progress;
};

struct Sample {
  int64_t time_s;
  double utilization;    // allocated chips / total chips
  double fragmentation;  // SlicePlanner::Fragmentation
  int64_t queued;
  int64_t running;
  int64_t down_hosts;
};

struct JobOutcome {
  // kFailed: the lifecycle failed it (a failure past its budget).
  enum class State { kFinished, kNeverPlaced, kUnfinished, kFailed };
  State state = State::kUnfinished;
  std::string reason;  // for kNeverPlaced, kUnfinished and kFailed
  int64_t first_start_s = -1;
  int64_t finish_s = -1;
  int restarts = 0;  // after failures and preemptions
  int preemptions = 0;
  // With failures on: every attempt, as the head would record it (workload/recovery.h), times
  // in ms of trace time plus 1 s (the lifecycle reads 0 as "unknown").
  std::vector<AttemptRecord> attempts;
};

struct SimResult {
  std::string policy;
  std::string admission;
  int64_t total_chips = 0;
  int64_t jobs = 0;
  int64_t finished = 0;
  int64_t failed = 0;        // failed by the lifecycle (failure budget)
  int64_t never_placed = 0;  // never fit this cluster, or still waiting when the run stopped
  int64_t start_s = 0;       // first submission
  int64_t end_s = 0;         // last finish (or the stop time)
  int64_t makespan_s = 0;    // end_s - start_s
  double utilization = 0;    // allocated chip-seconds / (total chips x makespan)
  double wait_p50_s = 0, wait_p95_s = 0, wait_p99_s = 0;  // submit -> first start
  double mean_jct_s = 0;                                  // submit -> finish, finished jobs
  double mean_fragmentation = 0;                          // over samples
  double allocated_chip_hours = 0;
  double rounding_waste = 0;  // share of allocated chip-time the shape map added over the ask
  // Failures and preemption.
  double goodput = 1;  // (allocated - lost) / allocated chip-time
  double lost_chip_hours = 0;
  int64_t host_failures = 0;
  int64_t cube_failures = 0;
  int64_t interrupted_jobs = 0;  // attempts ended by a host failure
  int64_t recoveries = 0;        // of those, restarts that made progress again
  // Failure -> the restarted attempt's first progress (the head's timeToRecover), over
  // recoveries: detection, waiting for room, schedule, start and restore.
  double mean_time_to_recover_s = 0;
  int64_t preemptions = 0;      // moves by defragmentation included
  int64_t moves = 0;            // easy: jobs stopped and placed again by defragmentation
  double moved_chip_hours = 0;  // the work those moves lost (since their last checkpoint)
  int64_t shrinks = 0;          // attempts placed with fewer slices than the one before
  int64_t grows = 0;            // attempts placed with more slices than the one before (grow-back)
  int64_t events = 0;
  uint64_t event_hash = 0;
  std::vector<Sample> series;
  std::vector<int64_t> waits_s;      // per started job, sorted
  std::vector<JobOutcome> outcomes;  // per job, in workload order
  // Waits, JCT and preemptions split by size class and by priority (classes.h).
  std::vector<ClassStats> by_size;
  ClassStats whole_cubes;  // the jobs that need whole cubes, over their size classes
  std::vector<ClassStats> by_priority;
};

// Maps a workload onto a cluster: shapes from the map (rounding up), and a never-placeable
// reason for requests this cluster cannot hold even when empty and healthy.
std::vector<SimJob> MapJobs(const Workload& workload, const Inventory& cluster,
                            const ShapeMap& map);
// The same with a planner the caller built (a planner's tables take milliseconds to build).
std::vector<SimJob> MapJobs(const Workload& workload, const Inventory& cluster, const ShapeMap& map,
                            const SlicePlanner& planner);

// One run. `cluster` is copied. Errors only for inconsistent input (a workload not sorted).
Result<SimResult> RunSimulation(const Inventory& cluster, const std::vector<SimJob>& jobs,
                                const SimOptions& options);
// The same with a planner built once and shared by several runs; it replaces
// options.placement.
Result<SimResult> RunSimulation(const Inventory& cluster, const std::vector<SimJob>& jobs,
                                const SimOptions& options, const SlicePlanner& planner);

// The running simulation, as seen by after_event hooks.
class Simulator {
 public:
  virtual ~Simulator() = default;
  virtual int64_t now() const = 0;
  virtual const Inventory& inventory() const = 0;
  // Checks: no host owned by two jobs or by a job that is neither running nor stopping; each
  // running or stopping job holds whole slices (between min and max of them, each of exactly
  // its shape's hosts); waiting and finished jobs hold nothing; no running job holds a down host
  // after its failure was noticed (a stopping job holds its hosts until the last lost one is
  // noticed). Returns the first violation as kInternal.
  virtual Status CheckInvariants() const = 0;
};

}  // namespace tessera::sim
