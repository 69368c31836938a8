// Fixed 3D slices (provisioned TPU VM slices) beside cubes: given whole or not at all, never
// carved, never combined with cube hosts.
#include <gtest/gtest.h>

#include <set>

#include "placement/planner.h"

namespace tessera {
namespace {

// One block of one v5p cube, a v5p-16 (2x2x2, 2 hosts) and a v5p-32 (2x2x4, 4 hosts).
Inventory CubeAndFixedSlices(std::vector<int> cubes = {1}) {
  auto inv = Inventory::MakePod(Generation::kV5p, cubes, {Shape::Of(2, 2, 2), Shape::Of(2, 2, 4)});
  EXPECT_TRUE(inv.ok()) << inv.status().ToString();
  return *inv;
}

SliceRequest V5p(const Shape& s, int n = 1) { return {Generation::kV5p, s, n}; }

TEST(FixedSlices, APodHoldsFixed3DSlicesBesideCubes) {
  Inventory inv = CubeAndFixedSlices();
  ASSERT_EQ(inv.slices().size(), 2u);
  EXPECT_EQ(inv.hosts().size(), 16u + 2 + 4);
  EXPECT_EQ(inv.total_chips(), 64 + 8 + 16);
  EXPECT_EQ(inv.usable_chips(), inv.total_chips());
  const FixedSlice& small = inv.slice(SliceId(0));
  ASSERT_EQ(small.hosts.size(), 2u);
  EXPECT_FALSE(inv.host(small.hosts[1]).cube.valid());
  EXPECT_EQ(inv.host(small.hosts[1]).coord, (Coord{0, 0, 1}));
  EXPECT_EQ(inv.HostName(small.hosts[1]), "slice-000-w1");
  // Fixed slices only, and a shape the generation lacks.
  EXPECT_TRUE(Inventory::MakePod(Generation::kV4, {}, {Shape::Of(2, 2, 4)}).ok());
  Status bad = Inventory::MakePod(Generation::kV4, {}, {Shape::Of(2, 3, 4)}).status();
  EXPECT_NE(bad.message().find("fixedSlices[0]"), std::string::npos) << bad.message();
  EXPECT_FALSE(Inventory::MakePod(Generation::kV4, {}, {}).ok());
}

TEST(FixedSlices, AJobOfTheSliceShapeGetsTheWholeFixedSliceInWorkerOrder) {
  Inventory inv = CubeAndFixedSlices();
  SlicePlanner planner;
  PlanResult r = planner.Plan(inv, V5p(Shape::Of(2, 2, 4)));
  ASSERT_TRUE(r.placed()) << r.message;
  ASSERT_EQ(r.slices.size(), 1u);
  EXPECT_EQ(r.slices[0].fixed_slice, SliceId(1));
  EXPECT_EQ(r.slices[0].hosts, inv.slice(SliceId(1)).hosts);
  EXPECT_TRUE(r.slices[0].cubes.empty());
  ASSERT_TRUE(ApplyPlan(inv, OwnerId(1), r).ok());
  // The cube is untouched: the fixed slice was the first choice.
  EXPECT_TRUE(inv.cube(CubeId(0)).whole_and_usable());
  // The next 2x2x4 comes from the cube, all of it inside the cube.
  PlanResult next = planner.Plan(inv, V5p(Shape::Of(2, 2, 4)));
  ASSERT_TRUE(next.placed()) << next.message;
  for (HostId h : next.slices[0].hosts) EXPECT_EQ(inv.host(h).cube, CubeId(0));
}

TEST(FixedSlices, AFixedSliceIsNeverCarvedNorCombinedWithCubeHosts) {
  // No cube: a 2x2x1 (smaller than every fixed slice) and a 2x2x4 from two 2x2x2 never fit.
  auto only_fixed =
      Inventory::MakePod(Generation::kV5p, {}, {Shape::Of(2, 2, 2), Shape::Of(2, 2, 2)});
  ASSERT_TRUE(only_fixed.ok());
  SlicePlanner planner;
  for (const Shape& s : {Shape::Of(2, 2, 1), Shape::Of(2, 2, 4)}) {
    PlanResult r = planner.Plan(*only_fixed, V5p(s));
    EXPECT_FALSE(r.placed()) << s.ToString();
    EXPECT_EQ(r.reason, NoFit::kNeverFits) << r.message;
  }
  // With a cube beside them, small shapes come from the cube only, whatever is free.
  Inventory inv = CubeAndFixedSlices();
  std::set<HostId> fixed_hosts;
  for (const FixedSlice& fs : inv.slices()) fixed_hosts.insert(fs.hosts.begin(), fs.hosts.end());
  uint64_t owner = 1;
  while (true) {
    PlanResult r = planner.Plan(inv, V5p(Shape::Of(2, 2, 1)));
    if (!r.placed()) break;
    for (HostId h : r.AllHosts()) EXPECT_EQ(fixed_hosts.count(h), 0u) << inv.HostName(h);
    ASSERT_TRUE(ApplyPlan(inv, OwnerId(owner++), r).ok());
  }
  EXPECT_EQ(owner, 1u + 16);  // the cube's 16 hosts, one each
  EXPECT_EQ(inv.usable_chips(), 8 + 16);
}

TEST(FixedSlices, ASliceWithADownHostIsNotPlacedAndNSlicesAreAllFixedOrAllCubes) {
  Inventory inv = CubeAndFixedSlices();
  const FixedSlice small = inv.slice(SliceId(0));
  ASSERT_TRUE(inv.SetHealth(small.hosts[1], Health::kDown).ok());  // worker 1 missing
  SlicePlanner planner;
  // The partial fixed slice is skipped; the 2x2x2 comes from the cube.
  PlanResult r = planner.Plan(inv, V5p(Shape::Of(2, 2, 2)));
  ASSERT_TRUE(r.placed()) << r.message;
  EXPECT_EQ(r.slices[0].cubes.size(), 1u);
  // Without a cube the request waits, and the reason says the fixed slice is not free.
  auto only_fixed = Inventory::MakePod(Generation::kV5p, {}, {Shape::Of(2, 2, 2)});
  ASSERT_TRUE(only_fixed.ok());
  ASSERT_TRUE(only_fixed->SetHealth(only_fixed->slice(SliceId(0)).hosts[0], Health::kDown).ok());
  PlanResult waits = planner.Plan(*only_fixed, V5p(Shape::Of(2, 2, 2)));
  EXPECT_EQ(waits.reason, NoFit::kNoFreeSlice) << waits.message;
  // Two 2x2x4 with one fixed 2x2x4: both from the cube (2x4x4 worth of room), none mixed.
  PlanResult two = planner.Plan(inv, V5p(Shape::Of(2, 2, 4), 2));
  ASSERT_TRUE(two.placed()) << two.message;
  for (const SlicePlacement& p : two.slices) EXPECT_FALSE(p.fixed_slice.valid());
}

}  // namespace
}  // namespace tessera
