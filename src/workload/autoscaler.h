// Autoscaler: how many replicas a Service role should run, from the load its router reports.
//
// One pure function shared by the head (controller, on every tick) and the simulator. Time is
// wall-clock milliseconds passed in; nothing here reads a clock, so delays do not stretch with
// a slow control loop (Ray Serve once counted loop iterations).
//
// The rule (docs/serving.md "Autoscaling"), learnt from Knative's KPA, AIBrix's APA, llm-d's
// saturation scaler and Ray Serve's known oscillations:
//   demand   = the requests the replicas would hold if they kept up: the mean in flight at the
//              replicas over the stable window (the look-back). Requests queued at the router
//              are not demand of their own: a saturated router queues whatever its replicas do
//              not take, so its queue says how long the saturation lasted, not how many
//              replicas would end it (the 1 -> 14 -> 1 flapping of issue 34). When the router
//              queues, the in-flight mean is scaled by arrival rate / completion rate (from its
//              cumulative counters, the refused requests among the arrivals: the excess the
//              replicas do not serve; at most 4, or 2 without a refused count), or, without
//              counters, by at most 2.
//   want     = ceil(demand / target), clamped to [min, max]; target = targetOngoingRequests,
//              by default half the role's maxOngoingRequests.
//   capacity = a replica's output tokens per second when full: measured over a window in which
//              the router queued in 90 % of the reports and the ready count held (the latest;
//              raised by any window that shows more). Known, and the router not queueing, the
//              size follows the output tokens streamed, in replicas' worth of it: up above 90 %
//              of the current size, to 90 %; down only to a size at or under 80 % (hysteresis:
//              a flat load at a capacity boundary does not flap) whose requests in flight stay
//              at or under 90 % of the target a replica (tokens do not see prefill work). Requests
//              in flight say little of how busy a replica is (a slow replica holds more of them).
//              Only with the default target: a targetOngoingRequests set in the spec keeps the
//              requests rule. A backlog draining (arrivals < 0.9 x completions) is work done once:
//              only the arrivals' share of the streamed tokens counts, and the SLO does not push
//              up.
//   saturated = while the router queues in most of the window and the role's
//              maxOngoingRequests is known, the replicas hold as much as they take: their
//              in-flight mean is their capacity, not what the load needs. The reference per
//              replica is then the measured saturation point: want = ceil(in flight x factor /
//              (maxOngoingRequests x 0.8)) (Little's law over the window: arrivals / completions
//              x the replicas that served them, at 80 % of the throughput they showed), not
//              in flight / target, which read a full replica as 2x demand (max = 2 x target)
//              and doubled the size on every saturated window (the scale-up cascade).
//   SLO      = on by default: the window's mean TTFT and TPOT as the router measured them,
//              against targetTTFTMs / targetTPOTMs (when 0: kAutoscalerDefaultTtftMs 2000 and
//              kAutoscalerDefaultTpotMs 50). Above a target, want at least current x
//              (measure / target), at most 2x, once no group starts and the ready count has
//              not changed for a look-back (the window measured the capacity there is); a
//              scale-down must leave the predicted measure at the new size (measure x current
//              / new) below the target less the tolerance. This is the queueing signal for a
//              prefill-bound role, whose TTFT passes its target long before its in-flight
//              count reaches the target.
//   up       = want > current, outside the tolerance band, held for the upscale delay; the
//              step is at most 2x (AIBrix) and at most current + free slices of the role's
//              shape (the caller passes them). Groups still starting count as capacity: the
//              size compared with is the desired size, starting groups included, and the SLO
//              (a measure of the capacity before them) does not push up while any starts.
//   panic    = the router's queue is not shrinking over the panic window (1/10 of the
//              look-back, >= 1 s: a backlog draining into new groups is no burst), and that
//              window's want is 2x the desired size or more (starting groups included, so a burst
//              already answered does not cascade): scale up at once to it (2x cap, free slices) and
//              do not scale down until a whole look-back passes without panic (Knative). With a
//              measured capacity the burst is also sized on its arrival rate (requests in, the
//              refused included, x the output tokens a request streams, over the capacity at
//              90 %; over the burst so far, at most a look-back): that size may pass x2, up to
//              4x and the free slices, and while the burst lasts a higher size it asks for is
//              taken at once (the rate does not grow with the size: no cascade). The panic
//              window's in-flight mean takes the stable window's factor (too short for rates),
//              unless more replicas became ready within the look-back: they filled from the
//              queue, so the stable window's own in-flight goes with its factor.
//   down     = want < current, outside the band, no group starting, no panic, held for the
//              downscale delay, and at least the downscale delay since the last scale-up (a
//              cooldown, waived once a scale-up made on a backlog (the router queued) is
//              drained: the router calm and the ready count held for a look-back, the token
//              rule sizing the load; that step waits a look-back, not the delay); the step is
//              at most half the current size (AIBrix), and each further
//              step waits its own delay: the whole one for the first step of a descent (it
//              proves the fall lasts) and a step to zero, a third of it (at least a look-back)
//              for each further step while no scale-up intervenes. llm-d's rule
//              holds: the new size keeps demand under target x (1 - tolerance) per replica.
//   Scale from zero: with 0 replicas, any ongoing request in the newest sample gives 1 at once.
//   No samples in the look-back window (the router is down or silent): keep the current size.
//
// Every setting has a default (AutoscalerConfig); `autoscaling: {maxReplicas: N}` gets them.
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
  // The size a new Service (or a role added to one) starts at, in [min, max]; -1: min_replicas
  // (Ray Serve's initial_replicas, Knative's initial-scale). The rule itself does not read it.
  int initial_replicas = -1;
  AutoscaleSignal signal = AutoscaleSignal::kOngoingRequests;
  // Per replica, >= 0; 0: half the role's maxOngoingRequests (2 when the caller does not say).
  double target_ongoing_requests = 0;
  double target_queued_prompt_tokens = 2048;  // per replica, > 0 (signal kQueuedPromptTokens)
  int64_t upscale_delay_ms = 15'000;
  int64_t downscale_delay_ms = 300'000;  // also the cooldown after a scale-up
  int64_t lookback_ms = 60'000;          // the stable window; the panic window is a tenth
  // The SLO signal's targets; 0: the defaults (kAutoscalerDefaultTtftMs, kAutoscalerDefaultTpotMs).
  // The window's mean TTFT (router arrival to first token) and time per output token after the
  // first, as the router measures them.
  double target_ttft_ms = 0;
  double target_tpot_ms = 0;
  friend bool operator==(const AutoscalerConfig&, const AutoscalerConfig&) = default;
};

