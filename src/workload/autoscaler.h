// Autoscaler: how many replicas a Service role should run, from the load its router reports.
//
// One pure function shared by the head (controller, on every tick) and the simulator. Time is
// wall-clock milliseconds passed in; nothing here reads a clock, so delays do not stretch with
// a slow control loop (Ray Serve once counted loop iterations).
//
// The rule (docs/serving.md "Autoscaling"):
//   load     = mean ongoing requests (in flight + queued, summed over replicas) of the samples
//              in [now - lookback, now]; with signal kQueuedPromptTokens the mean queued prompt
//              tokens instead, against target_queued_prompt_tokens
//   want     = ceil(load / target), clamped to [min, max]
//   up       = want > current and load > current * target * (1 + kTolerance)
//   down     = want < current and load < current * target * (1 - kTolerance)
//   A desire to go up (down) must hold without a break for the upscale (downscale) delay before
//   the decision changes; the size it then moves to is the latest `want`. The tolerance band is
//   what keeps a noisy steady load from flapping: its mean stays inside the band.
//   Scale from zero: with 0 replicas, any ongoing request in the newest sample gives 1 at once
//   (a request is waiting for a replica and no delay helps it).
//   No samples in the look-back window (the router is down or silent): keep the current size.
//
// Thread-safety: stateless function over values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera {

// What a role scales on: ongoing requests (the default; a decode role's too), or the prompt
// tokens waiting to be prefilled (a prefill role's: prefill time grows with prompt length, not
// request count).
enum class AutoscaleSignal { kOngoingRequests, kQueuedPromptTokens };

struct AutoscalerConfig {
  int min_replicas = 1;  // 0 allowed: scale to zero
  int max_replicas = 1;
  AutoscaleSignal signal = AutoscaleSignal::kOngoingRequests;
  double target_ongoing_requests = 2;         // per replica, > 0 (signal kOngoingRequests)
  double target_queued_prompt_tokens = 2048;  // per replica, > 0 (signal kQueuedPromptTokens)
  int64_t upscale_delay_ms = 30'000;
  int64_t downscale_delay_ms = 600'000;
  int64_t lookback_ms = 30'000;
};

// One load report of the role's router.
struct LoadSample {
  int64_t time_ms = 0;
  double ongoing_requests = 0;      // in flight + queued, summed over replicas
  double queued_prompt_tokens = 0;  // prompt tokens sent to prefill, not yet prefilled
};

// The autoscaler's own memory between calls: since when a higher (lower) size has been wanted
// without a break; -1: not wanted now.
struct AutoscalerState {
  int64_t up_since_ms = -1;
  int64_t down_since_ms = -1;
  friend bool operator==(const AutoscalerState&, const AutoscalerState&) = default;
};

struct AutoscalerDecision {
  int desired_replicas = 0;
  // For people: "load 9.5 ongoing over 2 replicas, target 2 -> want 5 for 30 s >= upscale
  // delay 30 s".
  std::string reason;
  AutoscalerState state;  // pass back on the next call
};

// Relative band around current * target inside which the size is kept.
inline constexpr double kAutoscalerTolerance = 0.1;

// `samples` may hold samples outside the look-back window (they are ignored) in any order.
AutoscalerDecision Autoscale(const AutoscalerConfig& config, const std::vector<LoadSample>& samples,
                             int current_replicas, const AutoscalerState& state, int64_t now_ms);

}  // namespace tessera
