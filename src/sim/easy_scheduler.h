// The `easy` admission of the simulator: submission order, EASY backfill with the admission
// module's reservation (admission/backfill.h), and defragmentation by checkpoint-and-move
// (admission/defrag.h) for a head that needs whole cubes while enough chips are free but
// scattered.
//
// Estimates: a job's expected duration is JobSpec::expected_s when the workload gives one (the
// traces do not), else BackfillOptions::default_duration_s. `true_durations` uses each job's
// real duration instead: an oracle, for comparison only; the figures in bench/README.md use
// estimates.
//
// Pure: no clock, no I/O. Thread-safety: none; one scheduler per simulation.
#pragma once

#include <memory>

#include "admission/backfill.h"
#include "admission/defrag.h"
#include "admission/help_threshold.h"
#include "sim/scheduler.h"

namespace tessera::sim {

struct EasyOptions {
  PlannerOptions placement;  // the policy under test (the simulator sets it)
  BackfillOptions backfill;
  bool true_durations = false;
  // Only a blocked job of at least this many chips (a cube's worth) gets a reservation; smaller
  // ones wait as under plain backfill (they do not starve: anything that frees fits them). 0:
  // every blocked head of the line reserves (classic EASY).
  int64_t reserve_min_chips = 64;
  // ... and only once it has waited this long (with defrag_after_backfill, defragmentation
  // too; else it is tried at once): a large job that finds room by itself soon costs no
  // drained chips. 0: at once.
  int64_t reserve_after_s = 0;
  // ... and only once it has waited `help.factor` times the recent small jobs' waits (a
  // quantile; admission/help_threshold.h). The threshold is taken at the start of each pass.
  // factor 0: off. The simulator sets help.floor_s to reserve_after_s.
  HelpThresholdOptions help;
  bool defrag = true;  // move sub-cube jobs to make room for a blocked whole-cube head
  // ... with the chips left once the rest of the line has started what fits now, so that a
  // move never takes chips a waiting job could use (false: at once, when the head is met).
  bool defrag_after_backfill = true;
  DefragOptions defrag_options;
};

std::unique_ptr<SimScheduler> MakeEasyScheduler(const EasyOptions& options);

}  // namespace tessera::sim
