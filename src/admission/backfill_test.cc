#include "admission/backfill.h"

#include <gtest/gtest.h>

#include "admission/defrag.h"
#include "admission/test_util.h"

namespace tessera {
namespace {

using testing::CubeHosts;
using testing::Pod;

SliceRequest Req(int x, int y, int z) { return {Generation::k7x, Shape::Of(x, y, z), 1}; }

PlanHead Planning(const SlicePlanner& planner, SliceRequest r) {
  return [&planner, r](const Inventory& inv) { return planner.Plan(inv, r); };
}

// Two cubes; A holds half of cube 0 until 100, B half of cube 1 until 500.
struct TwoCubes {
  Inventory inv = Pod(1, 2);
  SlicePlanner planner;
  std::vector<BackfillRunning> running;
  TwoCubes() {
    EXPECT_TRUE(inv.Reserve(OwnerId(1), CubeHosts(inv, 0, 0, 8)).ok());
    EXPECT_TRUE(inv.Reserve(OwnerId(2), CubeHosts(inv, 1, 0, 8)).ok());
    running = {{{OwnerId(1)}, 0, 100}, {{OwnerId(2)}, 0, 500}};
  }
};

TEST(Backfill, ReservesTheCubeThatFreesSoonest) {
  TwoCubes t;
  const Reservation r = Reserve(t.inv, Planning(t.planner, Req(4, 4, 4)), 64, t.running, 10);
  ASSERT_TRUE(r.made);
  EXPECT_EQ(r.start_s, 100);
  EXPECT_EQ(r.cubes, std::vector<CubeId>{t.inv.cubes()[0].id});
  EXPECT_EQ(r.hosts.size(), 16u);
  // A super-slice of both cubes waits for B too.
  const Reservation both = Reserve(t.inv, Planning(t.planner, Req(4, 4, 8)), 128, t.running, 10);
  ASSERT_TRUE(both.made);
  EXPECT_EQ(both.start_s, 500);
  EXPECT_EQ(both.cubes.size(), 2u);
}

TEST(Backfill, LongWorkAvoidsTheReservedHostsShortWorkMayUseThem) {
  TwoCubes t;
  const Reservation r = Reserve(t.inv, Planning(t.planner, Req(4, 4, 4)), 64, t.running, 10);
  ASSERT_TRUE(r.made);
  EXPECT_TRUE(EndsBefore(r, 10, 90));
  EXPECT_FALSE(EndsBefore(r, 10, 91));
  Result<Inventory> blocked = Blocked(t.inv, r);
  ASSERT_TRUE(blocked.ok()) << blocked.status().ToString();
  EXPECT_EQ(blocked->usable_chips(), 32);  // only cube 1's free half
  // 2x4x4 (8 hosts): fits in cube 0's free half on the live inventory, in cube 1 when blocked.
  const PlanResult live = t.planner.Plan(t.inv, Req(2, 4, 4));
  const PlanResult held = t.planner.Plan(*blocked, Req(2, 4, 4));
  ASSERT_TRUE(live.placed());
  ASSERT_TRUE(held.placed());
  for (HostId h : held.AllHosts()) EXPECT_EQ(t.inv.host(h).cube, t.inv.cubes()[1].id);
  // With cube 1 taken as well, long work finds no room.
  ASSERT_TRUE(blocked->Reserve(OwnerId(3), CubeHosts(t.inv, 1, 8, 16)).ok());
  EXPECT_FALSE(t.planner.Plan(*blocked, Req(2, 2, 1)).placed());
}

TEST(Backfill, AnOverrunningJobCountsAsEndingNowAndIsNotStopped) {
  TwoCubes t;
  EXPECT_EQ(ExpectedEnd(t.running[0], 10, {}), 100);
  EXPECT_EQ(ExpectedEnd(t.running[0], 150, {}), 150);
  const Reservation r = Reserve(t.inv, Planning(t.planner, Req(4, 4, 4)), 64, t.running, 150);
  ASSERT_TRUE(r.made);
  EXPECT_EQ(r.start_s, 150);  // nothing ends by now, so nothing backfills onto cube 0
  EXPECT_FALSE(EndsBefore(r, 150, 1));
}

TEST(Backfill, DefaultEstimateAndNoReservationForAShapeTooLarge) {
  TwoCubes t;
  BackfillOptions o;
  o.default_duration_s = 7200;
  t.running[0].expected_s = 0;  // no estimate: the default
  EXPECT_EQ(ExpectedEnd(t.running[0], 10, o), 7200);
  const Reservation r = Reserve(t.inv, Planning(t.planner, Req(4, 4, 4)), 64, t.running, 10, o);
  ASSERT_TRUE(r.made);
  EXPECT_EQ(r.start_s, 500);  // B (500) now ends before A (7200)
  EXPECT_EQ(r.cubes, std::vector<CubeId>{t.inv.cubes()[1].id});
  const Reservation none = Reserve(t.inv, Planning(t.planner, Req(4, 8, 8)), 256, t.running, 10);
  EXPECT_FALSE(none.made);
  EXPECT_TRUE(EndsBefore(none, 10, 1000000));
}

// Two cubes, one host used in each: 120 chips free, no whole cube.
struct Scattered {
  Inventory inv = Pod(1, 2);
  SlicePlanner planner;
  std::vector<MoveCandidate> candidates;
  Scattered() {
    EXPECT_TRUE(inv.Reserve(OwnerOf(WorkloadId(1)), CubeHosts(inv, 0, 5, 6)).ok());
    EXPECT_TRUE(inv.Reserve(OwnerOf(WorkloadId(2)), CubeHosts(inv, 1, 9, 10)).ok());
    candidates = {{WorkloadId(1), 0, Req(2, 2, 1), 4 * 100, -1},
                  {WorkloadId(2), 0, Req(2, 2, 1), 4 * 50, -1}};
  }
};

TEST(Defrag, MovesTheCheapestJobIntoACubeInUse) {
  Scattered t;
  const DefragPlan p = PlanDefrag(t.inv, t.planner, Req(4, 4, 4), t.candidates, 7200, 1000);
  ASSERT_TRUE(p.found) << p.message;
  ASSERT_EQ(p.moves.size(), 1u);
  EXPECT_EQ(p.moves[0].workload, WorkloadId(2));  // less work lost since its checkpoint
  EXPECT_EQ(p.lost_work_chip_s, 200);
  ASSERT_EQ(p.plan.slices.size(), 1u);
  EXPECT_EQ(p.plan.slices[0].cubes, std::vector<CubeId>{t.inv.cubes()[1].id});
  for (HostId h : p.moves[0].plan.AllHosts())
    EXPECT_EQ(t.inv.host(h).cube, t.inv.cubes()[0].id);  // next to job 1, not a free cube
}

TEST(Defrag, BudgetMovedRecentlyAndPriorityDecide) {
  Scattered t;
  // Not enough budget for either move.
  DefragPlan p = PlanDefrag(t.inv, t.planner, Req(4, 4, 4), t.candidates, 7200, 199);
  EXPECT_FALSE(p.found);
  EXPECT_NE(p.message.find("budget"), std::string::npos) << p.message;
  // Job 2 moved 30 minutes ago: job 1 moves instead.
  t.candidates[1].last_moved_s = 7200 - 1800;
  p = PlanDefrag(t.inv, t.planner, Req(4, 4, 4), t.candidates, 7200, 1000);
  ASSERT_TRUE(p.found) << p.message;
  ASSERT_EQ(p.moves.size(), 1u);
  EXPECT_EQ(p.moves[0].workload, WorkloadId(1));
  // An hour later it may move again; a higher priority makes it the dearer one.
  t.candidates[1].last_moved_s = 7200 - 3600;
  t.candidates[1].priority = 1;
  p = PlanDefrag(t.inv, t.planner, Req(4, 4, 4), t.candidates, 7200, 1000);
  ASSERT_TRUE(p.found) << p.message;
  EXPECT_EQ(p.moves[0].workload, WorkloadId(1));
}

TEST(Defrag, OnlyForWholeCubesWithEnoughFreeChips) {
  Scattered t;
  DefragPlan p = PlanDefrag(t.inv, t.planner, Req(2, 4, 4), t.candidates, 0, 1000);
  EXPECT_FALSE(p.found);
  EXPECT_NE(p.message.find("whole cubes"), std::string::npos);
  p = PlanDefrag(t.inv, t.planner, Req(4, 4, 8), t.candidates, 0, 1000000);
  EXPECT_FALSE(p.found);
  EXPECT_NE(p.message.find("not enough free chips"), std::string::npos) << p.message;
  // A cube job is not movable: with only cube jobs running nothing can move.
  Inventory inv = Pod(1, 3);
  ASSERT_TRUE(inv.Reserve(OwnerOf(WorkloadId(1)), CubeHosts(inv, 0)).ok());
  ASSERT_TRUE(inv.Reserve(OwnerOf(WorkloadId(2)), CubeHosts(inv, 1, 0, 1)).ok());
  ASSERT_TRUE(inv.Reserve(OwnerOf(WorkloadId(3)), CubeHosts(inv, 2, 0, 1)).ok());
  const std::vector<MoveCandidate> cube_only = {{WorkloadId(1), 0, Req(4, 4, 4), 0, -1}};
  p = PlanDefrag(inv, t.planner, Req(4, 4, 4), cube_only, 0, 1000000);
  EXPECT_FALSE(p.found);
  EXPECT_NE(p.message.find("no sub-cube job may move"), std::string::npos) << p.message;
}

}  // namespace
}  // namespace tessera
