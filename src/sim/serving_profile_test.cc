// Profiles of the serving simulation (serving_profile.h): the reader and its errors, the decode
// rate it gives the replica model (interpolation, the flat group beyond the table, the stated
// model unchanged without one), and runs of the engine under a profile.
#include "sim/serving_profile.h"

#include <gtest/gtest.h>

#include <sstream>

#include "sim/serving_report.h"

namespace tessera::sim {
namespace {

const char* const kGoodProfile = R"({
  "name": "example-cpu",
  "measuredOn": "2026-12-05 02:40 UTC, 2 cores, test CPU",
  "command": "bench/serving/profile.py --out p.json",
  "server": "examples/serve/server.py, a group of 1",
  "groupSize": 1,
  "loadAverage": {"before": [1.5, 1.2, 0.9], "after": [2.0, 1.4, 1.0]},
  "prefillTokensPerSecond": 2500.5,
  "decode": [
    {"concurrency": 1, "perRequestTokensPerSecond": 200, "perGroupTokensPerSecond": 200},
    {"concurrency": 4, "perRequestTokensPerSecond": 110, "perGroupTokensPerSecond": 440},
    {"concurrency": 16.0, "perRequestTokensPerSecond": 40, "perGroupTokensPerSecond": 640}
  ],
  "startupSeconds": 4.25,
  "details": {"anything": [1, 2, 3]}
})";

Result<ReplicaProfile> ReadProfileText(const std::string& text) {
  std::istringstream in(text);
  return ReadReplicaProfile(in, "p.json");
}

// kGoodProfile with `from` replaced by `to` (which must be there).
std::string ProfileWith(const std::string& from, const std::string& to) {
  std::string text = kGoodProfile;
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

TEST(ServingProfile, ReadsTheFieldsIntoTheModelAndTheLabel) {
  auto p = ReadProfileText(kGoodProfile);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->label.name, "example-cpu");
  EXPECT_EQ(p->label.file, "p.json");
  EXPECT_EQ(p->label.measured_on, "2026-12-05 02:40 UTC, 2 cores, test CPU");
  EXPECT_EQ(p->label.command, "bench/serving/profile.py --out p.json");
  EXPECT_EQ(p->model.prefill_tokens_per_s, 2500.5);
  EXPECT_EQ(p->model.startup_ms, 4'250);
  EXPECT_EQ(p->model.decode_table,
            (std::vector<DecodeRow>{{1, 200, 200}, {4, 110, 440}, {16, 40, 640}}));
  // The optional fields may be left out.
  auto bare = ReadProfileText(R"({"name": "n", "measuredOn": "m", "command": "c",
      "prefillTokensPerSecond": 1, "startupSeconds": 0,
      "decode": [{"concurrency": 1, "perRequestTokensPerSecond": 1,
                  "perGroupTokensPerSecond": 1}]})");
  ASSERT_TRUE(bare.ok()) << bare.status().ToString();
  EXPECT_EQ(bare->model.startup_ms, 0);
}

