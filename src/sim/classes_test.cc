#include "sim/classes.h"

#include <gtest/gtest.h>

#include <sstream>

#include "sim/report.h"
#include "sim/simulator.h"

namespace tessera::sim {
namespace {

Inventory Pod(int blocks, int cubes_per_block) {
  auto inv = Inventory::MakePod({Generation::k7x, blocks, cubes_per_block});
  EXPECT_TRUE(inv.ok());
  return *inv;
}

JobSpec Job(std::string name, int64_t submit, int64_t duration, int accelerators, int priority = 0,
            int slices = 1) {
  JobSpec j;
  j.name = std::move(name);
  j.submit_s = submit;
  j.duration_s = duration;
  j.accelerators = accelerators;
  j.priority = priority;
  j.num_slices = slices;
  j.min_slices = slices;
  return j;
}

TEST(Classes, SizeClassFromTheMappedSlice) {
  const Inventory inv = Pod(1, 4);
  Workload w;
  w.jobs = {Job("1gpu", 0, 1, 1),        Job("4", 0, 1, 4),        Job("8", 0, 1, 8),
            Job("32", 0, 1, 32),         Job("64", 0, 1, 64),      Job("128", 0, 1, 128),
            Job("2x64", 0, 1, 64, 0, 2), Job("2x8", 0, 1, 8, 0, 2)};
  const auto jobs = MapJobs(w, inv, ShapeMap::Default(Generation::k7x));
  const std::vector<SizeClass> want = {
      SizeClass::kOneHost, SizeClass::kOneHost,    SizeClass::kSubCube,    SizeClass::kSubCube,
      SizeClass::kCube,    SizeClass::kSuperSlice, SizeClass::kMultiSlice, SizeClass::kMultiSlice};
  ASSERT_EQ(jobs.size(), want.size());
  for (size_t i = 0; i < jobs.size(); ++i)
    EXPECT_EQ(SizeClassName(SizeClassOf(jobs[i])), std::string(SizeClassName(want[i])))
        << jobs[i].spec.name;
  EXPECT_FALSE(NeedsWholeCubes(jobs[3]));
  EXPECT_TRUE(NeedsWholeCubes(jobs[4]));
  EXPECT_TRUE(NeedsWholeCubes(jobs[6]));
  EXPECT_FALSE(NeedsWholeCubes(jobs[7]));
}

TEST(Classes, SummarizeCountsAndNearestRank) {
  // Waits 0, 10, 20, 30 (one job never started); JCTs 100, 300 (two finished).
  const std::vector<JobTimes> t = {
      {0, 0, 100, 0}, {5, 15, -1, 2}, {10, 30, 310, 1}, {20, 50, -1, 0}, {40, -1, -1, 0}};
  const ClassStats s = Summarize("x", t, {0, 1, 2, 3, 4});
  EXPECT_EQ(s.name, "x");
  EXPECT_EQ(s.jobs, 5);
  EXPECT_EQ(s.started, 4);
  EXPECT_EQ(s.finished, 2);
  EXPECT_EQ(s.preemptions, 3);
  EXPECT_EQ(s.preempted_jobs, 2);
  EXPECT_EQ(s.wait_p50_s, 10);  // nearest rank: ceil(0.5 * 4) = 2nd of 0,10,20,30
  EXPECT_EQ(s.wait_p95_s, 30);
  EXPECT_DOUBLE_EQ(s.wait_mean_s, 15);
  EXPECT_EQ(s.jct_p50_s, 100);
  EXPECT_EQ(s.jct_p95_s, 300);
  EXPECT_DOUBLE_EQ(s.jct_mean_s, 200);
  const ClassStats empty = Summarize("none", t, {});
  EXPECT_EQ(empty.jobs, 0);
  EXPECT_EQ(empty.wait_p95_s, 0);
}

// One cube. A one-host job starts at 0 and holds a host until 100; the 4x4x4 that arrived at
// the same time waits for it (backfill passes over it), starts at 100 and ends at 150; a
// priority-1 sub-cube job arrives at 10 and starts at once.
TEST(Classes, SimulationSplitsWaitsBySizeAndPriority) {
  const Inventory inv = Pod(1, 1);
  Workload w;
  w.jobs = {Job("host", 0, 100, 4), Job("cube", 0, 50, 64), Job("sub", 10, 20, 8, 1)};
  SimOptions o;
  o.admission = AdmissionKind::kBackfill;
  auto r = RunSimulation(inv, MapJobs(w, inv, ShapeMap::Default(Generation::k7x)), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->by_size.size(), 3u);
  EXPECT_EQ(r->by_size[0].name, "one host");
  EXPECT_EQ(r->by_size[0].wait_p95_s, 0);
  EXPECT_EQ(r->by_size[1].name, "sub-cube");
  EXPECT_EQ(r->by_size[1].wait_p95_s, 0);
  EXPECT_EQ(r->by_size[1].jct_mean_s, 20);
  EXPECT_EQ(r->by_size[2].name, "cube");
  EXPECT_EQ(r->by_size[2].jobs, 1);
  EXPECT_EQ(r->by_size[2].wait_p95_s, 100);
  EXPECT_EQ(r->by_size[2].jct_mean_s, 150);
  ASSERT_EQ(r->by_priority.size(), 2u);
  EXPECT_EQ(r->by_priority[0].name, "priority 1");
  EXPECT_EQ(r->by_priority[0].jobs, 1);
  EXPECT_EQ(r->by_priority[1].name, "priority 0");
  EXPECT_EQ(r->by_priority[1].jobs, 2);
  EXPECT_EQ(r->by_priority[1].wait_p95_s, 100);
  // Only cube jobs need whole cubes here: the aggregate is the cube row, and no table repeats it.
  EXPECT_EQ(r->whole_cubes.name, "cube or larger");
  EXPECT_EQ(r->whole_cubes.jobs, 1);
  EXPECT_EQ(r->whole_cubes.wait_p95_s, 100);
  Comparison c;
  c.runs.push_back(*r);
  std::ostringstream csv;
  WriteClassCsv(csv, c);
  EXPECT_EQ(csv.str().find("cube or larger"), std::string::npos) << csv.str();
}

// Two cubes. The 4x4x8 super-slice (128 chips) starts at 0 and holds both until 100; the cube
// job waits for it (starts at 100) and the two-slice job of 2x2x2 slices does not need whole
// cubes: "cube or larger" is the cube and the super-slice, over the two classes, in every
// format.
TEST(Classes, CubeOrLargerSpansTheClassesThatNeedWholeCubes) {
  const Inventory inv = Pod(1, 2);
  Workload w;
  w.jobs = {Job("super", 0, 100, 128), Job("cube", 0, 50, 64), Job("2x8", 0, 10, 8, 0, 2)};
  SimOptions o;
  o.admission = AdmissionKind::kBackfill;
  auto r = RunSimulation(inv, MapJobs(w, inv, ShapeMap::Default(Generation::k7x)), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->whole_cubes.jobs, 2);
  EXPECT_EQ(r->whole_cubes.started, 2);
  EXPECT_EQ(r->whole_cubes.wait_p50_s, 0);
  EXPECT_EQ(r->whole_cubes.wait_p95_s, 100);
  EXPECT_EQ(r->whole_cubes.jct_p95_s, 150);

  Comparison c;
  c.runs.push_back(*r);
  std::ostringstream json, csv, html;
  WriteJson(json, c);
  WriteClassCsv(csv, c);
  WriteHtml(html, c);
  EXPECT_NE(json.str().find("\"wholeCubes\""), std::string::npos);
  EXPECT_NE(csv.str().find(",size,cube or larger,2,2,2,0,100,"), std::string::npos) << csv.str();
  EXPECT_NE(html.str().find("cube or larger"), std::string::npos);
}

// Priority admission: a high-priority cube job preempts the low-priority one-host job; the
// preemption is charged to the victim's classes.
TEST(Classes, PreemptionsChargedToTheVictimsClass) {
  const Inventory inv = Pod(1, 1);
  Workload w;
  w.jobs = {Job("host", 0, 1000, 4), Job("cube", 10, 50, 64, 1)};
  SimOptions o;
  o.admission = AdmissionKind::kPriority;
  auto r = RunSimulation(inv, MapJobs(w, inv, ShapeMap::Default(Generation::k7x)), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->preemptions, 1);
  ASSERT_EQ(r->by_size.size(), 2u);
  EXPECT_EQ(r->by_size[0].name, "one host");
  EXPECT_EQ(r->by_size[0].preemptions, 1);
  EXPECT_EQ(r->by_size[0].preempted_jobs, 1);
  EXPECT_EQ(r->by_size[1].preemptions, 0);
  EXPECT_EQ(r->by_size[1].wait_p95_s, 0);

  Comparison c;
  c.cluster = "one cube";
  c.workload = "two jobs";
  c.runs.push_back(*r);
  std::ostringstream text, json, csv, html;
  WriteText(text, c);
  WriteJson(json, c);
  WriteClassCsv(csv, c);
  WriteHtml(html, c);
  EXPECT_NE(text.str().find("by size class"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("priority 1"), std::string::npos);
  EXPECT_NE(json.str().find("\"bySize\""), std::string::npos);
  EXPECT_NE(json.str().find("\"byPriority\""), std::string::npos);
  const std::string rows = csv.str();
  EXPECT_EQ(rows.rfind("policy,admission,split,class,jobs,", 0), 0u);
  EXPECT_NE(rows.find(",size,one host,1,1,1,0,0,0,0.0,"), std::string::npos) << rows;
  EXPECT_NE(rows.find(",priority,priority 1,1,1,1,"), std::string::npos) << rows;
  EXPECT_NE(html.str().find("By size class"), std::string::npos);
}

}  // namespace
}  // namespace tessera::sim
