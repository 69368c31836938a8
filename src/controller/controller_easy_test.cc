// The head with `--backfill easy --defrag` (easy_scheduling.cc) on two 7x cubes of hosts, a
// fake clock and agents that report at once: reservations and their reasons, and one
// defragmentation from the decision to both restarts, with its events.
#include <gtest/gtest.h>

#include <set>

#include "controller/controller.h"
#include "controller/controller_test_util.h"

namespace tessera::controller {
namespace {

std::string HostAt(int cube, int x, int y, int z) {
  return "c" + std::to_string(cube) + "-h" + std::to_string(z * 4 + y * 2 + x);
}

Json Job7x(const std::string& name, const std::string& topology, const std::string& expected) {
  Json spec = {{"accelerator", "7x"},
               {"topology", topology},
               {"template", {{"command", {"python3", "train.py"}}}}};
  if (!expected.empty()) spec["expectedDuration"] = expected;
  return {{"apiVersion", "tessera/v1"},
          {"kind", "TrainJob"},
          {"metadata", {{"name", name}}},
          {"spec", spec}};
}

class EasyHeadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = OpenMemoryStore();
    ASSERT_NE(store_, nullptr);
    ControllerOptions options;
    options.backfill_easy = true;
    options.defrag = true;
    options.lease_ms = 3'600'000;  // the test's hours pass without heartbeats in between
    c_ = std::make_unique<Controller>(*store_, clock_, options);
    ASSERT_TRUE(c_->Load().ok());
    for (int cube = 0; cube < 2; ++cube)
      for (int z = 0; z < 4; ++z)
        for (int y = 0; y < 2; ++y)
          for (int x = 0; x < 2; ++x)
            Ok(Register(*c_, {{"name", HostAt(cube, x, y, z)},
                              {"generation", "7x"},
                              {"chips", 4},
                              {"cube",
                               {{"name", "c" + std::to_string(cube)},
                                {"block", "block-00"},
                                {"coord", {x, y, z}}}}}));
  }

  // Every agent reports its assigned workers running (and so confirms withdrawn ones stopped),
  // until nothing changes.
  void Settle() {
    for (int round = 0; round < 4; ++round) {
      ASSERT_TRUE(c_->Tick().ok());
      for (int cube = 0; cube < 2; ++cube)
        for (int h = 0; h < 16; ++h) {
          const std::string host = "c" + std::to_string(cube) + "-h" + std::to_string(h);
          Json a = Ok(c_->Assignments(host));
          Json workers = WorkerReports(a, "Running", 0, clock_.NowMs());
          Ok(Beat(*c_, host, {{"workers", workers}, {"revision", a["revision"]}}));
        }
    }
  }
  Json JobStatus(const std::string& job) { return Ok(c_->GetJob(job))["status"]; }
  std::set<std::string> Cubes(const std::string& job) {
    std::set<std::string> out;
    const Json st = JobStatus(job);
    for (const Json& p : st["placement"])
      for (const Json& h : p["hosts"]) {
        const std::string name = h;
        out.insert(name.substr(0, name.find('-')));
      }
    return out;
  }
  std::set<std::string> Hosts(const std::string& job) {
    std::set<std::string> out;
    const Json st = JobStatus(job);
    for (const Json& p : st["placement"])
      for (const Json& h : p["hosts"]) out.insert(h.get<std::string>());
    return out;
  }
  bool HasEvent(const std::string& object, const std::string& reason, const std::string& text) {
    const Json events = c_->ListEvents();
    for (const Json& e : events["items"])
      if (e["object"] == object && e["reason"] == reason &&
          e["message"].get<std::string>().find(text) != std::string::npos)
        return true;
    return false;
  }

  FakeClock clock_{1'000'000};
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Controller> c_;
};