TEST(ServingProfile, AWrongFileNamesTheFieldAndTheFix) {
  struct Case {
    std::string text, message;
  };
  const std::vector<Case> cases = {
      {"", "p.json: not JSON ("},
      {"{\"name\": ", "p.json: not JSON ("},
      {"[1, 2]", "p.json: a profile is a JSON object, got [1,2]"},
      {ProfileWith("\"prefillTokensPerSecond\": 2500.5,", ""),
       "p.json: no field prefillTokensPerSecond: add it (prompt tokens"},
      {ProfileWith("\"startupSeconds\": 4.25,", ""), "p.json: no field startupSeconds: add it"},
      {ProfileWith("\"name\": \"example-cpu\",", ""), "p.json: no field name: add it"},
      {ProfileWith("\"name\": \"example-cpu\"", "\"name\": \"\""),
       "p.json: name: must be a non-empty string"},
      {ProfileWith("\"measuredOn\": \"2026-12-05 02:40 UTC, 2 cores, test CPU\"",
                   "\"measuredOn\": 2026"),
       "p.json: measuredOn: must be a non-empty string (when and on what machine it was "
       "measured), got 2026"},
      {ProfileWith("2500.5", "-5"),
       "p.json: prefillTokensPerSecond: must be positive (prompt tokens one replica prefills "
       "per second), got -5: measure it again with bench/serving/profile.py"},
      {ProfileWith("2500.5", "\"fast\""),
       "p.json: prefillTokensPerSecond: must be a number (prompt tokens one replica prefills per "
       "second), got \"fast\""},
      {ProfileWith("4.25", "-1"), "p.json: startupSeconds: must be 0 or more"},
      {ProfileWith("\"perGroupTokensPerSecond\": 440", "\"perGroupTokensPerSecond\": 0"),
       "p.json: decode[1].perGroupTokensPerSecond: must be positive"},
      {ProfileWith(", \"perGroupTokensPerSecond\": 440", ""),
       "p.json: no field decode[1].perGroupTokensPerSecond: add it"},
      {ProfileWith("\"concurrency\": 16.0", "\"concurrency\": 2"),
       "p.json: decode[2].concurrency: 2 is not above decode[1].concurrency 4: rows go in "
       "increasing concurrency, each once"},
      {ProfileWith("\"concurrency\": 4", "\"concurrency\": 1"),
       "p.json: decode[1].concurrency: 1 is not above decode[0].concurrency 1"},
      {ProfileWith("\"concurrency\": 1,", "\"concurrency\": 2,"),
       "p.json: decode[0].concurrency: the first row must be concurrency 1 (one request alone), "
       "got 2"},
      {ProfileWith("\"concurrency\": 4", "\"concurrency\": 4.5"),
       "p.json: decode[1].concurrency: must be a whole number from 1"},
      {ProfileWith("\"concurrency\": 4", "\"concurrency\": -4"),
       "p.json: decode[1].concurrency: must be a whole number from 1"},
      {ProfileWith("\"prefillTokensPerSecond\"", "\"prefilTokensPerSecond\""),
       "p.json: unknown field 'prefilTokensPerSecond'; the fields are name, measuredOn, "
       "command, server, groupSize, loadAverage, prefillTokensPerSecond, decode, "
       "startupSeconds, details: fix its spelling or remove it"},
      {ProfileWith("{\"concurrency\": 1,", "{\"tokens\": 3, \"concurrency\": 1,"),
       "p.json: decode[0]: unknown field 'tokens'; the fields are concurrency, "
       "perRequestTokensPerSecond, perGroupTokensPerSecond"},
      {R"({"name": "n", "measuredOn": "m", "command": "c", "prefillTokensPerSecond": 1,
           "startupSeconds": 1, "decode": []})",
       "p.json: decode: must be a non-empty array of rows"},
      {R"({"name": "n", "measuredOn": "m", "command": "c", "prefillTokensPerSecond": 1,
           "startupSeconds": 1, "decode": {"1": 2}})",
       "p.json: decode: must be a non-empty array of rows"},
      {ProfileWith("\"before\": [1.5, 1.2, 0.9]", "\"before\": \"high\""),
       "p.json: loadAverage.before: must be an array of load averages"},
      {ProfileWith("\"groupSize\": 1", "\"groupSize\": 0"),
       "p.json: groupSize: must be a whole number from 1"},
      {ProfileWith("\"details\": {\"anything\": [1, 2, 3]}", "\"details\": 3"),
       "p.json: details: must be an object"},
  };
  for (const Case& c : cases) {
    auto p = ReadProfileText(c.text);
    ASSERT_FALSE(p.ok()) << c.text;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(p.status().message().find(c.message), std::string::npos)
        << "got: " << p.status().message() << "\nwant: " << c.message;
  }
}

// ---------------------------------------------------------------------------------------------
// The decode rate

