// One pass of EASY backfill with defragmentation over a line of waiting workloads, as the head
// runs it (`tessera head --backfill easy [--defrag]`, while no ClusterQueue exists) and as the
// simulator's `easy` admission runs it (sim/easy_scheduler.h: the same function), on the pure
// pieces Reserve / Blocked / EndsBefore (backfill.h) and PlanDefrag (defrag.h).
//
// The line is taken in order. A workload starts if the planner places it, except that once the
// head of the line (the first one of reserve_min_chips or more that could not start) holds a
// reservation, a later one may
// use the reserved hosts only if its expected duration ends before the reservation starts.
// When the head needs whole cubes and enough chips are free but scattered, and `defrag` is on,
// the pass first asks PlanDefrag for the cheapest moves: the head is then placed where the moved
// workloads were, and each moved workload gets a placement hint (toward cubes already in use);
// the caller stops the moved ones (SIGTERM with grace, so they checkpoint), and starts the head
// and the moved ones on those placements once the chips are free. At most one defragmentation
// per pass. By default (defrag_after_backfill) the moves are planned after the rest of the line
// has started what fits, on the chips left; the head keeps its reservation meanwhile. A
// workload the pass is about to start is a move candidate too, and the cheapest (it loses no
// work): placed elsewhere (outside the head's room, so on hosts free now), it starts there;
// when only such workloads move, the head starts at once too.
//
// A request that did not fit is not planned again in the same pass (the next workload of the
// same generation, shape and slice count waits for the same reason): the pass only takes free
// hosts, so what did not fit does not fit later in it. A line of thousands of one shape costs
// one plan.
//
// Overrunning an estimate: nothing is stopped or preempted; the workload counts as ending now,
// so the reservation waiting for it starts later (backfill.h).
//
// Pure: times are arguments; no I/O. Thread-safety: a function of its arguments.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "admission/backfill.h"
#include "admission/defrag.h"

namespace tessera {

struct EasyWaiting {
  WorkloadId id;
  SliceRequest request;
  int64_t expected_s = 0;  // <= 0: BackfillOptions::default_duration_s
  std::string name;        // for messages; "" means "workload <id>"
  // false: a large workload that has not yet waited long enough to be helped (the caller's
  // HelpThreshold, help_threshold.h): no reservation and no moves for it; it waits as a small
  // one does, and a later large one may be the head.
  bool may_help = true;
  int32_t priority = 0;  // for the victim search, should the pass place it elsewhere
};

// A workload holding chips: under OwnerOf(id) in the inventory, or under `owners`.
struct EasyRunning {
  WorkloadId id;
  int32_t priority = 0;
  SliceRequest request;
  int64_t start_s = 0;
  int64_t expected_s = 0;          // <= 0: the default
  int64_t last_checkpoint_s = -1;  // -1: none since it started (all its work would be lost)
  int64_t last_moved_s = -1;       // -1: never moved by defragmentation
  bool movable = true;             // false: stopping already, or on an unhealthy host
  // The owners its slices are held under, when not OwnerOf(id) (the simulator holds each slice
  // of a job under its own owner); empty: OwnerOf(id).
  std::vector<OwnerId> owners;
};

struct EasyPassOptions {
  BackfillOptions backfill;
  // Only a blocked workload of at least this many chips (a cube's worth) gets a reservation;
  // a smaller one waits as under plain backfill (whatever frees fits it, so it does not
  // starve). 0: every blocked head of the line reserves (classic EASY). As in the simulator.
  int64_t reserve_min_chips = 64;
  bool defrag = false;
  // Plan the head's moves only after the rest of the line has started what fits now, on the
  // chips left, so that a move never takes room a waiting workload could use now (a large job
  // then starts by defragmentation when the line is short, not in the middle of a backlog).
  // false: at once, when the head is met, holding its room against the rest of the line.
  bool defrag_after_backfill = true;
  DefragOptions defrag_options;
  // false (the simulator, whose lines hold thousands): `waiting` holds only the head's entry,
  // and the pass ends once no chip is free (nothing more can start; the head's reservation is
  // then not made this pass). The starts and the moves are the same as with true.
  bool explain = true;
};

struct EasyWait {
  WorkloadId id;
  std::string reason;  // WaitingForReservation, WaitingForDefragmentation, BehindReservation, or
                       // the planner's NoFit name
  std::string message;
};

struct EasyPassResult {
  // In line order, then the ones defragmentation placed (a start it placed elsewhere; the head).
  std::vector<std::pair<WorkloadId, PlanResult>> starts;
  // Set when the head is to start after moves of running workloads: `defrag_for` and the
  // moves (with their hints). A workload of the line placed elsewhere is in `starts` (with its
  // new placement), and so is the head when nothing running had to move.
  std::optional<DefragPlan> defrag;
  WorkloadId defrag_for;
  std::vector<EasyWait> waiting;  // every waiting workload that neither starts nor is `defrag_for`
};

// `inv` holds every running workload under OwnerOf(id) (or its `owners`) and may hold other
// hosts (caller's holds: they are never released by the reservation). `budget_chip_s` is the work
// the moves may lose (defrag.h).
EasyPassResult RunEasyPass(const Inventory& inv, const SlicePlanner& planner,
                           const std::vector<EasyWaiting>& line,
                           const std::vector<EasyRunning>& running, int64_t now_s,
                           int64_t budget_chip_s, const EasyPassOptions& options);

// The same, with the running workloads asked for only if the pass needs them (a head of the
// line to reserve or move work for; at most once): the simulator runs a pass at every event
// instant, and most of them only start what fits. The list must stay valid for the call.
using EasyRunningFn = std::function<const std::vector<EasyRunning>&()>;
EasyPassResult RunEasyPass(const Inventory& inv, const SlicePlanner& planner,
                           const std::vector<EasyWaiting>& line, const EasyRunningFn& running,
                           int64_t now_s, int64_t budget_chip_s, const EasyPassOptions& options);

}  // namespace tessera
