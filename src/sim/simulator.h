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
// of mean cube_mtbf. Draws come from a per-host (per-cube) Rng derived from the seed, so every
// policy in a comparison sees the same failures at the same times. A failed host is marked down
// in the inventory; the job on it releases its chips and is requeued (restart policy), or, for a
// multi-slice job above its minimum under the shrink policy, drops the broken slice, restarts
// at the smaller size and grows back when the capacity returns (checked every pass).
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
#include "sim/scheduler.h"
#include "sim/workload.h"

namespace tessera::sim {

enum class OnHostLoss {
  kRestart,  // release everything, requeue at full size (pause and resume)
  kShrink,   // multi-slice jobs above min_slices drop the broken slice and grow back later
};

struct FailureOptions {
  double host_mtbf_hours = 0;  // 0: hosts do not fail
  double host_repair_hours = 4;
  double cube_mtbf_hours = 0;  // 0: cubes do not fail as a whole
  double cube_repair_hours = 24;
  int64_t checkpoint_interval_s = 3600;  // 0: no checkpoints, a restart loses all the work
  OnHostLoss on_host_loss = OnHostLoss::kRestart;
  bool enabled() const { return host_mtbf_hours > 0 || cube_mtbf_hours > 0; }
};

class Simulator;

struct SimOptions {
  PlannerOptions placement = PlannerOptions::Tessera();
  AdmissionKind admission = AdmissionKind::kBackfill;
  FailureOptions failures;
  // kueue and kueue-strict: the queues. Default: one queue holding every chip
  // (admission_scheduler.h).
  KueueConfig kueue;
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
  enum class State { kFinished, kNeverPlaced, kUnfinished };
  State state = State::kUnfinished;
  std::string reason;  // for kNeverPlaced and kUnfinished
  int64_t first_start_s = -1;
  int64_t finish_s = -1;
  int restarts = 0;  // after failures and preemptions
};

struct SimResult {
  std::string policy;
  std::string admission;
  int64_t total_chips = 0;
  int64_t jobs = 0;
  int64_t finished = 0;
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
  int64_t interrupted_jobs = 0;  // job interruptions by a failure
  int64_t recoveries = 0;        // interrupted jobs that ran again (restart or shrink)
  double mean_time_to_recover_s = 0;
  int64_t preemptions = 0;
  int64_t shrinks = 0;
  int64_t grows = 0;
  int64_t events = 0;
  uint64_t event_hash = 0;
  std::vector<Sample> series;
  std::vector<int64_t> waits_s;      // per started job, sorted
  std::vector<JobOutcome> outcomes;  // per job, in workload order
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
  // Checks: no host owned by two jobs or by a job that is not running; each running job holds
  // whole slices (between min and max of them, each of exactly its shape's hosts); waiting and
  // finished jobs hold nothing; no job holds a down host after its failure event. Returns the
  // first violation as kInternal.
  virtual Status CheckInvariants() const = 0;
};

}  // namespace tessera::sim
