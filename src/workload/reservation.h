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
// first; the hosts are released once they have stopped.
enum class ReservationPhase { kPending, kReady, kExpired };
const char* ReservationPhaseName(ReservationPhase phase);  // "Pending", "Ready", "Expired"
Result<ReservationPhase> ParseReservationPhase(std::string_view name);

// One held slice: its name and its hosts in worker-id order.
struct ReservedSlice {
  std::string name;
  std::vector<std::string> hosts;
  friend bool operator==(const ReservedSlice&, const ReservedSlice&) = default;
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
  int64_t ready_ms = 0;               // when it last became Ready
  int64_t expires_ms = 0;             // ready_ms + ttl; 0: no ttl (or not Ready)
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
};

// What the driver applies after a step, in this order: persist or remove (a failed write
// rolls the step back and applies nothing else), stop the users, release the hosts, emit
// events, schedule.
struct ReservationEffects {
  bool persist = false;
  bool remove = false;
  bool release_chips = false;
  bool stop_users = false;  // evict every workload that runs inside the reservation now
  std::vector<JobEvent> events;
  bool schedule = false;

  bool empty() const {
    return !persist && !remove && !release_chips && !stop_users && events.empty() && !schedule;
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
};

// The inventory a workload inside a reservation plans on: `inv` where only the hosts of
// `reservation` that are not in `in_use` (held by its other users) are free; every other host
// is marked down, so the planner never chooses it. Errors only for unknown host ids.
Result<Inventory> InsideReservation(const Inventory& inv, OwnerId reservation,
                                    const std::vector<HostId>& in_use);

}  // namespace tessera
