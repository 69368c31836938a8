// SliceReservation: N slices of one accelerator and topology held all or nothing for later work
// (Ray's slice placement group), as a typed resource with a pure lifecycle beside TrainJob's
// and Service's. A reservation is admitted through queues and priorities like any workload and
// holds its hosts under its own inventory owner; TrainJobs that name it (`spec.reservation`)
// run only on those hosts and are not charged quota again. docs/reservations.md has the rules.
//
// The steps change the reservation in place and return ReservationEffects for the driver
// (controller/reservations.cc): persist or remove the document, release its hosts, stop the
// workloads running inside it, emit events, schedule. No I/O, no clock, no threads.
//
// Thread-safety: values and stateless functions.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "inventory/inventory.h"
#include "topology/topology.h"
#include "workload/train_job.h"
#include "workload/train_lifecycle.h"

namespace tessera {

// What the user asked for (metadata and spec of the document).
struct SliceReservationSpec {
  std::string name;
  std::string queue;  // LocalQueue, as a TrainJob's metadata.queue
  std::map<std::string, std::string> labels;
  Generation accelerator = Generation::kV6e;
  Shape topology;
  int num_slices = 1;
  std::string priority;  // PriorityClass name
  int64_t ttl_ms = 0;    // held this long once Ready, then Expired and released; 0: until deleted
};

// Pending -> Ready -> Expired (ttl). Deleting or a preemption stops the workloads inside it
// first; the hosts are released once they have stopped. Ready -> Rescheduling when a host of a
// held slice is lost (Ray's RESCHEDULING placement group): the other slices stay held, and it is
// Ready again once a whole healthy slice of the same shape replaces each lost one.
enum class ReservationPhase { kPending, kReady, kRescheduling, kExpired };
// "Pending", "Ready", "Rescheduling", "Expired"
const char* ReservationPhaseName(ReservationPhase phase);
Result<ReservationPhase> ParseReservationPhase(std::string_view name);

// One held slice: its name and its hosts in worker-id order.
struct ReservedSlice {
  std::string name;
  std::vector<std::string> hosts;
  friend bool operator==(const ReservedSlice&, const ReservedSlice&) = default;
};

// A slice given up because one of its hosts was lost (or deleted). Its hosts stay held, unused,
// while workloads of the reservation still run there (their own recovery stops them), so that
// nothing else is placed beside their stopping workers; then they are released.
struct LostSlice {
  ReservedSlice slice;
  std::string host;  // the lost host
  std::string why;   // "no heartbeat for 5.2 s (lease 5000 ms)", "the host was deleted"
  bool held = true;  // its hosts are still held by the reservation
  friend bool operator==(const LostSlice&, const LostSlice&) = default;
};

// Every field is persisted.
struct SliceReservationStatus {
  ReservationPhase phase = ReservationPhase::kPending;
  std::string reason = "Pending";
  std::string message = "waiting for the scheduler";
  // While Pending: the admission reason, the place in line, what would let it in (as a job's).
  std::string pending_reason;
  int queue_position = 0;
  std::vector<WouldHelp> would_help;
  std::vector<ReservedSlice> slices;  // held now; empty while Pending or once released
  // Lost since it was last Ready (kept while Rescheduling), and those whose hosts are still
  // held; a lost slice is listed until it is replaced and its hosts are released.
  std::vector<LostSlice> lost_slices;
  // The workloads running inside it ("trainjob/a", "service/b"), as the controller last wrote
  // them: every change is a store write, so watchers see users come and go.
  std::vector<std::string> users;
  int64_t ready_ms = 0;    // when it last became Ready
  int64_t expires_ms = 0;  // ready_ms + ttl; 0: no ttl (or not Ready)
  // The workloads inside it are being stopped (deleted with force, expired, preempted); its
  // hosts stay held until none of them runs (UsersStopped).
  bool releasing = false;
  bool deleting = false;
  int preemptions = 0;
};

struct SliceReservation {
  uint64_t uid = 0;  // creation order; also the inventory owner id of its hosts
  int64_t created_ms = 0;
  SliceReservationSpec spec;
  std::string spec_document;  // the spec as stored (canonical accelerator spelling), echoed back
  SliceReservationStatus status;
  int64_t version = 0;  // store resource version (not persisted in the document)

