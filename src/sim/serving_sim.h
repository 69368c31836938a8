// Serving simulation: an LLM inference trace replayed against one simulated Service, once per
// scaling configuration (fixed replica counts, autoscalers with different targets and bounds),
// with chip-hours, SLO attainment, latency percentiles and replicas over time for each.
//
// What is real and what is a model (docs/simulator.md, "Serving"):
//   - Real code: the Service's life is the head's ServiceLifecycle (src/workload/), driven as
//     the controller drives it: Create, Tick at the head's cadence (which runs the same
//     Autoscale function on the router's load reports of the look-back window), Place of each
//     group waiting for a slice, ProcessRunning, Readiness from probes every readiness period,
//     ConfirmStopped when a stopped group's processes are gone. Requests are routed by the
//     router's own Dispatcher (src/proxy/dispatcher.h): power of two choices over ready
//     replicas under maxOngoingRequests, a FIFO queue of max_queued, rejections beyond, and the
//     router's queue timeout. Load reports are what the router sends (in flight + queued).
//   - A model: what one replica does with its requests (ReplicaModel). Prefill is FIFO, one
//     request at a time, at prefill_tokens_per_s; while any admitted request waits for or is in
//     prefill, decoding pauses (prefill first, as an LLM server without chunked prefill
//     schedules); otherwise every decoding request makes DecodeTokensPerSecond(model, n) tokens
//     per second: min(per-request rate, replica rate / n), or a measured table's figures at n.
//     A group is ready startup_ms after it is placed. A stopped group finishes its requests for
//     up to the role's grace period; requests still running then fail. The default numbers are
//     not a measurement of a TPU: set them from your own server's figures, or read a profile
//     that bench/serving/profile.py measured (serving_profile.h).
//   - One scaling unit is one whole slice of the role's topology; its chips (src/topology)
//     are charged from placement to the confirmed stop. The cluster has `cluster_slices`
//     slices of that shape (0: as many as asked).
//
// Discrete-event and deterministic: an event queue ordered by (time in microseconds, sequence
// number); randomness only from `seed` (the Dispatcher's draws). No clock, I/O or threads: the
// trace comes in as a std::istream and reports go out to std::ostream (serving_report.h).
//
// Thread-safety: functions of their arguments; values.
#pragma once

#include <cstdint>
#include <istream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "topology/topology.h"
#include "workload/autoscaler.h"

namespace tessera::sim {

// One request of an LLM inference trace.
struct LlmRequest {
  int64_t arrival_us = 0;  // from the first row, in trace time (before time scaling)
  int context_tokens = 1;
  int generated_tokens = 0;  // 0 is served as 1 (the first token ends the request)
  int64_t line = 0;          // in the file, for messages
};

struct LlmTrace {
  std::string source;                // "conv.csv"
  std::vector<LlmRequest> requests;  // in arrival order
};

// Reads the Azure LLM inference trace format (AzurePublicDataset 2023 and 2024): a header naming
// the columns TIMESTAMP ("YYYY-MM-DD HH:MM:SS[.fraction]", then optionally "Z" or a UTC offset
// "+HH:MM" as the 2024 traces write it, taken back to UTC), ContextTokens (>= 1) and
// GeneratedTokens (>= 0), in any order, extra columns ignored; rows in arrival order. Blank
// lines are skipped. Every error names the source, the line and the column:
// "conv.csv:3: column ContextTokens: 'abc' is not a whole number".
Result<LlmTrace> ReadLlmTrace(std::istream& in, std::string_view source);

// One row of a measured decode table (serving_profile.h): with `concurrency` requests decoding
// at once on one replica, each made per_request_tokens_per_s and the group
// per_group_tokens_per_s in all.
struct DecodeRow {
  int concurrency = 1;
  double per_request_tokens_per_s = 0;
  double per_group_tokens_per_s = 0;
  bool operator==(const DecodeRow&) const = default;
};

// What one replica (one group on one slice) serves. The defaults are a stated model, not a
// measurement; a profile (serving_profile.h) replaces them with a server's measured figures.
struct ReplicaModel {
  double prefill_tokens_per_s = 8'000;          // prompt tokens, one request at a time
  double decode_tokens_per_s = 400;             // output tokens per second, summed over requests
  double decode_tokens_per_s_per_request = 40;  // one request's ceiling (25 ms per token)
  int64_t startup_ms = 120'000;                 // placed -> the leader passes readiness
  // A measured decode table, rows in increasing concurrency from 1. When not empty it replaces
  // the two decode numbers above (DecodeTokensPerSecond).
  std::vector<DecodeRow> decode_table;
};

// Tokens per second each of `decoding` requests (>= 1; 0 is read as 1) makes when that many
// decode at once on one replica. Without a table: min(decode_tokens_per_s_per_request,
// decode_tokens_per_s / decoding). With one: min(per request, per group / decoding), each
// interpolated linearly in the concurrency between the two rows around `decoding`; beyond the
// last row both stay at that row's, so the group's throughput is held flat.
double DecodeTokensPerSecond(const ReplicaModel& model, size_t decoding);

// Which replica model a comparison ran (reports name it).
struct ProfileLabel {
  std::string name = "default";  // the profile's name
  std::string file;              // the profile's file name; empty: the default model
  std::string measured_on;       // the profile's measuredOn
  std::string command;           // the profile's command
};

// One configuration to compare: a fixed replica count, or an autoscaler.
struct ScalingConfig {
  std::string name;  // "fixed=4", "auto=1-16@4"
  int replicas = 1;  // without autoscaling
  std::optional<AutoscalerConfig> autoscaling;
};

// "fixed=N" or "auto=MIN-MAX[@TARGET][:up=S][:down=S][:lookback=S][:ttft=MS][:tpot=MS]"
// (seconds; omitted ones from `defaults`; TARGET omitted or 0: the default target). Errors name
// the text and say what is expected.
Result<ScalingConfig> ParseScalingConfig(std::string_view text, const AutoscalerConfig& defaults);

// A comma list of configurations: those of ParseScalingConfig, "fixed=A..B" (every count from
// A to B), and bare "auto" (`defaults` with min 1 and max the largest fixed count of the list)
// or "auto:OPTION..." (the same with options, e.g. auto:ttft=2000:tpot=50).
Result<std::vector<ScalingConfig>> ParseScalingConfigs(std::string_view list,
                                                       const AutoscalerConfig& defaults);

struct SloSpec {
  int64_t ttft_ms = 2'000;  // time to first token, arrival (at the router) to first token
  double tpot_ms = 50;      // time per output token after the first
};

struct ServingSimOptions {
  Generation accelerator = Generation::kV6e;
  Shape topology = Shape::Of(4, 4);  // one replica's slice
  ReplicaModel model;
  int max_ongoing_requests = 16;       // per replica (the role's maxOngoingRequests)
  int64_t grace_ms = 10'000;           // the role's terminationGracePeriod
  int64_t probe_period_ms = 10'000;    // readiness period (the role's default)
  int64_t startup_grace_ms = 900'000;  // readiness startupGrace (the role's default)
  int cluster_slices = 0;              // slices of the role's shape; 0: unlimited
  double time_scale = 1;               // trace arrival offsets are divided by this
  int64_t tick_ms = 100;               // the head's loop (HeadOptions::tick_ms)
  int64_t report_ms = 1'000;           // the router's load reports (HeadLinkOptions)
  size_t max_queued = 100;             // the router's queue bound (RouterOptions)
  int64_t queue_timeout_ms = 60'000;   // the router's queue timeout; 0: none
  SloSpec slo;
  uint64_t seed = 1;                    // the Dispatcher's draws
  int64_t series_interval_ms = 10'000;  // replicas-over-time sampling
  int64_t oracle_window_ms = 300'000;   // per-window SLO counts (serving_frontier.h's oracle)
};

