#include "sim/workload.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "sim/cluster.h"

namespace tessera::sim {
namespace {

Result<Workload> Read(const std::string& text, TraceFormat f = TraceFormat::kAuto) {
  std::istringstream in(text);
  return ReadTrace(in, "t.csv", f);
}

std::string ErrorOf(const std::string& text) {
  auto w = Read(text);
  EXPECT_FALSE(w.ok()) << text;
  return w.ok() ? "" : w.status().message();
}

TEST(ItpReader, ReadsRowsByHeaderName) {
  auto w = Read("num_gpu,job_id,duration,submission_time\r\n1,a,10,5\r\n8,b,20,5\n\n64,c,30,9\n");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_EQ(w->jobs.size(), 3u);
  EXPECT_EQ(w->jobs[0].name, "a");
  EXPECT_EQ(w->jobs[0].accelerators, 1);
  EXPECT_EQ(w->jobs[1].duration_s, 20);
  EXPECT_EQ(w->jobs[2].submit_s, 9);
  EXPECT_EQ(w->jobs[2].accelerators, 64);
  EXPECT_FALSE(w->has_priorities);
  EXPECT_EQ(w->source, "t.csv (itp)");
}

TEST(ItpReader, ErrorsNameLineAndColumn) {
  const std::string h = "job_id,submission_time,duration,num_gpu\n";
  EXPECT_EQ(ErrorOf(h + "a,1,10,1\nb,x,10,1\n"),
            "t.csv:3: column submission_time: 'x' is not an integer");
  EXPECT_EQ(ErrorOf(h + "a,1,0,1\n"),
            "t.csv:2: column duration: 0 is out of range [1, 1099511627776]");
  EXPECT_EQ(ErrorOf(h + "a,1,-5,1\n"),
            "t.csv:2: column duration: -5 is out of range [1, 1099511627776]");
  EXPECT_EQ(ErrorOf(h + "a,1,10,0\n"), "t.csv:2: column num_gpu: 0 is out of range [1, 1048576]");
  EXPECT_EQ(ErrorOf(h + "a,5,10,1\nb,4,10,1\n"),
            "t.csv:3: column submission_time: 4 is earlier than the previous row's 5; traces must "
            "be sorted by submission time");
  EXPECT_EQ(ErrorOf(h + "a,1,10,1\na,2,10,1\n"), "t.csv:3: column job_id: 'a' appears twice");
  EXPECT_EQ(ErrorOf(h + "a,1,10\n"), "t.csv:2: expected 4 fields, found 3 (missing num_gpu)");
  EXPECT_EQ(ErrorOf(h + "a,1,,1\n"), "t.csv:2: column duration: empty, expected an integer");
  EXPECT_EQ(ErrorOf(h + "a,1,10,1.5\n"), "t.csv:2: column num_gpu: '1.5' is not an integer");
  EXPECT_EQ(ErrorOf(""), "t.csv: empty file, expected a header line");
  EXPECT_NE(ErrorOf("a,b,c\n1,2,3\n").find("t.csv:1: unknown trace format"), std::string::npos);
  auto w = Read("job_id,submission_time,num_gpu\na,1,1\n", TraceFormat::kItp);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().message(),
            "t.csv:1: missing column duration (header is job_id,submission_time,num_gpu)");
}

TEST(OpenbReader, MapsTimesPrioritiesAndSkipsCpuPods) {
  const std::string h =
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
      "deletion_time,scheduled_time\n";
  auto w = Read(h + "p0,1000,1024,1,1000,,LS,Running,0,100,10\n" +
                "p1,1000,1024,0,0,,BE,Running,5,50,5\n" +                 // CPU only: skipped
                "p2,1000,1024,1,460,V100M16|V100M32,BE,Pending,7,9,\n" +  // share, not scheduled
                "p3,1000,1024,8,1000,,Guaranteed,Running,7,7,7\n");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_EQ(w->jobs.size(), 3u);
  EXPECT_EQ(w->skipped_rows, 1);
  EXPECT_TRUE(w->has_priorities);
  EXPECT_EQ(w->jobs[0].duration_s, 90);  // deletion - scheduled
  EXPECT_EQ(w->jobs[0].priority, 1);
  EXPECT_EQ(w->jobs[1].name, "p2");
  EXPECT_EQ(w->jobs[1].duration_s, 2);  // deletion - creation when never scheduled
  EXPECT_EQ(w->jobs[1].accelerators, 1);
  EXPECT_EQ(w->jobs[1].priority, 0);
  EXPECT_EQ(w->jobs[2].duration_s, 1);  // zero-length pods run one second
  EXPECT_EQ(w->jobs[2].accelerators, 8);

  EXPECT_EQ(ErrorOf(h + "p0,1,1,1,1000,,LS,Running,10,100,10\np1,1,1,1,1000,,LS,Running,9,100,9\n"),
            "t.csv:3: column creation_time: 9 is earlier than the previous row's 10; traces must "
            "be sorted by submission time");
  EXPECT_EQ(ErrorOf(h + "p0,1,1,1,1000,,LS,Running,10,5,10\n"),
            "t.csv:2: column deletion_time: 5 is before the pod started (10)");
  EXPECT_EQ(ErrorOf(h + "p0,1,1,1,2000,,LS,Running,10,50,10\n"),
            "t.csv:2: column gpu_milli: 2000 is out of range [0, 1000]");
  EXPECT_NE(ErrorOf("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,1000\n")
                .find("no creation_time/deletion_time columns"),
            std::string::npos);
}

TEST(ShapeMap, DefaultRoundsUpAndRejectsTooLarge) {
  const ShapeMap m = ShapeMap::Default(Generation::k7x);
  EXPECT_EQ(m.ToString(),
            "4:2x2x1,8:2x2x2,16:2x2x4,32:2x4x4,64:4x4x4,128:4x4x8,256:4x8x8,512:8x8x8");
  EXPECT_EQ(m.Find(1)->shape, Shape::Of(2, 2, 1));
  EXPECT_EQ(m.Find(3)->shape, Shape::Of(2, 2, 1));
  EXPECT_EQ(m.Find(5)->shape, Shape::Of(2, 2, 2));
  EXPECT_EQ(m.Find(48)->shape, Shape::Of(4, 4, 4));
  EXPECT_EQ(m.Find(513), nullptr);
  EXPECT_EQ(ShapeMap::Default(Generation::kV6e).ToString(), "16:4x4,64:8x8,128:8x16,256:16x16");
}

TEST(ShapeMap, ParseChecksEntries) {
  auto m = ShapeMap::Parse(Generation::k7x, "4:2x2x1,64:4x4x4");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->Find(8)->shape, Shape::Of(4, 4, 4));
  EXPECT_FALSE(ShapeMap::Parse(Generation::k7x, "8:2x2x1").ok());          // 8 > 4 chips
  EXPECT_FALSE(ShapeMap::Parse(Generation::k7x, "8:2x2x2,4:2x2x1").ok());  // not ascending
  EXPECT_FALSE(ShapeMap::Parse(Generation::k7x, "4:2x2").ok());            // 2D shape on 7x
  EXPECT_FALSE(ShapeMap::Parse(Generation::k7x, "x:2x2x1").ok());
  EXPECT_FALSE(ShapeMap::Parse(Generation::k7x, "").ok());
}

