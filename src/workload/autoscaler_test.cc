// Autoscale through its one function: each test feeds a load series second by second, as the
// router reports it, and checks the decisions over wall-clock time.
#include "workload/autoscaler.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>

namespace tessera {
namespace {

AutoscalerConfig Config(int min, int max) {
  AutoscalerConfig c;
  c.min_replicas = min;
  c.max_replicas = max;
  return c;
}

// Drives the autoscaler like the head does: one sample and one decision a second, the replica
// count following each decision at once. Returns the replica count after each second.
struct Series {
  explicit Series(AutoscalerConfig c) : config(c) {}
  AutoscalerConfig config;
  int replicas = 1;
  AutoscalerState state;
  std::vector<LoadSample> samples;
  std::vector<int> history;
  std::string last_reason;

  void Seconds(int64_t from_s, int64_t to_s, const std::function<double(int64_t)>& load) {
    for (int64_t t = from_s; t < to_s; ++t) {
      samples.push_back({t * 1000, load(t)});
      AutoscalerDecision d = Autoscale(config, samples, replicas, state, t * 1000);
      replicas = d.desired_replicas;
      state = d.state;
      last_reason = d.reason;
      history.push_back(replicas);
    }
  }
  // The first second at or after `from` with the count `n`, or -1.
  int64_t FirstAt(int n, size_t from = 0) const {
    for (size_t i = from; i < history.size(); ++i)
      if (history[i] == n) return static_cast<int64_t>(i);
    return -1;
  }
};

TEST(AutoscalerTest, StepUpWaitsForTheUpscaleDelayThenGoesStraightToTheWantedSize) {
  Series r{Config(1, 8)};
  r.Seconds(0, 60, [](int64_t) { return 2.0; });  // 1 replica at target
  EXPECT_EQ(r.replicas, 1);
  r.Seconds(60, 200, [](int64_t) { return 9.5; });
  EXPECT_EQ(r.replicas, 5);  // ceil(9.5 / 2)
  // The mean passes 2.2 (1 replica + 10%) at t=60 already (one sample of 9.5 in 31), so the
  // desire to go up starts then and holds 30 s.
  EXPECT_EQ(r.FirstAt(5), 60 + 30);
  for (int64_t t = 60; t < 90; ++t) EXPECT_EQ(r.history[t], 1) << "at " << t;
}

TEST(AutoscalerTest, ReasonNamesLoadReplicasTargetWantAndDelay) {
  AutoscalerConfig c = Config(1, 8);
  std::vector<LoadSample> samples;
  for (int t = 0; t <= 30; ++t) samples.push_back({t * 1000, 9.5});
  AutoscalerState state;
  state.up_since_ms = 0;
  AutoscalerDecision d = Autoscale(c, samples, 2, state, 30'000);
  EXPECT_EQ(d.desired_replicas, 5);
  EXPECT_EQ(d.reason,
            "load 9.5 ongoing over 2 replicas, target 2 -> want 5 for 30 s >= upscale delay 30 s");
  d = Autoscale(c, samples, 2, {}, 30'000);
  EXPECT_EQ(d.desired_replicas, 2);
  EXPECT_EQ(d.state.up_since_ms, 30'000);
  EXPECT_EQ(d.reason,
            "load 9.5 ongoing over 2 replicas, target 2 -> want 5 for 0 s < upscale delay 30 s");
}

TEST(AutoscalerTest, StepDownWaitsForTheDownscaleDelay) {
  Series r{Config(1, 8)};
  r.replicas = 4;
  r.Seconds(0, 1000, [](int64_t t) { return t < 100 ? 8.0 : 2.0; });
  EXPECT_EQ(r.replicas, 1);
  const int64_t down = r.FirstAt(1);
  // The mean drops under 4 * 2 * 0.9 = 7.2 at t=104 (4 of 31 samples at 2); 600 s later.
  EXPECT_GE(down, 100 + 600);
  EXPECT_LE(down, 100 + 600 + 30);
}

TEST(AutoscalerTest, ABreakInTheDesireRestartsTheDelay) {
  Series r{Config(1, 8)};
  r.config.lookback_ms = 1000;  // the mean is the newest sample: the series is the desire
  // High for 20 s, back at target for 5 s, high again: the 30 s count starts over at t=25.
  r.Seconds(0, 100, [](int64_t t) { return (t < 20 || t >= 25) ? 6.0 : 2.0; });
  EXPECT_EQ(r.FirstAt(3), 25 + 30);
}

TEST(AutoscalerTest, NoiseAroundASteadyLoadDoesNotFlap) {
  std::mt19937 rng(7);
  std::normal_distribution<double> noise(0.0, 1.5);
  Series r{Config(1, 10)};
  r.replicas = 4;
  // Steady 8 ongoing (4 replicas at target 2) with a per-second standard deviation of 1.5
  // (some seconds are at 5, some at 11) for two hours.
  r.Seconds(0, 7200, [&](int64_t) { return std::max(0.0, 8.0 + noise(rng)); });
  for (size_t i = 0; i < r.history.size(); ++i) ASSERT_EQ(r.history[i], 4) << "at " << i;
}

TEST(AutoscalerTest, ScaleFromZeroIsImmediateAndScaleToZeroAfterTheDelay) {
  Series r{Config(0, 4)};
  r.replicas = 0;
  r.Seconds(0, 10, [](int64_t) { return 0.0; });
  EXPECT_EQ(r.replicas, 0);
  r.Seconds(10, 11, [](int64_t) { return 1.0; });  // one request waits
  EXPECT_EQ(r.replicas, 1);
  EXPECT_NE(r.last_reason.find("a request waits with no replica: 1 at once"), std::string::npos)
      << r.last_reason;
  r.Seconds(11, 2000, [](int64_t) { return 0.0; });
  EXPECT_EQ(r.replicas, 0);
  EXPECT_GE(r.FirstAt(0, 11), 11 + 600);
  EXPECT_LE(r.FirstAt(0, 11), 11 + 600 + 30);
}

TEST(AutoscalerTest, StaysInsideMinAndMax) {
  Series r{Config(2, 3)};
  r.replicas = 2;
  r.Seconds(0, 200, [](int64_t) { return 100.0; });
  EXPECT_EQ(r.replicas, 3);
  r.Seconds(200, 2000, [](int64_t) { return 0.0; });
  EXPECT_EQ(r.replicas, 2);
  // Bounds that exclude the current size apply at once.
  AutoscalerDecision d = Autoscale(Config(4, 6), {}, 2, {}, 0);
  EXPECT_EQ(d.desired_replicas, 4);
}

TEST(AutoscalerTest, WithoutSamplesKeepsTheCurrentSize) {
  std::vector<LoadSample> old = {{0, 50.0}};
  AutoscalerDecision d = Autoscale(Config(1, 8), old, 3, {5'000, -1}, 120'000);
  EXPECT_EQ(d.desired_replicas, 3);
  EXPECT_EQ(d.state, AutoscalerState{});
  EXPECT_EQ(d.reason, "no load reports in the last 30 s: keep 3 replicas");
}

TEST(AutoscalerTest, DelaysAreWallClockNotCalls) {
  // The same load, decided once every 10 s instead of every second: the size changes at the
  // same wall-clock time (to the nearest call).
  AutoscalerConfig c = Config(1, 8);
  std::vector<LoadSample> samples;
  for (int t = 0; t < 120; ++t) samples.push_back({t * 1000, t < 10 ? 2.0 : 6.0});
  int replicas = 1;
  AutoscalerState state;
  int64_t changed_at = -1;
  for (int64_t t = 0; t < 120; t += 10) {
    AutoscalerDecision d = Autoscale(c, samples, replicas, state, t * 1000);
    if (d.desired_replicas != replicas && changed_at < 0) changed_at = t;
    replicas = d.desired_replicas;
    state = d.state;
  }
  EXPECT_EQ(replicas, 3);
  EXPECT_EQ(changed_at, 40);  // desire from t=10, 30 s delay
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// A prefill role scales on the prompt tokens waiting for it, not on request count: a few long
// prompts scale it up, many requests with no tokens waiting do not.
TEST(AutoscalerTest, QueuedPromptTokensSignalScalesOnTokensNotRequests) {
  AutoscalerConfig c;
  c.min_replicas = 1;
  c.max_replicas = 8;
  c.signal = AutoscaleSignal::kQueuedPromptTokens;
  c.target_queued_prompt_tokens = 1000;
  c.upscale_delay_ms = 0;
  std::vector<LoadSample> samples = {{1000, /*ongoing=*/50, /*queued tokens=*/800}};
  AutoscalerDecision d = Autoscale(c, samples, 1, {}, 1000);
  EXPECT_EQ(d.desired_replicas, 1) << d.reason;  // 800 tokens < 1 x 1000
  samples.push_back({2000, 2, 5000});
  d = Autoscale(c, samples, 1, {}, 2000);
  EXPECT_EQ(d.desired_replicas, 3) << d.reason;  // mean 2900 tokens -> ceil(2.9)
  EXPECT_NE(d.reason.find("queued prompt tokens"), std::string::npos) << d.reason;
  // From zero: tokens waiting start one replica at once.
  c.min_replicas = 0;
  d = Autoscale(c, {{3000, 0, 10}}, 0, {}, 3000);
  EXPECT_EQ(d.desired_replicas, 1) << d.reason;
}

}  // namespace
}  // namespace tessera
