// A measured replica model for `tessera sim-serve --profile` (docs/simulator.md "Profiles"): the
// JSON file bench/serving/profile.py writes after measuring a model server, read into the
// ReplicaModel the serving simulation runs (serving_sim.h) and the label its reports print.
//
// The file (every field named as profile.py writes it):
//   name                    string, required: "example-cpu"
//   measuredOn              string, required: when and on what, "2026-12-05 02:40 UTC, 2 cores,
//   ..." command                 string, required: the command that made it prefillTokensPerSecond
//   number > 0, required: prompt tokens per second, one request at a time decode array, required:
//   rows {concurrency, perRequestTokensPerSecond,
//                           perGroupTokensPerSecond}, concurrency a whole number from 1 and
//                           strictly increasing, the rates > 0
//   startupSeconds          number >= 0, required: the group's start to its readiness
//   server                  string, optional: what was measured
//   groupSize               whole number >= 1, optional: processes of the group
//   loadAverage             object, optional: {"before": [numbers], "after": [numbers]}
//   details                 object, optional: the samples behind the medians (not read)
// Any other key, a missing field, a wrong type, a negative or zero rate or a table out of order
// is InvalidArgument naming the file, the field (decode[2].concurrency) and the fix.
//
// Pure: the caller opens the file. Thread-safety: functions of their arguments.
#pragma once

#include <istream>
#include <string>
#include <string_view>

#include "common/status.h"
#include "sim/serving_sim.h"

namespace tessera::sim {

struct ReplicaProfile {
  ProfileLabel label;  // name, measuredOn, command; file = the `source` given
  // prefill_tokens_per_s, decode_table and startup_ms from the file; the other fields keep
  // their defaults (the table replaces them).
  ReplicaModel model;
};

// Reads a profile; `source` names the file in messages and in the label ("example-cpu.json").
Result<ReplicaProfile> ReadReplicaProfile(std::istream& in, std::string_view source);

}  // namespace tessera::sim
