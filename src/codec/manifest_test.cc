#include "codec/manifest.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace tessera::codec {
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

// Ray's "TPU-V6E" and pod types ("v6e-32": 32 chips, so 4x8) name the accelerator, in any case.
TEST(Manifest, AcceleratorInRaySpellingOrAsAPodType) {
  auto parse = [](const std::string& from, const std::string& to) {
    auto doc = ParseDocument(WithSpecLine(from, to));
    EXPECT_TRUE(doc.ok());
    return ParseTrainJob(*doc);
  };
  auto spec = parse("accelerator: v6e", "accelerator: TPU-V6E");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->accelerator, Generation::kV6e);
  spec = parse("accelerator: v6e\n  topology: 4x4", "accelerator: TPU-V6E-32");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->topology, Shape::Of(4, 8));
  spec = parse("accelerator: v6e", "accelerator: V6E-16");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->topology, Shape::Of(4, 4));
  EXPECT_EQ(ErrorOf(WithSpecLine("accelerator: v6e\n  topology: 4x4", "accelerator: v6e-16")),
            "spec.topology: required: v6e-16 is 16 chips, which is 2x8 or 4x4; set topology to "
            "one of them");
  EXPECT_EQ(ErrorOf(WithSpecLine("accelerator: v6e", "accelerator: v6e-8"))
                .rfind("spec.topology: '4x4' is 16 chips but accelerator v6e-8 is 8", 0),
            0u);
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

// The message of ParseDocument's refusal, or of the typed parser's (`kind` picks it).
std::string Refusal(const std::string& text, const std::string& kind = "TrainJob") {
  auto doc = ParseDocument(text);
  if (!doc.ok()) return doc.status().message();
  Status s = Status::Ok();
  if (kind == "TrainJob") s = ParseTrainJob(*doc).status();
  if (kind == "ClusterQueue") s = ParseClusterQueue(*doc).status();
  if (kind == "LocalQueue") s = ParseLocalQueue(*doc).status();
  if (kind == "PriorityClass") s = ParsePriorityClass(*doc).status();
  EXPECT_FALSE(s.ok()) << text;
  return s.ok() ? "" : s.message();
}

#define EXPECT_HAS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "'" << (text) << "'"

std::string NestedJson(int depth) {
  return std::string(static_cast<size_t>(depth), '[') +
         std::string(static_cast<size_t>(depth), ']');
}

TEST(ManifestLimits, DeepNestingIsRefusedInJsonAndYaml) {
  const std::string deep = NestedJson(100'000);
  // The issue's case: a PriorityClass (and a ClusterQueue) with labels nested 100,000 deep.
  for (const char* kind : {"PriorityClass", "ClusterQueue"}) {
    const std::string json = std::string(R"({"apiVersion":"tessera/v1","kind":")") + kind +
                             R"(","metadata":{"name":"p","labels":{"a":)" + deep + "}},";
    EXPECT_HAS(Refusal(json + R"("value":1})", kind), "body: metadata.labels.a[0][0]");
    EXPECT_HAS(Refusal(json + R"("value":1})", kind), "nested deeper than 64 levels");
  }
  // YAML flow and block style: refused at depth 65, before yaml-cpp builds anything.
  const std::string flow = "metadata: {labels: {a: " + deep + "}}\n";
  EXPECT_HAS(Refusal(flow), "body: line 1, column ");
  EXPECT_HAS(Refusal(flow), "nested deeper than 64 levels");
  std::string block;
  for (int i = 0; i < 200; ++i) block += std::string(static_cast<size_t>(i), ' ') + "a:\n";
  EXPECT_HAS(Refusal(block), "nested deeper than 64 levels");
  // 64 levels are fine for the parser (the typed parsers then say what is wrong).
  EXPECT_TRUE(ParseDocument(R"({"metadata": )" + NestedJson(63) + "}").ok());
  EXPECT_HAS(Refusal(R"({"metadata": )" + NestedJson(64) + "}"), "deeper than 64");
}