  const std::string& name() const { return spec.name; }
  bool HoldsChips() const { return !status.slices.empty(); }
  int64_t chips() const { return spec.topology.chips() * spec.num_slices; }
  // The chips of the slices held now (fewer than chips() while Rescheduling).
  int64_t held_chips() const {
    return spec.topology.chips() * static_cast<int64_t>(status.slices.size());
  }
  // How many slices it must re-acquire (Rescheduling), else 0.
  int missing_slices() const {
    return status.phase == ReservationPhase::kRescheduling
               ? spec.num_slices - static_cast<int>(status.slices.size())
               : 0;
  }
};

// What the driver applies after a step, in this order: persist or remove (a failed write
// rolls the step back and applies nothing else), stop the users, release the hosts, emit
// events, schedule.
struct ReservationEffects {
  bool persist = false;
  bool remove = false;
  bool release_chips = false;
  // Release only these hosts (a lost slice whose workloads have stopped); the rest stay held.
  std::vector<std::string> release_hosts;
  bool stop_users = false;  // evict every workload that runs inside the reservation now
  std::vector<JobEvent> events;
  bool schedule = false;

  bool empty() const {
    return !persist && !remove && !release_chips && release_hosts.empty() && !stop_users &&
           events.empty() && !schedule;
  }
};

class ReservationLifecycle {
 public:
  static SliceReservation Create(SliceReservationSpec spec, std::string spec_document, uint64_t uid,
                                 int64_t now);
  // The scheduler reserved `slices` for it: Ready, expiring at now + ttl.
  static ReservationEffects Place(SliceReservation& r, std::vector<ReservedSlice> slices,
                                  int64_t now);
  // It keeps waiting: why, its place in line, what would help. Persists only on a change.
  static ReservationEffects SetPending(SliceReservation& r, const std::string& reason,
                                       const std::string& message, int position,
                                       std::vector<WouldHelp> would_help);
  // A user deletes it. `users`: the workloads running inside it now ("trainjob/a"). With users
  // and without `force`: kConflict naming them, nothing changed. Otherwise the users are
  // stopped, and it is removed once they have (at once when there are none).
  static Result<ReservationEffects> Delete(SliceReservation& r,
                                           const std::vector<std::string>& users, bool force,
                                           int64_t now);
  // Admission preempted it: its users are stopped, then it is Pending again.
  static ReservationEffects Evict(SliceReservation& r, const std::string& message, int64_t now);
  // Timers: a Ready reservation whose ttl has passed is Expired; its users are stopped.
  static ReservationEffects Tick(SliceReservation& r, int64_t now);
  // Releasing, and no workload runs inside it any more: the hosts are released; then removed
  // (deleted), kept Expired, or Pending again (preempted).
  static ReservationEffects UsersStopped(SliceReservation& r, int64_t now);
  // The workloads running inside it now. Persists only on a change (no event: the document's
  // MODIFIED is what watchers see).
  static ReservationEffects SetUsers(SliceReservation& r, std::vector<std::string> users);

  // Lost hosts (docs/reservations.md "A lost host"). `lost`: host name -> why, for the hosts
  // that are lost or gone now. Ready or Rescheduling (and not being released): every held slice
  // with such a host is no longer a whole slice; it moves to lost_slices (its hosts still held)
  // and the reservation is Rescheduling, its reason SliceLost and its message naming the host;
  // the other slices stay held and its ttl keeps counting. Otherwise nothing.
  static ReservationEffects HostsLost(SliceReservation& r,
                                      const std::map<std::string, std::string>& lost, int64_t now);
  // No workload runs on the hosts of lost slice `slice` any more: they are released (and the
  // slice forgotten once it has been replaced).
  static ReservationEffects LostSliceFreed(SliceReservation& r, const std::string& slice,
                                           int64_t now);
  // Rescheduling: the scheduler found `slices` (whole, healthy, free) to replace lost ones.
  // Ready again once it holds spec.slices; its ttl is not reset.
  static ReservationEffects Replace(SliceReservation& r, std::vector<ReservedSlice> slices,
                                    int64_t now);
  // Rescheduling and no whole slice is free now: the planner's reason and message. Persists
  // only on a change.
  static ReservationEffects WaitForSlices(SliceReservation& r, const std::string& reason,
                                          const std::string& message);
};

// The inventory a workload inside a reservation plans on: `inv` where only the hosts of
// `reservation` that are not in `in_use` (held by its other users) are free; every other host
// is marked down, so the planner never chooses it. Errors only for unknown host ids.
Result<Inventory> InsideReservation(const Inventory& inv, OwnerId reservation,
                                    const std::vector<HostId>& in_use);

}  // namespace tessera
