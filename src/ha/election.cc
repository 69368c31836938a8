#include "ha/election.h"

#include <algorithm>

namespace tessera::ha {

Status ValidateElectionConfig(const ElectionConfig& c) {
  const int64_t lease = c.lease.count(), renew = c.renew_deadline.count(), retry = c.retry.count();
  if (retry < 100) {
    return InvalidArgument("--election-retry-ms: must be at least 100 ms, got " +
                           std::to_string(retry));
  }
  if (lease < 2'000 || lease % 1'000 != 0) {
    return InvalidArgument(
        "--election-lease-ms: must be whole seconds of at least 2000 ms (etcd leases are in "
        "seconds), got " +
        std::to_string(lease));
  }
  if (!(lease > renew)) {
    return InvalidArgument("--election-renew-deadline-ms (" + std::to_string(renew) +
                           ") must be less than --election-lease-ms (" + std::to_string(lease) +
                           "): a leader must step down before its lease can expire for others");
  }
  // renew > 1.2 x retry, in integers: 5 x renew > 6 x retry.
  if (!(5 * renew > 6 * retry)) {
    return InvalidArgument("--election-renew-deadline-ms (" + std::to_string(renew) +
                           ") must be more than 1.2 x --election-retry-ms (" +
                           std::to_string(retry) + "), so a leader gets a renewal in before it");
  }
  return Status::Ok();
}

const char* RoleName(Role role) {
  switch (role) {
    case Role::kCandidate:
      return "standby";
    case Role::kLeader:
      return "leader";
    case Role::kSteppedDown:
      return "stepped-down";
  }
  return "unknown";
}

Decision ElectionState::Next(int64_t now_ms) const {
  switch (role_) {
    case Role::kSteppedDown:
      return {Action::kNone, 0};
    case Role::kCandidate:
      if (now_ms >= next_attempt_ms_) return {Action::kAcquire, now_ms};
      return {Action::kWait, next_attempt_ms_};
    case Role::kLeader: {
      const int64_t deadline = last_renew_sent_ms_ + config_.renew_deadline.count();
      if (now_ms >= deadline) return {Action::kStepDown, now_ms};
      if (now_ms >= next_attempt_ms_) return {Action::kRenew, now_ms};
      return {Action::kWait, std::min(next_attempt_ms_, deadline)};
    }
  }
  return {Action::kNone, 0};
}

void ElectionState::OnAcquired(int64_t sent_ms, int64_t term) {
  if (role_ != Role::kCandidate) return;
  role_ = Role::kLeader;
  term_ = term;
  last_renew_sent_ms_ = sent_ms;
  next_attempt_ms_ = sent_ms + config_.retry.count();
}

void ElectionState::OnNotAcquired(int64_t now_ms) {
  if (role_ != Role::kCandidate) return;
  next_attempt_ms_ = now_ms + config_.retry.count();
}

void ElectionState::OnRenewed(int64_t sent_ms) {
  if (role_ != Role::kLeader) return;
  last_renew_sent_ms_ = std::max(last_renew_sent_ms_, sent_ms);
  next_attempt_ms_ = sent_ms + config_.retry.count();
}

void ElectionState::OnRenewFailed(int64_t now_ms) {
  if (role_ != Role::kLeader) return;
  // Retry soon, but not in a busy loop: a fifth of the retry period.
  next_attempt_ms_ = now_ms + std::max<int64_t>(config_.retry.count() / 5, 20);
}

void ElectionState::OnLost() { StepDown(); }

void ElectionState::StepDown() { role_ = Role::kSteppedDown; }

}  // namespace tessera::ha