// InvalidArgument naming the option and the fix, or OK.
Status ValidateServingOptions(const ServingSimOptions& options);

struct LatencySummary {
  int64_t count = 0;
  double p50_ms = 0, p99_ms = 0, mean_ms = 0;  // linear interpolation between closest ranks
};

struct ReplicaPoint {
  double time_s = 0;  // from the first arrival
  int desired = 0;    // the role's desired replicas (the autoscaler's decision)
  int placed = 0;     // groups holding a slice (starting, ready or stopping)
  int ready = 0;      // groups the router sends requests to
  int ongoing = 0;    // in flight + queued at the router
  int queued = 0;
};

struct ScaleEvent {
  double time_s = 0;
  int from = 0, to = 0;
  std::string reason;  // the autoscaler's reason
};

struct ServingRunResult {
  ScalingConfig config;
  int64_t chips_per_replica = 0;
  int64_t requests = 0;
  int64_t completed = 0;
  int64_t rejected = 0;                // the router's queue was full (503)
  int64_t timed_out = 0;               // waited in the router's queue past its timeout (503)
  int64_t failed = 0;                  // still running when their stopped group's grace ran out
  int64_t slo_met = 0;                 // completed with TTFT <= slo.ttft_ms and TPOT <= slo.tpot_ms
  double slo_attainment = 0;           // slo_met / requests (requests not completed miss the SLO)
  LatencySummary ttft, tpot, latency;  // completed requests (tpot: those with 2+ tokens)
  int64_t duration_us = 0;  // first arrival to the last request's end: the charged window
  int64_t chip_us = 0;      // chips x time held inside that window, exact
  double chip_hours = 0;    // chip_us / 3.6e9
  double replica_hours = 0;
  int max_placed = 0;      // most groups holding slices at once
  int groups_started = 0;  // placements (initial ones included)
  std::vector<ReplicaPoint> series;
  std::vector<ScaleEvent> scale_events;
  // Requests by arrival window of options.oracle_window_ms (scaled time): how many arrived and
  // how many of them met the SLO.
  std::vector<int64_t> window_requests;
  std::vector<int64_t> window_met;
  // The requests only the initial replicas can serve in time: those arriving before
  // early_cut_us = start-up - the TTFT target (a group placed at time 0 is ready at start-up,
  // so their first token is due before any other group serves). Per window, of them: how many
  // met the SLO, and how many had their first token within the TTFT target.
  int64_t early_cut_us = 0;
  int64_t early_requests = 0;
  std::vector<int64_t> window_early_met;
  std::vector<int64_t> window_early_ttft_met;
  uint64_t event_hash = 0;  // FNV-1a over every applied event: same inputs, same hash
};

struct ServingComparison {
  std::string source;  // "conv.csv, 19,366 requests, time scale 1"
  std::string model;   // the replica model and router settings, for people
  ProfileLabel profile;
  ServingSimOptions options;
  double offered_rps = 0;  // requests / scaled trace span
  std::vector<ServingRunResult> runs;
};

// Replays `trace` (already windowed by the caller) once under `config`. The service starts at
// the first arrival with its initial replicas (fixed count, or the autoscaler's initial size,
// by default its minimum) ready: deployed before the traffic. InvalidArgument for bad options;
// Internal if the lifecycle breaks an invariant the driver relies on.
Result<ServingRunResult> RunServingSimulation(const LlmTrace& trace, const ScalingConfig& config,
                                              const ServingSimOptions& options);

}  // namespace tessera::sim