TEST(Generator, SameSeedSameJobs) {
  GeneratorOptions o;
  o.jobs = 500;
  o.seed = 3;
  o.multi_slice_fraction = 0.1;
  const Workload a = Generate(o), b = Generate(o);
  ASSERT_EQ(a.jobs.size(), 500u);
  for (size_t i = 0; i < a.jobs.size(); ++i) {
    EXPECT_EQ(a.jobs[i].submit_s, b.jobs[i].submit_s);
    EXPECT_EQ(a.jobs[i].accelerators, b.jobs[i].accelerators);
    if (i > 0) {
      EXPECT_GE(a.jobs[i].submit_s, a.jobs[i - 1].submit_s);
    }
    EXPECT_GE(a.jobs[i].duration_s, 60);
  }
  o.seed = 4;
  EXPECT_NE(Generate(o).jobs[10].submit_s, a.jobs[10].submit_s);
}

TEST(Cluster, Presets) {
  for (auto [name, chips] : {std::pair{"ironwood", 9216}, {"v5p", 8960}, {"v6e-fleet", 2048}}) {
    auto spec = Preset(name);
    ASSERT_TRUE(spec.ok());
    auto inv = BuildCluster(*spec);
    ASSERT_TRUE(inv.ok()) << inv.status().ToString();
    EXPECT_EQ(inv->total_chips(), chips) << name;
  }
  EXPECT_FALSE(Preset("v4-pod").ok());
  auto spec = *Preset("ironwood");
  spec.unhealthy_hosts = 10;
  auto inv = BuildCluster(spec);
  ASSERT_TRUE(inv.ok());
  EXPECT_EQ(inv->usable_chips(), 9216 - 40);
}

// One real file through the reader: the first rows of ITP cluster04, if the traces are here.
TEST(ItpReader, ReadsTheHeadOfARealTrace) {
  std::ifstream file(std::string(TESSERA_TRACES_DIR) + "/microsoft-itp-elasticflow/cluster04.csv");
  if (!file) GTEST_SKIP() << "traces not present";
  std::string text, line;
  for (int i = 0; i < 300 && std::getline(file, line); ++i) text += line + "\n";
  auto w = Read(text);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->jobs.size(), 299u);
  EXPECT_EQ(w->jobs[0].accelerators, 16);
  EXPECT_EQ(w->jobs[0].submit_s, 5810);
}

}  // namespace
}  // namespace tessera::sim