TEST(ManifestLimits, YamlAliasesAreRefusedBeforeTheyExpand) {
  // The issue's 520-byte "billion laughs": 9 levels of 9 aliases, 9^9 leaves when expanded.
  std::string laughs = "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (int i = 1; i <= 9; ++i) {
    const std::string prev = "*a" + std::to_string(i - 1);
    laughs += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [" + prev;
    for (int k = 0; k < 8; ++k) laughs += ", " + prev;
    laughs += "]\n";
  }
  const auto start = std::chrono::steady_clock::now();
  const std::string refusal = Refusal(laughs);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_HAS(refusal, "body: line 1, column ");
  EXPECT_HAS(refusal, "anchors (&name) and aliases (*name) are not supported");
  // An alias alone (its anchor defined elsewhere) and a merge key are refused too.
  EXPECT_HAS(Refusal("a: &x 1\nb: *x\n"), "not supported");
  EXPECT_HAS(Refusal("base: &b {x: 1}\nspec: {<<: *b}\n"), "not supported");
  EXPECT_HAS(Refusal("a: *nowhere\n"), "");  // yaml-cpp's own error or ours: never a crash
}

TEST(ManifestLimits, DocumentSizeAndValueCountAreBounded) {
  EXPECT_HAS(Refusal(std::string(kMaxDocumentBytes + 1, ' ') + "a: 1"), "documents are at most");
  std::string many = "[";
  for (size_t i = 0; i <= kMaxDocumentValues; ++i) many += i ? ",1" : "1";
  many += "]";
  EXPECT_HAS(Refusal(many), "more than 100000 values");
  std::string many_yaml = "a:\n";
  for (size_t i = 0; i <= kMaxDocumentValues; ++i) many_yaml += "- 1\n";
  EXPECT_HAS(Refusal(many_yaml), "more than 100000 values");
}

TEST(ManifestLimits, DuplicateKeysAreRefusedInJsonAsInYaml) {
  EXPECT_HAS(Refusal("metadata: {name: a, name: b}\n"), "metadata.name: key appears twice");
  EXPECT_HAS(Refusal(R"({"metadata": {"name": "a", "name": "b"}})"),
             "body: metadata.name: key appears twice");
  EXPECT_HAS(Refusal(R"({"kind": "TrainJob", "kind": "TrainJob"})"), "body: kind: key appears");
}

// Found by manifest_fuzz: two keys that differ only in invalid UTF-8 bytes were one key once the
// stored JSON replaced those bytes, so the stored document no longer parsed.
TEST(ManifestLimits, YamlThatIsNotUtf8IsRefusedNamingTheField) {
  EXPECT_HAS(Refusal("metadata:\n  name: a\xff\n"),
             "body: metadata.name: 'a\\xff' is not valid UTF-8 (byte 1)");
  EXPECT_HAS(Refusal("spec:\n  \"k\xfe\": 1\n  \"k\xff\": 2\n"),
             "body: spec: the key 'k\\xfe' is not valid UTF-8");
  EXPECT_HAS(Refusal("- \xc0\xaf\n"), "body: [0]: '\\xc0\\xaf' is not valid UTF-8");
  EXPECT_HAS(Refusal("\"\xff\": 1\n"), "body: the key '\\xff' is not valid UTF-8");
  auto ok = ParseDocument("metadata:\n  description: \"caf\xc3\xa9 \xe2\x82\xac\"\n");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ((*ok)["metadata"]["description"].dump(), "\"caf\xc3\xa9 \xe2\x82\xac\"");
}

// Found by manifest_fuzz (a timeout in the fuzz stage): yaml-cpp allocated about 200 MB before
// refusing a document whose first token is ','. Refused before yaml-cpp sees it.
TEST(ManifestLimits, AYamlDocumentBeginningWithACommaIsRefusedBeforeYamlCpp) {
  EXPECT_HAS(Refusal(",\"kind\":\"TrainJob\",\"metadata\":{\"name\":\"j\"}"),
             "body: line 1: a YAML document cannot begin with ','");
  EXPECT_HAS(Refusal("# a comment\n  ,\n"), "body: line 2: a YAML document cannot begin");
  EXPECT_HAS(Refusal("a: 1\n---\n,\n"), "body: line 3: a YAML document cannot begin");
  EXPECT_HAS(Refusal("%YAML 1.2\n--- ,\n"), "body: line 2: a YAML document cannot begin");
  // A comma inside a document is yaml-cpp's to judge, as before, and an indented "---" is a
  // block scalar's text, not a document's start.
  auto inside = ParseDocument("a: [1, 2]\nb: x, y\nnotes: |\n  ---\n  , item\n");
  ASSERT_TRUE(inside.ok()) << inside.status().ToString();
  EXPECT_EQ((*inside)["b"], "x, y");
  EXPECT_EQ((*inside)["notes"], "---\n, item\n");
}

