// The admission cycle: from a snapshot of the cluster (inventory, queues, workloads) to
// decisions (admit here, preempt these, evict that for not starting, deactivate) and a current,
// specific reason for every workload still waiting.
//
// One cycle, in order:
//  1. Start guard: admitted workloads not all running within start_timeout are evicted and
//     requeued with exponential backoff, or deactivated after the retry limit.
//  2. Admission: every ClusterQueue's pending workloads, in queue order (priority, then
//     creation order), as many as fit, from every queue: the next workload tried is always the
//     head of the queue that is least served (lowest weighted dominant share after admitting
//     it, with fair sharing; then priority, creation order, queue name). Each admission
//     reserves quota and a placement together on the cycle's working inventory, so later
//     admissions see earlier ones. A workload that does not fit may preempt (preemption.h),
//     within its queue's policy. StrictFIFO stops a queue at the first head that cannot be
//     admitted; BestEffortFIFO moves on.
//  3. Reasons: every workload still waiting gets a reason against the state after step 2, and
//     what would let it in.
// The caller applies the decisions: SIGTERM victims and wait out their grace period, start an
// admission only after the workloads in its waits_for have stopped, requeue the evicted with
// their original creation order.
//
// Pure: no I/O, clock, threads or environment; time arrives as now_ms. Deterministic: ties are
// broken by name or id. Thread-safety: an Admitter is immutable; Run may be called from any
// number of threads at once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "admission/model.h"
#include "admission/preemption.h"
#include "common/shared_list.h"
#include "common/shared_text.h"
#include "common/status.h"
#include "inventory/inventory.h"
#include "placement/planner.h"