TEST(ServingProfile, DecodeRateInterpolatesTheTableAndHoldsTheGroupFlatBeyondIt) {
  auto p = ReadProfileText(kGoodProfile);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const ReplicaModel& m = p->model;
  // On the rows: min(per request, per group / n).
  EXPECT_DOUBLE_EQ(DecodeTokensPerSecond(m, 1), 200);
  EXPECT_DOUBLE_EQ(DecodeTokensPerSecond(m, 4), 110);
  EXPECT_DOUBLE_EQ(DecodeTokensPerSecond(m, 16), 40);
  // Between rows 1 and 4 at n = 2: per request 200 - 90 / 3 = 170, per group 200 + 240 / 3 =
  // 280, so 140 each.
  EXPECT_DOUBLE_EQ(DecodeTokensPerSecond(m, 2), 140);
  // Between 4 and 16 at n = 10: per request 110 - 70 / 2 = 75, per group 440 + 200 / 2 = 540,
  // so 54 each (the group's figure binds).
  EXPECT_DOUBLE_EQ(DecodeTokensPerSecond(m, 10), 54);
  // Beyond the last row the group makes its 640 tokens/s, shared.
  EXPECT_DOUBLE_EQ(DecodeTokensPerSecond(m, 32), 20);
  EXPECT_DOUBLE_EQ(DecodeTokensPerSecond(m, 64) * 64, 640);
  EXPECT_DOUBLE_EQ(DecodeTokensPerSecond(m, 0), 200);  // read as one
  // A one-row table: that row at 1, the group flat after.
  ReplicaModel one;
  one.decode_table = {{1, 50, 50}};
  EXPECT_DOUBLE_EQ(DecodeTokensPerSecond(one, 1), 50);
  EXPECT_DOUBLE_EQ(DecodeTokensPerSecond(one, 5), 10);
}

// Without a table the rate is the stated model's expression, to the bit: the runs (and their
// event hashes) of sim-serve without --profile are those from before profiles existed.
TEST(ServingProfile, WithoutATableTheRateIsTheStatedModelsExactly) {
  const ReplicaModel m;
  ASSERT_TRUE(m.decode_table.empty());
  for (size_t n = 1; n <= 256; ++n)
    EXPECT_EQ(DecodeTokensPerSecond(m, n), std::min(40.0, 400.0 / static_cast<double>(n))) << n;
}

TEST(ServingProfile, OptionsRefuseATableOutOfOrder) {
  ServingSimOptions o;
  o.model.decode_table = {{1, 10, 10}, {1, 5, 10}};
  Status s = ValidateServingOptions(o);
  EXPECT_NE(s.message().find("decode table (--profile) row 1: concurrency 1 is not above"),
            std::string::npos)
      << s.message();
  o.model.decode_table = {{2, 10, 10}};
  s = ValidateServingOptions(o);
  EXPECT_NE(s.message().find("the first row must be concurrency 1"), std::string::npos)
      << s.message();
  o.model.decode_table = {{1, 10, -1}};
  s = ValidateServingOptions(o);
  EXPECT_NE(s.message().find("row 0 per-group tokens per second: must be positive"),
            std::string::npos)
      << s.message();
}

// ---------------------------------------------------------------------------------------------
// The engine under a profile

// Arrivals every `period_ms` for `seconds`, each `context` tokens in and `output` out.
LlmTrace ProfileTrace(int64_t seconds, int64_t period_ms, int context, int output) {
  LlmTrace t;
  for (int64_t us = 0; us < seconds * 1'000'000; us += period_ms * 1000) {
    LlmRequest r;
    r.arrival_us = us;
    r.context_tokens = context;
    r.generated_tokens = output;
    t.requests.push_back(r);
  }
  return t;
}

ServingRunResult ProfileRun(const LlmTrace& t, const std::string& config,
                            const ReplicaModel& model) {
  ServingSimOptions o;
  o.model = model;
  auto c = ParseScalingConfig(config, AutoscalerConfig{});
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  auto r = RunServingSimulation(t, *c, o);
  EXPECT_TRUE(r.ok()) << config << " seed " << o.seed << ": " << r.status().ToString();
  return r.ok() ? *r : ServingRunResult{};
}