TEST(ManifestLimits, NamesAndLabelsMustBeStrings) {
  EXPECT_HAS(Refusal(WithSpecLine("name: llama-8b", "name: 5")),
             "metadata.name: must be a string, got 5; quote it");
  EXPECT_HAS(Refusal(R"({"apiVersion":"tessera/v1","kind":"PriorityClass",)"
                     R"("metadata":{"name":5},"value":1})",
                     "PriorityClass"),
             "metadata.name: must be a string, got 5");
  EXPECT_HAS(Refusal(WithSpecLine("queue: research", "queue: 7")), "metadata.queue: must be a");
  EXPECT_HAS(Refusal(WithSpecLine("labels: {team: a}", "labels: {team: 5}")),
             "metadata.labels.team: must be a string, got 5");
  EXPECT_HAS(Refusal(WithSpecLine("labels: {team: a}", "labels: {5: a}")),
             "metadata.labels.5: mapping keys must be strings; quote it");
  EXPECT_HAS(Refusal(WithSpecLine("STEPS: \"1000\"", "true: \"1000\"")),
             "spec.template.env.true: mapping keys must be strings");
  EXPECT_HAS(Refusal(R"({"apiVersion":"tessera/v1","kind":"ClusterQueue",)"
                     R"("metadata":{"name":"q","labels":{"a":[1]}},"spec":{}})",
                     "ClusterQueue"),
             "metadata.labels.a: must be a string");
  // Quoted, they are strings.
  auto doc = ParseDocument(WithSpecLine("labels: {team: a}", "labels: {\"5\": \"5\"}"));
  ASSERT_TRUE(doc.ok());
  EXPECT_TRUE(ParseTrainJob(*doc).ok());
}

TEST(ManifestLimits, NulAndControlCharactersAreRefused) {
  const std::string job = R"({"apiVersion":"tessera/v1","kind":"TrainJob","metadata":{"name":"j")";
  const std::string spec = R"(},"spec":{"accelerator":"v6e","topology":"4x4","template":{)";
  auto with = [&](const std::string& meta, const std::string& tmpl) {
    return job + meta + spec + tmpl + "}}}";
  };
  EXPECT_TRUE(ParseTrainJob(*ParseDocument(with("", R"("command":["x"])"))).ok());
  EXPECT_HAS(Refusal(with("", R"("command":["x"],"env":{"A\u0000B":"1"})")),
             "spec.template.env.'A\\x00B': 'A\\x00B' holds a control character (byte 1), a NUL,");
  EXPECT_HAS(Refusal(with("", R"("command":["x"],"env":{"A":"x\u0000y"})")),
             "spec.template.env.A: 'x\\x00y' holds a control character");
  EXPECT_HAS(Refusal(with("", R"("command":["x"],"env":{"A\nB":"1"})")),
             "holds a control character");
  EXPECT_HAS(Refusal(with("", R"("command":["x\u0000"])")), "spec.template.command[0]: ");
  EXPECT_HAS(Refusal(with("", R"("command":["x"],"workingDir":"/a\u0000")")),
             "spec.template.workingDir: ");
  EXPECT_HAS(Refusal(with(R"(,"labels":{"a\u0001":"b"})", R"("command":["x"])")),
             "metadata.labels.'a\\x01': ");
  EXPECT_HAS(Refusal(with(R"(,"labels":{"a":"b\u007f"})", R"("command":["x"])")),
             "metadata.labels.a: 'b\\x7f' holds a control character");
  EXPECT_HAS(Refusal(with(R"(,"queue":"q\u0000")", R"("command":["x"])")), "metadata.queue: ");
  EXPECT_HAS(Refusal(R"({"apiVersion":"tessera/v1","kind":"TrainJob","metadata":)"
                     R"({"name":"a\u0000b"}})"),
             "metadata.name: 'a\\x00b'");
  // Multi-line environment values and arguments are fine.
  EXPECT_TRUE(
      ParseTrainJob(*ParseDocument(with("", R"("command":["a\tb"],"env":{"A":"x\ny"})"))).ok());
}

