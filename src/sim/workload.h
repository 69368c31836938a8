// Simulator workloads: the jobs a simulation replays, where they come from (trace readers and
// a generator) and how an accelerator count becomes a slice shape.
//
// Trace readers take a std::istream, so tests feed them strings; the CLI opens the files.
// Every reader checks each row and stops at the first bad one with an InvalidArgument naming
// the source, the line number and the column (Philly's JSON log: the job's index and field).
// CSV rows must be sorted by submission time (the published files are); an unsorted row is an
// error, not silently reordered, because a shuffled trace is a sign the file is not the trace
// it claims to be. The Philly log, which need not be in that order, is sorted.
//
// Pure: no I/O beyond the stream passed in; the generator draws only from its seed.
// Thread-safety: functions of their arguments; values.
#pragma once

#include <cstdint>
#include <istream>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "topology/topology.h"

namespace tessera::sim {

// One job as the workload describes it, before it is mapped to a slice shape.
struct JobSpec {
  std::string name;
  int64_t submit_s = 0;    // seconds from the start of the trace
  int64_t duration_s = 1;  // run time at full size, without failures (>= 1)
  int accelerators = 1;    // per slice, as the trace asked (GPUs, chips)
  int num_slices = 1;      // a multi-slice job runs this many slices of one shape
  int min_slices = 1;      // elastic: it may shrink to this many after a failure
  int priority = 0;        // larger runs first under priority admission
  // Expected duration (spec.expectedDuration), for backfill; 0: none given (the traces read
  // here give none).
  int64_t expected_s = 0;
};

struct Workload {
  std::string source;         // "cluster04.csv (itp)", "generated (seed 7)"
  std::vector<JobSpec> jobs;  // sorted by submit_s, ties in file order
  // Rows or jobs left out: openb's CPU-only pods; Philly's jobs that never ran, or whose run
  // time the log does not give. `skipped_reason` says so for the report ("" when none).
  int64_t skipped_rows = 0;
  std::string skipped_reason;
  bool has_priorities = false;  // false: every priority is 0 (the ITP traces carry none)
};

enum class TraceFormat {
  kAuto,    // '[' first -> philly; else the header: submission_time -> itp, creation_time -> openb
  kItp,     // Microsoft ITP (ElasticFlow raw traces): job_id,submission_time,duration,num_gpu
  kOpenb,   // Alibaba GPU v2023 openb pod lists
  kPhilly,  // Microsoft Philly (msr-fiddle/philly-traces) cluster_job_log, a JSON list of jobs
};
// "auto", "itp", "openb", "philly"
Result<TraceFormat> ParseTraceFormat(std::string_view text);

// Reads a trace. `source` names it in errors ("cluster04.csv:17: ..."). Columns are found by
// header name, in any order; extra columns are ignored.
//  itp:   job_id, submission_time (s), duration (s, > 0), num_gpu (> 0).
//  openb: name, num_gpu, gpu_milli, qos, creation_time, deletion_time, scheduled_time.
//         submit = creation_time; duration = deletion_time - (scheduled_time, or creation_time
//         when empty), at least 1 s; accelerators = num_gpu, or 1 for a GPU share
//         (num_gpu 0 with gpu_milli > 0 does not occur, but would count as 1); rows with no GPU
//         are skipped and counted; priority 1 for qos LS and Guaranteed, else 0.
//         openb_pod_list_multigpu50.csv has no time columns and is rejected with that reason.
//  philly: read by ReadPhilly; auto takes a file whose first byte is '[' for one.
Result<Workload> ReadTrace(std::istream& in, std::string_view source,
                           TraceFormat format = TraceFormat::kAuto);

// Reads Philly's cluster_job_log, as the trace's analysis notebook reads it: a job's GPUs are
// those its first attempt's machines list, its run time is from the first attempt's start_time
// to the last attempt's end_time (at least 1 s; restarts and the gaps between attempts are in
// it), its submission is submitted_time ("YYYY-MM-DD HH:MM:SS", taken as written). The log
// need not be in submission order: the jobs are sorted (stably) and timed from the first
// submission.
// Skipped and counted, by reason: jobs with no attempt, no submitted_time, no start_time on the
// first attempt, no end_time on the last (still running), no GPU, or ending before they start
// (times absent may be null, "" or "None"). status, vc and user are not read. Anything else
// malformed (not a list, a job not an object, no jobid, a time that is not a time, a machine
// without a gpus list) is an error naming the job's index, its jobid and the field.
Result<Workload> ReadPhilly(std::istream& in, std::string_view source);

// The mapping from an accelerator count to a slice shape. Entries are (count, shape) with
// count == shape.chips(), ascending. A count rounds up to the first entry that holds it; the
// difference is waste, counted by the simulator. A count above the last entry maps to nothing:
// the job is reported as never placeable.
struct ShapeMap {
  struct Entry {
    int accelerators;
    Shape shape;
  };
  std::vector<Entry> entries;

  // 3D: 4->2x2x1, 8->2x2x2, 16->2x2x4, 32->2x4x4, 64->4x4x4, 128->4x4x8, 256->4x8x8,
  // 512->8x8x8 (so 1-3 accelerators take a 2x2x1 host). 2D, for fleets of fixed slices:
  // 16->4x4, 64->8x8, 128->8x16, 256->16x16 (a small job takes a whole 4x4 node pool).
  static ShapeMap Default(Generation g);
  // "4:2x2x1,8:2x2x2,..." for generation `g`: shapes must be valid for g, and each entry's
  // count must be at most its shape's chips; entries must ascend. Errors name the entry.
  static Result<ShapeMap> Parse(Generation g, std::string_view text);
  // The entry for `accelerators`, or nullptr when it is larger than every entry.
  const Entry* Find(int accelerators) const;
  std::string ToString() const;
};

// A synthetic workload: Poisson arrivals, exponential durations, sizes from a weighted mix.
struct GeneratorOptions {
  int64_t jobs = 1000;
  uint64_t seed = 1;
  double mean_interarrival_s = 60;
  double mean_duration_s = 3600;  // exponential, at least 60 s
  // Accelerator counts and weights, e.g. {{4, 8}, {8, 4}, {64, 1}}. Empty: 4:8,8:4,16:2,32:1,64:1.
  std::vector<std::pair<int, double>> sizes;
  double high_priority_fraction = 0.2;  // jobs with priority 1
  // Jobs made of 2..4 slices of 64 accelerators (min 1 slice, so they may shrink).
  double multi_slice_fraction = 0.0;
};
Workload Generate(const GeneratorOptions& options);
// Parses "4:8,8:4,64:1" (count:weight) into GeneratorOptions::sizes.
Result<std::vector<std::pair<int, double>>> ParseSizeMix(std::string_view text);

// Mean chips x seconds a generated job asks for, to size mean_interarrival_s for a load.
double MeanChipSeconds(const GeneratorOptions& options, const ShapeMap& map);

}  // namespace tessera::sim
