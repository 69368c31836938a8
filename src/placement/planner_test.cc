#include "placement/planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "common/rng.h"
#include "placement/naive_planner.h"

namespace tessera {
namespace {

Inventory Pod(int blocks, int cubes_per_block, Generation g = Generation::k7x) {
  auto inv = Inventory::MakePod({g, blocks, cubes_per_block});
  EXPECT_TRUE(inv.ok()) << inv.status().ToString();
  return *inv;
}

SliceRequest Req(const Shape& s, int n = 1, Generation g = Generation::k7x) { return {g, s, n}; }

void Take(Inventory& inv, CubeId cube, std::initializer_list<Coord> hosts, uint64_t owner = 999) {
  std::vector<HostId> ids;
  for (Coord c : hosts) ids.push_back(inv.cube(cube).hosts[CubeLocalIndex(c.x, c.y, c.z)]);
  ASSERT_TRUE(inv.Reserve(OwnerId(owner), ids).ok());
}

// Checks that a sub-slice placement is a connected box of usable hosts in one cube, whose
// worker order follows the logical shape.
void ExpectValidSubSlice(const Inventory& inv, const SlicePlacement& p, const Shape& shape) {
  ASSERT_EQ(p.cubes.size(), 1u);
  const SliceTopology topo = *SliceTopology::Make(inv.generation(), shape);
  ASSERT_EQ(static_cast<int>(p.hosts.size()), topo.hosts());
  std::multiset<int> got(p.physical.dims.begin(), p.physical.dims.end());
  std::multiset<int> want(shape.dims.begin(), shape.dims.end());
  EXPECT_EQ(got, want) << "physical box is not a rotation of the shape";
  std::set<HostId> seen;
  for (HostId h : p.hosts) {
    const Host& host = inv.host(h);
    EXPECT_TRUE(host.usable()) << inv.HostName(h);
    EXPECT_EQ(host.cube, p.cubes[0]);
    EXPECT_TRUE(seen.insert(h).second);
    EXPECT_GE(host.coord.x, p.offset.x);
    EXPECT_LT(host.coord.x, p.offset.x + p.physical.x() / 2);
    EXPECT_GE(host.coord.y, p.offset.y);
    EXPECT_LT(host.coord.y, p.offset.y + p.physical.y() / 2);
    EXPECT_GE(host.coord.z, p.offset.z);
    EXPECT_LT(host.coord.z, p.offset.z + p.physical.z());
  }
}

TEST(Placement, AlignedHasEightPlacesForA2x2x2AndAnyHasTwelve) {
  for (auto [opts, expected_first_free_after_fill] :
       {std::pair{PlannerOptions::FirstFit(), 0}, {PlannerOptions::Tessera(), 0}}) {
    Inventory inv = Pod(1, 1);
    SlicePlanner planner(opts);
    int placed = 0;
    while (true) {
      PlanResult r = planner.Plan(inv, Req(Shape::Of(2, 2, 2)));
      if (!r.placed()) break;
      ExpectValidSubSlice(inv, r.slices[0], Shape::Of(2, 2, 2));
      ASSERT_TRUE(ApplyPlan(inv, OwnerId(100 + placed), r).ok());
      ++placed;
    }
    EXPECT_EQ(placed, 8) << opts.Name();
    EXPECT_EQ(inv.usable_chips(), expected_first_free_after_fill);
  }
}

TEST(Placement, AnyModeFindsMisalignedBoxesAlignedModeCannot) {
  Inventory inv = Pod(1, 1);
  // Take the z=0 and z=3 layers: the free z=1..2 band has no aligned 2x2x2 position.
  Take(inv, CubeId(0),
       {{0, 0, 0}, {1, 0, 0}, {0, 1, 0}, {1, 1, 0}, {0, 0, 3}, {1, 0, 3}, {0, 1, 3}, {1, 1, 3}});
  PlanResult aligned =
      SlicePlanner(PlannerOptions::TightestFit()).Plan(inv, Req(Shape::Of(2, 2, 2)));
  EXPECT_EQ(aligned.reason, NoFit::kNoFreeBox);
  EXPECT_NE(aligned.message.find("aligned"), std::string::npos);
  PlanResult any = SlicePlanner().Plan(inv, Req(Shape::Of(2, 2, 2)));
  ASSERT_TRUE(any.placed()) << any.message;
  EXPECT_EQ(any.slices[0].offset.z, 1);
  ExpectValidSubSlice(inv, any.slices[0], Shape::Of(2, 2, 2));
}

TEST(Placement, RotationsFitWhereTheCanonicalOrientationDoesNot) {
  Inventory inv = Pod(1, 1);
  // Take the y=1 half: what is left is 4x2x4 chips, a 2x4x4 lying on its side.
  Take(inv, CubeId(0),
       {{0, 1, 0}, {1, 1, 0}, {0, 1, 1}, {1, 1, 1}, {0, 1, 2}, {1, 1, 2}, {0, 1, 3}, {1, 1, 3}});
  EXPECT_FALSE(
      SlicePlanner(PlannerOptions::FirstFit()).Plan(inv, Req(Shape::Of(2, 4, 4))).placed());
  PlanResult r = SlicePlanner().Plan(inv, Req(Shape::Of(2, 4, 4)));
  ASSERT_TRUE(r.placed()) << r.message;
  EXPECT_EQ(r.slices[0].physical, Shape::Of(4, 2, 4));
  ExpectValidSubSlice(inv, r.slices[0], Shape::Of(2, 4, 4));
}

TEST(Placement, WorkerIdsFollowTheLogicalShapeWhenNotRotated) {
  Inventory inv = Pod(1, 1);
  PlanResult r = SlicePlanner(PlannerOptions::FirstFit()).Plan(inv, Req(Shape::Of(2, 4, 4)));
  ASSERT_TRUE(r.placed());
  // Logical host grid 1x2x4: worker w = hz*2 + hy.
  for (int w = 0; w < 8; ++w) {
    const Host& h = inv.host(r.slices[0].hosts[w]);
    EXPECT_EQ(h.coord.z * 2 + h.coord.y, w);
  }
}

TEST(Placement, UnhealthyHostsAreNeverChosenButTheirCubeStillHoldsSubSlices) {
  Inventory inv = Pod(1, 1);
  ASSERT_TRUE(inv.SetHealth(inv.cube(CubeId(0)).hosts[0], Health::kDown).ok());
  ASSERT_TRUE(inv.SetHealth(inv.cube(CubeId(0)).hosts[5], Health::kDegraded).ok());
  SlicePlanner planner;
  EXPECT_EQ(planner.Plan(inv, Req(Shape::Of(4, 4, 4))).reason, NoFit::kNotEnoughChips);
  PlanResult r = planner.Plan(inv, Req(Shape::Of(2, 2, 4)));
  ASSERT_TRUE(r.placed()) << r.message;
  ExpectValidSubSlice(inv, r.slices[0], Shape::Of(2, 2, 4));
}

TEST(Placement, SuperSliceTakesWholeCubesInOneBlockWithLogicalWorkerIds) {
  Inventory inv = Pod(2, 4);
  Take(inv, CubeId(1), {{0, 0, 0}});  // block 0 now has 3 whole cubes
  PlanResult r = SlicePlanner().Plan(inv, Req(Shape::Of(4, 4, 8)));
  ASSERT_TRUE(r.placed()) << r.message;
  const SlicePlacement& p = r.slices[0];
  EXPECT_EQ(p.block, BlockId(0));  // tightest block that fits
  ASSERT_EQ(p.cubes.size(), 2u);
  EXPECT_EQ(p.cubes[0], CubeId(0));
  EXPECT_EQ(p.cubes[1], CubeId(2));
  ASSERT_EQ(p.hosts.size(), 32u);
  // Host grid 2x2x8: workers 0..15 in the first cube, 16..31 in the second, in cube order.
  const SliceTopology topo = *SliceTopology::Make(Generation::k7x, Shape::Of(4, 4, 8));
  for (int w = 0; w < 32; ++w) {
    const Host& h = inv.host(p.hosts[w]);
    const Coord hc = topo.HostCoordOf(w);
    EXPECT_EQ(h.cube, p.cubes[hc.z / 4]);
    EXPECT_EQ(h.coord, (Coord{hc.x, hc.y, hc.z % 4}));
  }
  PlanResult big = SlicePlanner().Plan(inv, Req(Shape::Of(8, 8, 8)));
  EXPECT_EQ(big.reason, NoFit::kNeverFits);
  EXPECT_NE(big.message.find("largest block of this cluster has 4"), std::string::npos);
}

TEST(Placement, CubesSplitOverBlocksIsItsOwnReason) {
  Inventory inv = Pod(2, 2);
  Take(inv, CubeId(0), {{0, 0, 0}});
  Take(inv, CubeId(2), {{0, 0, 0}});
  PlanResult r = SlicePlanner().Plan(inv, Req(Shape::Of(4, 4, 8)));
  EXPECT_EQ(r.reason, NoFit::kCubesSplitOverBlocks);
  EXPECT_NE(r.message.find("split over blocks"), std::string::npos);
  EXPECT_EQ(r.largest_free, "1 whole cube in block-00");
}

TEST(Placement, MultiSliceIsAllOrNothingAndPrefersOneBlock) {
  Inventory inv = Pod(2, 4);
  Take(inv, CubeId(0), {{0, 0, 0}});  // block 0: 3 whole cubes, block 1: 4
  PlanResult r = SlicePlanner().Plan(inv, Req(Shape::Of(4, 4, 4), 3));
  ASSERT_TRUE(r.placed()) << r.message;
  ASSERT_EQ(r.slices.size(), 3u);
  for (const auto& s : r.slices) EXPECT_EQ(s.block, BlockId(0));
  // 8 slices of 4x4x4 need 8 whole cubes: only 7 are whole. Nothing is planned.
  PlanResult none = SlicePlanner().Plan(inv, Req(Shape::Of(4, 4, 4), 8));
  EXPECT_FALSE(none.placed());
  EXPECT_TRUE(none.slices.empty());
  // Sub-slices: 5 x 2x4x4 (two per cube) fit in one block of 3 cubes.
  PlanResult subs = SlicePlanner().Plan(inv, Req(Shape::Of(2, 4, 4), 5));
  ASSERT_TRUE(subs.placed()) << subs.message;
  std::set<HostId> hosts;
  for (const auto& s : subs.slices) {
    EXPECT_EQ(s.block, BlockId(0));
    ExpectValidSubSlice(inv, s, Shape::Of(2, 4, 4));
    for (HostId h : s.hosts) EXPECT_TRUE(hosts.insert(h).second) << "host planned twice";
  }
  ASSERT_TRUE(ApplyPlan(inv, OwnerId(5), subs).ok());
}

TEST(Placement, FragmentationAwarePacksPartlyUsedCubesFirst) {
  Inventory inv = Pod(1, 2);
  Take(inv, CubeId(1), {{0, 0, 0}});
  PlanResult r = SlicePlanner().Plan(inv, Req(Shape::Of(2, 2, 1)));
  ASSERT_TRUE(r.placed());
  EXPECT_EQ(r.slices[0].cubes[0], CubeId(1));  // keeps cube 0 whole for a 4x4x4
  PlanResult ff = SlicePlanner(PlannerOptions::FirstFit()).Plan(inv, Req(Shape::Of(2, 2, 1)));
  EXPECT_EQ(ff.slices[0].cubes[0], CubeId(0));
}

TEST(Placement, FixedSlicesMatchTheShapeNotThePodType) {
  auto fleet =
      Inventory::MakeFleet({Generation::kV6e, {Shape::Of(4, 4), Shape::Of(4, 4), Shape::Of(2, 8)}});
  ASSERT_TRUE(fleet.ok());
  SlicePlanner planner;
  // 2x8 and 4x4 both hold 16 chips: a 2x8 request must get the 2x8 slice, never a 4x4.
  PlanResult r = planner.Plan(*fleet, Req(Shape::Of(2, 8), 1, Generation::kV6e));
  ASSERT_TRUE(r.placed());
  EXPECT_EQ(r.slices[0].fixed_slice, SliceId(2));
  ASSERT_TRUE(ApplyPlan(*fleet, OwnerId(1), r).ok());
  PlanResult again = planner.Plan(*fleet, Req(Shape::Of(2, 8), 1, Generation::kV6e));
  EXPECT_EQ(again.reason, NoFit::kNoFreeSlice);
  PlanResult two = planner.Plan(*fleet, Req(Shape::Of(4, 4), 2, Generation::kV6e));
  ASSERT_TRUE(two.placed());
  EXPECT_EQ(two.slices[1].fixed_slice, SliceId(1));
  EXPECT_EQ(two.slices[0].hosts, fleet->slice(SliceId(0)).hosts);
  PlanResult never = planner.Plan(*fleet, Req(Shape::Of(8, 8), 1, Generation::kV6e));
  EXPECT_EQ(never.reason, NoFit::kNeverFits);
  EXPECT_NE(never.message.find("2 x 4x4"), std::string::npos);
  EXPECT_EQ(planner.Plan(*fleet, Req(Shape::Of(4, 4), 3, Generation::kV6e)).reason,
            NoFit::kNeverFits);
  ASSERT_TRUE(fleet->SetHealth(fleet->slice(SliceId(0)).hosts[2], Health::kDown).ok());
  PlanResult unhealthy = planner.Plan(*fleet, Req(Shape::Of(4, 4), 2, Generation::kV6e));
  EXPECT_EQ(unhealthy.reason, NoFit::kNoFreeSlice);
  EXPECT_NE(unhealthy.message.find("1 of 2"), std::string::npos);
}

TEST(Placement, InvalidRequestsAreReasonsNotCrashes) {
  Inventory inv = Pod(1, 1);
  SlicePlanner planner;
  EXPECT_EQ(planner.Plan(inv, Req(Shape::Of(4, 4), 1, Generation::kV6e)).reason,
            NoFit::kInvalidRequest);
  EXPECT_EQ(planner.Plan(inv, Req(Shape::Of(2, 2, 3))).reason, NoFit::kInvalidRequest);
  EXPECT_EQ(planner.Plan(inv, Req(Shape::Of(2, 2, 2), 0)).reason, NoFit::kInvalidRequest);
  EXPECT_EQ(planner.Plan(inv, Req(Shape::Of(4, 4, 4), 2)).reason, NoFit::kNeverFits);
}

TEST(Fragmentation, EmptyPodIsZeroScatteredHostsAreHigh) {
  Inventory inv = Pod(1, 1);
  SlicePlanner planner;
  EXPECT_DOUBLE_EQ(planner.Fragmentation(inv), 0.0);
  // Leave only a checkerboard of single hosts: only 2x2x1 (1/5 of the mix) can use them.
  std::vector<HostId> taken;
  for (int i = 0; i < kHostsPerCube; ++i) {
    const Host& h = inv.host(inv.cube(CubeId(0)).hosts[i]);
    if ((h.coord.x + h.coord.y + h.coord.z) % 2) taken.push_back(h.id);
  }
  ASSERT_TRUE(inv.Reserve(OwnerId(1), taken).ok());
  EXPECT_NEAR(planner.Fragmentation(inv), 0.8, 1e-9);
  EXPECT_EQ(planner.LargestFree(inv), "2x2x1");
}

// Random reserve/release/health sequences on random pods: every plan is valid, reserving it
// never collides, and the planner finds a placement exactly when the exhaustive search
// (NaivePlanner, host by host) does, in the planner's own position mode.
TEST(PlacementProperty, AgreesWithExhaustiveSearch) {
  const std::vector<Shape> shapes = {Shape::Of(2, 2, 1), Shape::Of(2, 2, 2), Shape::Of(2, 2, 4),
                                     Shape::Of(2, 4, 4), Shape::Of(4, 4, 4), Shape::Of(4, 4, 8)};
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    Inventory inv = Pod(1 + static_cast<int>(rng.Uniform(3)), 1 + static_cast<int>(rng.Uniform(4)));
    const PlannerOptions opts = seed % 2 ? PlannerOptions::Tessera() : PlannerOptions::FirstFit();
    SlicePlanner planner(opts);
    uint64_t next_owner = 1;
    for (int step = 0; step < 600; ++step) {
      const uint64_t op = rng.Uniform(10);
      if (op < 6) {
        const Shape& shape = shapes[rng.Uniform(shapes.size())];
        const Inventory before = inv;
        PlanResult r = planner.Plan(inv, Req(shape));
        const int s = SubCubeShapeIndex(shape);
        const PlanResult reference = NaivePlanner(opts.positions).Plan(inv, Req(shape));
        const bool naive = reference.placed();
        if (naive && s >= 0) ExpectValidSubSlice(inv, reference.slices[0], shape);
        ASSERT_EQ(r.placed(), naive)
            << "step " << step << " " << shape.ToString() << ": " << r.message;
        if (!r.placed()) {
          EXPECT_FALSE(r.message.empty());
          continue;
        }
        if (s >= 0) ExpectValidSubSlice(inv, r.slices[0], shape);
        ASSERT_TRUE(ApplyPlan(inv, OwnerId(next_owner++), r).ok());
        EXPECT_EQ(inv.owned_chips(), before.owned_chips() + shape.chips());
      } else if (op < 9) {
        if (next_owner > 1) inv.Release(OwnerId(1 + rng.Uniform(next_owner - 1)));
      } else {
        const HostId h(static_cast<uint32_t>(rng.Uniform(inv.hosts().size())));
        ASSERT_TRUE(inv.SetHealth(h, rng.Uniform(4) == 0 ? Health::kDown : Health::kHealthy).ok());
      }
    }
  }
}

// A SubCubeIndex told of every change answers as the walk of every cube does, plan after plan
// (with each scoring); a change it is not told of makes it start over rather than answer for a
// state it does not know.
TEST(PlacementProperty, SubCubeIndexAgreesWithTheWalkOfEveryCube) {
  const std::vector<Shape> shapes = {Shape::Of(2, 2, 1), Shape::Of(2, 2, 2), Shape::Of(2, 2, 4),
                                     Shape::Of(2, 4, 4), Shape::Of(4, 4, 4)};
  const std::vector<PlannerOptions> all = {
      PlannerOptions::FirstFit(), PlannerOptions::TightestFit(), PlannerOptions::Tessera()};
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    const PlannerOptions& opts = all[seed % all.size()];
    SCOPED_TRACE("seed " + std::to_string(seed) + " " + opts.Name());
    Rng rng(seed);
    Inventory inv = Pod(1 + static_cast<int>(rng.Uniform(3)), 2 + static_cast<int>(rng.Uniform(6)));
    SlicePlanner planner(opts);
    SubCubeIndex index;
    auto told = [&](const std::vector<HostId>& hosts) { index.OwnersChanged(inv, hosts); };
    uint64_t next_owner = 1;
    for (int step = 0; step < 800; ++step) {
      const uint64_t op = rng.Uniform(20);
      if (op < 11) {
        const Shape& shape = shapes[rng.Uniform(shapes.size())];
        const PlanResult walked = planner.Plan(inv, Req(shape));
        const PlanResult indexed = planner.Plan(inv, Req(shape), index);
        ASSERT_EQ(indexed.placed(), walked.placed()) << "step " << step << " " << shape.ToString();
        EXPECT_EQ(indexed.message, walked.message);
        if (!walked.placed()) continue;
        ASSERT_EQ(indexed.AllHosts(), walked.AllHosts()) << "step " << step;
        EXPECT_EQ(indexed.slices[0].offset, walked.slices[0].offset);
        EXPECT_EQ(indexed.slices[0].physical, walked.slices[0].physical);
        ASSERT_TRUE(ApplyPlan(inv, OwnerId(next_owner++), indexed).ok());
        if (op != 0) told(indexed.AllHosts());  // 1 in 20: a change it is not told of
      } else if (op < 18) {
        if (next_owner == 1) continue;
        const OwnerId owner(1 + rng.Uniform(next_owner - 1));
        const std::vector<HostId> hosts = inv.HostsOf(owner);
        if (inv.Release(owner) > 0) told(hosts);  // releasing no host is no change
      } else {
        const HostId h(static_cast<uint32_t>(rng.Uniform(inv.hosts().size())));
        ASSERT_TRUE(inv.SetHealth(h, rng.Uniform(3) == 0 ? Health::kDown : Health::kHealthy).ok());
        index.HealthChanged(inv, h);
      }
    }
  }
}

