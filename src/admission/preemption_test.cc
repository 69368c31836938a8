#include "admission/preemption.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <set>
#include <string>

#include "admission/test_util.h"
#include "common/rng.h"

namespace tessera {
namespace {

using testing::CubeHosts;
using testing::Pod;

void Hold(Inventory& inv, uint64_t id, const std::vector<HostId>& hosts) {
  ASSERT_TRUE(inv.Reserve(OwnerOf(WorkloadId(id)), hosts).ok());
}

std::vector<WorkloadId> Ids(std::initializer_list<uint64_t> ids) {
  std::vector<WorkloadId> out;
  for (auto i : ids) out.push_back(WorkloadId(i));
  return out;
}

// Every victim holds a host the plan uses.
void ExpectEveryVictimUsed(const Inventory& inv, const VictimSet& v) {
  std::set<HostId> used;
  for (HostId h : v.plan.AllHosts()) used.insert(h);
  for (WorkloadId id : v.victims) {
    bool touches = false;
    for (HostId h : inv.HostsOf(OwnerOf(id))) touches = touches || used.count(h);
    EXPECT_TRUE(touches) << "victim " << id.value() << " does not help";
  }
}

const SliceRequest kCube{Generation::k7x, Shape::Of(4, 4, 4), 1};

TEST(Preemption, PicksTheCubeWithTheLowestPriorityVictims) {
  Inventory inv = Pod(1, 2);
  Hold(inv, 1, CubeHosts(inv, 0, 0, 8));
  Hold(inv, 2, CubeHosts(inv, 1, 0, 8));
  Hold(inv, 3, CubeHosts(inv, 1, 8, 16));
  SlicePlanner planner;
  VictimSet v = FindVictims(inv, planner, kCube,
                            {{WorkloadId(1), 5, 0}, {WorkloadId(2), 1, 0}, {WorkloadId(3), 1, 0}});
  ASSERT_TRUE(v.found) << v.message;
  EXPECT_EQ(v.victims, Ids({2, 3}));
  EXPECT_EQ(v.cost.max_priority, 1);
  EXPECT_EQ(v.cost.chips, 64);
  ExpectEveryVictimUsed(inv, v);
}

TEST(Preemption, ThenFewestChipsThenLeastLostWork) {
  Inventory inv = Pod(1, 3);
  Hold(inv, 1, CubeHosts(inv, 0));         // 64 chips
  Hold(inv, 2, CubeHosts(inv, 1, 0, 8));   // 32 chips, lost work 900
  Hold(inv, 3, CubeHosts(inv, 2, 8, 16));  // 32 chips, lost work 100
  SlicePlanner planner;
  VictimSet v =
      FindVictims(inv, planner, kCube,
                  {{WorkloadId(1), 1, 0}, {WorkloadId(2), 1, 900}, {WorkloadId(3), 1, 100}});
  ASSERT_TRUE(v.found);
  EXPECT_EQ(v.victims, Ids({3}));
  EXPECT_EQ(v.plan.slices.at(0).cubes.at(0), CubeId(2));
}

TEST(Preemption, SubCubeEvictsOnlyTheHostsInTheBox) {
  Inventory inv = Pod(1, 1);
  std::vector<PreemptionCandidate> cands;
  for (int i = 0; i < 16; ++i) {
    Hold(inv, 100 + i, CubeHosts(inv, 0, i, i + 1));
    cands.push_back({WorkloadId(100 + i), 1, 1000 - i});
  }
  SlicePlanner planner;
  VictimSet v = FindVictims(inv, planner, {Generation::k7x, Shape::Of(2, 2, 2), 1}, cands);
  ASSERT_TRUE(v.found);
  EXPECT_EQ(v.victims.size(), 2u);
  EXPECT_EQ(v.cost.chips, 8);
  ExpectEveryVictimUsed(inv, v);
}

TEST(Preemption, UsesFreeHostsAndNeverEvictsWhatDoesNotHelp) {
  Inventory inv = Pod(1, 1);
  Hold(inv, 1, CubeHosts(inv, 0, 0, 2));   // a 2x2x2 at z=0
  Hold(inv, 2, CubeHosts(inv, 0, 4, 16));  // the rest but z=1
  SlicePlanner planner;
  // A 2x2x2 is a column of two hosts in z. Free hosts 2 and 3 sit at z=0 above job 2's hosts
  // 6 and 7, so evicting job 2 alone suffices; job 1 must stay.
  VictimSet v = FindVictims(inv, planner, {Generation::k7x, Shape::Of(2, 2, 2), 1},
                            {{WorkloadId(1), 1, 0}, {WorkloadId(2), 0, 0}});
  ASSERT_TRUE(v.found);
  EXPECT_EQ(v.victims, Ids({2}));
  ExpectEveryVictimUsed(inv, v);
}

TEST(Preemption, NonCandidatesBlockTheirRoom) {
  Inventory inv = Pod(1, 2);
  Hold(inv, 1, CubeHosts(inv, 0, 0, 1));  // cheap but not a candidate
  Hold(inv, 2, CubeHosts(inv, 1));
  SlicePlanner planner;
  VictimSet v = FindVictims(inv, planner, kCube, {{WorkloadId(2), 9, 0}});
  ASSERT_TRUE(v.found);
  EXPECT_EQ(v.victims, Ids({2}));
  VictimSet none =
      FindVictims(inv, planner, {Generation::k7x, Shape::Of(4, 4, 8), 1}, {{WorkloadId(2), 9, 0}});
  EXPECT_FALSE(none.found);
  EXPECT_FALSE(none.message.empty());
}

// Rooms of one cube with the same victims are tried once, but the message that every room was
// refused still counts each of them.
TEST(Preemption, RefusedRoomsAreCountedOncePerPositionNotPerVictimSet) {
  Inventory inv = Pod(1, 1);
  Hold(inv, 1, CubeHosts(inv, 0, 0, 8));  // half the cube; the other half is free
  SlicePlanner planner;
  const Shape shape = Shape::Of(2, 2, 2);
  int asked = 0;
  VictimSet v = FindVictims(inv, planner, {Generation::k7x, shape, 1}, {{WorkloadId(1), 1, 0}},
                            [&](const std::vector<int>&) {
                              ++asked;
                              return false;
                            });
  ASSERT_FALSE(v.found);
  const size_t positions = planner.SubCubeMasks(SubCubeShapeIndex(shape)).size();
  EXPECT_NE(v.message.find("(" + std::to_string(positions) + " rooms could be freed"),
            std::string::npos)
      << v.message;
  // Every position holds job 1's hosts, the free ones, or both: three victim sets at most, each
  // asked about once (the free room's empty set first, then the search's).
  EXPECT_LE(asked, 4);
  EXPECT_GT(positions, 4u);
}

TEST(Preemption, CheckRejectsSetsAndTheNextCheapestWins) {
  Inventory inv = Pod(1, 2);
  Hold(inv, 1, CubeHosts(inv, 0));
  Hold(inv, 2, CubeHosts(inv, 1));
  SlicePlanner planner;
  std::vector<PreemptionCandidate> cands = {{WorkloadId(1), 1, 0}, {WorkloadId(2), 2, 0}};
  VictimSet v = FindVictims(inv, planner, kCube, cands, [](const std::vector<int>& victims) {
    return victims == std::vector<int>{1};
  });
  ASSERT_TRUE(v.found);
  EXPECT_EQ(v.victims, Ids({2}));
}

TEST(Preemption, MultiSliceSuperSliceTakesCubesAcrossVictims) {
  Inventory inv = Pod(1, 4);
  Hold(inv, 1, CubeHosts(inv, 0));
  Hold(inv, 2, [&] {  // one 4x4x8 victim over cubes 1 and 2
    auto a = CubeHosts(inv, 1);
    auto b = CubeHosts(inv, 2);
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }());
  SlicePlanner planner;
  VictimSet v = FindVictims(inv, planner, {Generation::k7x, Shape::Of(4, 4, 4), 2},
                            {{WorkloadId(1), 3, 0}, {WorkloadId(2), 1, 0}});
  ASSERT_TRUE(v.found) << v.message;
  // Cube 3 is free; the second slice goes to the cheaper victim (priority 1) and uses one of
  // its cubes; the priority-3 cube is left alone.
  EXPECT_EQ(v.victims, Ids({2}));
  EXPECT_EQ(v.plan.slices.size(), 2u);
  ExpectEveryVictimUsed(inv, v);
}

// The greedy N-slice search enumerates again, after each room, only the rooms that room can
// change: here the first room (cube 1) evicts V, which also holds half of cube 3 in the other
// block, so cube 3 gets cheaper (only X is left to evict there) and is the second room. A
// search that kept block 1's rooms at their first cost would take cube 0 (S: fewer chips than
// V and X together) instead.
TEST(Preemption, MultiSliceSecondRoomSeesTheFirstRoomsVictimsGoneInAnotherBlock) {
  Inventory inv = Pod(2, 2);  // cubes 0 and 1 in block 0, 2 and 3 in block 1
  auto hosts = [&](std::vector<HostId> a, const std::vector<HostId>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  Hold(inv, 1, hosts(CubeHosts(inv, 0), CubeHosts(inv, 2, 0, 12)));  // S: 112 chips
  Hold(inv, 2, hosts(CubeHosts(inv, 1), CubeHosts(inv, 3, 0, 8)));   // V: 96 chips
  Hold(inv, 3, CubeHosts(inv, 2, 12, 16));                           // W: 16 chips
  Hold(inv, 4, CubeHosts(inv, 3, 8, 16));                            // X: 32 chips
  SlicePlanner planner;
  VictimSet v = FindVictims(
      inv, planner, {Generation::k7x, Shape::Of(4, 4, 4), 2},
      {{WorkloadId(1), 1, 0}, {WorkloadId(2), 1, 0}, {WorkloadId(3), 1, 0}, {WorkloadId(4), 1, 0}});
  ASSERT_TRUE(v.found) << v.message;
  EXPECT_EQ(v.victims, Ids({2, 4}));
  EXPECT_EQ(v.cost.chips, 128);
  ASSERT_EQ(v.plan.slices.size(), 2u);
  std::set<CubeId> cubes;
  for (const SlicePlacement& s : v.plan.slices) cubes.insert(s.cubes.begin(), s.cubes.end());
  EXPECT_EQ(cubes, (std::set<CubeId>{CubeId(1), CubeId(3)}));
  ExpectEveryVictimUsed(inv, v);
}

TEST(Preemption, FixedSlicesOn2DFleets) {
  auto inv = *Inventory::MakeFleet({Generation::kV6e, {Shape::Of(4, 4), Shape::Of(4, 4)}});
  ASSERT_TRUE(inv.Reserve(OwnerOf(WorkloadId(1)), inv.slices()[0].hosts).ok());
  ASSERT_TRUE(inv.Reserve(OwnerOf(WorkloadId(2)), inv.slices()[1].hosts).ok());
  SlicePlanner planner;
  VictimSet v = FindVictims(inv, planner, {Generation::kV6e, Shape::Of(4, 4), 1},
                            {{WorkloadId(1), 4, 0}, {WorkloadId(2), 2, 0}});
  ASSERT_TRUE(v.found);
  EXPECT_EQ(v.victims, Ids({2}));
  EXPECT_EQ(v.plan.slices.at(0).fixed_slice, SliceId(1));
}

TEST(Preemption, EqualRoomsAreOrderedByTheirCubes) {
  // Cube 0 is free; cubes 1 and 2 are held by workloads of equal cost. The rooms {0,1} and
  // {0,2} for a 4x4x8 cost the same and share their first cube: the lower cube list wins.
  Inventory inv = Pod(1, 3);
  Hold(inv, 1, CubeHosts(inv, 1));
  Hold(inv, 2, CubeHosts(inv, 2));
  SlicePlanner planner;
  VictimSet v = FindVictims(inv, planner, {Generation::k7x, Shape::Of(4, 4, 8), 1},
                            {{WorkloadId(1), 1, 0}, {WorkloadId(2), 1, 0}});
  ASSERT_TRUE(v.found) << v.message;
  EXPECT_EQ(v.victims, Ids({1}));
  ExpectEveryVictimUsed(inv, v);
}

// A VictimFinder asked many checks, in any order, answers each exactly as a fresh FindVictims;
// so does a finder built from the previous one (another shape, the same candidates).
TEST(PreemptionProperty, FinderReusedAcrossChecksMatchesFreshSearches) {
  const std::vector<Shape> shapes = {Shape::Of(2, 2, 1), Shape::Of(2, 2, 2), Shape::Of(2, 2, 4),
                                     Shape::Of(2, 4, 4), Shape::Of(4, 4, 4), Shape::Of(4, 4, 8)};
  SlicePlanner planner;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    Inventory inv = Pod(1 + int(rng.Uniform(2)), 2 + int(rng.Uniform(5)));
    std::vector<PreemptionCandidate> cands;
    for (uint64_t id = 1; id < 200; ++id) {
      const SliceRequest req{Generation::k7x, shapes[rng.Uniform(shapes.size())], 1};
      PlanResult plan = planner.Plan(inv, req);
      if (!plan.placed()) continue;
      ASSERT_TRUE(ApplyPlan(inv, OwnerOf(WorkloadId(id)), plan).ok());
      if (rng.Uniform(5) == 0) continue;  // held, but not a candidate
      cands.push_back({WorkloadId(id), int32_t(rng.Uniform(4)),
                       int64_t(rng.Uniform(3)) * req.shape.chips() * 1000});
    }
    std::unique_ptr<VictimFinder> previous;
    for (int r = 0; r < 4; ++r) {
      const SliceRequest req{Generation::k7x, shapes[rng.Uniform(shapes.size())],
                             1 + int(rng.Uniform(2))};
      VictimFinder finder(inv, planner, req, cands);
      std::unique_ptr<VictimFinder> derived;
      if (previous) derived = std::make_unique<VictimFinder>(*previous, req);
      if (req.num_slices == 1 && req.shape.chips() <= 64) {
        // One room, searched exhaustively: no set of one or two candidates whose eviction lets
        // the planner place the request costs less than the answer.
        VictimSet best = finder.Find();
        ASSERT_TRUE(best.found || cands.empty()) << best.message;
        for (size_t a = 0; a < cands.size(); ++a)
          for (size_t b = a; b < cands.size(); ++b) {
            Inventory freed = inv;
            freed.Release(OwnerOf(cands[a].workload));
            freed.Release(OwnerOf(cands[b].workload));
            if (!planner.Plan(freed, req).placed()) continue;
            VictimCost cost;
            for (size_t c : {a, b}) {
              cost.max_priority = std::max(cost.max_priority, cands[c].priority);
              cost.chips += 4 * int64_t(inv.HostsOf(OwnerOf(cands[c].workload)).size());
              cost.lost_work_chip_ms += cands[c].lost_work_chip_ms;
              if (a == b) break;
            }
            ASSERT_TRUE(best.found);
            EXPECT_LE(best.cost, cost) << "evicting " << a << " and " << b << " is cheaper";
          }
      }
      for (int q = 0; q < 6; ++q) {
        // Checks like a queue's quota: the victims must free at least `need` chips, and (for
        // some) must not include one chosen candidate.
        const int64_t need = int64_t(rng.Uniform(5)) * 32;
        const int banned = cands.empty() || rng.Uniform(2) ? -1 : int(rng.Uniform(cands.size()));
        std::vector<int64_t> chips_of;
        for (const PreemptionCandidate& c : cands)
          chips_of.push_back(4 * int64_t(inv.HostsOf(OwnerOf(c.workload)).size()));
        VictimSetCheck check = [&, need, banned](const std::vector<int>& victims) {
          int64_t freed = 0;
          for (int v : victims) {
            if (v == banned) return false;
            freed += chips_of[v];
          }
          return freed >= need;
        };
        const bool none = rng.Uniform(4) == 0;
        VictimSet reused = finder.Find(none ? VictimSetCheck() : check);
        VictimSet fresh = FindVictims(inv, planner, req, cands, none ? VictimSetCheck() : check);
        ASSERT_EQ(reused.found, fresh.found) << fresh.message;
        EXPECT_EQ(reused.victims, fresh.victims);
        EXPECT_EQ(reused.cost, fresh.cost);
        EXPECT_EQ(reused.plan.AllHosts(), fresh.plan.AllHosts());
        EXPECT_EQ(reused.message, fresh.message);
        if (fresh.found) ExpectEveryVictimUsed(inv, fresh);
        VictimSet victims_only =
            finder.Find(none ? VictimSetCheck() : check, VictimPlan::kVictimsOnly);
        EXPECT_EQ(victims_only.victims, fresh.victims);
        EXPECT_TRUE(victims_only.plan.slices.empty());
        if (derived) {
          VictimSet from_previous = derived->Find(none ? VictimSetCheck() : check);
          ASSERT_EQ(from_previous.found, fresh.found) << fresh.message;
          EXPECT_EQ(from_previous.victims, fresh.victims);
          EXPECT_EQ(from_previous.cost, fresh.cost);
          EXPECT_EQ(from_previous.plan.AllHosts(), fresh.plan.AllHosts());
          EXPECT_EQ(from_previous.message, fresh.message);
        }
      }
      previous = std::make_unique<VictimFinder>(inv, planner, req, cands);
      previous->Find([](const std::vector<int>&) { return false; });  // searches: prepared
    }
    if (HasFailure()) {
      std::cerr << "failing seed: " << seed << "\n";
      return;
    }
  }
}

// Finders made like one another share the rooms any of them lists for a shape, whichever made
// it and whatever it had searched: each answers what a fresh search answers.
TEST(PreemptionProperty, FindersMadeAlikeShareRoomsAndMatchFreshSearches) {
  const std::vector<Shape> shapes = {Shape::Of(2, 2, 2), Shape::Of(2, 4, 4), Shape::Of(4, 4, 4),
                                     Shape::Of(4, 4, 8)};
  SlicePlanner planner;
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    Inventory inv = Pod(2 + int(rng.Uniform(2)), 2 + int(rng.Uniform(3)));
    std::vector<PreemptionCandidate> cands;
    // Two thirds of the hosts held, some by others than the candidates, whole cubes among them:
    // free cubes and cubes no candidate holds a host in, in blocks where some do.
    size_t held = 0;
    for (uint64_t id = 1; id < 150 && 3 * held < 2 * inv.hosts().size(); ++id) {
      const SliceRequest req{Generation::k7x, shapes[rng.Uniform(shapes.size())], 1};
      PlanResult plan = planner.Plan(inv, req);
      if (!plan.placed()) continue;
      ASSERT_TRUE(ApplyPlan(inv, OwnerOf(WorkloadId(id)), plan).ok());
      held += plan.AllHosts().size();
      if (rng.Uniform(3) == 0) continue;
      cands.push_back({WorkloadId(id), int32_t(rng.Uniform(4)), int64_t(rng.Uniform(3)) * 1000});
    }
    auto random_request = [&] {
      return SliceRequest{Generation::k7x, shapes[rng.Uniform(shapes.size())],
                          1 + int(rng.Uniform(2))};
    };
    std::vector<std::unique_ptr<VictimFinder>> family;
    family.push_back(std::make_unique<VictimFinder>(inv, planner, random_request(), cands));
    for (int r = 0; r < 8; ++r) {
      const SliceRequest req = random_request();
      // Like any earlier member, searched or not.
      family.push_back(std::make_unique<VictimFinder>(*family[rng.Uniform(family.size())], req));
      VictimFinder& finder = *family.back();
      const int64_t need = int64_t(rng.Uniform(4)) * 64;
      const VictimSetCheck check = [&, need](const std::vector<int>& victims) {
        int64_t freed = 0;
        for (int v : victims) freed += 4 * int64_t(inv.HostsOf(OwnerOf(cands[v].workload)).size());
        return freed >= need;
      };
      const VictimSet shared = finder.Find(check);
      const VictimSet fresh = FindVictims(inv, planner, req, cands, check);
      ASSERT_EQ(shared.found, fresh.found) << fresh.message;
      EXPECT_EQ(shared.victims, fresh.victims);
      EXPECT_EQ(shared.cost, fresh.cost);
      EXPECT_EQ(shared.plan.AllHosts(), fresh.plan.AllHosts());
      EXPECT_EQ(shared.message, fresh.message);
    }
    if (HasFailure()) {
      std::cerr << "failing seed: " << seed << "\n";
      return;
    }
  }
}

// A search by group (VictimFinder::SetGroups, Find's needs_group) tries only the rooms with a
// victim of the group; given a check that refuses every set without one, it answers what the
// full search answers, message (with its count of refused rooms) included. So does a search by
// group and weight (needs_weight), given a check that refuses every set whose victims of the
// group weigh less.
TEST(PreemptionProperty, SearchByGroupMatchesTheFullSearch) {
  const std::vector<Shape> shapes = {Shape::Of(2, 2, 1), Shape::Of(2, 2, 2), Shape::Of(2, 4, 4),
                                     Shape::Of(4, 4, 4), Shape::Of(4, 4, 8)};
  SlicePlanner planner;
  int found_by_group = 0;
  int skipped_by_weight = 0;  // one-slice searches where weights could skip rooms and none fit
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    Inventory inv = Pod(1 + int(rng.Uniform(2)), 2 + int(rng.Uniform(5)));
    std::vector<PreemptionCandidate> cands;
    std::vector<int> groups;
    for (uint64_t id = 1; id < 200; ++id) {
      const SliceRequest req{Generation::k7x, shapes[rng.Uniform(shapes.size())], 1};
      PlanResult plan = planner.Plan(inv, req);
      if (!plan.placed()) continue;
      ASSERT_TRUE(ApplyPlan(inv, OwnerOf(WorkloadId(id)), plan).ok());
      if (rng.Uniform(5) == 0) continue;  // held, but not a candidate
      cands.push_back({WorkloadId(id), int32_t(rng.Uniform(4)),
                       int64_t(rng.Uniform(3)) * req.shape.chips() * 1000});
      groups.push_back(int(rng.Uniform(4)) - 1);  // -1: in no group
    }
    std::vector<int64_t> chips_of;
    for (const PreemptionCandidate& c : cands)
      chips_of.push_back(4 * int64_t(inv.HostsOf(OwnerOf(c.workload)).size()));
    for (int r = 0; r < 4; ++r) {
      const SliceRequest req{Generation::k7x, shapes[rng.Uniform(shapes.size())],
                             1 + int(rng.Uniform(2))};
      VictimFinder finder(inv, planner, req, cands);
      finder.SetGroups(groups);
      VictimFinder weighed(inv, planner, req, cands);
      weighed.SetGroups(groups, chips_of);
      for (int q = 0; q < 6; ++q) {
        // Like a quota check: victims of the group must free `need` chips (at least one), so a
        // set without one is refused, as Find's promise asks.
        const int group = int(rng.Uniform(3));
        const int64_t need = 1 + int64_t(rng.Uniform(4)) * 32;
        VictimSetCheck check = [&, group, need](const std::vector<int>& victims) {
          int64_t freed = 0;
          for (int v : victims)
            if (groups[v] == group) freed += chips_of[v];
          return freed >= need;
        };
        VictimSet by_group = finder.Find(check, VictimPlan::kVictimsOnly, group);
        VictimSet full = FindVictims(inv, planner, req, cands, check);
        ASSERT_EQ(by_group.found, full.found) << full.message;
        EXPECT_EQ(by_group.victims, full.victims);
        EXPECT_EQ(by_group.cost, full.cost);
        EXPECT_EQ(by_group.message, full.message);
        found_by_group += by_group.found && req.num_slices == 1;
        VictimSet by_weight = weighed.Find(check, VictimPlan::kVictimsOnly, group, need);
        ASSERT_EQ(by_weight.found, full.found) << full.message;
        EXPECT_EQ(by_weight.victims, full.victims);
        EXPECT_EQ(by_weight.cost, full.cost);
        EXPECT_EQ(by_weight.message, full.message);
        skipped_by_weight += !full.found && req.num_slices == 1 && need > 1;
      }
    }
    if (HasFailure()) {
      std::cerr << "failing seed: " << seed << "\n";
      return;
    }
  }
  EXPECT_GT(found_by_group, 20) << "too few one-slice searches by group found a room";
  EXPECT_GT(skipped_by_weight, 0) << "no search where weights could skip rooms found nothing";
}