// Two replica models alike alone (150 tokens/s for one request) and unlike in batches: one
// group's throughput stays at 150 tokens/s however many decode, the other's grows to 1,600 at
// 16. At 2 req/s of 200 -> 100 tokens on one replica the decode demand is 198 tokens/s: the
// flat one falls behind until 16 decode at once, each at 150 / 16 = 9.4 tokens/s (107 ms a
// token, past the 50 ms objective), and the router's queue grows behind them; the batching one
// keeps up with about two at once (2 at once make 123 tokens/s each).
TEST(ServingProfile, HigherBatchThroughputMakesFewerRequestsMiss) {
  const LlmTrace t = ProfileTrace(600, 500, 200, 100);
  ReplicaModel flat, batching;
  flat.prefill_tokens_per_s = batching.prefill_tokens_per_s = 20'000;
  flat.decode_table = {{1, 150, 150}, {16, 9.375, 150}};
  batching.decode_table = {{1, 150, 150}, {16, 100, 1'600}};
  const ServingRunResult f = ProfileRun(t, "fixed=1", flat);
  const ServingRunResult b = ProfileRun(t, "fixed=1", batching);
  EXPECT_GE(b.slo_attainment, 0.99);
  EXPECT_LT(f.slo_attainment, 0.5);
  EXPECT_LT(b.tpot.p99_ms, 50);
  EXPECT_GT(f.tpot.p99_ms, 50);
  EXPECT_LT(b.latency.p50_ms, f.latency.p50_ms);
}

// One request alone decodes at the table's first row; the start-up and the prefill rate come
// from the profile too.
TEST(ServingProfile, StartUpPrefillAndTheFirstRowComeFromTheProfile) {
  auto p = ReadProfileText(kGoodProfile);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  // One request at 0 s of 2,501 tokens in (1 s of prefill) and 101 out (100 at 200 tokens/s).
  const LlmTrace t = ProfileTrace(1, 5000, 2501, 101);
  const ServingRunResult warm = ProfileRun(t, "fixed=1", p->model);
  ASSERT_EQ(warm.completed, 1);
  EXPECT_NEAR(warm.ttft.p50_ms, 1'000.2, 0.01);  // ceil to the microsecond
  EXPECT_NEAR(warm.tpot.p50_ms, 5, 0.001);
  // From zero replicas: the group is placed on the tick after the first load report (0.1 s)
  // and ready at the first readiness probe (10 s later) after its 4.25 s start-up.
  const ServingRunResult cold = ProfileRun(t, "auto=0-1@1", p->model);
  ASSERT_EQ(cold.completed, 1);
  EXPECT_NEAR(cold.ttft.p50_ms, 10'100 + 1'000.2, 0.01);
  ReplicaModel slow = p->model;
  slow.startup_ms = 14'000;  // past the first probe: ready at the second
  EXPECT_NEAR(ProfileRun(t, "auto=0-1@1", slow).ttft.p50_ms, 20'100 + 1'000.2, 0.01);
}

TEST(ServingProfile, ReportsNameTheProfileInUse) {
  const LlmTrace t = ProfileTrace(60, 1000, 100, 10);
  ServingComparison c;
  c.source = "constant";
  c.runs.push_back(ProfileRun(t, "fixed=1", c.options.model));
  std::ostringstream text, json;
  WriteServingText(text, c);
  WriteServingJson(json, c);
  EXPECT_NE(text.str().find("\nprofile: default (stated, not measured)\n"), std::string::npos)
      << text.str();
  EXPECT_NE(json.str().find("\"profile\": {\n    \"measured\": false,\n    \"name\": \"default\""),
            std::string::npos)
      << json.str();

  auto p = ReadProfileText(kGoodProfile);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  c.profile = p->label;
  c.options.model = p->model;
  std::ostringstream text2, json2;
  WriteServingText(text2, c);
  WriteServingJson(json2, c);
  EXPECT_NE(text2.str().find("\nprofile: example-cpu (p.json), measured 2026-12-05 02:40 UTC, 2 "
                             "cores, test CPU\n"),
            std::string::npos)
      << text2.str();
  EXPECT_NE(json2.str().find("\"measuredOn\": \"2026-12-05 02:40 UTC, 2 cores, test CPU\""),
            std::string::npos)
      << json2.str();
  EXPECT_NE(json2.str().find("\"decodeTable\""), std::string::npos) << json2.str();
  EXPECT_NE(json2.str().find("\"perGroupTokensPerSecond\": 640.0"), std::string::npos)
      << json2.str();
}

}  // namespace
}  // namespace tessera::sim
