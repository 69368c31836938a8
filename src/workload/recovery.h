// Recovery: the failure policy of a TrainJob and the figures that show how well it recovers.
//
// Pure: times arrive as values (milliseconds since the Unix epoch), nothing here reads a clock or
// does I/O. The controller records what happened to each attempt in an AttemptRecord, asks
// DecideRecovery what to do after a failure, FindHungRanks whether a running attempt stalled,
// and ComputeRecovery for the figures shown in `tessera describe job` and the API. The
// simulator can use the same functions. docs/elastic.md explains every rule and figure.
//
// Thread-safety: values and stateless functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tessera {

enum class FailureKind { kWorkerFailed, kHostLost, kHang };
const char* FailureKindName(FailureKind kind);  // "WorkerFailed", "HostLost", "Hang"

// spec.failurePolicy.onHostLoss: what a lost host does to a job (docs/elastic.md).
//   fail:   the job fails;
//   pause:  it restarts at the same size once that fits again;
//   resize: it restarts at once at the largest size in [min, max] that fits, and grows back.
enum class HostLossPolicy { kFail, kPause, kResize };
const char* HostLossPolicyName(HostLossPolicy p);  // "fail", "pause", "resize"

// What happened to one attempt (one start of every worker of the job).
struct AttemptRecord {
  int attempt = 0;
  int slices = 0;
  int world_size = 0;
  int64_t placed_ms = 0;      // chips reserved and assignments sent
  int64_t running_ms = 0;     // every worker reported running; 0: never
  int64_t first_step_ms = 0;  // first completed step reported in this attempt; 0: none
  int64_t first_step = -1;
  int64_t last_step = -1;  // highest completed step reported in this attempt
  int64_t last_step_ms = 0;
  // From the workers' restore report (python: tessera.worker.report_restore). Without one, the
  // step resumed from is taken as the first completed step minus one.
  bool restored = false;
  int64_t resumed_from_step = -1;  // the checkpoint step the workers restored; -1: fresh start
  double restore_seconds = 0;      // time the workers spent loading it
  int64_t ended_ms = 0;            // 0 while the attempt is current
  // Why it ended: a FailureKindName, or "Succeeded", "Failed" (budget), "Preempted",
  // "StartTimeout", "GrowBack", "Deleted". Empty while current.
  std::string end_reason;
  std::vector<int> failed_ranks;
  int64_t failure_ms = 0;   // when the failure happened (exit time, last heartbeat, last step)
  int64_t detected_ms = 0;  // when the head noticed it
  std::string message;
};

// Figures of the recovery that led to `attempt`, from the failed attempt before it.
struct RecoveryFigures {
  int64_t time_to_detect_ms = -1;      // failure -> detection
  int64_t time_to_schedule_ms = -1;    // detection -> replacement placed
  int64_t time_to_first_step_ms = -1;  // placed -> first completed step of the new attempt
  int64_t time_to_restore_ms = -1;     // checkpoint load, as the workers reported it
  int64_t time_to_recover_ms = -1;     // failure -> first completed step of the new attempt
  int64_t steps_lost = -1;             // last step before the failure - step resumed from
};

// nullopt when `previous` did not end in a failure (a first start, a grow-back, a preemption).
// Figures not known yet (no step completed) are -1.
std::optional<RecoveryFigures> ComputeRecoveryFigures(const AttemptRecord& previous,
                                                      const AttemptRecord& next);

// Young/Daly checkpoint-interval advice.
struct CheckpointAdvice {
  double save_seconds = -1;      // median reported save cost; -1: no checkpoint reported
  double interval_seconds = -1;  // median time between reported checkpoints; -1: fewer than 2
  double mtbf_seconds = -1;      // observed (wall time / failures) or configured; -1: unknown
  std::string mtbf_source;       // "observed", "configured" or ""
  double advised_interval_seconds = -1;  // sqrt(2 x save x MTBF); -1 when either is unknown
};

// `checkpoints`: (time ms, save seconds) of every reported checkpoint, in time order.
// `configured_mtbf_ms` 0 means none configured; the observed MTBF wins when there was a failure.
CheckpointAdvice AdviseCheckpointInterval(
    const std::vector<std::pair<int64_t, double>>& checkpoints, int failures, int64_t wall_ms,
    int64_t configured_mtbf_ms);

// Job-level figures over every attempt.
struct JobRecovery {
  int failures = 0;
  int64_t steps_lost = 0;  // summed over recoveries with a known figure
  int64_t mean_time_to_recover_ms = -1;
  // Time spent on steps that were kept, over wall time since the first placement. Steps of an
  // attempt are kept up to the step the next attempt resumed from (all of them for the last).
  double goodput = -1;
};
JobRecovery SummarizeRecovery(const std::vector<AttemptRecord>& attempts, int64_t now_ms);

// The failure budget: maxFailures 0 allows none, -1 is unlimited. `failures` counts the one
// just seen.
bool WithinFailureBudget(int failures, int max_failures);

// What to do after a failure that is within the budget.
enum class RecoveryAction {
  kRestartSameSize,   // restart at the attempt's size (waits for capacity if needed)
  kRestartLargestFit  // restart now at the largest size in [min, max] that fits
};
struct RecoveryDecision {
  bool fail = false;  // the job fails; `why` says which rule
  std::string why;
  RecoveryAction action = RecoveryAction::kRestartSameSize;
  int min_slices = 1;  // the size range the restart may take
  int max_slices = 1;
};
// `failures` includes this one. Host loss with kFail ends the job regardless of the budget.
RecoveryDecision DecideRecovery(FailureKind kind, HostLossPolicy on_host_loss, int failures,
                                int max_failures, int attempt_slices, int spec_min_slices,
                                int spec_max_slices);

// Hang detection. A rank is silent when it has reported no completed step for `hang_timeout_ms`
// (counted from when the attempt was running, for a rank that has not reported yet). The attempt
// hangs when any rank is silent. The stuck ranks named are, in order of evidence:
//  1. ranks whose liveness ticks (the SDK's background thread) stopped while other ranks' did
//     not: a stopped or wedged process, the others wait for it in a collective;
//  2. else ranks behind the others' highest step;
//  3. else every silent rank (they stalled together).
struct RankProgress {
  int64_t last_step = -1;
  int64_t last_step_ms = 0;   // when the head received it; 0: none this attempt
  int64_t last_alive_ms = 0;  // last liveness tick received; 0: the worker sends none
};
struct HangVerdict {
  bool hung = false;
  std::vector<int> stuck_ranks;
  int64_t since_ms = 0;  // the oldest last report among the stuck ranks
  std::string message;
};
HangVerdict FindHungRanks(const std::map<int, RankProgress>& ranks, int64_t running_ms,
                          int64_t now_ms, int64_t hang_timeout_ms, int64_t alive_timeout_ms);

}  // namespace tessera
