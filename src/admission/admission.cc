#include "admission/admission.h"

#include <algorithm>
#include <string>
#include <utility>

#include "admission/cycle.h"

namespace tessera {

const char* PreemptionKindName(PreemptionKind kind) {
  switch (kind) {
    case PreemptionKind::kWithinClusterQueue:
      return "WithinClusterQueue";
    case PreemptionKind::kReclaimWithinCohort:
      return "ReclaimWithinCohort";
    case PreemptionKind::kBorrowWithinCohort:
      return "BorrowWithinCohort";
  }
  return "Unknown";
}

const char* EvictionCauseName(EvictionCause cause) {
  return cause == EvictionCause::kPreempted ? "Preempted" : "StartTimeout";
}

const char* PendingReasonName(PendingReason reason) {
  switch (reason) {
    case PendingReason::kLocalQueueNotFound:
      return "LocalQueueNotFound";
    case PendingReason::kInvalidRequest:
      return "InvalidRequest";
    case PendingReason::kNeverFits:
      return "NeverFits";
    case PendingReason::kOverQuota:
      return "OverQuota";
    case PendingReason::kNoFreeBox:
      return "NoFreeBox";
    case PendingReason::kWaitingBehind:
      return "WaitingBehind";
    case PendingReason::kBackoff:
      return "Backoff";
    case PendingReason::kDeactivated:
      return "Deactivated";
    case PendingReason::kFitsNextCycle:
      return "FitsNextCycle";
    case PendingReason::kPreempted:
      return "Preempted";
  }
  return "Unknown";
}

Status Validate(const AdmissionOptions& o) {
  const StartGuardOptions& g = o.start_guard;
  if (g.start_timeout_ms <= 0) return InvalidArgument("startGuard.startTimeout: must be > 0");
  if (g.backoff_base_ms <= 0) return InvalidArgument("startGuard.backoffBase: must be > 0");
  if (g.backoff_cap_ms < g.backoff_base_ms)
    return InvalidArgument("startGuard.backoffCap: must be >= backoffBase (" +
                           std::to_string(g.backoff_base_ms) + " ms)");
  if (g.retry_limit < 0) return InvalidArgument("startGuard.retryLimit: must be >= 0");
  if (o.preemption_grace_ms < 0) return InvalidArgument("preemption.grace: must be >= 0");
  return Status::Ok();
}

Admitter::Admitter(AdmissionOptions options)
    : options_(std::move(options)), planner_(options_.planner) {}

int64_t Admitter::BackoffMs(int retries) const {
  const StartGuardOptions& g = options_.start_guard;
  int64_t delay = g.backoff_base_ms;
  for (int i = 1; i < retries && delay < g.backoff_cap_ms; ++i) delay *= 2;
  return std::min(delay, g.backoff_cap_ms);
}

Result<AdmissionCycle> Admitter::Run(const Snapshot& snapshot, int64_t now_ms) const {
  return Run(snapshot, now_ms, options_.explain);
}

Result<AdmissionCycle> Admitter::Run(const Snapshot& snapshot, int64_t now_ms,
                                     Explain explain) const {
  admission_internal::Cycle cycle(*this, snapshot, now_ms, explain);
  TESSERA_RETURN_IF_ERROR(cycle.Build());
  cycle.StartGuard();
  cycle.Admit();
  cycle.Explain();
  AdmissionCycle out = cycle.Finish();
  out.explained = explain;
  return out;
}

}  // namespace tessera
