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

// What the samples of one window say.
struct WindowLoad {
  int samples = 0;
  double demand = 0;        // requests the replicas would hold if they kept up (or queued tokens)
  double in_system = 0;     // mean requests in flight at the replicas
  bool saturated = false;   // the router queued
  double queued_share = 0;  // of the samples, those with requests queued at the router
  bool piling_up = false;  // its queue is as long at the end of the window as at the start, or more
  // What the in-flight mean is scaled by while the router queues: arrivals / completions over
  // the window from the counters, within [1/2, 2]; without counters 1 + queued / in flight,
  // at most 2.
  double factor = 1;
  bool arrivals_known = false;  // the factor counts the requests refused (refused counters)
  // Arrivals / completions over the window from the counters, whether the router queued or
  // not; -1: no counters or nothing completed. Below 1 a backlog drained: some of what the
  // replicas finished (and streamed) was work left from before the window, done once, not a
  // rate that lasts.
  double arrival_ratio = -1;
  double tokens_per_s = -1;        // output tokens streamed per second; -1: not reported
  double arrivals = 0;             // requests that arrived (refused included when counted)
  double arrivals_per_s = -1;      // the same per second; -1: no counters
  double tokens_per_request = -1;  // output tokens streamed per request completed
  double newest_signal = 0;        // the newest sample's ongoing requests (or queued tokens)
  double ttft_ms = -1;             // window means; -1: nothing measured
  double tpot_ms = -1;
};

double Ceil(double v) { return std::ceil(v - 1e-9); }

WindowLoad Measure(const AutoscalerConfig& config, const std::vector<LoadSample>& samples,
                   int64_t from_ms, int64_t to_ms) {
  WindowLoad w;
  double ongoing = 0, queued = 0, tokens = 0;
  int queueing = 0;
  const LoadSample* oldest = nullptr;
  const LoadSample* newest = nullptr;
  for (const LoadSample& s : samples) {
    if (s.time_ms < from_ms || s.time_ms > to_ms) continue;
    ++w.samples;
    ongoing += s.ongoing_requests;
    queued += std::min(s.queued_requests, s.ongoing_requests);
    tokens += s.queued_prompt_tokens;
    queueing += s.queued_requests > 0 ? 1 : 0;
    if (oldest == nullptr || s.time_ms < oldest->time_ms) oldest = &s;
    if (newest == nullptr || s.time_ms >= newest->time_ms) newest = &s;
  }
  if (w.samples == 0) return w;
  const double n = w.samples;
  w.queued_share = queueing / n;
  w.newest_signal = config.signal == AutoscaleSignal::kQueuedPromptTokens
                        ? newest->queued_prompt_tokens
                        : newest->ongoing_requests;
  if (config.signal == AutoscaleSignal::kQueuedPromptTokens) {
    w.demand = tokens / n;
  } else {
    const double in_system = (ongoing - queued) / n;
    const double waiting = queued / n;
    w.in_system = in_system;
    w.saturated = waiting > 0;
    w.piling_up = newest->queued_requests > 0 && newest->queued_requests >= oldest->queued_requests;
    const double dt_s = static_cast<double>(newest->time_ms - oldest->time_ms) / 1000.0;
    if (oldest->completed >= 0 && newest->completed >= oldest->completed && dt_s > 0) {
      const double done = static_cast<double>(newest->completed - oldest->completed);
      double arrived = done + newest->ongoing_requests - oldest->ongoing_requests;
      // A full queue refuses what it does not hold: without the refused count the arrivals
      // are those the router kept, and the factor is held to 2x.
      w.arrivals_known = oldest->refused >= 0 && newest->refused >= oldest->refused;
      if (w.arrivals_known) arrived += static_cast<double>(newest->refused - oldest->refused);
      if (done > 0) w.arrival_ratio = std::max(0.0, arrived / done);
      w.arrivals = std::max(0.0, arrived);
      w.arrivals_per_s = w.arrivals / dt_s;
      if (done > 0 && oldest->output_tokens >= 0 && newest->output_tokens >= oldest->output_tokens)
        w.tokens_per_request =
            static_cast<double>(newest->output_tokens - oldest->output_tokens) / done;
    }
    if (w.saturated) {
      w.factor = in_system > 0 ? std::min(kAutoscalerMaxUpFactor, 1 + waiting / in_system) : 1;
      // Fewer arrivals than completions: a backlog draining, not demand.
      if (w.arrival_ratio >= 0)
        w.factor =
            std::clamp(w.arrival_ratio, 1 / kAutoscalerMaxUpFactor,
                       w.arrivals_known ? kAutoscalerMaxArrivalFactor : kAutoscalerMaxUpFactor);
    }
    w.demand = in_system > 0 ? in_system * w.factor : waiting;
  }
  const double span_s = static_cast<double>(newest->time_ms - oldest->time_ms) / 1000.0;
  if (oldest->output_tokens >= 0 && newest->output_tokens >= oldest->output_tokens && span_s > 0)
    w.tokens_per_s = static_cast<double>(newest->output_tokens - oldest->output_tokens) / span_s;
  auto mean = [&](int64_t c0, double s0, int64_t c1, double s1) {
    return c0 >= 0 && c1 > c0 ? (s1 - s0) / static_cast<double>(c1 - c0) : -1.0;
  };
  w.ttft_ms =
      mean(oldest->ttft_count, oldest->ttft_sum_ms, newest->ttft_count, newest->ttft_sum_ms);
  w.tpot_ms =
      mean(oldest->tpot_count, oldest->tpot_sum_ms, newest->tpot_count, newest->tpot_sum_ms);
  return w;
}

