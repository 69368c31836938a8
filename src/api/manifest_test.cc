#include "api/manifest.h"

#include <gtest/gtest.h>

namespace tessera::api {
namespace {

const char* kGood = R"(
apiVersion: tessera/v1
kind: TrainJob
metadata: {name: llama-8b, queue: research, labels: {team: a}}
spec:
  accelerator: v6e
  topology: 4x4
  slices: {min: 1, max: 2}
  priority: high
  failurePolicy: {maxFailures: 3, onHostLoss: resize}
  progress: {hangTimeout: 60s}
  checkpoint: {dir: /data/ckpt/llama-8b}
  template:
    command: [python3, train.py]
    env: {STEPS: "1000", LR: 0.1}
)";

std::string ErrorOf(const std::string& yaml) {
  auto doc = ParseDocument(yaml);
  if (!doc.ok()) return doc.status().message();
  auto spec = ParseTrainJob(*doc);
  EXPECT_FALSE(spec.ok()) << yaml;
  return spec.ok() ? "" : spec.status().message();
}

std::string WithSpecLine(const std::string& from, const std::string& to) {
  std::string s = kGood;
  const size_t pos = s.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  return s.replace(pos, from.size(), to);
}

TEST(Manifest, TheArchitectureExampleParses) {
  auto doc = ParseDocument(kGood);
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  auto spec = ParseTrainJob(*doc);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->name, "llama-8b");
  EXPECT_EQ(spec->queue, "research");
  EXPECT_EQ(spec->accelerator, Generation::kV6e);
  EXPECT_EQ(spec->topology, Shape::Of(4, 4));
  EXPECT_EQ(spec->min_slices, 1);
  EXPECT_EQ(spec->max_slices, 2);
  EXPECT_EQ(spec->max_failures, 3);
  EXPECT_EQ(spec->on_host_loss, HostLossPolicy::kResize);
  EXPECT_EQ(spec->hang_timeout_ms, 60'000);
  EXPECT_EQ(spec->command, (std::vector<std::string>{"python3", "train.py"}));
  EXPECT_EQ(spec->env.at("STEPS"), "1000");
  EXPECT_EQ(spec->env.at("LR"), "0.1");
}

TEST(Manifest, JsonInputWorksToo) {
  auto doc = ParseDocument(
      R"({"apiVersion":"tessera/v1","kind":"TrainJob","metadata":{"name":"j"},)"
      R"("spec":{"accelerator":"7x","topology":"2x2x2","slices":3,"template":{"command":["true"]}}})");
  ASSERT_TRUE(doc.ok());
  auto spec = ParseTrainJob(*doc);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->min_slices, 3);
  EXPECT_EQ(spec->max_slices, 3);
}

TEST(Manifest, MalformedInputNamesWhereItBroke) {
  EXPECT_NE(ErrorOf("{\"apiVersion\": ").find("malformed JSON"), std::string::npos);
  EXPECT_NE(ErrorOf("a: [b, c\nd: e").find("malformed YAML at line"), std::string::npos);
  EXPECT_NE(ErrorOf("").find("empty"), std::string::npos);
  EXPECT_NE(ErrorOf("a: 1\n---\nb: 2\n").find("one document"), std::string::npos);
}

TEST(Manifest, EveryBadFieldIsNamedWithWhatWouldBeValid) {
  EXPECT_NE(ErrorOf(WithSpecLine("kind: TrainJob", "kind: Pod")).find("kind: 'Pod' is unknown"),
            std::string::npos);
  EXPECT_NE(ErrorOf(WithSpecLine("tessera/v1", "v1")).find("apiVersion"), std::string::npos);
  EXPECT_NE(ErrorOf(WithSpecLine("topology: 4x4", "topology: 4x5"))
                .find("spec.topology: topology '4x5' is not a v6e slice shape; valid v6e shapes"),
            std::string::npos);
  EXPECT_NE(ErrorOf(WithSpecLine("accelerator: v6e", "accelerator: v9"))
                .find("spec.accelerator: generation 'v9' is unknown; valid: v2"),
            std::string::npos);
  EXPECT_NE(ErrorOf(WithSpecLine("slices: {min: 1, max: 2}", "slices: -1"))
                .find("spec.slices: -1 is out of range"),
            std::string::npos);
  EXPECT_NE(ErrorOf(WithSpecLine("slices: {min: 1, max: 2}", "slices: 99999999999999999999"))
                .find("spec.slices"),
            std::string::npos);
  EXPECT_NE(ErrorOf(WithSpecLine("slices: {min: 1, max: 2}", "slices: {min: 3, max: 2}"))
                .find("spec.slices.max: 2 is below"),
            std::string::npos);
  EXPECT_NE(ErrorOf(WithSpecLine("priority: high", "prority: high"))
                .find("spec.prority: unknown field; valid fields of spec: accelerator"),
            std::string::npos);
  EXPECT_NE(ErrorOf(WithSpecLine("name: llama-8b", "name: Llama_8B")).find("metadata.name"),
            std::string::npos);
  EXPECT_NE(ErrorOf(WithSpecLine("onHostLoss: resize", "onHostLoss: retry"))
                .find("valid: fail, pause, resize"),
            std::string::npos);
  EXPECT_NE(ErrorOf(WithSpecLine("hangTimeout: 60s", "hangTimeout: soon")).find("duration"),
            std::string::npos);
  EXPECT_NE(ErrorOf(WithSpecLine("command: [python3, train.py]", "command: []"))
                .find("spec.template.command"),
            std::string::npos);
  EXPECT_NE(ErrorOf(WithSpecLine("STEPS: \"1000\"", "RANK: \"3\"")).find("set by tessera"),
            std::string::npos);
  EXPECT_NE(ErrorOf(WithSpecLine("maxFailures: 3", "maxFailures: -2")).find("maxFailures"),
            std::string::npos);
}

TEST(Manifest, Durations) {
  EXPECT_EQ(*ParseDurationMs("d", Json("1500ms")), 1500);
  EXPECT_EQ(*ParseDurationMs("d", Json("2m")), 120'000);
  EXPECT_EQ(*ParseDurationMs("d", Json(5)), 5000);
  EXPECT_FALSE(ParseDurationMs("d", Json("-5s")).ok());
  EXPECT_FALSE(ParseDurationMs("d", Json("99999h")).ok());
}

}  // namespace
}  // namespace tessera::api
