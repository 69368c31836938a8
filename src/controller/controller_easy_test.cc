// The head with `--backfill easy --defrag` (easy_scheduling.cc) on two 7x cubes of hosts, a
// fake clock and agents that report at once: reservations and their reasons, and one
// defragmentation from the decision to both restarts, with its events; a start the pass places
// elsewhere to keep a cube whole.
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
  virtual ControllerOptions Options() const {
    ControllerOptions options;
    options.backfill_easy = true;
    options.defrag = true;
    options.lease_ms = 3'600'000;  // the test's hours pass without heartbeats in between
    return options;
  }
  void SetUp() override {
    store_ = OpenMemoryStore();
    ASSERT_NE(store_, nullptr);
    c_ = std::make_unique<Controller>(*store_, clock_, Options());
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
  ASSERT_EQ(c_->GetJob("fill").status().code(), StatusCode::kNotFound);
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

// `--help-factor 2` (the simulator's adaptive help threshold, admission/help_threshold.h): a
// large job gets no reservation until it has waited 2 x the 0.95 quantile of the recent small
// jobs' waits (here 1 h: the threshold is 2 h), and gets one after; with factor 0 it reserves
// at once, as before.
class EasyHelpThresholdTest : public EasyHeadTest, public ::testing::WithParamInterface<double> {
 protected:
  ControllerOptions Options() const override {
    ControllerOptions options;
    options.backfill_easy = true;
    options.lease_ms = 4 * 3'600'000;  // hours pass without heartbeats in between
    options.help_threshold.factor = GetParam();
    return options;
  }
};

TEST_P(EasyHelpThresholdTest, ALargeJobReservesOnlyOnceItHasWaitedPastTheThreshold) {
  const bool on = GetParam() > 0;
  // Four 2x4x4 (32 chips: small) fill both cubes at once (waits 0); `late` waits 1 h for one.
  for (const char* name : {"j1", "j2", "j3", "j4", "late"})
    Ok(c_->CreateJob(Job7x(name, "2x4x4", "1h")));
  Settle();
  ASSERT_EQ(JobStatus("j4")["phase"], "Running");
  ASSERT_EQ(JobStatus("late")["phase"], "Pending");
  clock_.AdvanceMs(3'600'000);
  Ok(c_->DeleteJob("j1"));
  Settle();
  ASSERT_EQ(JobStatus("late")["phase"], "Running");  // small waits: 0, 0, 0, 0, 1 h

  // The 4x4x4 (64 chips: large) finds no free chip.
  Ok(c_->CreateJob(Job7x("cube", "4x4x4", "1h")));
  Settle();
  Json cube = JobStatus("cube");
  EXPECT_EQ(cube["phase"], "Pending");
  if (!on) {
    EXPECT_EQ(cube["reason"], "WaitingForReservation") << cube.dump();
    return;
  }
  EXPECT_NE(cube["reason"], "WaitingForReservation") << cube.dump();
  EXPECT_NE(cube["message"].get<std::string>().find(
                "until it has waited longer than the help threshold (2h0m, from the last 5 small "
                "jobs' waits; it has waited 0h0m)"),
            std::string::npos)
      << cube.dump();
  // A head restart feeds the threshold again from the stored jobs' first starts (j1, deleted,
  // no longer counts; the quantile is still `late`'s 1 h).
  c_ = std::make_unique<Controller>(*store_, clock_, Options());
  ASSERT_TRUE(c_->Load().ok());
  Settle();
  cube = JobStatus("cube");
  EXPECT_NE(cube["message"].get<std::string>().find("(2h0m, from the last 4 small jobs' waits"),
            std::string::npos)
      << cube.dump();
  // Just short of the threshold: still no reservation.
  clock_.AdvanceMs(7'200'000 - 60'000);
  Settle();
  cube = JobStatus("cube");
  EXPECT_NE(cube["reason"], "WaitingForReservation") << cube.dump();
  EXPECT_NE(cube["message"].get<std::string>().find("it has waited 1h59m"), std::string::npos)
      << cube.dump();
  // At the threshold: the head of the line reserves.
  clock_.AdvanceMs(60'000);
  Settle();
  cube = JobStatus("cube");
  EXPECT_EQ(cube["phase"], "Pending");
  EXPECT_EQ(cube["reason"], "WaitingForReservation") << cube.dump();
  EXPECT_EQ(cube["message"].get<std::string>().find("help threshold"), std::string::npos)
      << cube.dump();
}

INSTANTIATE_TEST_SUITE_P(OnAndOff, EasyHelpThresholdTest, ::testing::Values(2.0, 0.0),
                         [](const ::testing::TestParamInfo<double>& p) {
                           return p.param > 0 ? std::string("Factor2") : std::string("Off");
                         });

// A start the pass places elsewhere (easy_pass.h): the pod is full of one-host jobs, and `one`
// (a host) and then `cube` (a 4x4x4) wait. All but three of the one-host jobs end at once,
// leaving c0-h2 and c0-h14 (cube c0) and c1-h11 (cube c1) taken, so that both waiting jobs meet
// the chips in one pass (their agents report together). On its own the planner puts `one` in c1,
// and no cube can be whole. With defragmentation the pass moves the job on c1-h11 and starts `one`
// in c0 instead, in that pass: c1 is the cube's once the moved job has stopped. Without it, `one`
// goes to c1 and the 4x4x4 reserves.
class EasyPlacedElsewhereTest : public EasyHeadTest, public ::testing::WithParamInterface<bool> {
 protected:
  ControllerOptions Options() const override {
    ControllerOptions options = EasyHeadTest::Options();
    options.defrag = GetParam();
    return options;
  }
};

TEST_P(EasyPlacedElsewhereTest, ADefragPassStartsTheLineElsewhereToKeepACubeWhole) {
  const bool defrag = GetParam();
  for (int i = 0; i < 32; ++i) Ok(c_->CreateJob(Job7x("f" + std::to_string(i), "2x2x1", "2h")));
  Settle();
  Ok(c_->CreateJob(Job7x("one", "2x2x1", "1h")));
  Ok(c_->CreateJob(Job7x("cube", "4x4x4", "1h")));
  Settle();
  ASSERT_EQ(JobStatus("one")["phase"], "Pending");
  ASSERT_EQ(JobStatus("cube")["phase"], "Pending");
  clock_.AdvanceMs(60'000);

  const std::set<std::string> keep = {"c0-h2", "c0-h14", "c1-h11"};
  std::string on_c1;
  for (int i = 0; i < 32; ++i) {
    const std::string name = "f" + std::to_string(i);
    const std::set<std::string> hosts = Hosts(name);
    ASSERT_EQ(hosts.size(), 1u) << name;
    if (!keep.count(*hosts.begin())) {
      Ok(c_->DeleteJob(name));
    } else if (*hosts.begin() == "c1-h11") {
      on_c1 = name;
    }
  }
  ASSERT_FALSE(on_c1.empty());
  // The agents confirm the deleted jobs' workers stopped, all before the next pass (the head
  // runs one pass for reports that arrive together): that pass sees all their chips.
  for (int cube = 0; cube < 2; ++cube)
    for (int h = 0; h < 16; ++h) {
      const std::string host = "c" + std::to_string(cube) + "-h" + std::to_string(h);
      Json a = Ok(c_->Assignments(host));
      const Json body = {{"workers", WorkerReports(a, "Running", 0, clock_.NowMs())},
                         {"revision", a["revision"]}};
      auto beat = protocol::ParseHeartbeat(body.dump());
      ASSERT_TRUE(beat.ok()) << beat.status().ToString();
      Ok(c_->Heartbeat(host, *beat));  // no pass listener: no pass yet
    }
  ASSERT_EQ(JobStatus("one")["phase"], "Pending");
  ASSERT_TRUE(c_->Tick().ok());
  const Json cube = JobStatus("cube");
  EXPECT_EQ(cube["phase"], "Pending");
  if (!defrag) {
    EXPECT_EQ(Cubes("one"), std::set<std::string>{"c1"}) << JobStatus("one").dump();
    EXPECT_EQ(cube["reason"], "WaitingForReservation") << cube.dump();
    EXPECT_EQ(JobStatus(on_c1)["preemptions"], 0);
    return;
  }
  // Placed elsewhere in the same pass as the move.
  EXPECT_EQ(Cubes("one"), std::set<std::string>{"c0"}) << JobStatus("one").dump();
  EXPECT_EQ(JobStatus(on_c1)["preemptions"], 1);
  EXPECT_EQ(cube["reason"], "WaitingForDefragmentation") << cube.dump();
  EXPECT_TRUE(HasEvent("trainjob/cube", "WaitingForDefragmentation", "moving " + on_c1 + " "));

  Settle();
  EXPECT_EQ(JobStatus("cube")["phase"], "Running") << JobStatus("cube").dump();
  EXPECT_EQ(Cubes("cube"), std::set<std::string>{"c1"});
  EXPECT_EQ(JobStatus(on_c1)["phase"], "Running") << JobStatus(on_c1).dump();
  EXPECT_EQ(Cubes(on_c1), std::set<std::string>{"c0"});
  EXPECT_EQ(JobStatus("one")["phase"], "Running");
  EXPECT_EQ(Cubes("one"), std::set<std::string>{"c0"});
  for (const char* other : {"c0-h2", "c0-h14"}) EXPECT_EQ(Hosts("one").count(other), 0u);
  EXPECT_EQ(JobStatus("one")["preemptions"], 0);
}

INSTANTIATE_TEST_SUITE_P(DefragOnAndOff, EasyPlacedElsewhereTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? std::string("Defrag") : std::string("NoDefrag");
                         });

}  // namespace
}  // namespace tessera::controller
