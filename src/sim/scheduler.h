// SimScheduler: the admission step of the simulator, behind one small interface.
//
// Five schedulers. Three are written inside the simulator, as simple baselines:
//   fifo      StrictFIFO: jobs in submission order; the head of the line blocks everyone.
//   backfill  BestEffortFIFO: a job that does not fit is passed over, later ones may start.
//   priority  BestEffortFIFO ordered by priority then submission, plus preemption: the first
//             blocked job may evict lower-priority jobs, and only those whose chips the chosen
//             placement uses (topology-aware: a victim elsewhere in the pod would not help).
// Two run the admission module (src/admission/), the same Admitter the head runs, through
// the adapter in admission_scheduler.h:
//   kueue         one ClusterQueue, BestEffortFIFO, preemption withinClusterQueue
//                 LowerPriority with the admission module's gang- and topology-aware victim
//                 search (cheapest victims by priority, chips, work lost since checkpoint).
//   kueue-strict  the same with StrictFIFO.
// fifo and backfill ignore priorities, so comparing them with priority isolates its effect.
// Placement is never the scheduler's business: every plan is made by the real SlicePlanner
// with the policy under test.
//
// Decisions are applied through the SchedulingContext as they are made (the Reserve step of a
// scheduling framework), so the next Plan in the same pass sees the chips already taken; this
// costs nothing, where planning every pass against a fresh copy of a pod would cost more than
// the replay itself.
//
// Pure: no clock, no I/O. Thread-safety: none; one scheduler per simulation.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "inventory/inventory.h"
#include "placement/planner.h"
#include "sim/workload.h"

namespace tessera::sim {

using JobIndex = uint32_t;  // a job's position in the simulation's job list

// A job as the simulator runs it: the spec and the slice request it maps to.
struct SimJob {
  JobSpec spec;
  SliceRequest request;      // shape from the ShapeMap; num_slices = spec.num_slices
  int64_t slice_chips = 0;   // chips of one slice (>= spec.accelerators)
  std::string never_reason;  // non-empty: this cluster can never hold it; it is not queued
};

struct RunningJobView {
  JobIndex job;
  int priority;
  int64_t start_s;  // when the current run started
  int64_t chips;    // chips held now
  // Where the job would restart from if stopped now: its last checkpoint in the current run,
  // or start_s when it has not checkpointed since.
  int64_t last_checkpoint_s;
};

// What a scheduler may see and do. Implemented by the simulator (and later the controller).
class SchedulingContext {
 public:
  virtual ~SchedulingContext() = default;
  virtual const Inventory& inventory() const = 0;
  // The job as it asks now: after a restart with a range of sizes (failures on), its request
  // holds the largest size in the range that fits the live inventory, or the smallest.
  virtual const SimJob& job(JobIndex j) const = 0;
  // The job's request planned against the live inventory, or against `scratch` (a copy the
  // scheduler changed, e.g. with preemption candidates released).
  virtual PlanResult Plan(JobIndex j) const = 0;
  virtual PlanResult PlanOn(const Inventory& scratch, JobIndex j) const = 0;
  // Reserves the plan's hosts for `j` and starts it. The plan must be placed and its hosts free.
  virtual void Start(JobIndex j, const PlanResult& plan) = 0;
  // Stops a running job, releases its chips, loses its work since the last checkpoint, and
  // requeues it (the scheduler's OnArrival is called before Preempt returns).
  virtual void Preempt(JobIndex victim, JobIndex for_job) = 0;
  // Running jobs, by job index; and the owner ids a running job holds its slices under.
  virtual std::vector<RunningJobView> Running() const = 0;
  virtual std::vector<OwnerId> OwnersOf(JobIndex j) const = 0;
};

class SimScheduler {
 public:
  virtual ~SimScheduler() = default;
  virtual std::string Name() const = 0;
  // `j` wants to run: it arrived, or it was requeued after a failure or a preemption.
  virtual void OnArrival(JobIndex j, const SimJob& job) = 0;
  // A running job released its chips (finished, failed, preempted).
  virtual void OnDeparture(JobIndex j) = 0;
  // One scheduling pass at time `now`: start what fits, preempt where allowed.
  virtual void Schedule(int64_t now, SchedulingContext& ctx) = 0;
  // Jobs waiting, for metrics and the end-of-run report.
  virtual size_t QueueLength() const = 0;
  virtual std::vector<JobIndex> Queued() const = 0;
  // Not OK when the scheduler cannot go on (a bad queue configuration); the simulator stops
  // the run with this error after the pass.
  virtual Status status() const { return Status::Ok(); }
  // Why a waiting job is waiting, as the scheduler last saw it; empty when it does not say.
  virtual std::string PendingReason(JobIndex /*j*/) const { return {}; }
  // Jobs moved by defragmentation (easy_scheduler.h), and the chip-hours of work they lost.
  virtual int64_t moves() const { return 0; }
  virtual double moved_chip_hours() const { return 0; }
};

enum class AdmissionKind { kFifo, kBackfill, kPriority, kKueue, kKueueStrict, kEasy };
// "fifo", "backfill", "priority", "kueue", "kueue-strict", "easy"; anything else is
// InvalidArgument listing them. easy (easy_scheduler.h) is made by the simulator with its
// options, not by MakeScheduler.
Result<AdmissionKind> ParseAdmission(std::string_view name);
const char* AdmissionName(AdmissionKind kind);
// The kueue kinds plan with `placement` and the default queues (admission_scheduler.h).
std::unique_ptr<SimScheduler> MakeScheduler(AdmissionKind kind,
                                            const PlannerOptions& placement = {});

}  // namespace tessera::sim
