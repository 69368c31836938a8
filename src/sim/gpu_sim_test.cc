#include "sim/gpu_sim.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace tessera::sim {
namespace {

JobSpec GpuJob(int gpus, int64_t submit_s, int64_t duration_s) {
  JobSpec j;
  j.name = "j" + std::to_string(submit_s);
  j.accelerators = gpus;
  j.submit_s = submit_s;
  j.duration_s = duration_s;
  return j;
}

GpuSimResult GpuRun(const Workload& w, GpuSystem sys, int domains, GpuPolicy policy,
                    bool defrag = true) {
  GpuSimOptions o;
  o.system = sys;
  o.domains = domains;
  o.policy = policy;
  o.defrag = defrag;
  auto r = RunGpuSimulation(w, o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : GpuSimResult{};
}

// Two 8-GPU hosts. A (4 GPUs, short) and B (4, long) share host 0 by best fit, C (4, long) takes
// host 1. When A ends, each host has 4 GPUs free: the 8-GPU job D fits nowhere. slurm-block
// waits until B and C end (t=1000); tessera holds host 0, moves B to host 1, starts D at 200.
TEST(GpuSim, TesseraMovesSmallJobsOffTheHostABigJobNeeds) {
  Workload w;
  w.jobs = {GpuJob(4, 0, 100), GpuJob(4, 0, 1000), GpuJob(4, 0, 1000), GpuJob(8, 200, 10)};
  const GpuSimResult s = GpuRun(w, GpuSystem::kH100, 2, GpuPolicy::kSlurmBlock);
  const GpuSimResult t = GpuRun(w, GpuSystem::kH100, 2, GpuPolicy::kTessera);
  const GpuSimResult no_defrag = GpuRun(w, GpuSystem::kH100, 2, GpuPolicy::kTessera, false);
  ASSERT_EQ(s.classes[1].name, "domain");
  EXPECT_EQ(s.classes[1].jobs, 1);
  EXPECT_DOUBLE_EQ(s.classes[1].p95_wait_h, 800.0 / 3600);
  EXPECT_DOUBLE_EQ(no_defrag.classes[1].p95_wait_h, 800.0 / 3600);
  EXPECT_DOUBLE_EQ(t.classes[1].p95_wait_h, 0);
  EXPECT_EQ(t.migrations, 1);
  EXPECT_DOUBLE_EQ(t.migrated_gpu_h, 4.0 * 300 / 3600);
  EXPECT_EQ(s.migrations, 0);
  // B ends 300 s late: the last end is 1300.
  EXPECT_EQ(t.makespan_s, 1300);
  EXPECT_EQ(s.makespan_s, 1010);
}

// First fit ignores cliques: on two NVL72 racks, after a 10-tray job in rack 0 (8 trays free),
// a 12-tray job spans both racks under first fit; the domain planners put it in rack 1.
TEST(GpuSim, FirstFitSpansCliquesAndTheDomainPlannersDoNot) {
  Workload w;
  w.jobs = {GpuJob(40, 0, 1000), GpuJob(48, 10, 100), GpuJob(48, 20, 100)};
  const GpuSimResult f = GpuRun(w, GpuSystem::kGb200Nvl72, 2, GpuPolicy::kFirstFit);
  const GpuSimResult t = GpuRun(w, GpuSystem::kGb200Nvl72, 2, GpuPolicy::kTessera);
  const GpuSimResult s = GpuRun(w, GpuSystem::kGb200Nvl72, 2, GpuPolicy::kSlurmBlock);
  EXPECT_GE(f.spanned, 1);
  EXPECT_EQ(t.spanned, 0);
  EXPECT_EQ(s.spanned, 0);
}

TEST(GpuSim, SameInputSameResultAndEveryJobRuns) {
  GeneratorOptions g;
  g.jobs = 400;
  g.seed = 11;
  g.mean_interarrival_s = 300;
  g.sizes = {{1, 8}, {2, 2}, {4, 4}, {8, 3}, {16, 2}, {36, 1}, {64, 1}, {144, 1}};
  const Workload w = Generate(g);
  for (GpuSystem sys : {GpuSystem::kH100, GpuSystem::kGb200Nvl72}) {
    for (GpuPolicy p : {GpuPolicy::kTessera, GpuPolicy::kSlurmBlock, GpuPolicy::kFirstFit}) {
      SCOPED_TRACE(std::string(GpuSystemName(sys)) + " " + std::string(GpuPolicyName(p)));
      const int domains = sys == GpuSystem::kH100 ? 24 : 3;
      const GpuSimResult a = GpuRun(w, sys, domains, p);
      const GpuSimResult b = GpuRun(w, sys, domains, p);
      EXPECT_EQ(a.hash, b.hash);
      EXPECT_EQ(a.never_placed, 0);
      EXPECT_EQ(a.overall.jobs, 400);
      EXPECT_GT(a.utilisation, 0);
      EXPECT_LE(a.utilisation, 1.0);
    }
  }
}

TEST(GpuSim, BadOptionsNameTheField) {
  Workload w;
  GpuSimOptions o;
  o.domains = 0;
  auto r = RunGpuSimulation(w, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("domains: 0 must be at least 1"), std::string::npos);
  o.domains = 1;
  o.span_slowdown = 0.5;
  r = RunGpuSimulation(w, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("span_slowdown"), std::string::npos);
}

// A job larger than the fleet is counted, not queued forever.
TEST(GpuSim, JobsLargerThanTheFleetAreCounted) {
  Workload w;
  w.jobs = {GpuJob(64, 0, 10), GpuJob(8, 1, 10)};
  const GpuSimResult r = GpuRun(w, GpuSystem::kH100, 4, GpuPolicy::kTessera);
  EXPECT_EQ(r.never_placed, 1);
  EXPECT_EQ(r.overall.jobs, 1);
}

TEST(GpuSim, ReplaysAnItpTrace) {
  std::ifstream in(std::string(TESSERA_TRACES_DIR) + "/microsoft-itp-elasticflow/cluster10.csv");
  if (!in) GTEST_SKIP() << "trace not present";
  auto w = ReadTrace(in, "cluster10.csv");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (GpuPolicy p : {GpuPolicy::kTessera, GpuPolicy::kSlurmBlock, GpuPolicy::kFirstFit}) {
    const GpuSimResult r = GpuRun(*w, GpuSystem::kH100, 4, p);
    EXPECT_EQ(r.overall.jobs + r.never_placed, static_cast<int64_t>(w->jobs.size()));
  }
}

}  // namespace
}  // namespace tessera::sim
