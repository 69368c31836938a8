// The head's state for EASY backfill with defragmentation (`tessera head --backfill easy
// [--defrag]`; easy_scheduling.cc, admission/easy_pass.h). In memory only. After a head restart:
// - the holds are gone: the moved jobs and the head of the line wait in line as any other. Safe:
//   every placement is planned again on the inventory rebuilt from the stored assignments, and a
//   moved job's chips stay held by it until its workers report stopped, so nothing is placed
//   twice; what may be lost is the head's start on the room the moves made (the moved jobs then
//   lost their work since their checkpoint for nothing, within the budget below).
// - last_moved_ms is gone, but the pass also counts every stored attempt that ended Preempted as
//   a move (easy_scheduling.cc), so no job moves twice within the hour across a restart.
// - the moved-work account starts again, with capacity counted over at least a day: each
//   restart may let moves lose up to max_share of one day's chip-time more. Not persisted.
// - the help threshold (ControllerOptions::help_threshold) is fed again at the first pass from
//   the stored jobs that have started (each small job's first start, in start order, as the
//   window holds them), so it does not start empty; the jobs already deleted are not counted.
//
// Thread-safety: none; the controller's lock guards it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "admission/help_threshold.h"
#include "placement/planner.h"

namespace tessera::controller {

struct EasyHeadState {
  // Placements held for jobs until the chips are free: the head of the line that
  // defragmentation made room for, and each job it moved (the placement hint).
  struct Hold {
    PlanResult plan;
    std::string made_for;  // the head's job name
    bool moved = false;    // a moved job (else the head)
  };
  std::map<uint64_t, Hold> holds;             // by job uid
  std::map<uint64_t, int64_t> last_moved_ms;  // by job uid
  int64_t lost_chip_ms = 0;                   // work lost to the moves so far
  int64_t first_pass_ms = -1;                 // the first pass: capacity counts from here
  // The small jobs' recent waits (help_threshold.h); set at the first pass, from the options.
  std::optional<HelpThreshold> help;
};

}  // namespace tessera::controller
