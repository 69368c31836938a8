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
#include "sim/scheduler.h"

namespace tessera::sim {

struct EasyOptions {
  PlannerOptions placement;  // the policy under test (the simulator sets it)
  BackfillOptions backfill;
  bool true_durations = false;
  bool defrag = true;  // move sub-cube jobs to make room for a blocked whole-cube head
  DefragOptions defrag_options;
};

std::unique_ptr<SimScheduler> MakeEasyScheduler(const EasyOptions& options);

}  // namespace tessera::sim
