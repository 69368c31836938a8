#include "workload/autoscaler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace tessera {
namespace {

std::string Number(double v) {
  char buf[32];
  if (v == std::floor(v) && std::fabs(v) < 1e9)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else
    std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string Secs(int64_t ms) { return Number(static_cast<double>(ms) / 1000.0) + " s"; }

std::string Replicas(int n) { return std::to_string(n) + (n == 1 ? " replica" : " replicas"); }

double Signal(const AutoscalerConfig& config, const LoadSample& s) {
  return config.signal == AutoscaleSignal::kQueuedPromptTokens ? s.queued_prompt_tokens
                                                               : s.ongoing_requests;
}

}  // namespace

AutoscalerDecision Autoscale(const AutoscalerConfig& config, const std::vector<LoadSample>& samples,
                             int current, const AutoscalerState& state, int64_t now_ms) {
  AutoscalerDecision d;
  d.state = state;
  double sum = 0;
  int n = 0;
  const LoadSample* newest = nullptr;
  for (const LoadSample& s : samples) {
    if (s.time_ms < now_ms - config.lookback_ms || s.time_ms > now_ms) continue;
    sum += Signal(config, s);
    ++n;
    if (newest == nullptr || s.time_ms >= newest->time_ms) newest = &s;
  }
  // Outside [min, max] (the bounds changed): move into them at once.
  const int bounded = std::clamp(current, config.min_replicas, config.max_replicas);
  if (bounded != current) {
    d.desired_replicas = bounded;
    d.state = {};
    d.reason = Replicas(current) + " is outside [" + std::to_string(config.min_replicas) + ", " +
               std::to_string(config.max_replicas) + "] -> " + std::to_string(bounded);
    return d;
  }
  if (n == 0) {
    d.desired_replicas = current;
    d.state = {};
    d.reason =
        "no load reports in the last " + Secs(config.lookback_ms) + ": keep " + Replicas(current);
    return d;
  }
  const double load = sum / n;
  const bool tokens = config.signal == AutoscaleSignal::kQueuedPromptTokens;
  const double target =
      tokens ? config.target_queued_prompt_tokens : config.target_ongoing_requests;
  const std::string head = "load " + Number(load) +
                           (tokens ? " queued prompt tokens" : " ongoing") + " over " +
                           Replicas(current) + ", target " + Number(target);
  if (current == 0 && Signal(config, *newest) > 0 && config.max_replicas > 0) {
    d.desired_replicas = 1;
    d.state = {};
    d.reason = head + " -> a request waits with no replica: 1 at once";
    return d;
  }
  const int want = std::clamp(static_cast<int>(std::ceil(load / target - 1e-9)),
                              config.min_replicas, config.max_replicas);
  const double capacity = current * target;
  const bool up = want > current && load > capacity * (1 + kAutoscalerTolerance);
  const bool down = want < current && load < capacity * (1 - kAutoscalerTolerance);
  d.desired_replicas = current;
  if (!up) d.state.up_since_ms = -1;
  if (!down) d.state.down_since_ms = -1;
  if (!up && !down) {
    d.reason = head + " -> keep " + std::to_string(current);
    return d;
  }
  int64_t& since = up ? d.state.up_since_ms : d.state.down_since_ms;
  if (since < 0) since = now_ms;
  const int64_t delay = up ? config.upscale_delay_ms : config.downscale_delay_ms;
  const int64_t held = now_ms - since;
  const std::string what = up ? "upscale" : "downscale";
  d.reason = head + " -> want " + std::to_string(want) + " for " + Secs(held) +
             (held >= delay ? " >= " : " < ") + what + " delay " + Secs(delay);
  if (held >= delay) {
    d.desired_replicas = want;
    d.state = {};
  }
  return d;
}

}  // namespace tessera
