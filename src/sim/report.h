// Reports of a comparison run: a text table, a JSON summary, a CSV time series and a
// self-contained HTML page with inline SVG plots (no scripts, no fonts, no network).
//
// Writers take a std::ostream; opening files is the shell's job. Thread-safety: functions.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "sim/simulator.h"

namespace tessera::sim {

struct Comparison {
  std::string cluster;   // Describe(spec, inventory)
  std::string workload;  // Workload::source
  std::string command;   // the settings that made it, for the record
  int64_t jobs = 0;
  int64_t skipped_rows = 0;
  std::string skipped_reason;  // Workload::skipped_reason
  // From the first submission to the last: with a run's allocated chip-hours, the offered load
  // a cluster of N chips sees (chip-hours / (N x span)), which sizes clusters for traces.
  int64_t submit_span_s = 0;
  uint64_t seed = 0;
  bool failures = false;        // failure injection was on: print the failure metrics
  std::vector<SimResult> runs;  // one per (admission, policy)
};

void WriteText(std::ostream& out, const Comparison& c);
void WriteJson(std::ostream& out, const Comparison& c);
// policy,admission,time_s,utilization,fragmentation,queued,running,down_hosts
void WriteCsv(std::ostream& out, const Comparison& c);
// One row per (run, size class) then per (run, priority class): policy,admission,split,class,
// jobs,started,finished,wait_p50_s,wait_p95_s,wait_p99_s,wait_mean_s,jct_p50_s,jct_p95_s,
// jct_mean_s,preemptions,preempted_jobs (split: size or priority).
void WriteClassCsv(std::ostream& out, const Comparison& c);
void WriteHtml(std::ostream& out, const Comparison& c);

}  // namespace tessera::sim