// The worst measure over its target, or -1 with no target or nothing measured.
double SloRatio(const AutoscalerConfig& config, const WindowLoad& w) {
  double ratio = -1;
  if (w.ttft_ms >= 0) ratio = std::max(ratio, w.ttft_ms / AutoscaleTtftTarget(config));
  if (w.tpot_ms >= 0) ratio = std::max(ratio, w.tpot_ms / AutoscaleTpotTarget(config));
  return ratio;
}

}  // namespace

double AutoscaleTarget(const AutoscalerConfig& config, int max_ongoing_requests) {
  if (config.signal == AutoscaleSignal::kQueuedPromptTokens)
    return config.target_queued_prompt_tokens;
  if (config.target_ongoing_requests > 0) return config.target_ongoing_requests;
  return max_ongoing_requests > 0 ? max_ongoing_requests / 2.0 : 2.0;
}

double AutoscaleTtftTarget(const AutoscalerConfig& config) {
  return config.target_ttft_ms > 0 ? config.target_ttft_ms : kAutoscalerDefaultTtftMs;
}

double AutoscaleTpotTarget(const AutoscalerConfig& config) {
  return config.target_tpot_ms > 0 ? config.target_tpot_ms : kAutoscalerDefaultTpotMs;
}

AutoscalerDecision Autoscale(const AutoscalerConfig& config, const std::vector<LoadSample>& samples,
                             int current_replicas, const AutoscalerState& state, int64_t now_ms) {
  AutoscaleInput in;
  in.samples = samples;
  in.current_replicas = current_replicas;
  in.state = state;
  in.now_ms = now_ms;
  return Autoscale(config, in);
}

