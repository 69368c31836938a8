// A Service's replica groups as admission workloads (docs/serving.md "Admission"), the way
// Kueue admits a LeaderWorkerSet: every replica group is one Workload of one slice of its
// role's shape, admitted all or nothing, charged to the Service's LocalQueue (metadata.queue;
// the default one when empty) at the Service's priority (spec.priority). So quota is charged
// per group, some replicas may run while others wait, and a group may preempt (or be preempted
// by) training. These are the rules of that mapping; the controller builds the cycle's snapshot
// from them and applies its decisions through ServiceLifecycle (Place, SetPending, Evict).
//
// Pure: no I/O, clock or threads. Thread-safety: functions of values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "admission/admission.h"
#include "workload/service.h"
#include "workload/service_lifecycle.h"

namespace tessera {

// One group the admission cycle sees.
struct GroupWorkload {
  ReplicaKey key;
  // kPending: waiting for a slice. kRunning: it holds its slice (starting, ready, unready, or
  // recreating on it); the group's own start-up grace (ServiceLifecycle::Tick) is its start
  // guard, so a group is never kAdmitted and the cycle's start guard never evicts it.
  WorkloadState state = WorkloadState::kPending;
  uint64_t owner = 0;    // kRunning: the inventory owner of its slice
  SliceRequest request;  // one slice of the role's shape
};

struct ServiceWorkloads {
  std::vector<GroupWorkload> groups;  // role then replica order
  // Owners of groups being stopped to free their slice (scaled down, replaced, deleted,
  // preempted, moved off a lost host): the chips are held until the hosts confirm, but they
  // count as free when planning, exactly like a stopping job's, so an admission may land on
  // them and start once they are released. Such a group is not charged to its queue any more.
  std::vector<uint64_t> releasing;
};

// The groups of `service` that take part in admission. A deleted service's groups are all
// releasing (or gone); a group whose role is no longer in the spec is only ever releasing.
// Limit: a running group of an older generation is charged its role's current shape.
ServiceWorkloads AdmissionWorkloads(const Service& service);

// "service/<service>/<role>/<replica>": the group's name in the cycle's messages and
// what-would-help lists (never a TrainJob name: those have no '/').
std::string GroupWorkloadName(const std::string& service, const ReplicaKey& key);

// The Workload of `group` for one cycle. `id` is the inventory owner for a running group (the
// cycle finds its hosts under OwnerOf(id)); for a pending group any id unique in the snapshot
// and owning no hosts. Its place in line is the Service's creation (its uid): every group of a
// Service shares it, so groups of one Service never preempt each other on creation order, and
// ties are broken by id (replica order when ids are given in that order).
Workload GroupAdmissionWorkload(const Service& service, const GroupWorkload& group, WorkloadId id,
                                int32_t priority, const std::string& default_queue);

// What a pending group says (ReplicaStatus::message): the cycle's message with the numbers,
// its place in its ClusterQueue, and what would let it in, as `tessera explain job` gives
// for a job: "needs 16 chips; ... ; position 2 in ClusterQueue serving; would help: trainjob
// train (priority 1, 16 chips, preemptible)".
std::string GroupPendingMessage(const PendingStatus& status);

// Whether a stopping group was preempted: its processes get the preemption's SIGTERM grace,
// like a preempted job's workers (a broken or moved group is killed at once).
bool StoppingForPreemption(const ReplicaStatus& r);

}  // namespace tessera
