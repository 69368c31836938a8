// The admission model's resources: ClusterQueue, LocalQueue, PriorityClass and Workload, as
// plain structs, with one validation function each. The API layer decodes documents into these
// and calls Validate; the admission cycle (admission.h) reads them from a Snapshot.
//
// Names follow Kueue's (../shared/docs/domain.md section 4); docs/admission.md explains every
// field and what tessera does differently.
//
// Pure and dependency-free beyond placement/topology/common. Thread-safety: values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/ids.h"
#include "common/object_key.h"
#include "common/status.h"
#include "placement/gpu_planner.h"
#include "placement/planner.h"
#include "topology/gpu_system.h"
#include "topology/topology.h"

namespace tessera {

using WorkloadId = StrongId<struct WorkloadTag, uint64_t>;

// A workload's hosts are held in the Inventory under this owner id: one workload, one owner.
inline OwnerId OwnerOf(WorkloadId id) { return OwnerId(id.value()); }

enum class QueueingStrategy {
  kStrictFIFO,      // the head blocks the queue until it is admitted
  kBestEffortFIFO,  // a head that cannot be admitted lets the next workloads try
};

// Which workloads of the same ClusterQueue a workload may preempt.
enum class WithinClusterQueue {
  kNever,
  kLowerPriority,              // strictly lower priority
  kLowerOrNewerEqualPriority,  // lower priority, or equal priority and created later
};

// Which workloads of other ClusterQueues of the cohort a workload may preempt, when those
// queues are borrowing. Without fair sharing it applies only while the preemptor stays within
// its nominal quota (it is taking back what it lent); with fair sharing it also governs
// preemption while borrowing, together with the share rule (docs/admission.md).
enum class ReclaimWithinCohort { kNever, kLowerPriority, kAny };

enum class BorrowWithinCohortPolicy { kNever, kLowerPriority };

// Without fair sharing: whether a workload that needs to borrow may preempt borrowing
// workloads of other queues of the cohort, and up to which victim priority.
struct BorrowWithinCohort {
  BorrowWithinCohortPolicy policy = BorrowWithinCohortPolicy::kNever;
  // Victims must have priority <= this value (and < the preemptor's). Unset: no threshold.
  std::optional<int32_t> max_priority_threshold;
};

struct PreemptionPolicy {
  WithinClusterQueue within_cluster_queue = WithinClusterQueue::kNever;
  ReclaimWithinCohort reclaim_within_cohort = ReclaimWithinCohort::kNever;
  BorrowWithinCohort borrow_within_cohort;
};

// The resources a quota counts, by the names Kubernetes device plugins give them (a
// ClusterQueue document's `spec.quotas[].resource`): TPU chips of a generation, and GPUs of a
// GPU system. The generation or the GPU system plays the part of Kueue's ResourceFlavor.
inline constexpr char kTpuResource[] = "google.com/tpu";
inline constexpr char kGpuResource[] = "nvidia.com/gpu";

// Quota for one accelerator generation, in chips, or for one GPU system, in GPUs. The fields
// named *_chips then count GPUs.
struct ResourceQuota {
  Generation generation = Generation::k7x;
  int64_t nominal_chips = 0;
  // How far above nominal this queue may go by borrowing from its cohort. Unset: as far as the
  // cohort has unused quota to lend. Needs a cohort.
  std::optional<int64_t> borrowing_limit_chips;
  // How much of its unused nominal quota the cohort may borrow. Unset: all of it. The rest
  // (nominal - lending limit) is kept for this queue alone. Needs a cohort; <= nominal.
  std::optional<int64_t> lending_limit_chips;
  // Set: the quota counts GPUs (nvidia.com/gpu) of this system; `generation` is not used.
  std::optional<GpuSystem> gpu_system;
};

struct ClusterQueueSpec {
  std::string name;
  std::string cohort;                 // empty: no cohort, no borrowing or lending
  std::vector<ResourceQuota> quotas;  // at most one entry per generation
  QueueingStrategy queueing_strategy = QueueingStrategy::kBestEffortFIFO;
  PreemptionPolicy preemption;
  // Fair-sharing weight (> 0): a queue of weight 2 may borrow twice the share of one of
  // weight 1 before it counts as equally served.
  double fair_sharing_weight = 1.0;
};

// The LocalQueue of a workload that names none (metadata.queue empty), as Kueue's default
// LocalQueue: such a workload waits with kLocalQueueNotFound until one of this name exists.
inline constexpr char kDefaultLocalQueue[] = "default";

// The LocalQueue a workload uses: `queue` (kDefaultLocalQueue when empty) in the namespace of
// the workload's key, never another namespace's (as Kueue's LocalQueues admit only their own
// namespace's workloads). Keys as in common/object_key.h.
inline std::string LocalQueueKeyOf(std::string_view workload_key, std::string_view queue) {
  return ObjectKey(NamespaceOfKey(workload_key), queue.empty() ? kDefaultLocalQueue : queue);
}

// A team's entry point: workloads name a LocalQueue, which points at a ClusterQueue.
struct LocalQueueSpec {
  std::string name;
  std::string cluster_queue;
};

struct PriorityClass {
  std::string name;
  int32_t value = 0;  // higher runs first; in [-1e9, 1e9]
};

enum class WorkloadState {
  kPending,      // waiting in its queue (possibly in start-guard backoff)
  kAdmitted,     // quota and hosts reserved; workers starting
  kRunning,      // every worker running
  kDeactivated,  // stopped retrying after the start guard's retry limit; a person must act
};

// Start guard (Kueue's waitForPodsReady) bookkeeping, carried across requeues.
struct StartGuardState {
  int retries = 0;               // evictions for not starting in time
  int64_t backoff_until_ms = 0;  // not admitted again before this time
  std::string last_eviction;     // why it was last evicted, for people
};

// A GPU workload's request: GPUs of one system, in whole hosts, under a domain rule
// (placement/gpu_planner.h).
struct GpuWorkloadRequest {
  GpuSystem system = GpuSystem::kH100;
  GpuRequest request;  // gpus: a multiple of the system's GPUs per host
};

struct Workload {
  WorkloadId id;
  std::string name;
  std::string local_queue;
  int32_t priority = 0;                   // the resolved PriorityClass value
  SliceRequest request;                   // a TPU workload's request; not used when `gpu` is set
  std::optional<GpuWorkloadRequest> gpu;  // set: a GPU workload, admitted by a GPU cycle
  // Place in line, assigned once at creation and kept across requeues (a preempted workload
  // does not go to the back of the queue). Smaller is older.
  int64_t creation_order = 0;
  WorkloadState state = WorkloadState::kPending;
  // kAdmitted / kRunning: the hosts are the Inventory's hosts of OwnerOf(id).
  int64_t admitted_at_ms = 0;
  // The last checkpoint the workload reported; unset: none since admission. Preemption prefers
  // victims that lose the least work (chips x time since this).
  std::optional<int64_t> last_checkpoint_ms;
  StartGuardState start_guard;