// The room a group's check accepts comes after cheaper rooms with only other groups' victims:
// the search by group skips those and takes it.
TEST(Preemption, SearchByGroupSkipsRoomsWithoutTheGroup) {
  Inventory inv = Pod(1, 2);
  Hold(inv, 1, CubeHosts(inv, 0));  // priority 0, group 0: the cheapest room
  Hold(inv, 2, CubeHosts(inv, 1));  // priority 3, group 1
  SlicePlanner planner;
  VictimFinder finder(inv, planner, kCube, {{WorkloadId(1), 0, 0}, {WorkloadId(2), 3, 0}});
  finder.SetGroups({0, 1});
  auto needs_group_1 = [](const std::vector<int>& victims) {
    return std::find(victims.begin(), victims.end(), 1) != victims.end();
  };
  VictimSet v = finder.Find(needs_group_1, VictimPlan::kVictimsOnly, 1);
  ASSERT_TRUE(v.found) << v.message;
  EXPECT_EQ(v.victims, Ids({2}));
  VictimSet none =
      finder.Find([](const std::vector<int>&) { return false; }, VictimPlan::kVictimsOnly, 1);
  EXPECT_FALSE(none.found);
  EXPECT_EQ(none.message,
            FindVictims(inv, planner, kCube, {{WorkloadId(1), 0, 0}, {WorkloadId(2), 3, 0}},
                        [](const std::vector<int>&) { return false; })
                .message);
}

}  // namespace
}  // namespace tessera
