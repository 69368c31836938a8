// AdmissionScheduler: the admission module (src/admission/, the same Admitter the head runs)
// plugged into the simulator as a SimScheduler, for `--admission kueue` and `kueue-strict`.
//
// Every scheduling pass builds an admission Snapshot from the simulator's state and runs one
// Admitter cycle at now:
//   inventory    the live inventory, with each running job's slices re-owned by
//                OwnerOf(WorkloadId(job index)): the admission model's one owner per workload
//   workloads    running jobs (state kRunning, admitted at the start of their current run,
//                last checkpoint from the simulator's checkpoint clock, request cut to the
//                slices they hold after a shrink) and waiting jobs (kPending); priority is the
//                job's, creation order its job index (submission order), kept across requeues
//   queues       the KueueConfig below
// Then it applies the cycle through the SchedulingContext: each preemption victim first
// (Preempt: it loses the work since its last checkpoint and is requeued with its creation
// order), then each admission (Start, on the placement the cycle chose). When the cycle left
// a workload "fits next cycle" (a victim freed more than its preemptor used), another cycle
// runs at the same instant, so that room is not left idle until the next event.
//
// What the simulator does not model: the preemption grace period (victims stop at once, and
// lose the work since their last checkpoint), and the start guard (a job admitted by the
// simulator has all its workers running at once, so it is never evicted for not starting).
// With failures on, restarts and grow-backs are decided by the head's TrainLifecycle (the
// simulator drives it); the job is requeued and admitted again like any other, asking for the
// size the lifecycle allows (SchedulingContext::job). A running job keeps a failed host until
// the failure is noticed; its snapshot re-owns that host too.
//
// A cycle gives no pending reasons (Explain::kFitsNextCycleOnly: only whether a workload fits
// now, for the extra cycle above); the simulator asks for reasons only for the jobs still
// waiting when the run ends, and PendingReason then runs the last cycle's snapshot again with
// KueueConfig::admission's explain level. The decisions do not depend on it, so the run is the
// same as with reasons every cycle, at a fraction of the cost: a pass lists every waiting job.
//
// A pass is skipped when nothing the cycle reads changed since a pass that decided nothing
// (no arrival or departure, same free and owned chips): the Admitter is deterministic, and in
// the simulator a waiting workload's chance depends on nothing else.
//
// Pure: no clock, no I/O. Thread-safety: none; one scheduler per simulation.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "admission/admission.h"
#include "admission/model.h"
#include "placement/planner.h"
#include "sim/scheduler.h"

namespace tessera::sim {

struct KueueConfig {
  // Empty: one ClusterQueue "default" with a nominal quota of every chip of the cluster (so
  // quota never binds and only room and order matter), no cohort, the AdmissionKind's
  // queueing strategy (kueue: BestEffortFIFO; kueue-strict: StrictFIFO), preemption
  // withinClusterQueue LowerPriority; and one LocalQueue "default" pointing at it. When set,
  // the queues carry their own strategies and policies.
  std::vector<ClusterQueueSpec> cluster_queues;
  std::vector<LocalQueueSpec> local_queues;
  // The LocalQueue a job is submitted to. Empty: the first LocalQueue.
  std::function<std::string(JobIndex, const SimJob&)> local_queue_of;
  // The Admitter's options. Its planner is replaced by the placement policy under test; by
  // default pending reasons skip the what-would-help search (it costs a victim search per
  // waiting shape every pass, and the simulator reports only the reason).
  AdmissionOptions admission = [] {
    AdmissionOptions o;
    o.explain = Explain::kReasons;
    return o;
  }();
};

// The default configuration for `kind` (kKueue or kKueueStrict) on a cluster of
// `total_chips` chips of `generation`.
KueueConfig DefaultKueueConfig(AdmissionKind kind, Generation generation, int64_t total_chips);

// A scheduler for kKueue or kKueueStrict that plans with `placement`. A bad configuration
// (a spec failing validation, a LocalQueue naming a missing ClusterQueue) is reported by the
// scheduler's status() after the first pass, and ends the run.
std::unique_ptr<SimScheduler> MakeAdmissionScheduler(AdmissionKind kind,
                                                     const PlannerOptions& placement,
                                                     KueueConfig config = {});

}  // namespace tessera::sim