namespace tessera {

struct StartGuardOptions {
  int64_t start_timeout_ms = 30 * 60 * 1000;  // admitted but not all running: evict after this
  int64_t backoff_base_ms = 60 * 1000;        // first requeue delay; doubles per retry
  int64_t backoff_cap_ms = 3600 * 1000;       // the delay never exceeds this
  int retry_limit = 5;                        // evictions allowed; the next one deactivates
};

// Cluster-wide, as Kueue's configuration `fairSharing.enable`: off by default. Off, a
// borrowing preemptor follows borrowWithinCohort (and maxPriorityThreshold); on, heads are
// ordered by share, borrowWithinCohort is ignored and preemption while borrowing follows the
// share rule (docs/admission.md, "Fair sharing").
enum class FairSharing { kDisabled, kEnabled };

// How much each pending reason explains.
enum class Explain {
  // Only the workloads that fit now (kFitsNextCycle), with no reason for the others (nor their
  // count in usage): for a caller that runs another cycle at once when one does, and wants the
  // others' reasons only now and then. The decisions are the same at every level, so it gets
  // them by running the same snapshot again with kReasons (the simulator does).
  kFitsNextCycleOnly,
  kReasons,              // the reason and its numbers only
  kReasonsAndWhatHelps,  // also which running workloads would have to finish or be preempted
};

struct AdmissionOptions {
  PlannerOptions planner = PlannerOptions::Tessera();
  GpuPolicy gpu_policy = GpuPolicy::kTessera;  // the GPU domain planner's policy (GPU cycles)
  StartGuardOptions start_guard;
  FairSharing fair_sharing = FairSharing::kDisabled;
  int64_t preemption_grace_ms = 30 * 1000;  // SIGTERM to SIGKILL: time to checkpoint
  Explain explain = Explain::kReasonsAndWhatHelps;
};

Status Validate(const AdmissionOptions& options);

// The hosts of one GPU system for a GPU cycle, and who holds each.
struct GpuSnapshot {
  // Hosts held by a workload of the cycle have free_gpus 0; hosts no workload of the cycle can
  // give back (held by something else, unhealthy) are not usable.
  GpuFleet fleet;
  // Per fleet host: the workload of the cycle holding it; invalid when nobody of the cycle does.
  std::vector<WorkloadId> holders;
};

// Everything a cycle reads. Finished workloads are not listed.
//
// A TPU cycle (`gpu` unset): admitted and running workloads hold their hosts in `inventory`
// under OwnerOf(id); quotas count chips of the inventory's generation.
// A GPU cycle (`gpu` set): the same queues, quota rules, order, preemption policies and
// reasons, for the GPU workloads of gpu->fleet.system: quotas count that system's GPUs
// (nvidia.com/gpu), placements come from the GPU domain planner (placement/gpu_planner.h) and
// `inventory` is not used. A workload that is not of that system is kInvalidRequest.
struct Snapshot {
  Inventory inventory;
  std::vector<ClusterQueueSpec> cluster_queues;
  std::vector<LocalQueueSpec> local_queues;
  std::vector<Workload> workloads;
  std::optional<GpuSnapshot> gpu;
};

// Reserve `placement` for the workload (owner OwnerOf(workload)) and charge its queue.
struct Admission {
  WorkloadId workload;
  std::string cluster_queue;
  PlanResult placement;        // TPU cycle
  GpuPlacement gpu_placement;  // GPU cycle: fleet host indices in rank order
  // Workloads evicted in this cycle that hold hosts of `placement`: start the workload only
  // after they have stopped.
  std::vector<WorkloadId> waits_for;
  int64_t borrowed_chips = 0;  // how far its queue is above nominal after this admission
};

enum class PreemptionKind {
  kWithinClusterQueue,   // victims from the preemptor's own queue only
  kReclaimWithinCohort,  // taking back lent quota (and room) from borrowing queues
  kBorrowWithinCohort,   // while borrowing: lower priority, or fair share
};
const char* PreemptionKindName(PreemptionKind kind);

// SIGTERM the victims, give them grace_ms to checkpoint, then stop them and requeue them with
// their original creation order. The preemptor's Admission lists them in waits_for.
struct Preemption {
  WorkloadId preemptor;
  std::vector<WorkloadId> victims;  // ascending
  int64_t grace_ms = 0;
  PreemptionKind kind = PreemptionKind::kWithinClusterQueue;
  VictimCost cost;
  std::string message;
};

enum class EvictionCause { kPreempted, kStartTimeout };
const char* EvictionCauseName(EvictionCause cause);

// Stop the workload (keeping its creation order) and set its start guard state to the values
// here; if `deactivated`, set its state to kDeactivated instead of requeueing it.
struct Eviction {
  WorkloadId workload;
  EvictionCause cause = EvictionCause::kPreempted;
  WorkloadId preemptor;         // kPreempted
  int64_t grace_ms = 0;         // kPreempted: time to checkpoint
  StartGuardState start_guard;  // the workload's start guard state after this eviction
  bool deactivated = false;
  std::string message;
};

enum class PendingReason {
  kLocalQueueNotFound,  // the named LocalQueue (or its ClusterQueue) does not exist
  kInvalidRequest,      // the request does not match this cluster (generation, shape)
  kNeverFits,           // this cluster cannot hold the shape even when empty
  kOverQuota,           // the queue (with what it may borrow) has not enough quota now
  kNoFreeBox,           // quota fits, but there is no free room of the shape (GPU: no domain
                        // placement under the job's rule) now
  kWaitingBehind,       // StrictFIFO: behind a head that cannot be admitted
  kBackoff,             // evicted by the start guard; may not be admitted before a time
  kDeactivated,         // the start guard gave up after its retry limit
  kFitsNextCycle,       // room appeared after it was tried in this cycle
  kPreempted,           // preempted in this cycle; requeued in its original place in line
};
const char* PendingReasonName(PendingReason reason);

// A running workload whose finishing (or preemption) would help a waiting one.
struct Blocker {
  WorkloadId workload;
  std::string name;
  std::string cluster_queue;
  int32_t priority = 0;
  int64_t chips = 0;
  bool preemptible = false;  // the waiting workload's policies allow preempting it
};

struct PendingStatus {
  WorkloadId workload;
  std::string name;
  std::string cluster_queue;  // empty when the local queue does not resolve
  PendingReason reason = PendingReason::kOverQuota;
  // For people, with the numbers. Shared: workloads waiting for the same reason (a queue's
  // over-quota line) hold one copy.
  SharedText message;
  int position = 0;        // 1-based place among the waiting workloads of its queue; 0: not in line
  int waiting_behind = 0;  // kWaitingBehind: workloads ahead of it that are waiting
  int64_t over_quota_chips = 0;  // kOverQuota: by how much (GPUs in a GPU cycle)
  std::string largest_free;      // kNoFreeBox: the largest free room now
  int64_t backoff_until_ms = 0;  // kBackoff
  int retries = 0;               // start guard evictions so far
  // What would let it in: running workloads that would have to finish or be preempted (the
  // cheapest such set, ignoring policy; `preemptible` says which the policy allows). Shared:
  // workloads of a queue waiting with the same size and priority hold one copy.
  SharedList<Blocker> would_help;
};

// Per ClusterQueue, for the inventory's generation (a GPU cycle: the fleet's GPU system, the
// *_chips fields counting GPUs), after this cycle's decisions.
struct ClusterQueueUsage {
  std::string name;
  std::string cohort;
  int64_t nominal_chips = 0;
  int64_t used_chips = 0;
  int64_t borrowed_chips = 0;  // max(0, used - nominal)
  int64_t lendable_chips = 0;  // what the cohort may borrow from it
  int pending_workloads = 0;   // waiting (including backoff, excluding deactivated)
  int admitted_workloads = 0;  // admitted or running
  double share = 0;            // weighted dominant share (docs/admission.md)
};

struct AdmissionCycle {
  std::vector<Admission> admissions;     // in the order they were decided
  std::vector<Preemption> preemptions;   // in the order they were decided
  std::vector<Eviction> evictions;       // start guard first, then preemption victims
  std::vector<PendingStatus> pending;    // every waiting workload, by queue then position
                                         // (kFitsNextCycleOnly: only those that fit now)
  std::vector<ClusterQueueUsage> usage;  // by queue name
  // The working inventory after the decisions: victims and evicted released, admissions
  // reserved. The caller's own inventory changes only when it applies the decisions.
  Inventory inventory;
  // The level the statuses were built at: below kReasonsAndWhatHelps every would_help is empty
  // because it was not looked for, not because nothing running would help.
  Explain explained = Explain::kReasonsAndWhatHelps;
};

class Admitter {
 public:
  explicit Admitter(AdmissionOptions options = {});

  const AdmissionOptions& options() const { return options_; }
  const SlicePlanner& planner() const { return planner_; }

  // Runs one cycle. InvalidArgument (naming the object and field) when a spec fails
  // validation, names collide, a LocalQueue names a missing ClusterQueue, workload ids repeat,
  // or an admitted workload holds no hosts. A workload that cannot be admitted is not an error:
  // it gets a PendingStatus.
  Result<AdmissionCycle> Run(const Snapshot& snapshot, int64_t now_ms) const;
  // The same at another explain level than options().explain: the decisions are the same at
  // every level (a head finds what would help only now and then, and reasons every cycle).
  Result<AdmissionCycle> Run(const Snapshot& snapshot, int64_t now_ms, Explain explain) const;

  // The start guard's requeue delay after `retries` evictions (1 -> base): base * 2^(r-1),
  // capped.
  int64_t BackoffMs(int retries) const;

 private:
  AdmissionOptions options_;
  SlicePlanner planner_;
};

}  // namespace tessera