  // What it is charged: chips of its generation, or GPUs of its system.
  int64_t chips() const {
    return gpu ? gpu->request.gpus : request.shape.chips() * request.num_slices;
  }
};

const char* QueueingStrategyName(QueueingStrategy s);
const char* WithinClusterQueueName(WithinClusterQueue p);
const char* ReclaimWithinCohortName(ReclaimWithinCohort p);
const char* BorrowWithinCohortPolicyName(BorrowWithinCohortPolicy p);
const char* WorkloadStateName(WorkloadState s);

// OK or InvalidArgument naming the field ("quotas[1].lendingLimit: ..."). Names are 1 to 63
// characters of lowercase letters, digits and '-', starting and ending with a letter or digit.
Status ValidateName(std::string_view field, std::string_view name);
Status Validate(const ClusterQueueSpec& spec);
Status Validate(const LocalQueueSpec& spec);
Status Validate(const PriorityClass& spec);
Status Validate(const Workload& workload);

// What Validate(workload) may leave out, for a caller that validates many workloads sharing a
// few queues and shapes (an admission cycle: 100,000 workloads, a few hundred queues, a dozen
// shapes): its queue key, found among LocalQueueSpecs that passed Validate (their names pass
// the same check); its TPU shape, already found valid for the same generation.
struct KnownValid {
  bool queue = false;
  bool shape = false;
};
Status Validate(const Workload& workload, KnownValid known);

// The value of the class named `name`; NotFound listing the known classes otherwise.
Result<int32_t> ResolvePriority(const std::vector<PriorityClass>& classes, std::string_view name);

}  // namespace tessera