// PlaceOnHosts gives, on hosts of a cube whoever holds them, the plan of a one-cube pod where
// exactly those hosts are free: the same hosts in the same worker order, box and offset, and no
// placement where that pod has none. Every room of each sub-cube shape (the masks a victim
// search frees) and every 37th mask of the 2^16, under each named policy (both position
// modes), in the second cube of a pod.
TEST(PlacementProperty, PlaceOnHostsIsThePlanOfACubeWithExactlyThoseHostsFree) {
  const std::vector<Shape> shapes = {Shape::Of(2, 2, 1), Shape::Of(2, 2, 2), Shape::Of(2, 2, 4),
                                     Shape::Of(2, 4, 4)};
  const Inventory pod = Pod(1, 2);
  const Cube& cube = pod.cubes()[1];
  int placed = 0, refused = 0;
  for (const PlannerOptions& opts :
       {PlannerOptions::FirstFit(), PlannerOptions::TightestFit(), PlannerOptions::Tessera()}) {
    const SlicePlanner planner(opts);
    for (const Shape& shape : shapes) {
      const int s = SubCubeShapeIndex(shape);
      ASSERT_GE(s, 0) << shape.ToString();
      std::vector<unsigned> masks(planner.SubCubeMasks(s).begin(), planner.SubCubeMasks(s).end());
      for (unsigned m = 0; m < (1u << kHostsPerCube); m += 37) masks.push_back(m);
      for (const unsigned mask : masks) {
        SCOPED_TRACE(opts.Name() + " " + shape.ToString() + " mask " + std::to_string(mask));
        Inventory one = Pod(1, 1);
        std::vector<HostId> fence;
        for (int l = 0; l < kHostsPerCube; ++l)
          if (!(mask & (1u << l))) fence.push_back(one.cubes()[0].hosts[l]);
        if (!fence.empty()) {
          ASSERT_TRUE(one.Reserve(OwnerId(1), fence).ok());
        }
        const PlanResult want = planner.Plan(one, Req(shape));
        SlicePlacement got;
        const bool ok = planner.PlaceOnHosts(cube, static_cast<HostMask>(mask), s, got);
        ASSERT_EQ(ok, want.placed());
        if (!ok) {
          ++refused;
          continue;
        }
        ++placed;
        const SlicePlacement& w = want.slices[0];
        std::vector<HostId> mapped;
        for (HostId h : w.hosts) {
          const Coord c = one.host(h).coord;
          mapped.push_back(cube.hosts[CubeLocalIndex(c.x, c.y, c.z)]);
        }
        ASSERT_EQ(got.hosts, mapped);
        EXPECT_EQ(got.physical, w.physical);
        EXPECT_EQ(got.offset, w.offset);
        EXPECT_EQ(got.cubes, std::vector<CubeId>{cube.id});
        EXPECT_EQ(got.block, cube.block);
      }
    }
  }
  EXPECT_GT(placed, 100);
  EXPECT_GT(refused, 100);
  SlicePlacement none;
  EXPECT_FALSE(SlicePlanner().PlaceOnHosts(cube, HostMask(0xFFFF), -1, none));
  EXPECT_FALSE(SlicePlanner().PlaceOnHosts(cube, HostMask(0xFFFF), 4, none));
}

TEST(PlacementProperty, SameInputSameAnswer) {
  Inventory inv = Pod(3, 4);
  Rng rng(7);
  for (int i = 0; i < 40; ++i)
    ASSERT_TRUE(inv.Reserve(OwnerId(1 + i), {HostId(static_cast<uint32_t>(i * 4))}).ok());
  for (const auto& opts :
       {PlannerOptions::FirstFit(), PlannerOptions::TightestFit(), PlannerOptions::Tessera()}) {
    PlanResult a = SlicePlanner(opts).Plan(inv, Req(Shape::Of(2, 2, 4), 3));
    PlanResult b = SlicePlanner(opts).Plan(Inventory(inv), Req(Shape::Of(2, 2, 4), 3));
    ASSERT_TRUE(a.placed());
    EXPECT_EQ(a.AllHosts(), b.AllHosts()) << opts.Name();
  }
}

}  // namespace
}  // namespace tessera
