// Defragmentation by checkpoint-and-move: when a waiting workload needs whole cubes (a 4x4x4 or
// a super-slice) and enough chips are free but scattered over partly used cubes, choose the
// cheapest set of running sub-cube workloads to stop (SIGTERM with the grace period, so they
// checkpoint) and place again elsewhere, so that the waiting one fits.
//
// The choice is the admission module's victim search (preemption.h) over the movable
// workloads: the cheapest room by (highest priority moved, chips moved, work lost since their
// last checkpoint), then the set minimised. A workload is movable when it runs one sub-cube
// slice and was not moved in the last `min_interval_s`. The set is accepted only if the work
// it loses fits the remaining budget (the caller's: moved chip-hours stay under `max_share` of
// the capacity so far) and if every moved workload can be placed again at once next to the
// waiting one: each is planned, largest first, on the inventory with the waiting one placed
// and, as a hint toward cubes already in use, with the wholly free cubes held back; only when
// that fails is a free cube used.
//
// Pure: times are arguments. Thread-safety: functions of their arguments.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "admission/model.h"
#include "admission/preemption.h"
#include "inventory/inventory.h"
#include "placement/planner.h"

namespace tessera {

struct DefragOptions {
  double max_share = 0.01;        // moved chip-hours over capacity chip-hours (so far)
  int64_t min_interval_s = 3600;  // no workload is moved twice within this
  int max_moves = 8;              // workloads moved for one waiting workload, at most
};

// A running workload that might be moved. Its hosts are the inventory's hosts of
// OwnerOf(workload).
struct MoveCandidate {
  WorkloadId workload;
  int32_t priority = 0;
  SliceRequest request;          // what it runs (and asks again when moved)
  int64_t lost_work_chip_s = 0;  // chips x seconds since its last checkpoint
  int64_t last_moved_s = -1;     // -1: never moved
};

struct Move {
  WorkloadId workload;
  PlanResult plan;  // where it goes (on the inventory once the moves and the waiting one are done)
};

struct DefragPlan {
  bool found = false;
  std::vector<Move> moves;       // ascending by workload
  PlanResult plan;               // the waiting workload's placement once the moved ones are gone
  int64_t lost_work_chip_s = 0;  // what the moves lose
  std::string message;           // when not found: why, for people (explain, events)
};

// Whether `request` needs whole cubes: a 3D slice of 64 chips or more.
bool NeedsWholeCubes(const SliceRequest& request);

// The cheapest moves that let `request` fit, within `budget_chip_s` of lost work.
DefragPlan PlanDefrag(const Inventory& inv, const SlicePlanner& planner,
                      const SliceRequest& request, const std::vector<MoveCandidate>& candidates,
                      int64_t now_s, int64_t budget_chip_s, const DefragOptions& options = {});

}  // namespace tessera