TEST_F(EasyHeadTest, ACubeJobReservesAndLongWorkStaysOffTheReservedCube) {
  // `a` (ends in 1 h) and `b` (5 h) share one cube (tightest fit); `fill` (no estimate: 24 h)
  // takes half of the other.
  Ok(c_->CreateJob(Job7x("a", "2x4x4", "1h")));
  Ok(c_->CreateJob(Job7x("b", "2x4x4", "5h")));
  Ok(c_->CreateJob(Job7x("fill", "2x4x4", "")));
  Settle();
  ASSERT_EQ(JobStatus("fill")["phase"], "Running");
  ASSERT_EQ(Cubes("a"), Cubes("b"));
  ASSERT_NE(Cubes("a"), Cubes("fill"));
  // 32 chips free: the 4x4x4 reserves the cube of `a` and `b`, whole when `b` ends in 5 h.
  Ok(c_->CreateJob(Job7x("cube", "4x4x4", "2h")));
  Settle();
  Json cube = JobStatus("cube");
  EXPECT_EQ(cube["phase"], "Pending");
  EXPECT_EQ(cube["reason"], "WaitingForReservation") << cube.dump();
  EXPECT_NE(cube["message"].get<std::string>().find("expected to start in 5h0m"), std::string::npos)
      << cube.dump();
  // A 2x4x4 without an estimate runs past the reservation's start: it may start only off the
  // reserved cube, which the free half next to `fill` is.
  Ok(c_->CreateJob(Job7x("long", "2x4x4", "")));
  Settle();
  EXPECT_EQ(JobStatus("long")["phase"], "Running");
  EXPECT_EQ(Cubes("long"), Cubes("fill"));
  EXPECT_EQ(JobStatus("cube")["reason"], "WaitingForReservation");
  EXPECT_EQ(JobStatus("a")["preemptions"], 0);
  EXPECT_EQ(JobStatus("b")["preemptions"], 0);
}

TEST_F(EasyHeadTest, DefragMovesTheCheapestJobThenBothStartOnTheirHeldPlacements) {
  // `fill` and `half` share one cube (tightest fit), `small` goes to the other.
  Ok(c_->CreateJob(Job7x("fill", "2x4x4", "2h")));
  Settle();
  Ok(c_->CreateJob(Job7x("half", "2x4x4", "2h")));
  Settle();
  Ok(c_->CreateJob(Job7x("small", "2x2x4", "2h")));
  Settle();
  ASSERT_EQ(JobStatus("small")["phase"], "Running");
  ASSERT_EQ(Cubes("fill"), Cubes("half"));
  ASSERT_NE(Cubes("small"), Cubes("half"));
  const std::set<std::string> small_before = Hosts("small");
  const std::set<std::string> half_cube = Cubes("half");
  const std::set<std::string> small_cube = Cubes("small");
  Ok(c_->DeleteJob("fill"));
  Settle();
  ASSERT_TRUE(std::holds_alternative<ApiError>(c_->GetJob("fill")));
  clock_.AdvanceMs(60'000);

  // 80 chips free, no whole cube: the 4x4x4 moves `small` (16 chips), not `half` (32).
  Ok(c_->CreateJob(Job7x("cube", "4x4x4", "1h")));
  ASSERT_TRUE(c_->Tick().ok());
  EXPECT_EQ(JobStatus("small")["preemptions"], 1);
  EXPECT_EQ(JobStatus("half")["preemptions"], 0);
  EXPECT_EQ(JobStatus("cube")["phase"], "Pending");
  EXPECT_EQ(JobStatus("cube")["reason"], "WaitingForDefragmentation") << JobStatus("cube").dump();
  EXPECT_TRUE(HasEvent("trainjob/small", "Preempted", "moved by defragmentation"));
  EXPECT_TRUE(HasEvent("trainjob/cube", "WaitingForDefragmentation", "small"));

  // The agents confirm `small` stopped: the cube job starts on small's cube, `small` on its
  // hint, next to `half`.
  Settle();
  EXPECT_EQ(JobStatus("cube")["phase"], "Running") << JobStatus("cube").dump();
  EXPECT_EQ(Cubes("cube"), small_cube);
  EXPECT_EQ(JobStatus("small")["phase"], "Running") << JobStatus("small").dump();
  EXPECT_EQ(Cubes("small"), half_cube);
  for (const std::string& h : Hosts("small")) EXPECT_EQ(small_before.count(h), 0u) << h;
  EXPECT_EQ(JobStatus("half")["phase"], "Running");
  EXPECT_TRUE(HasEvent("trainjob/small", "Defragmented", "checkpoint"));
  EXPECT_TRUE(HasEvent("trainjob/cube", "Defragmented", "room"));

  // A second 4x4x4 finds 16 chips free: nothing to move, it reserves.
  Ok(c_->CreateJob(Job7x("cube2", "4x4x4", "1h")));
  Settle();
  EXPECT_EQ(JobStatus("cube2")["phase"], "Pending");
  EXPECT_EQ(JobStatus("cube2")["reason"], "WaitingForReservation");
  EXPECT_EQ(JobStatus("small")["preemptions"], 1);
  EXPECT_EQ(JobStatus("half")["preemptions"], 0);
}

}  // namespace
}  // namespace tessera::controller