AutoscalerDecision Autoscale(const AutoscalerConfig& config, const AutoscaleInput& in) {
  AutoscalerDecision d;
  d.state = in.state;
  const int current = in.current_replicas;
  const int64_t now = in.now_ms;
  d.desired_replicas = current;
  // Outside [min, max] (the bounds changed): move into them at once.
  const int bounded = std::clamp(current, config.min_replicas, config.max_replicas);
  if (bounded != current) {
    d.desired_replicas = bounded;
    d.state = {};
    d.state.capacity_tokens_per_s = in.state.capacity_tokens_per_s;
    d.reason = Replicas(current) + " is outside [" + std::to_string(config.min_replicas) + ", " +
               std::to_string(config.max_replicas) + "] -> " + std::to_string(bounded);
    return d;
  }
  const WindowLoad stable = Measure(config, in.samples, now - config.lookback_ms, now);
  if (stable.samples == 0) {
    d.state.up_since_ms = d.state.down_since_ms = -1;
    d.reason =
        "no load reports in the last " + Secs(config.lookback_ms) + ": keep " + Replicas(current);
    return d;
  }
  const bool tokens = config.signal == AutoscaleSignal::kQueuedPromptTokens;
  const double target = AutoscaleTarget(config, in.max_ongoing_requests);
  const int ready = in.ready_replicas >= 0 ? in.ready_replicas : current;
  // The SLO and the measured capacity are of the replicas that served the window: not of a
  // window that began before the ready count last changed.
  if (ready != d.state.ready_seen) {
    if (d.state.ready_seen >= 0 && ready > d.state.ready_seen) d.state.ready_rose_ms = now;
    d.state.ready_seen = ready;
    d.state.ready_changed_ms = now;
  }
  const bool settled =
      d.state.ready_changed_ms < 0 || now - d.state.ready_changed_ms >= config.lookback_ms;
  // A replica's capacity in output tokens per second: what the ready replicas streamed while
  // the router queued throughout the window (every replica full), the latest such window; a
  // window that showed more raises it (the mix of requests changed).
  if (!tokens && settled && ready > 0 && stable.tokens_per_s >= 0) {
    const double per = stable.tokens_per_s / ready;
    if (stable.queued_share >= kAutoscalerFullShare && per > 0)
      d.state.capacity_tokens_per_s = per;
    else if (d.state.capacity_tokens_per_s > 0 && per > d.state.capacity_tokens_per_s)
      d.state.capacity_tokens_per_s = per;
  }
  // A saturated window: the replicas held what they take, so size them on the throughput they
  // showed there (maxOngoingRequests in flight), at kAutoscalerSaturatedUtilization of it,
  // times arrivals / completions; a backlog flowing into new groups is no new demand. While
  // the queue piles up and the router does not count what it refused, the load is past that
  // throughput by an amount the window cannot see (a full queue rejects what it does not
  // hold): the target stands (up to 2x a step).
  const bool router_queues = !tokens && stable.queued_share >= 0.5;
  const bool saturated_window =
      router_queues && in.max_ongoing_requests > 0 && (!stable.piling_up || stable.arrivals_known);
  const double per_replica =
      saturated_window ? std::max(target, in.max_ongoing_requests * kAutoscalerSaturatedUtilization)
                       : target;
  std::string head =
      "demand " + Number(stable.demand) + (tokens ? " queued prompt tokens" : " in flight") +
      (stable.saturated ? " (router queueing)" : "") + " over " + Replicas(current) +
      (in.starting_replicas > 0 ? " (" + std::to_string(in.starting_replicas) + " starting)" : "") +
      ", target " + Number(target) +
      (per_replica != target ? " (saturated: " + Number(per_replica) + " a replica)" : "");
  if (current == 0) {
    if (stable.newest_signal > 0 && config.max_replicas > 0 && in.free_slices != 0) {
      d.desired_replicas = 1;
      d.state = {};
      d.state.capacity_tokens_per_s = in.state.capacity_tokens_per_s;
      d.state.last_up_ms = now;
      d.reason = head + " -> a request waits with no replica: 1 at once";
      return d;
    }
  }
  const auto clamp_want = [&](double v) {
    return std::clamp(static_cast<int>(std::min(Ceil(v), 1e6)), config.min_replicas,
                      config.max_replicas);
  };
  // The most one scale-up may reach: x2, and the free slices of the role's shape.
  int up_cap = std::min(config.max_replicas,
                        std::max(current + 1, static_cast<int>(current * kAutoscalerMaxUpFactor)));
  if (in.free_slices >= 0) up_cap = std::min(up_cap, current + in.free_slices);
  const std::string cap_note = in.free_slices >= 0 && up_cap == current + in.free_slices
                                   ? " (" + std::to_string(in.free_slices) + " free slices)"
                                   : "";

  // Burst: the panic window says the ready replicas are far too few.
  const int64_t panic_ms = std::max<int64_t>(1000, config.lookback_ms / 10);
  WindowLoad burst = Measure(config, in.samples, now - panic_ms, now);
  // The panic window is too short for rates (groups that just became ready have taken requests
  // and finished none): while the stable window saw the router queue, its factor is the one.
  // The factor is arrivals over the completions of the replicas that served the stable window;
  // when more became ready within it, they filled from the router's queue, and the panic
  // window's in-flight (the new replicas full) x that factor counts the backlog twice (on
  // conv.csv 1 -> 2 ready read 117 in flight where the load needed 5 replicas: 5 -> 10). The
  // stable window's own in-flight goes with its factor (Little's law over the same window).
  const bool ready_rose =
      d.state.ready_rose_ms >= 0 && now - d.state.ready_rose_ms < config.lookback_ms;
  if (!tokens && stable.saturated && burst.in_system > 0)
    burst.demand = ready_rose ? stable.demand : burst.in_system * stable.factor;
  // The panic window sizes a saturated router on the throughput shown, as the stable one does.
  const double burst_per_replica =
      !tokens && burst.queued_share >= 0.5 && in.max_ongoing_requests > 0 &&
              (!burst.piling_up || stable.arrivals_known)
          ? std::max(target, in.max_ongoing_requests * kAutoscalerSaturatedUtilization)
          : target;
  int panic_want = burst.samples > 0 ? clamp_want(burst.demand / burst_per_replica) : 0;
  // With a measured capacity, the panic window's arrival rate says how many replicas the burst
  // needs: its requests x the output tokens a request streams (the stable window's) over what a
  // replica streams at the target utilization. The rate is taken over the burst so far (from a
  // panic window before it was declared, at most a look-back), so the estimate firms up as the
  // burst lasts: a few seconds of arrivals are noisy, and each step up that noise asks for would be
  // undone.
  int rate_want = 0;
  double rate = -1;
  if (!tokens && d.state.capacity_tokens_per_s > 0 && stable.tokens_per_request > 0 &&
      burst.piling_up) {
    const int64_t from = d.state.panic_since_ms >= 0 && d.state.panic_until_ms >= now
                             ? std::max(now - config.lookback_ms,
                                        std::min(now - panic_ms, d.state.panic_since_ms - panic_ms))
                             : now - panic_ms;
    const WindowLoad r = Measure(config, in.samples, from, now);
    if (r.arrivals_per_s > 0) {
      rate = r.arrivals_per_s;
      rate_want = clamp_want(rate * stable.tokens_per_request /
                             (d.state.capacity_tokens_per_s * kAutoscalerTargetUtilization));
    }
  }
  panic_want = std::max(panic_want, rate_want);
  // Against the desired size, starting groups included: a burst already answered by groups on
  // the way is no new burst (no cascade while they start).
  // A burst piles requests up at the router; a backlog draining into new groups is none.
  const bool panic_now = !tokens && ready > 0 && burst.piling_up &&
                         panic_want >= kAutoscalerPanicThreshold * std::max(ready, current);
  if (panic_now) {
    if (d.state.panic_until_ms < now) d.state.panic_since_ms = now;
    d.state.panic_until_ms = now + config.lookback_ms;
  }
  const bool in_panic = d.state.panic_until_ms >= now;
  if (!in_panic) d.state.panic_until_ms = d.state.panic_since_ms = -1;
  // While a burst lasts, a higher size its arrival rate asks for is taken at once (Knative's
  // panic mode: up at once, never down); the rate does not grow with the size, so no cascade.
  const bool raise_in_panic = in_panic && !panic_now && burst.piling_up && rate_want > current;
  if (raise_in_panic) panic_want = rate_want;
  if ((panic_now && panic_want > current) || raise_in_panic) {
    // A burst sized on its measured arrival rate may pass x2 (Knative's panic mode has no such
    // cap), up to kAutoscalerMaxArrivalFactor x and the free slices.
    int burst_cap = up_cap;
    if (rate_want > up_cap) {
      burst_cap = std::min(config.max_replicas,
                           static_cast<int>(std::max(current, 1) * kAutoscalerMaxArrivalFactor));
      if (in.free_slices >= 0) burst_cap = std::min(burst_cap, current + in.free_slices);
      burst_cap = std::max(burst_cap, up_cap);
    }
    const int to = std::min(panic_want, burst_cap);
    d.state.up_since_ms = d.state.down_since_ms = -1;
    if (to > current) {
      d.desired_replicas = to;
      d.state.last_up_ms = now;
      d.state.up_on_backlog = true;
      d.reason = "burst: demand " + Number(burst.demand) + " in flight in the last " +
                 Secs(panic_ms) + " over " + Replicas(ready) + " ready, target " +
                 Number(burst_per_replica) +
                 (rate_want > 0 ? ", arrivals " + Number(std::round(rate * 10) / 10) +
                                      "/s: " + std::to_string(rate_want) + " replicas' worth"
                                : "") +
                 " -> " + std::to_string(to) + " at once" + cap_note;
    } else {
      d.reason = "burst: want " + std::to_string(panic_want) + " but no free slice: keep " +
                 Replicas(current);
    }
    return d;
  }

  const double slo = SloRatio(config, stable);
  const double capacity = current * per_replica;
  // With a measured capacity and a router that does not queue, the size follows the output
  // tokens the load asks for, in replicas' worth of that capacity: up above the high-water
  // mark, to the target utilization; down only to a size that would stay at or below the
  // low-water mark (llm-d: the smaller size keeps the margin), so a flat load at a capacity
  // boundary does not flap. Otherwise requests in flight over the target.
  const double cap_tps = d.state.capacity_tokens_per_s;
  // A targetOngoingRequests the user set is theirs to keep: the token rule sizes only the
  // default target (unset, half of maxOngoingRequests).
  const bool token_rule = !tokens && !router_queues && cap_tps > 0 && stable.tokens_per_s >= 0 &&
                          config.target_ongoing_requests <= 0;
  // A backlog draining (fewer arrivals than completions over the window) is work done once:
  // the tokens it streamed are no rate that lasts, so only the arrivals' share of them counts
  // (new replicas emptying the router's queue read as a load above what arrives, and the rule
  // scaled up past it: 8 -> 10 on a 1.5x plateau).
  const bool draining =
      stable.arrival_ratio >= 0 && stable.arrival_ratio < 1 - kAutoscalerTolerance;
  const double load_share = draining ? stable.arrival_ratio : 1.0;
  const double worth = token_rule ? stable.tokens_per_s * load_share / cap_tps : 0;
  int want, down_want;
  bool demand_up, down_wish;
  if (token_rule) {
    want = clamp_want(worth / kAutoscalerTargetUtilization);
    demand_up = want > current && worth > current * kAutoscalerHighWater;
    down_want = clamp_want(worth / kAutoscalerLowWater);
    // llm-d: a smaller size must keep the margins on every signal. Output tokens do not see
    // prefill (on conv.csv 5 replicas streaming 2.8 replicas' worth of tokens read as 70 % busy
    // at 4, yet fixed=4 attains 61.5 % where fixed=5 attains 98.6 %), so the requests in flight
    // must also stay under kAutoscalerDownRequestsShare of the target per replica.
    down_want =
        std::max(down_want, clamp_want(stable.demand / (target * kAutoscalerDownRequestsShare)));
    down_wish = down_want < current;
    head += "; " + Number(stable.tokens_per_s) + " output tokens/s" +
            (draining ? " (a backlog draining: " + Number(std::round(load_share * 100)) +
                            "% of it arrivals)"
                      : "") +
            ", " + Number(cap_tps) +
            " a replica at capacity: " + Number(std::round(worth * 100) / 100) + " replicas' worth";
  } else {
    want = clamp_want(stable.demand / per_replica);
    demand_up = want > current && stable.demand > capacity * (1 + kAutoscalerTolerance);
    down_want = want;
    down_wish = want < current && stable.demand < capacity * (1 - kAutoscalerTolerance);
  }
  // While a backlog drains, the latency measured is that of the queueing before it: no push up.
  const bool slo_up =
      slo > 1 && in.starting_replicas == 0 && settled && !draining && current < config.max_replicas;
  const int slo_want = slo_up ? clamp_want(std::max<double>(
                                    current + 1, current * std::min(slo, kAutoscalerMaxUpFactor)))
                              : 0;
  const bool up = (demand_up || slo_up) && up_cap > current;
  const int up_want = std::max(demand_up ? want : 0, slo_want);
  if (slo >= 0) head += "; SLO at " + Number(std::round(slo * 100)) + "% of target";

  // A scale-up sized on a backlog (the router queued) asked for replicas to drain work done
  // once. Once the router has not queued for a whole look-back, the ready count has held as
  // long (the window measures the replicas there are) and the token rule sizes the load, the
  // replicas it no longer needs go after a look-back, not after the cooldown and the whole
  // downscale delay (the excess held 10 minutes on every step up).
  const bool backlog_gone =
      d.state.up_on_backlog && token_rule && stable.queued_share == 0 && settled && !draining;
  // Down: the size that still keeps the margins, at most half off, none starting, no burst.
  int down_to = current;
  std::string down_block;
  if (down_wish) {
    // At most half off a step, at least one.
    const int floor_step = std::max(
        down_want, current - std::max(1, static_cast<int>(current * kAutoscalerMaxDownFraction)));
    for (int m = std::max(floor_step, config.min_replicas); m < current; ++m) {
      const bool slo_ok = slo < 0 || slo * current / std::max(m, 1) < 1 - kAutoscalerTolerance;
      if (slo_ok) {
        down_to = m;
        break;
      }
    }
    if (down_to == current)
      down_block = "the SLO measure at a smaller size would pass its target";
    else if (router_queues)  // a backlog draining: arrivals below completions, not demand
      down_block = "the router queues";
    else if (in.starting_replicas > 0)
      down_block = std::to_string(in.starting_replicas) + " starting";
    else if (in_panic)
      down_block = "a burst in the last " + Secs(config.lookback_ms);
    else if (d.state.last_up_ms >= 0 && now - d.state.last_up_ms < config.downscale_delay_ms &&
             !backlog_gone)
      down_block = "scaled up " + Secs(now - d.state.last_up_ms) + " ago, cooldown " +
                   Secs(config.downscale_delay_ms);
  }
  const bool down = !up && down_to < current && down_block.empty();

  if (!up) d.state.up_since_ms = -1;
  if (!down) d.state.down_since_ms = -1;
  if (!up && !down) {
    if ((demand_up || slo_up) && up_cap <= current && current < config.max_replicas)
      down_block = "no free slice of the role's shape";
    d.reason = head + " -> want " + std::to_string(std::max(want, slo_want)) + ": keep " +
               std::to_string(current) + (down_block.empty() ? "" : " (" + down_block + ")");
    return d;
  }
  int64_t& since = up ? d.state.up_since_ms : d.state.down_since_ms;
  if (since < 0) since = now;
  // A descent under way (the last step was down, none up since) and demand still lower: each
  // further step waits a third of the delay, at least a look-back. The first step down waits the
  // whole delay (it proves the fall lasts), and so does a step to zero.
  const bool fast_down =
      !up && down_to >= 1 && d.state.last_down_ms >= 0 && d.state.last_down_ms > d.state.last_up_ms;
  const int64_t delay =
      up             ? config.upscale_delay_ms
      : backlog_gone ? std::min(config.lookback_ms, config.downscale_delay_ms)
      : fast_down
          ? std::max(config.lookback_ms, config.downscale_delay_ms / kAutoscalerFastDownDivisor)
          : config.downscale_delay_ms;
  const int64_t held = now - since;
  const int to = up ? std::min(up_want, up_cap) : down_to;
  d.reason = head + " -> want " + std::to_string(up ? up_want : down_want) +
             (slo_up && !demand_up ? " (SLO)" : "") + ", step to " + std::to_string(to) + cap_note +
             " for " + Secs(held) + (held >= delay ? " >= " : " < ") +
             (up ? "upscale" : "downscale") + " delay " + Secs(delay) +
             (backlog_gone ? " (a backlog's replicas, the router calm for a look-back)"
              : fast_down  ? " (a descent under way)"
                           : "");
  if (held >= delay) {
    d.desired_replicas = to;
    d.state.up_since_ms = d.state.down_since_ms = -1;
    (up ? d.state.last_up_ms : d.state.last_down_ms) = now;
    d.state.up_on_backlog = up && router_queues;
  }
  return d;
}

}  // namespace tessera
