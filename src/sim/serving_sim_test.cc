// The serving simulation through its public API: the trace reader and its errors, the
// configuration syntax, and hand-checked scenarios of the engine (settling, a load step,
// chip-hours, SLO attainment, stopping groups, scale from zero, determinism).
#include "sim/serving_sim.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <sstream>

#include "sim/serving_frontier.h"
#include "sim/serving_report.h"

namespace tessera::sim {
namespace {

// Arrivals every `period_ms` in [from_s, to_s), each `context` tokens in, `output` out.
void Constant(LlmTrace& t, int64_t from_s, int64_t to_s, int64_t period_ms, int context,
              int output) {
  for (int64_t us = from_s * 1'000'000; us < to_s * 1'000'000; us += period_ms * 1000) {
    LlmRequest r;
    r.arrival_us = us;
    r.context_tokens = context;
    r.generated_tokens = output;
    r.line = static_cast<int64_t>(t.requests.size()) + 2;
    t.requests.push_back(r);
  }
}

ServingSimOptions Options() {
  ServingSimOptions o;
  o.series_interval_ms = 1'000;
  return o;
}

ScalingConfig Auto(int min, int max, int target) {
  auto c = ParseScalingConfig(
      "auto=" + std::to_string(min) + "-" + std::to_string(max) + "@" + std::to_string(target),
      AutoscalerConfig{});
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return *c;
}

ScalingConfig Fixed(int n) {
  auto c = ParseScalingConfig("fixed=" + std::to_string(n), AutoscalerConfig{});
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return *c;
}

ServingRunResult Simulate(const LlmTrace& t, const ScalingConfig& c, const ServingSimOptions& o) {
  auto r = RunServingSimulation(t, c, o);
  EXPECT_TRUE(r.ok()) << c.name << " seed " << o.seed << ": " << r.status().ToString();
  return r.ok() ? *r : ServingRunResult{};
}

Status ReadError(const std::string& text) {
  std::istringstream in(text);
  auto t = ReadLlmTrace(in, "t.csv");
  return t.ok() ? Status::Ok() : t.status();
}

// ---------------------------------------------------------------------------------------------
// The trace

TEST(LlmTrace, ReadsColumnsByNameAndOffsetsFromTheFirstRow) {
  std::istringstream in(
      "GeneratedTokens,Extra,TIMESTAMP,ContextTokens\r\n"
      "44,x,2023-11-16 18:15:46.6805900,374\r\n"
      "\n"
      "0,y,2023-11-16 18:15:47.0000000,1\n"
      "7,z,2023-11-17 00:00:00,9\n");
  auto t = ReadLlmTrace(in, "t.csv");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->requests.size(), 3u);
  EXPECT_EQ(t->requests[0].arrival_us, 0);
  EXPECT_EQ(t->requests[0].context_tokens, 374);
  EXPECT_EQ(t->requests[0].generated_tokens, 44);
  EXPECT_EQ(t->requests[1].arrival_us, 319'410);  // 47.0 - 46.68059 s, to the microsecond
  EXPECT_EQ(t->requests[1].generated_tokens, 0);
  EXPECT_EQ(t->requests[1].line, 4);
  // Across midnight: 5 h 44 min 13.31941 s later.
  EXPECT_EQ(t->requests[2].arrival_us, ((5 * 60 + 44) * 60 + 13) * 1'000'000ll + 319'410);
}

// The 2024 traces (AzureLLMInferenceDataset2024) write a UTC offset: taken back to UTC.
TEST(LlmTrace, ReadsTimestampsWithAZone) {
  std::istringstream in(
      "TIMESTAMP,ContextTokens,GeneratedTokens\n"
      "2024-05-10 00:00:00.009930+00:00,2162,5\n"
      "2024-05-10 00:00:01Z,10,1\n"
      "2024-05-10 02:00:02.5+02:00,10,1\n"
      "2024-05-09 20:00:03-04:00,10,1\n");
  auto t = ReadLlmTrace(in, "t.csv");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->requests.size(), 4u);
  EXPECT_EQ(t->requests[1].arrival_us, 990'070);
  EXPECT_EQ(t->requests[2].arrival_us, 2'490'070);
  EXPECT_EQ(t->requests[3].arrival_us, 2'990'070);
  for (const std::string bad : {"2024-05-10 00:00:00+24:00", "2024-05-10 00:00:00+0000",
                                "2024-05-10 00:00:00.+00:00", "2024-02-30 00:00:00+00:00"}) {
    std::istringstream one("TIMESTAMP,ContextTokens,GeneratedTokens\n" + bad + ",1,1\n");
    auto r = ReadLlmTrace(one, "t.csv");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().message(),
              "t.csv:2: column TIMESTAMP: '" + bad +
                  "' is not a timestamp YYYY-MM-DD HH:MM:SS[.fraction][+HH:MM]");
  }
}

TEST(LlmTrace, BadInputNamesTheLineAndTheColumn) {
  const std::string header = "TIMESTAMP,ContextTokens,GeneratedTokens\n";
  const std::string ok = "2023-11-16 18:15:46.68,374,44\n";
  struct Case {
    std::string text, message;
  };
  const std::vector<Case> cases = {
      {"", "t.csv:1: the file is empty"},
      {"TIMESTAMP,ContextTokens\n" + ok, "t.csv:1: header: no column GeneratedTokens"},
      {header, "t.csv: no requests after the header"},
      {header + ok + "2023-11-16 18:15:47,abc,3\n",
       "t.csv:3: column ContextTokens: 'abc' is not a whole number"},
      {header + ok + "2023-11-16 18:15:47,12,-3\n",
       "t.csv:3: column GeneratedTokens: '-3' is not a whole number"},
      {header + ok + "2023-11-16 18:15:47,0,3\n",
       "t.csv:3: column ContextTokens: must be at least 1, got 0"},
      {header + ok + "2023-11-16 18:15:47,12\n",
       "t.csv:3: column GeneratedTokens: missing (the row has 2 fields"},
      {header + ok + "18:15:47,12,3\n", "t.csv:3: column TIMESTAMP: '18:15:47' is not a timestamp"},
      {header + ok + "2023-13-16 18:15:47,12,3\n", "t.csv:3: column TIMESTAMP: '2023-13-16"},
      {header + ok + "2023-11-16 18:15:40,12,3\n",
       "t.csv:3: column TIMESTAMP: 2023-11-16 18:15:40 is earlier than the row before it "
       "(2023-11-16 18:15:46.68); the trace must be in arrival order"},
      {header + ok + "2023-11-16 18:15:47,99999999999,3\n",
       "t.csv:3: column ContextTokens: '99999999999' is not a whole number"},
  };
  for (const Case& c : cases) {
    const Status s = ReadError(c.text);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(s.message().find(c.message), std::string::npos)
        << "got: " << s.message() << "\nwant: " << c.message;
  }
}

TEST(LlmTrace, ReadsTheRealConversationTrace) {
  std::ifstream in(std::string(TESSERA_TRACES_DIR) + "/azure-llm-inference-2023/conv.csv");
  if (!in) GTEST_SKIP() << "../shared/traces/azure-llm-inference-2023/conv.csv not present";
  auto t = ReadLlmTrace(in, "conv.csv");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->requests.size(), 19'366u);
  EXPECT_EQ(t->requests.front().context_tokens, 374);
  EXPECT_EQ(t->requests.front().generated_tokens, 44);
  // One hour of arrivals.
  EXPECT_GT(t->requests.back().arrival_us, 3'500'000'000);
  EXPECT_LT(t->requests.back().arrival_us, 3'700'000'000);
}

// ---------------------------------------------------------------------------------------------
// Configurations and options

TEST(ScalingConfigs, ParseFixedAndAutoWithTheirDelays) {
  AutoscalerConfig defaults;
  defaults.upscale_delay_ms = 30'000;
  auto f = ParseScalingConfig("fixed=4", defaults);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->replicas, 4);
  EXPECT_FALSE(f->autoscaling);
  auto a = ParseScalingConfig("auto=0-16@2.5:down=120:lookback=10", defaults);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(a->autoscaling);
  EXPECT_EQ(a->autoscaling->min_replicas, 0);
  EXPECT_EQ(a->autoscaling->max_replicas, 16);
  EXPECT_DOUBLE_EQ(a->autoscaling->target_ongoing_requests, 2.5);
  EXPECT_EQ(a->autoscaling->upscale_delay_ms, 30'000);
  EXPECT_EQ(a->autoscaling->downscale_delay_ms, 120'000);
  EXPECT_EQ(a->autoscaling->lookback_ms, 10'000);
  // Without @TARGET (or with 0): the default target; SLO targets in milliseconds.
  auto slo = ParseScalingConfig("auto=1-8:ttft=2000:tpot=50", defaults);
  ASSERT_TRUE(slo.ok()) << slo.status().ToString();
  EXPECT_EQ(slo->autoscaling->target_ongoing_requests, 0);
  EXPECT_EQ(slo->autoscaling->target_ttft_ms, 2000);
  EXPECT_EQ(slo->autoscaling->target_tpot_ms, 50);
  // A start other than the minimum (Ray Serve's initial_replicas).
  auto warm = ParseScalingConfig("auto=1-8:initial=5", defaults);
  ASSERT_TRUE(warm.ok()) << warm.status().ToString();
  EXPECT_EQ(warm->autoscaling->initial_replicas, 5);
  EXPECT_EQ(warm->replicas, 5);
  EXPECT_EQ(a->autoscaling->initial_replicas, -1);
  EXPECT_EQ(a->replicas, 0);
  for (const char* bad : {"fixed=0", "fixed=x", "auto=4-2@1", "auto=1", "auto=1-4@-1",
                          "auto=1-4@2:up=-1", "auto=1-4@2:sideways=3", "auto=2-4:initial=1",
                          "auto=1-4:initial=5", "auto=1-4:initial=2.5", "both=3", ""}) {
    auto r = ParseScalingConfig(bad, defaults);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find(std::string("'") + bad + "'"), std::string::npos)
        << r.status().message();
  }
}

TEST(ScalingConfigs, ARangeOfFixedCountsAndBareAutoTakingTheRangesMax) {
  AutoscalerConfig defaults;
  auto list = ParseScalingConfigs("fixed=2..4,auto,auto:tpot=50,auto=2-6@3", defaults);
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->size(), 6u);
  EXPECT_EQ((*list)[0].name, "fixed=2");
  EXPECT_EQ((*list)[2].name, "fixed=4");
  EXPECT_EQ((*list)[2].replicas, 4);
  const ScalingConfig& bare = (*list)[3];
  EXPECT_EQ(bare.name, "auto");
  ASSERT_TRUE(bare.autoscaling);
  AutoscalerConfig expected = defaults;
  expected.min_replicas = 1;
  expected.max_replicas = 4;
  EXPECT_EQ(*bare.autoscaling, expected);
  EXPECT_EQ((*list)[4].autoscaling->target_tpot_ms, 50);
  EXPECT_EQ((*list)[4].autoscaling->max_replicas, 4);
  EXPECT_EQ((*list)[5].autoscaling->max_replicas, 6);
  auto warm = ParseScalingConfigs("fixed=1..4,auto:initial=3", defaults);
  ASSERT_TRUE(warm.ok()) << warm.status().ToString();
  EXPECT_EQ(warm->back().replicas, 3);
  EXPECT_EQ(warm->back().autoscaling->min_replicas, 1);
  for (const char* bad : {"auto", "fixed=3..1", "fixed=0..2", "fixed=1..x", "fixed=1..4,auto:x=1",
                          "fixed=1..4,auto:initial=5"}) {
    auto r = ParseScalingConfigs(bad, defaults);
    EXPECT_FALSE(r.ok()) << bad;
  }
}

TEST(ServingOptions, BadOptionsAreRefusedNamingTheFlag) {
  LlmTrace t;
  Constant(t, 0, 10, 1000, 100, 10);
  auto expect = [&](const std::function<void(ServingSimOptions&)>& change,
                    const std::string& flag) {
    ServingSimOptions o = Options();
    change(o);
    auto r = RunServingSimulation(t, Fixed(1), o);
    ASSERT_FALSE(r.ok()) << flag;
    EXPECT_NE(r.status().message().find(flag), std::string::npos) << r.status().message();
  };
  expect([](ServingSimOptions& o) { o.time_scale = 0; }, "--time-scale");
  expect([](ServingSimOptions& o) { o.model.prefill_tokens_per_s = -1; }, "--prefill-tokens-per-s");
  expect([](ServingSimOptions& o) { o.topology = Shape::Of(4, 5); }, "--topology");
  expect([](ServingSimOptions& o) { o.model.startup_ms = 900'000; }, "--startup-grace-s");
  expect([](ServingSimOptions& o) { o.max_ongoing_requests = 0; }, "--max-ongoing-requests");
}

// ---------------------------------------------------------------------------------------------
// The engine

// 4 req/s of 800 -> 200 tokens. One request takes 0.1 s of prefill and 199 / 40 = 5 s of
// decode (at most 10 decoding per replica stay under the replica's 400 tokens/s), a bit more
// with the prefills of others pausing decode: about 5.4 s, so ~22 ongoing by Little's law, and
// a target of 4 per replica wants ceil(22 / 4) = 6 replicas. Starting from one replica it may
// overshoot (the queue grows while the first new groups start) and come back once; then, with
// a size of 6 the load neither wants fewer (<= 20) nor passes the band above (26.4), and the
// autoscaler must hold still.
TEST(ServingEngine, ConstantLoadSettlesAtTheExpectedCountWithoutFlapping) {
  LlmTrace t;
  Constant(t, 0, 3600, 250, 800, 200);
  ServingSimOptions o = Options();
  const ServingRunResult r = Simulate(t, Auto(1, 16, 4), o);
  ASSERT_FALSE(r.series.empty());
  EXPECT_EQ(r.series.back().desired, 6);
  // No decision in the second half hour.
  for (const ScaleEvent& e : r.scale_events) {
    EXPECT_LT(e.time_s, 1800) << e.reason;
  }
  // At most one change of direction (an overshoot while the first groups start, corrected).
  int reversals = 0;
  for (size_t i = 1; i < r.scale_events.size(); ++i) {
    const bool up0 = r.scale_events[i - 1].to > r.scale_events[i - 1].from;
    const bool up1 = r.scale_events[i].to > r.scale_events[i].from;
    reversals += up0 != up1 ? 1 : 0;
  }
  EXPECT_LE(reversals, 1);
  // Settled, nothing waits at the router any more. (While the first groups start, one replica
  // cannot keep up and the router's queue overflows: those 503s are part of the result.)
  for (const ReplicaPoint& p : r.series) {
    if (p.time_s >= 1800) {
      EXPECT_EQ(p.queued, 0) << "at " << p.time_s << " s";
    }
  }
  EXPECT_EQ(r.completed + r.rejected + r.timed_out + r.failed, r.requests);
}

// 1 req/s for 10 minutes (2 replicas at target 4 hold it), then 6 req/s: a burst (the router's
// queue piles up and the panic window wants 2x or more), so the first upscale comes at once,
// and the new groups take traffic at the first readiness probe after their start-up (120 s).
TEST(ServingEngine, ALoadStepScalesUpAfterTheDelayPlusStartUp) {
  LlmTrace t;
  Constant(t, 0, 600, 1000, 800, 200);
  Constant(t, 600, 1500, 166, 800, 200);
  ServingSimOptions o = Options();
  const ServingRunResult r = Simulate(t, Auto(2, 16, 4), o);
  ASSERT_FALSE(r.scale_events.empty());
  const ScaleEvent& up = r.scale_events.front();
  EXPECT_GT(up.to, 2);
  EXPECT_GE(up.time_s, 600) << up.reason;
  EXPECT_LE(up.time_s, 600 + 15) << up.reason;  // the panic window (6 s) fills within seconds
  EXPECT_NE(up.reason.find("burst"), std::string::npos) << up.reason;
  // Ready groups: 2 until the new ones finish starting, then more.
  double first_more = -1;
  for (const ReplicaPoint& p : r.series) {
    if (p.time_s < up.time_s + 120) {
      EXPECT_LE(p.ready, 2) << "at " << p.time_s << " s";
    }
    if (p.ready > 2 && first_more < 0) first_more = p.time_s;
  }
  EXPECT_GE(first_more, up.time_s + 120);
  EXPECT_LE(first_more, up.time_s + 120 + o.probe_period_ms / 1000.0 + 1);
}

TEST(ServingEngine, FixedReplicasChipHoursAreReplicasTimesChipsTimesHours) {
  LlmTrace t;
  Constant(t, 0, 900, 400, 500, 100);
  for (const Shape shape : {Shape::Of(4, 4), Shape::Of(2, 4)}) {
    ServingSimOptions o = Options();
    o.topology = shape;
    const ServingRunResult r = Simulate(t, Fixed(3), o);
    EXPECT_EQ(r.chips_per_replica, shape.chips());
    EXPECT_GT(r.duration_us, 900'000'000);
    EXPECT_EQ(r.chip_us, 3 * shape.chips() * r.duration_us);
    EXPECT_EQ(r.chip_hours, static_cast<double>(3 * shape.chips() * r.duration_us) / 3.6e9);
    EXPECT_EQ(r.replica_hours, static_cast<double>(3 * shape.chips() * r.duration_us) /
                                   static_cast<double>(shape.chips()) / 3.6e9);
    EXPECT_EQ(r.max_placed, 3);
    EXPECT_TRUE(r.scale_events.empty());
  }
}

TEST(ServingEngine, SloAttainmentDropsWhenCapacityIsTooSmall) {
  LlmTrace t;
  Constant(t, 0, 600, 250, 800, 200);  // ~22 ongoing: needs 2+ replicas of 16 slots
  ServingSimOptions o = Options();
  const ServingRunResult small = Simulate(t, Fixed(1), o);
  const ServingRunResult enough = Simulate(t, Fixed(6), o);
  EXPECT_GE(enough.slo_attainment, 0.99);
  EXPECT_LT(small.slo_attainment, 0.5);
  EXPECT_LT(small.slo_attainment, enough.slo_attainment);
  EXPECT_GT(small.ttft.p99_ms, enough.ttft.p99_ms);
  // One replica cannot keep up: its queue overflows or times out.
  EXPECT_GT(small.rejected + small.timed_out, 0);
  EXPECT_EQ(small.slo_met + (small.completed - small.slo_met) + small.rejected + small.timed_out +
                small.failed,
            small.requests);
}

// A burst then quiet: the autoscaler stops groups. A stopped group leaves routing and finishes
// its requests within the grace period; without a grace they are killed.
TEST(ServingEngine, StoppedGroupsDrainWithinTheGraceOrTheirRequestsFail) {
  LlmTrace t;
  Constant(t, 0, 300, 125, 800, 200);
  Constant(t, 300, 1500, 2000, 800, 200);
  ScalingConfig c = *ParseScalingConfig("auto=1-16@4:down=60", AutoscalerConfig{});
  ServingSimOptions o = Options();
  const ServingRunResult drained = Simulate(t, c, o);
  bool went_down = false;
  for (const ScaleEvent& e : drained.scale_events) went_down = went_down || e.to < e.from;
  EXPECT_TRUE(went_down);
  EXPECT_EQ(drained.failed, 0);
  // Chips are charged only while held: less than the peak held all along.
  EXPECT_LT(drained.chip_us, drained.max_placed * drained.chips_per_replica * drained.duration_us);
  o.grace_ms = 0;
  const ServingRunResult killed = Simulate(t, c, o);
  EXPECT_GT(killed.failed, 0);
  EXPECT_EQ(killed.completed + killed.failed + killed.rejected + killed.timed_out, killed.requests);
}

TEST(ServingEngine, FromZeroTheFirstRequestWaitsForAStartUp) {
  LlmTrace t;
  Constant(t, 0, 1, 5000, 100, 10);  // one request at 0 s
  ServingSimOptions o = Options();
  o.model.startup_ms = 30'000;
  const ServingRunResult r = Simulate(t, Auto(0, 2, 2), o);
  ASSERT_EQ(r.completed, 1);
  ASSERT_EQ(r.scale_events.size(), 1u);
  EXPECT_EQ(r.scale_events.front().from, 0);
  EXPECT_EQ(r.scale_events.front().to, 1);
  EXPECT_NE(r.scale_events.front().reason.find("a request waits with no replica"),
            std::string::npos)
      << r.scale_events.front().reason;
  // Decided on the tick after the first load report (0.1 s), ready at the third probe 30 s
  // later, then 100 tokens of prefill (12.5 ms).
  EXPECT_DOUBLE_EQ(r.scale_events.front().time_s, 0.1);
  EXPECT_DOUBLE_EQ(r.ttft.p50_ms, 30'100 + 12.5);
  // With the router's queue timeout below the start-up, the request gets a 503 instead.
  o.queue_timeout_ms = 10'000;
  const ServingRunResult timed_out = Simulate(t, Auto(0, 2, 2), o);
  EXPECT_EQ(timed_out.timed_out, 1);
  EXPECT_EQ(timed_out.slo_attainment, 0);
}

// Until a group placed at time 0 is ready (the start-up), an autoscaled run starting at one
// replica serves exactly as fixed=1: the requests whose first token is due before then get it
// in time as often in both, and from that start no schedule meets more than the oracle's most.
TEST(ServingEngine, FromItsStartAutoIsFixedAtItsMinimumUntilTheStartUp) {
  LlmTrace t;
  Constant(t, 0, 900, 100, 800, 200);  // 10 req/s: one replica holds about 3
  ServingSimOptions o = Options();
  auto configs = ParseScalingConfigs("fixed=1..5,auto", AutoscalerConfig{});
  ASSERT_TRUE(configs.ok()) << configs.status().ToString();
  ServingComparison c;
  c.options = o;
  for (const ScalingConfig& config : *configs) c.runs.push_back(Simulate(t, config, o));
  const ServingRunResult& one = c.runs[0];
  const ServingRunResult& autoscaled = c.runs.back();
  ASSERT_TRUE(autoscaled.config.autoscaling.has_value());
  ASSERT_FALSE(autoscaled.scale_events.empty());
  EXPECT_LT(autoscaled.scale_events.front().time_s, 5) << autoscaled.scale_events.front().reason;
  EXPECT_EQ(one.early_cut_us, (o.model.startup_ms - o.slo.ttft_ms) * 1000);
  EXPECT_EQ(autoscaled.early_requests, 1180);  // one every 100 ms in the first 118 s
  EXPECT_EQ(one.early_requests, autoscaled.early_requests);
  EXPECT_EQ(autoscaled.window_early_ttft_met, one.window_early_ttft_met);
  int64_t in_time = 0;
  for (int64_t n : one.window_early_ttft_met) in_time += n;
  EXPECT_GT(in_time, 0);
  EXPECT_LT(in_time, one.early_requests / 2);  // one replica is far behind
  // More replicas from time 0 meet more of them: the start is what costs.
  int64_t five = 0;
  for (int64_t n : c.runs[4].window_early_met) five += n;
  EXPECT_GT(five, 2 * in_time);

  const ServingFrontier f = ComputeFrontier(c);
  ASSERT_EQ(f.autos.size(), 1u);
  const AutoVerdict& v = f.autos[0];
  ASSERT_TRUE(v.from_start);
  EXPECT_EQ(v.initial_replicas, 1);
  EXPECT_EQ(v.early_in_time, in_time);
  EXPECT_LE(autoscaled.slo_met, v.most_met_from_start);
  EXPECT_LE(v.most_met_from_start, autoscaled.requests - (one.early_requests - in_time));
  ASSERT_TRUE(v.goal_reach_from_start.computed);
}

// With initial=N the service starts with N groups ready, and the autoscaler goes from there.
TEST(ServingEngine, AnInitialSizeStartsTheRunWarm) {
  LlmTrace t;
  Constant(t, 0, 900, 100, 800, 200);
  ServingSimOptions o = Options();
  auto warm = ParseScalingConfig("auto=1-8:initial=4", AutoscalerConfig{});
  ASSERT_TRUE(warm.ok()) << warm.status().ToString();
  const ServingRunResult r = Simulate(t, *warm, o);
  ASSERT_FALSE(r.series.empty());
  EXPECT_EQ(r.series.front().ready, 4);
  ASSERT_FALSE(r.scale_events.empty());
  EXPECT_EQ(r.scale_events.front().from, 4);
  // Warm, the first 118 s are served as fixed=4 serves them.
  const ServingRunResult four = Simulate(t, Fixed(4), o);
  EXPECT_EQ(r.window_early_ttft_met, four.window_early_ttft_met);
  const ServingRunResult cold = Simulate(t, Auto(1, 8, 0), o);
  EXPECT_GT(r.slo_met, cold.slo_met);
}

TEST(ServingEngine, TheSameSeedReplaysTheSameRun) {
  LlmTrace t;
  Constant(t, 0, 600, 200, 700, 150);
  ServingSimOptions o = Options();
  o.seed = 7;
  const ServingRunResult a = Simulate(t, Auto(1, 8, 3), o);
  const ServingRunResult b = Simulate(t, Auto(1, 8, 3), o);
  EXPECT_EQ(a.event_hash, b.event_hash);
  EXPECT_EQ(a.chip_us, b.chip_us);
  EXPECT_EQ(a.ttft.p99_ms, b.ttft.p99_ms);
  o.seed = 8;  // other power-of-two-choices draws: other replicas, other times
  const ServingRunResult c = Simulate(t, Auto(1, 8, 3), o);
  EXPECT_NE(a.event_hash, c.event_hash);
}

TEST(ServingEngine, TimeScaleCompressesArrivals) {
  LlmTrace t;
  Constant(t, 0, 600, 1000, 100, 10);
  ServingSimOptions o = Options();
  o.time_scale = 10;
  const ServingRunResult r = Simulate(t, Fixed(2), o);
  EXPECT_LT(r.duration_us, 62'000'000);  // 600 s of arrivals in 60 s, plus the last request
  EXPECT_GT(r.duration_us, 59'000'000);
}

TEST(ServingReport, TextJsonAndCsvCarryEveryRun) {
  LlmTrace t;
  Constant(t, 0, 120, 500, 300, 50);
  ServingComparison c;
  c.source = "constant";
  c.options = Options();
  c.runs.push_back(Simulate(t, Fixed(2), c.options));
  c.runs.push_back(Simulate(t, Auto(1, 4, 2), c.options));
  std::ostringstream text, json, csv;
  WriteServingText(text, c);
  WriteServingJson(json, c);
  WriteServingCsv(csv, c);
  EXPECT_NE(text.str().find("fixed=2"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("auto=1-4@2"), std::string::npos) << text.str();
  EXPECT_NE(json.str().find("\"chipHours\""), std::string::npos);
  EXPECT_NE(json.str().find("\"scaleEvents\""), std::string::npos);
  EXPECT_EQ(csv.str().rfind("config,time_s,desired,placed,ready,ongoing,queued\n", 0), 0u);
  EXPECT_NE(csv.str().find("\nauto=1-4@2,"), std::string::npos);
}

}  // namespace
}  // namespace tessera::sim