TEST(ManifestLimits, NumbersOutOfRangeAreRefusedNamingTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {"slices: {min: 1, max: 2}", "slices: 1e400"},
      {"slices: {min: 1, max: 2}", "slices: {min: -1}"},
      {"slices: {min: 1, max: 2}", "slices: {min: 1, max: 9223372036854775808}"},
      {"slices: {min: 1, max: 2}", "slices: .nan"},
      {"slices: {min: 1, max: 2}", "slices: 2.5"},
      {"maxFailures: 3", "maxFailures: -9223372036854775809"},
      {"maxFailures: 3", "maxFailures: 18446744073709551615"},
      {"hangTimeout: 60s", "hangTimeout: -1"},
      {"hangTimeout: 60s", "hangTimeout: 1e400"},
      {"hangTimeout: 60s", "hangTimeout: 9223372036854775807"},
      {"hangTimeout: 60s", "hangTimeout: 99999999999s"},
      {"hangTimeout: 60s", "hangTimeout: 18446744073709551615"},
  };
  for (const auto& [from, to] : cases) {
    const std::string field = std::string(to).substr(0, std::string(to).find(':'));
    EXPECT_HAS(ErrorOf(WithSpecLine(from, to)), field) << to;
  }
  const std::string cq = R"({"apiVersion":"tessera/v1","kind":"ClusterQueue","metadata":)"
                         R"({"name":"q"},"spec":)";
  EXPECT_HAS(
      Refusal(cq + R"({"quotas":[{"generation":"v6e","nominalQuota":-1}]}})", "ClusterQueue"),
      "spec.quotas[0].nominalQuota: -1 is out of range");
  EXPECT_HAS(
      Refusal(cq + R"({"quotas":[{"generation":"v6e","nominalQuota":1e300}]}})", "ClusterQueue"),
      "spec.quotas[0].nominalQuota: must be a whole number");
  EXPECT_HAS(Refusal(cq + R"({"quotas":[{"generation":"v6e","nominalQuota":1,)"
                          R"("borrowingLimit":99999999999999999999}]}})",
                     "ClusterQueue"),
             "spec.quotas[0].borrowingLimit");
  EXPECT_HAS(Refusal(cq + R"({"fairSharing":{"weight":1e308}}})", "ClusterQueue"),
             "spec.fairSharing.weight: 1e+308 is out of range");
  EXPECT_HAS(Refusal(cq + R"({"fairSharing":{"weight":-1}}})", "ClusterQueue"),
             "spec.fairSharing.weight");
  EXPECT_HAS(Refusal("apiVersion: tessera/v1\nkind: ClusterQueue\nmetadata: {name: q}\n"
                     "spec: {fairSharing: {weight: .inf}}\n",
                     "ClusterQueue"),
             "spec.fairSharing.weight");
  // JSON cannot carry 1e400: the parser refuses it, naming the field.
  EXPECT_HAS(Refusal(cq + R"({"fairSharing":{"weight":1e400}}})", "ClusterQueue"),
             "body: malformed JSON at spec.fairSharing.weight");
  const std::string pc = R"({"apiVersion":"tessera/v1","kind":"PriorityClass","metadata":)"
                         R"({"name":"p"},"value":)";
  for (const char* v : {"1000000001", "-1000000001", "18446744073709551615", "1.5", "\"1\""})
    EXPECT_HAS(Refusal(pc + v + "}", "PriorityClass"), "value: must be");
}

TEST(Manifest, Durations) {
  EXPECT_EQ(*ParseDurationMs("d", Json("1500ms")), 1500);
  EXPECT_EQ(*ParseDurationMs("d", Json("2m")), 120'000);
  EXPECT_EQ(*ParseDurationMs("d", Json(5)), 5000);
  EXPECT_FALSE(ParseDurationMs("d", Json("-5s")).ok());
  EXPECT_FALSE(ParseDurationMs("d", Json("99999h")).ok());
}

TEST(Manifest, ExpectedDurationIsADurationNamedWhenWrong) {
  auto doc =
      ParseDocument(WithSpecLine("priority: high", "priority: high\n  expectedDuration: 6h"));
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  auto spec = ParseTrainJob(*doc);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->expected_duration_ms, 6 * 3'600'000);
  auto none = ParseTrainJob(*ParseDocument(kGood));
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->expected_duration_ms, 0);  // none given: the head's default applies
  for (const char* bad : {"expectedDuration: soon", "expectedDuration: 0s", "expectedDuration: -1",
                          "expectedDuration: 999d", "expectedDuration: [1]"}) {
    const std::string error =
        ErrorOf(WithSpecLine("priority: high", std::string("priority: high\n  ") + bad));
    EXPECT_EQ(error.rfind("spec.expectedDuration:", 0), 0u) << bad << ": " << error;
  }
}