// One load report of the role's router. The counters are cumulative since the router started;
// -1: not reported (an older router).
struct LoadSample {
  int64_t time_ms = 0;
  double ongoing_requests = 0;      // in flight + queued, summed over replicas
  double queued_prompt_tokens = 0;  // prompt tokens sent to prefill, not yet prefilled
  double queued_requests = 0;       // of ongoing_requests, waiting at the router for a slot
  int64_t completed = -1;           // requests a replica finished
  int64_t refused = -1;             // requests that left unserved: rejected (queue full), or
                                    // cancelled while queued (queue timeout, client gone)
  int64_t output_tokens = -1;       // output tokens the replicas streamed
  int64_t ttft_count = -1;          // streams' time to first token: count and sum
  double ttft_sum_ms = 0;
  int64_t tpot_count = -1;  // streams of 2+ tokens: time per output token, count and sum
  double tpot_sum_ms = 0;
};

// The autoscaler's own memory between calls. -1: not now / never.
struct AutoscalerState {
  int64_t up_since_ms = -1;    // since when a higher size is wanted without a break
  int64_t down_since_ms = -1;  // the same for a lower size
  int64_t panic_until_ms = -1;
  int64_t panic_since_ms = -1;  // when the burst under way was declared
  int64_t last_up_ms = -1;      // the last scale-up (the scale-down cooldown counts from it)
  int64_t last_down_ms = -1;    // the last scale-down (a later one continues a descent)
  int ready_seen = -1;          // the ready replicas at the last call, and since when
  int64_t ready_changed_ms = -1;
  int64_t ready_rose_ms = -1;  // the last call at which more replicas were ready than before
  // What one ready replica streams at most, in output tokens per second: measured over a
  // window in which the router queued throughout (every replica held maxOngoingRequests) and
  // the ready count did not change, raised by any window that showed more. -1: not measured.
  double capacity_tokens_per_s = -1;
  // The last scale-up was made while the router queued: sized on a backlog (work done once),
  // so once the router has not queued for a look-back with the new replicas settled, the
  // replicas the backlog asked for are released without the cooldown.
  bool up_on_backlog = false;
  friend bool operator==(const AutoscalerState&, const AutoscalerState&) = default;
};

