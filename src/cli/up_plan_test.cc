#include "cli/up_plan.h"

#include <gtest/gtest.h>

namespace tessera::cli {
namespace {

bool Mentions(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// docs/ha.md runs `tessera up --ha` with its defaults: the agents' fence must then be above the
// election lease (CheckHaUpFlags refuses one that is not), so up picks the lease plus 5 s.
TEST(AgentFenceMs, UnderHaWithoutTheFlagItIsAboveTheLease) {
  EXPECT_EQ(AgentFenceMs(true, 15'000, ""), "20000");
  EXPECT_EQ(AgentFenceMs(true, 2'000, ""), "7000");
  EXPECT_EQ(AgentFenceMs(true, 15'000, "30000"), "30000");  // given: as given
  EXPECT_EQ(AgentFenceMs(false, 15'000, ""), "");           // one head: the agent's default
  EXPECT_EQ(AgentFenceMs(false, 15'000, "0"), "0");
}

TEST(DemoJob, TheExampleOnlyWhereItFits) {
  EXPECT_TRUE(ExampleJobFits({"v6e", false, "4x4", 2, 0, 8, "", 0}));
  EXPECT_FALSE(ExampleJobFits({"v6e", false, "4x4", 1, 0, 4, "", 0}));
  EXPECT_FALSE(ExampleJobFits({"v6e", false, "2x4", 2, 0, 4, "", 0}));
  EXPECT_FALSE(ExampleJobFits({"v5e", false, "4x4", 2, 0, 8, "", 0}));
  EXPECT_FALSE(ExampleJobFits({"7x", true, "4x4", 0, 2, 32, "", 0}));
}

// `tessera up --generation 7x --cubes 2`: a 3D slice of the cluster's generation.
TEST(DemoJob, A7xClusterGetsA7xJob) {
  const std::string yaml = DemoJobYaml({"7x", true, "4x4", 0, 2, 32, "", 0});
  EXPECT_TRUE(Mentions(yaml, "  accelerator: 7x\n  topology: 2x2x2\n  slices: 1\n")) << yaml;
  EXPECT_TRUE(Mentions(yaml, "kind: TrainJob\n"));
  EXPECT_TRUE(Mentions(yaml, "command: [/usr/bin/python3, examples/train/train.py]"));
  EXPECT_FALSE(Mentions(yaml, "v6e"));
  const std::string one = DemoJobYaml({"v5e", false, "2x4", 1, 0, 2, "", 0});
  EXPECT_TRUE(Mentions(one, "  accelerator: v5e\n  topology: 2x4\n  slices: 1\n")) << one;
}

TEST(UpSummary, OneHeadPrintsOneUrlPerLine) {
  const std::string out =
      UpSummary({"v6e", false, "4x4", 2, 0, 8, "", 0}, {"http://127.0.0.1:4000"},
                "http://127.0.0.1:4000", "http://127.0.0.1:4100", "/d", "examples/train/job.yaml");
  EXPECT_TRUE(Mentions(out, "tessera cluster up: 8 emulated v6e hosts (2 x 4x4 slices)\n"));
  EXPECT_TRUE(Mentions(out, "  API:    http://127.0.0.1:4000\n"));
  EXPECT_TRUE(Mentions(out, "  web:    http://127.0.0.1:4000/  (dashboard"));
  EXPECT_FALSE(Mentions(out, "heads:"));
  EXPECT_TRUE(Mentions(out, "  router: http://127.0.0.1:4100/services/NAME/...")) << out;
  EXPECT_TRUE(Mentions(out, "Try: tessera get hosts; tessera apply -f examples/train/job.yaml\n"));
}

TEST(UpSummary, AGpuClusterNamesItsSystemAndDomains) {
  const std::string out =
      UpSummary({"v6e", false, "2x2", 4, 0, 4, "gb200-nvl72", 2}, {"http://127.0.0.1:4000"},
                "http://127.0.0.1:4000", "http://127.0.0.1:4100", "/d", "/d/demo-job.yaml");
  EXPECT_TRUE(
      Mentions(out, "tessera cluster up: 4 emulated gb200-nvl72 hosts (2 NVLink domain(s))\n"))
      << out;
  EXPECT_FALSE(ExampleJobFits({"v6e", false, "4x4", 2, 0, 8, "h100", 8}));
}

// --ha: the heads listed apart, the web line one URL (the leader's), never three glued.
TEST(UpSummary, HaListsTheHeadsAndGivesTheLeadersDashboard) {
  const std::string out =
      UpSummary({"7x", true, "", 0, 1, 16, "", 0},
                {"http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3"},
                "http://127.0.0.1:2", "http://127.0.0.1:9", "/d", "/d/demo-job.yaml");
  EXPECT_TRUE(Mentions(out, "(1 cube(s))"));
  EXPECT_TRUE(Mentions(
      out, "  heads:  http://127.0.0.1:1, http://127.0.0.1:2 (leader), http://127.0.0.1:3\n"))
      << out;
  EXPECT_TRUE(Mentions(out, "  web:    http://127.0.0.1:2/  (dashboard")) << out;
  EXPECT_FALSE(Mentions(out, ",http")) << out;
  EXPECT_TRUE(Mentions(out, "tessera apply -f /d/demo-job.yaml\n"));
}

}  // namespace
}  // namespace tessera::cli