std::string GpuJob(const std::string& gpu, const std::string& extra = "") {
  return "apiVersion: tessera/v1\nkind: TrainJob\nmetadata: {name: g}\nspec:\n  gpu: " + gpu +
         "\n" + extra + "  template: {command: [python3, train.py]}\n";
}

TEST(GpuJobSpec, DecodesSystemHostsAndTheDomainRule) {
  auto parse = [](const std::string& yaml) -> Result<TrainJobSpec> {
    auto doc = ParseDocument(yaml);
    if (!doc.ok()) return doc.status();
    return ParseTrainJob(*doc);
  };
  auto required = parse(GpuJob("{system: GB200-NVL72, hosts: 4}"));
  ASSERT_TRUE(required.ok()) << required.status().ToString();
  ASSERT_TRUE(required->gpu.has_value());
  EXPECT_EQ(required->gpu->system, GpuSystem::kGb200Nvl72);
  EXPECT_EQ(required->gpu->hosts, 4);
  EXPECT_EQ(required->gpu->gpus(), 16);
  EXPECT_EQ(required->gpu->rule.rule, DomainRule::kRequired);
  auto preferred = parse(GpuJob("{system: h100, hosts: 3, domain: preferred}"));
  ASSERT_TRUE(preferred.ok()) << preferred.status().ToString();
  EXPECT_EQ(preferred->gpu->rule.rule, DomainRule::kPreferred);
  for (const char* seg : {"{system: gb200-nvl72, hosts: 8, segment: 4}",
                          "{system: gb200-nvl72, hosts: 8, domain: segment, segment: 4}"}) {
    auto segment = parse(GpuJob(seg));
    ASSERT_TRUE(segment.ok()) << segment.status().ToString();
    EXPECT_EQ(segment->gpu->rule.rule, DomainRule::kSegment);
    EXPECT_EQ(segment->gpu->rule.segment_hosts, 4);
  }
  auto tpu = parse(kGood);
  ASSERT_TRUE(tpu.ok());
  EXPECT_FALSE(tpu->gpu.has_value());
}

TEST(GpuJobSpec, EveryWrongFieldIsNamed) {
  const std::pair<std::string, std::string> bad[] = {
      {GpuJob("{hosts: 2}"), "spec.gpu.system: required; valid: h100, h200, gb200-nvl72"},
      {GpuJob("{system: a100, hosts: 2}"), "spec.gpu.system: "},
      {GpuJob("{system: h100}"), "spec.gpu.hosts: required"},
      {GpuJob("{system: h100, hosts: 0}"), "spec.gpu.hosts: "},
      {GpuJob("{system: h100, hosts: two}"), "spec.gpu.hosts: "},
      {GpuJob("{system: h100, hosts: 2, domain: block}"), "spec.gpu.domain: 'block' is unknown"},
      {GpuJob("{system: h100, hosts: 2, domain: segment}"), "spec.gpu.segment: required"},
      {GpuJob("{system: h100, hosts: 6, segment: 4}"), "spec.gpu.segment: 4 does not divide"},
      {GpuJob("{system: h100, hosts: 4, domain: preferred, segment: 2}"),
       "spec.gpu.segment: only with domain: segment"},
      {GpuJob("{system: h100, hosts: 2, gpus: 16}"), "spec.gpu.gpus: unknown field"},
      {GpuJob("[h100]"), "spec.gpu: "},
      {GpuJob("{system: h100, hosts: 2}", "  accelerator: v6e\n"),
       "spec.accelerator: a GPU job (spec.gpu) takes no accelerator"},
      {GpuJob("{system: h100, hosts: 2}", "  slices: 2\n"), "spec.slices: "},
      {"apiVersion: tessera/v1\nkind: TrainJob\nmetadata: {name: g}\nspec:\n"
       "  gpu: {system: h100, hosts: 2}\n"
       "  template: {command: [python3], env: {CUDA_VISIBLE_DEVICES: '0'}}\n",
       "spec.template.env.CUDA_VISIBLE_DEVICES: set by tessera"},
  };
  for (const auto& [yaml, want] : bad) {
    const std::string got = ErrorOf(yaml);
    EXPECT_EQ(got.rfind(want, 0), 0u) << "got: " << got << "\nwant: " << want;
  }
}

