#include "workload/recovery.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace tessera {
namespace {

bool IsFailure(const std::string& end_reason) {
  return end_reason == "WorkerFailed" || end_reason == "HostLost" || end_reason == "Hang";
}

// The step an attempt started from: the restored checkpoint, else the step before its first.
std::optional<int64_t> StartStep(const AttemptRecord& a) {
  if (a.restored) return a.resumed_from_step;
  if (a.first_step >= 0) return a.first_step - 1;
  return std::nullopt;
}

template <typename T>
T Median(std::vector<T> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string TenthsOfSeconds(int64_t ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(ms) / 1000.0);
  return buf;
}

std::string RankList(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

}  // namespace

const char* HostLossPolicyName(HostLossPolicy p) {
  switch (p) {
    case HostLossPolicy::kFail:
      return "fail";
    case HostLossPolicy::kPause:
      return "pause";
    case HostLossPolicy::kResize:
      return "resize";
  }
  return "fail";
}

const char* FailureKindName(FailureKind kind) {
  switch (kind) {
    case FailureKind::kWorkerFailed:
      return "WorkerFailed";
    case FailureKind::kHostLost:
      return "HostLost";
    case FailureKind::kHang:
      return "Hang";
  }
  return "?";
}

std::optional<RecoveryFigures> ComputeRecoveryFigures(const AttemptRecord& previous,
                                                      const AttemptRecord& next) {
  if (!IsFailure(previous.end_reason)) return std::nullopt;
  RecoveryFigures f;
  if (previous.detected_ms > 0 && previous.failure_ms > 0)
    f.time_to_detect_ms = std::max<int64_t>(0, previous.detected_ms - previous.failure_ms);
  if (next.placed_ms > 0 && previous.detected_ms > 0)
    f.time_to_schedule_ms = std::max<int64_t>(0, next.placed_ms - previous.detected_ms);
  if (next.first_step_ms > 0) {
    f.time_to_first_step_ms = std::max<int64_t>(0, next.first_step_ms - next.placed_ms);
    if (previous.failure_ms > 0)
      f.time_to_recover_ms = std::max<int64_t>(0, next.first_step_ms - previous.failure_ms);
  }
  if (next.restored) f.time_to_restore_ms = std::llround(next.restore_seconds * 1000.0);
  if (auto start = StartStep(next))
    f.steps_lost = std::max<int64_t>(0, previous.last_step - *start);
  return f;
}

CheckpointAdvice AdviseCheckpointInterval(
    const std::vector<std::pair<int64_t, double>>& checkpoints, int failures, int64_t wall_ms,
    int64_t configured_mtbf_ms) {
  CheckpointAdvice a;
  if (!checkpoints.empty()) {
    std::vector<double> saves;
    for (const auto& [t, s] : checkpoints) saves.push_back(s);
    a.save_seconds = Median(saves);
  }
  if (checkpoints.size() >= 2) {
    std::vector<double> gaps;
    for (size_t i = 1; i < checkpoints.size(); ++i)
      gaps.push_back(static_cast<double>(checkpoints[i].first - checkpoints[i - 1].first) / 1000.0);
    a.interval_seconds = Median(gaps);
  }
  if (failures > 0 && wall_ms > 0) {
    a.mtbf_seconds = static_cast<double>(wall_ms) / 1000.0 / failures;
    a.mtbf_source = "observed";
  } else if (configured_mtbf_ms > 0) {
    a.mtbf_seconds = static_cast<double>(configured_mtbf_ms) / 1000.0;
    a.mtbf_source = "configured";
  }
  if (a.save_seconds >= 0 && a.mtbf_seconds > 0)
    a.advised_interval_seconds = std::sqrt(2.0 * a.save_seconds * a.mtbf_seconds);
  return a;
}

JobRecovery SummarizeRecovery(const std::vector<AttemptRecord>& attempts, int64_t now_ms) {
  JobRecovery r;
  int64_t recover_sum = 0;
  int recover_n = 0;
  for (size_t i = 0; i < attempts.size(); ++i) {
    if (IsFailure(attempts[i].end_reason)) ++r.failures;
    if (i + 1 == attempts.size()) break;
    auto f = ComputeRecoveryFigures(attempts[i], attempts[i + 1]);
    if (!f) continue;
    if (f->steps_lost >= 0) r.steps_lost += f->steps_lost;
    if (f->time_to_recover_ms >= 0) {
      recover_sum += f->time_to_recover_ms;
      ++recover_n;
    }
  }
  if (recover_n > 0) r.mean_time_to_recover_ms = recover_sum / recover_n;

  if (attempts.empty() || attempts.front().placed_ms <= 0) return r;
  const int64_t wall_ms = now_ms - attempts.front().placed_ms;
  // Step time of each attempt from its own reports; attempts with a single step borrow the
  // median of the others.
  std::vector<double> step_ms(attempts.size(), -1);
  std::vector<double> known;
  for (size_t i = 0; i < attempts.size(); ++i) {
    const AttemptRecord& a = attempts[i];
    if (a.first_step >= 0 && a.last_step > a.first_step && a.last_step_ms > a.first_step_ms) {
      step_ms[i] = static_cast<double>(a.last_step_ms - a.first_step_ms) /
                   static_cast<double>(a.last_step - a.first_step);
      known.push_back(step_ms[i]);
    }
  }
  if (known.empty() || wall_ms <= 0) return r;
  const double fallback = Median(known);
  double kept_ms = 0;
  for (size_t i = 0; i < attempts.size(); ++i) {
    const AttemptRecord& a = attempts[i];
    auto start = StartStep(a);
    if (!start || a.last_step < 0) continue;
    int64_t kept_until = a.last_step;
    if (i + 1 < attempts.size())
      if (auto next_start = StartStep(attempts[i + 1]))
        kept_until = std::min(kept_until, *next_start);
    const int64_t kept_steps = std::max<int64_t>(0, kept_until - *start);
    kept_ms += static_cast<double>(kept_steps) * (step_ms[i] >= 0 ? step_ms[i] : fallback);
  }
  r.goodput = std::clamp(kept_ms / static_cast<double>(wall_ms), 0.0, 1.0);
  return r;
}

bool WithinFailureBudget(int failures, int max_failures) {
  return max_failures < 0 || failures <= max_failures;
}

RecoveryDecision DecideRecovery(FailureKind kind, HostLossPolicy on_host_loss, int failures,
                                int max_failures, int attempt_slices, int spec_min_slices,
                                int spec_max_slices) {
  RecoveryDecision d;
  if (kind == FailureKind::kHostLost && on_host_loss == HostLossPolicy::kFail) {
    d.fail = true;
    d.why = "a host was lost and spec.failurePolicy.onHostLoss is fail";
    return d;
  }
  if (!WithinFailureBudget(failures, max_failures)) {
    d.fail = true;
    d.why = "failure " + std::to_string(failures) + " exceeds spec.failurePolicy.maxFailures " +
            std::to_string(max_failures);
    return d;
  }
  if (kind == FailureKind::kHostLost && on_host_loss == HostLossPolicy::kResize) {
    d.action = RecoveryAction::kRestartLargestFit;
    d.min_slices = spec_min_slices;
    d.max_slices = spec_max_slices;
    d.why = "restart now at the largest size between " + std::to_string(spec_min_slices) + " and " +
            std::to_string(spec_max_slices) + " slices that fits";
    return d;
  }
  // A worker failure or hang leaves every host in place, and pause waits for them: the same size.
  d.action = RecoveryAction::kRestartSameSize;
  d.min_slices = d.max_slices = attempt_slices;
  d.why = kind == FailureKind::kHostLost
              ? "wait for capacity for " + std::to_string(attempt_slices) +
                    " slices, then restart at full size (onHostLoss: pause)"
              : "restart at " + std::to_string(attempt_slices) + " slices from the last checkpoint";
  return d;
}

HangVerdict FindHungRanks(const std::map<int, RankProgress>& ranks, int64_t running_ms,
                          int64_t now_ms, int64_t hang_timeout_ms, int64_t alive_timeout_ms) {
  HangVerdict v;
  if (hang_timeout_ms <= 0 || running_ms <= 0 || ranks.empty()) return v;
  auto last_report = [&](const RankProgress& p) {
    return p.last_step_ms > 0 ? p.last_step_ms : running_ms;
  };
  std::vector<int> silent;
  int64_t max_step = -1;
  for (const auto& [rank, p] : ranks) {
    max_step = std::max(max_step, p.last_step);
    if (now_ms - last_report(p) > hang_timeout_ms) silent.push_back(rank);
  }
  if (silent.empty()) return v;
  v.hung = true;

  auto alive = [&](const RankProgress& p) {
    return p.last_alive_ms > 0 && now_ms - p.last_alive_ms <= alive_timeout_ms;
  };
  std::vector<int> not_alive, behind;
  bool any_alive = false;
  for (const auto& [rank, p] : ranks) {
    if (alive(p))
      any_alive = true;
    else
      not_alive.push_back(rank);
  }
  for (int rank : silent)
    if (ranks.at(rank).last_step < max_step) behind.push_back(rank);

  std::string evidence;
  if (any_alive && !not_alive.empty()) {
    v.stuck_ranks = not_alive;
    evidence = "stopped sending liveness ticks while the other ranks wait for them";
  } else if (!behind.empty()) {
    v.stuck_ranks = behind;
    evidence = "fell behind the other ranks (step " + std::to_string(max_step) + ")";
  } else {
    v.stuck_ranks = silent;
    evidence = "stalled together";
  }
  v.since_ms = now_ms;
  int64_t last_step = -1;
  for (int rank : v.stuck_ranks) {
    const RankProgress& p = ranks.at(rank);
    v.since_ms = std::min(v.since_ms, last_report(p));
    last_step = std::max(last_step, p.last_step);
  }
  v.message = RankList(v.stuck_ranks) + " " + evidence + "; no step reported for " +
              TenthsOfSeconds(now_ms - last_report(ranks.at(silent.front()))) + " (hangTimeout " +
              TenthsOfSeconds(hang_timeout_ms) + ")" +
              (last_step >= 0 ? ", last step " + std::to_string(last_step) : ", no step yet");
  return v;
}

}  // namespace tessera