// What the caller knows of the role besides its load.
struct AutoscaleInput {
  std::vector<LoadSample> samples;  // any order; those outside the windows are ignored
  int current_replicas = 0;         // the desired size now, starting groups included
  int ready_replicas = -1;          // serving now; -1: as many as current
  int starting_replicas = 0;        // placed or waiting for a slice, not yet ready
  int free_slices = -1;             // of the role's shape, free to place now; -1: unknown
  int max_ongoing_requests = 0;     // the role's, for the default target; 0: unknown
  AutoscalerState state;
  int64_t now_ms = 0;
};

struct AutoscalerDecision {
  int desired_replicas = 0;
  // For people: "demand 9.5 in flight over 2 replicas, target 2 -> want 5 for 15 s >=
  // upscale delay 15 s".
  std::string reason;
  AutoscalerState state;  // pass back on the next call
};

// Relative band around current * target inside which the size is kept.
inline constexpr double kAutoscalerTolerance = 0.1;
// The panic window's want over the ready replicas at which a burst is declared.
inline constexpr double kAutoscalerPanicThreshold = 2.0;
// The most one step changes the size: x2 up, half down.
inline constexpr double kAutoscalerMaxUpFactor = 2.0;
inline constexpr double kAutoscalerMaxDownFraction = 0.5;
// Each step down after the first of a descent waits the downscale delay divided by this (at
// least a look-back).
inline constexpr int64_t kAutoscalerFastDownDivisor = 3;
// The SLO signal's targets when the spec does not set them (the simulator's default SLO).
inline constexpr double kAutoscalerDefaultTtftMs = 2000;
inline constexpr double kAutoscalerDefaultTpotMs = 50;
// A saturated replica is sized at this fraction of the throughput it showed at
// maxOngoingRequests in flight.
inline constexpr double kAutoscalerSaturatedUtilization = 0.8;
// With a measured capacity (AutoscalerState::capacity_tokens_per_s), the share of it the size
// aims at, the share above which it scales up, and the share at or below which a smaller
// size must land to scale down (the hysteresis band: no flapping at a capacity boundary).
inline constexpr double kAutoscalerTargetUtilization = 0.9;
inline constexpr double kAutoscalerHighWater = 0.9;
inline constexpr double kAutoscalerLowWater = 0.8;
// With a measured capacity, a step down must also keep the requests in flight per replica at
// or under this share of the target (output tokens do not count prefill work).
inline constexpr double kAutoscalerDownRequestsShare = 0.9;
// The router queued in at least this share of a window's reports: every replica was full.
inline constexpr double kAutoscalerFullShare = 0.9;
// The most the arrival rate / completion rate factor may say (a saturated window).
inline constexpr double kAutoscalerMaxArrivalFactor = 4.0;

AutoscalerDecision Autoscale(const AutoscalerConfig& config, const AutoscaleInput& input);

// The same with nothing known but the samples and the size (ready = current, nothing starting,
// free slices unknown).
AutoscalerDecision Autoscale(const AutoscalerConfig& config, const std::vector<LoadSample>& samples,
                             int current_replicas, const AutoscalerState& state, int64_t now_ms);

// The size a role starts at: initial_replicas, or min_replicas when not set.
inline int AutoscaleInitialReplicas(const AutoscalerConfig& config) {
  return config.initial_replicas < 0 ? config.min_replicas : config.initial_replicas;
}

// The target per replica in force: the configured one, or the default from maxOngoingRequests.
double AutoscaleTarget(const AutoscalerConfig& config, int max_ongoing_requests);

// The SLO targets in force (ms): the configured ones, or the defaults.
double AutoscaleTtftTarget(const AutoscalerConfig& config);
double AutoscaleTpotTarget(const AutoscalerConfig& config);

}  // namespace tessera