// GPU quotas: resource nvidia.com/gpu with a gpuSystem; every wrong spelling names the field and
// the fix.
TEST(Manifest, ClusterQueueGpuQuotas) {
  const std::string head = "apiVersion: tessera/v1\nkind: ClusterQueue\nmetadata: {name: q}\n";
  auto doc = ParseDocument(head +
                           "spec: {cohort: org, quotas: [{generation: v6e, nominalQuota: 32}, "
                           "{resource: nvidia.com/gpu, gpuSystem: GB200-NVL72, nominalQuota: 16, "
                           "lendingLimit: 8}, {gpuSystem: h100, nominalQuota: 8}]}\n");
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  auto cq = ParseClusterQueue(*doc);
  ASSERT_TRUE(cq.ok()) << cq.status().ToString();
  ASSERT_EQ(cq->quotas.size(), 3u);
  EXPECT_FALSE(cq->quotas[0].gpu_system.has_value());
  EXPECT_EQ(cq->quotas[0].generation, Generation::kV6e);
  EXPECT_EQ(cq->quotas[1].gpu_system, GpuSystem::kGb200Nvl72);
  EXPECT_EQ(cq->quotas[1].nominal_chips, 16);
  EXPECT_EQ(cq->quotas[1].lending_limit_chips, 8);
  EXPECT_EQ(cq->quotas[2].gpu_system, GpuSystem::kH100);

  auto refusal = [&](const std::string& quota) {
    return Refusal(head + "spec: {quotas: [" + quota + "]}\n", "ClusterQueue");
  };
  // A GPU quota on a TPU flavor.
  EXPECT_HAS(refusal("{resource: nvidia.com/gpu, generation: v6e, nominalQuota: 8}"),
             "spec.quotas[0].generation: v6e is a TPU generation, and an nvidia.com/gpu quota "
             "counts GPUs of a GPU system; write gpuSystem: h100, h200, gb200-nvl72");
  EXPECT_HAS(refusal("{resource: nvidia.com/gpu, gpuSystem: v6e, nominalQuota: 8}"),
             "spec.quotas[0].gpuSystem: ");
  EXPECT_HAS(refusal("{resource: google.com/tpu, gpuSystem: h100, nominalQuota: 8}"),
             "spec.quotas[0].gpuSystem: only with resource: nvidia.com/gpu");
  EXPECT_HAS(refusal("{generation: gb200-nvl72, nominalQuota: 8}"),
             "spec.quotas[0].generation: gb200-nvl72 is a GPU system, not a TPU generation; "
             "count its GPUs with resource: nvidia.com/gpu, gpuSystem: gb200-nvl72");
  EXPECT_HAS(refusal("{resource: nvidia.com/gpu, generation: h100, nominalQuota: 8}"),
             "write gpuSystem: h100 instead of generation: h100");
  // An unknown resource name.
  EXPECT_HAS(refusal("{resource: nvidia.com/gpus, gpuSystem: h100, nominalQuota: 8}"),
             "spec.quotas[0].resource: 'nvidia.com/gpus' is unknown; valid: google.com/tpu "
             "(TPU chips of a generation: generation: v6e) and nvidia.com/gpu");
  EXPECT_HAS(refusal("{resource: nvidia.com/gpu, nominalQuota: 8}"),
             "spec.quotas[0].gpuSystem: required with resource: nvidia.com/gpu");
  EXPECT_HAS(refusal("{resource: nvidia.com/gpu, gpuSystem: h100}"),
             "spec.quotas[0].nominalQuota: required (GPUs)");
  EXPECT_HAS(refusal("{gpuSystem: h100, nominalQuota: 8}, {gpuSystem: H100, nominalQuota: 8}"),
             "spec.quotas[1].gpuSystem: h100 is listed twice");
}

}  // namespace
}  // namespace tessera::codec
