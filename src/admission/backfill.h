// EASY backfill with topology: the head of the line gets a reservation, and backfilled work
// may use the reserved chips only if it is expected to end before the reservation starts.
//
// When the first waiting workload in line (the head) does not fit, Reserve finds when and
// where it will: the running workloads are released in a scratch copy of the inventory in the
// order they are expected to end (ties by their order in the input), and after each release
// the planner is asked for the head; the first placement found is the reservation, and its
// start is the expected end of the last workload released. So the head reserves the hosts
// (for whole-cube shapes: the cubes) that will free soonest and that its shape can use.
//
// A later workload may then start now if its placement avoids the reserved hosts (plan it on
// Blocked(), which marks them taken), or, anywhere, if it is expected to end by the
// reservation's start (EndsBefore). Either way the head is not delayed, as long as the
// estimates hold.
//
// Estimates: a workload's expected duration is its `spec.expectedDuration`, or a conservative
// default when it has none (BackfillOptions). Nothing is killed or preempted when a workload
// runs past its estimate: it keeps running, and from then on it counts as ending now, so a
// reservation that waits for it starts "now" (no backfilled work may use its hosts, since none
// ends by now) and the head starts at the first pass after the overrunning workload ends. The
// head is then late by the overrun; workloads backfilled on reserved hosts that overrun delay
// it the same way. A reservation is recomputed at every pass, so it follows the estimates as
// they change.
//
// Pure: no clock (times are arguments), no I/O. Thread-safety: functions of their arguments.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "inventory/inventory.h"
#include "placement/planner.h"

namespace tessera {

struct BackfillOptions {
  // Expected duration of a workload that gives none: long, so that without estimates nothing
  // is backfilled onto reserved hosts (a reservation then starts within a day at the latest,
  // and a job that says nothing is assumed to run that long).
  int64_t default_duration_s = 24 * 3600;
};

// A running workload as the reservation sees it.
struct BackfillRunning {
  std::vector<OwnerId> owners;  // the owners its chips are held under in the inventory
  int64_t start_s = 0;          // when its current run started
  int64_t expected_s = 0;       // expected duration; <= 0: BackfillOptions::default_duration_s
};

// When a running workload is expected to end: start + estimate, or `now` once it overran.
int64_t ExpectedEnd(const BackfillRunning& r, int64_t now_s, const BackfillOptions& options);

struct Reservation {
  bool made = false;          // false: the head cannot fit even when everything running has ended
  int64_t start_s = 0;        // expected start of the head (the shadow time)
  std::vector<HostId> hosts;  // sorted: the hosts the head's placement will take
  std::vector<CubeId> cubes;  // sorted: the cubes those hosts are in
  PlanResult plan;            // the head's placement on the inventory as it will be then
};

// Plans the head on an inventory (the head's request and placement policy are the caller's:
// the head's SlicePlanner, or the simulator's context).
using PlanHead = std::function<PlanResult(const Inventory&)>;

// The head's reservation; `head_chips` is what it needs (the planner is asked only when that
// many are usable). Running workloads whose owners hold nothing in `inv` are ignored.
Reservation Reserve(const Inventory& inv, const PlanHead& plan, int64_t head_chips,
                    const std::vector<BackfillRunning>& running, int64_t now_s,
                    const BackfillOptions& options = {});

// `inv` with the reservation's free hosts marked taken (by an owner no workload uses), to plan
// work that would not end before the reservation starts.
Result<Inventory> Blocked(const Inventory& inv, const Reservation& reservation);

// Whether work of `expected_s` (<= 0: the default) started at `now_s` ends by the
// reservation's start.
bool EndsBefore(const Reservation& reservation, int64_t now_s, int64_t expected_s,
                const BackfillOptions& options = {});

}  // namespace tessera
