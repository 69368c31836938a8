#include "inventory/inventory.h"

#include <gtest/gtest.h>

#include <map>

#include "common/rng.h"

namespace tessera {
namespace {

Inventory SmallPod(int blocks = 2, int cubes_per_block = 2) {
  auto inv = Inventory::MakePod({Generation::k7x, blocks, cubes_per_block});
  EXPECT_TRUE(inv.ok()) << inv.status().ToString();
  return *inv;
}

TEST(Inventory, PodLayoutBlocksCubesHosts) {
  Inventory inv = SmallPod(2, 3);
  EXPECT_EQ(inv.blocks().size(), 2u);
  EXPECT_EQ(inv.cubes().size(), 6u);
  EXPECT_EQ(inv.hosts().size(), 6u * 16);
  EXPECT_EQ(inv.total_chips(), 6 * 64);
  EXPECT_EQ(inv.usable_chips(), 6 * 64);
  const Cube& c = inv.cube(CubeId(4));
  EXPECT_EQ(c.block, BlockId(1));
  for (int i = 0; i < kHostsPerCube; ++i) {
    const Host& h = inv.host(c.hosts[i]);
    EXPECT_EQ(h.cube, c.id);
    EXPECT_EQ(CubeLocalIndex(h.coord.x, h.coord.y, h.coord.z), i);
  }
  EXPECT_EQ(inv.block(BlockId(1)).usable_cubes, 3);
}

TEST(Inventory, BadSpecsAreRejectedWithTheField) {
  EXPECT_NE(Inventory::MakePod({Generation::kV6e, 1, 1}).status().message().find("fleet"),
            std::string::npos);
  EXPECT_NE(Inventory::MakePod({Generation::kV4, 0, 1}).status().message().find("blocks"),
            std::string::npos);
  EXPECT_NE(Inventory::MakePod({Generation::kV4, 1, -1}).status().message().find("cubesPerBlock"),
            std::string::npos);
  EXPECT_NE(Inventory::MakeFleet({Generation::kV6e, {Shape::Of(4, 5)}})
                .status()
                .message()
                .find("slices[0]"),
            std::string::npos);
  EXPECT_FALSE(Inventory::MakeFleet({Generation::kV6e, {}}).ok());
}

TEST(Inventory, ReserveIsAllOrNothing) {
  Inventory inv = SmallPod();
  const Cube& c = inv.cube(CubeId(0));
  ASSERT_TRUE(inv.Reserve(OwnerId(1), {c.hosts[0], c.hosts[1]}).ok());
  EXPECT_EQ(inv.cube(CubeId(0)).free_mask, HostMask(0xFFFC));
  EXPECT_EQ(inv.block(BlockId(0)).usable_cubes, 1);
  // Overlaps host 1: nothing of it may be taken.
  Status s = inv.Reserve(OwnerId(2), {c.hosts[2], c.hosts[1], c.hosts[3]});
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("already owned"), std::string::npos);
  EXPECT_TRUE(inv.host(c.hosts[2]).free());
  EXPECT_TRUE(inv.host(c.hosts[3]).free());
  EXPECT_TRUE(inv.HostsOf(OwnerId(2)).empty());
  // Duplicates and unknown hosts change nothing either.
  EXPECT_FALSE(inv.Reserve(OwnerId(3), {c.hosts[4], c.hosts[4]}).ok());
  EXPECT_FALSE(inv.Reserve(OwnerId(3), {c.hosts[4], HostId(100000)}).ok());
  EXPECT_TRUE(inv.host(c.hosts[4]).free());
  EXPECT_EQ(inv.owned_chips(), 8);
}

TEST(Inventory, ReleaseIsIdempotent) {
  Inventory inv = SmallPod();
  const Cube& c = inv.cube(CubeId(1));
  ASSERT_TRUE(inv.Reserve(OwnerId(7), {c.hosts[5]}).ok());
  ASSERT_TRUE(inv.Reserve(OwnerId(7), {c.hosts[6]}).ok());
  EXPECT_EQ(inv.Release(OwnerId(7)), 2);
  EXPECT_EQ(inv.Release(OwnerId(7)), 0);
  EXPECT_EQ(inv.Release(OwnerId(99)), 0);
  EXPECT_EQ(inv.cube(CubeId(1)).free_mask, kFullCube);
  EXPECT_EQ(inv.owned_chips(), 0);
  EXPECT_EQ(inv.usable_chips(), inv.total_chips());
}

TEST(Inventory, HealthShapesUsabilityNotOwnership) {
  Inventory inv = SmallPod();
  HostId h = inv.cube(CubeId(2)).hosts[9];
  ASSERT_TRUE(inv.SetHealth(h, Health::kDown).ok());
  EXPECT_EQ(inv.cube(CubeId(2)).healthy_mask, HostMask(kFullCube & ~(1u << 9)));
  EXPECT_EQ(inv.block(BlockId(1)).usable_cubes, 1);
  EXPECT_EQ(inv.usable_chips(), inv.total_chips() - 4);
  EXPECT_EQ(inv.Reserve(OwnerId(1), {h}).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(inv.SetHealth(h, Health::kHealthy).ok());
  ASSERT_TRUE(inv.Reserve(OwnerId(1), {h}).ok());
  ASSERT_TRUE(inv.SetHealth(h, Health::kDegraded).ok());  // keeps its owner
  EXPECT_EQ(inv.host(h).owner, OwnerId(1));
  EXPECT_EQ(inv.ChipOwner(h, 3), OwnerId(1));
  EXPECT_FALSE(inv.ChipOwner(h, 4).valid());
}

TEST(Inventory, FleetOfFixedSlices) {
  auto inv = Inventory::MakeFleet({Generation::kV6e, {Shape::Of(4, 4), Shape::Of(2, 4)}});
  ASSERT_TRUE(inv.ok());
  EXPECT_EQ(inv->slices().size(), 2u);
  EXPECT_EQ(inv->hosts().size(), 5u);  // 4 + one 8-chip host
  EXPECT_EQ(inv->host(HostId(4)).chips, 8);
  EXPECT_EQ(inv->total_chips(), 24);
}

// Random reserve/release/health against a naive map model: the masks, counters and owners
// always agree with the model, and no host is ever owned twice.
TEST(InventoryProperty, RandomOpsAgreeWithNaiveModel) {
  const uint64_t seed = 20261129;
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  Inventory inv = SmallPod(3, 4);
  std::map<uint32_t, uint64_t> owner_of;  // host -> owner
  std::map<uint32_t, Health> health;
  const uint32_t n = static_cast<uint32_t>(inv.hosts().size());
  for (int step = 0; step < 5000; ++step) {
    const uint64_t op = rng.Uniform(10);
    if (op < 5) {
      std::vector<HostId> want;
      const int k = 1 + static_cast<int>(rng.Uniform(6));
      for (int i = 0; i < k; ++i) want.push_back(HostId(static_cast<uint32_t>(rng.Uniform(n))));
      bool expect_ok = true;
      std::map<uint32_t, int> count;
      for (HostId h : want) {
        if (++count[h.value()] > 1 || owner_of.count(h.value()) ||
            health[h.value()] == Health::kDown)
          expect_ok = false;
      }
      const OwnerId owner(1 + rng.Uniform(20));
      Status s = inv.Reserve(owner, want);
      ASSERT_EQ(s.ok(), expect_ok) << "step " << step << ": " << s.ToString();
      if (s.ok())
        for (HostId h : want) owner_of[h.value()] = owner.value();
    } else if (op < 8) {
      const OwnerId owner(1 + rng.Uniform(20));
      int expected = 0;
      for (auto it = owner_of.begin(); it != owner_of.end();) {
        if (it->second == owner.value()) {
          ++expected;
          it = owner_of.erase(it);
        } else {
          ++it;
        }
      }
      ASSERT_EQ(inv.Release(owner), expected);
    } else {
      const HostId h(static_cast<uint32_t>(rng.Uniform(n)));
      const Health hh = static_cast<Health>(rng.Uniform(3));
      ASSERT_TRUE(inv.SetHealth(h, hh).ok());
      health[h.value()] = hh;
    }
    // Check every derived field against the model.
    int64_t usable = 0, owned = 0;
    std::vector<int> usable_cubes(inv.blocks().size(), 0);
    for (const Cube& c : inv.cubes()) {
      HostMask free = 0, healthy = 0;
      for (int i = 0; i < kHostsPerCube; ++i) {
        const uint32_t h = c.hosts[i].value();
        const bool is_free = !owner_of.count(h);
        const bool is_healthy = health[h] == Health::kHealthy;
        if (is_free) free |= HostMask(1u << i);
        if (is_healthy) healthy |= HostMask(1u << i);
        if (is_free && is_healthy) usable += 4;
        if (!is_free) owned += 4;
        ASSERT_EQ(inv.host(c.hosts[i]).owner.value(), is_free ? OwnerId::kInvalid : owner_of[h]);
      }
      ASSERT_EQ(c.free_mask, free);
      ASSERT_EQ(c.healthy_mask, healthy);
      if ((free & healthy) == kFullCube) ++usable_cubes[c.block.value()];
    }
    ASSERT_EQ(inv.usable_chips(), usable);
    ASSERT_EQ(inv.owned_chips(), owned);
    for (const Block& b : inv.blocks()) ASSERT_EQ(b.usable_cubes, usable_cubes[b.id.value()]);
    // Who holds what: each owner's hosts ascending (over several reservations), and the owners.
    std::map<uint64_t, std::vector<HostId>> held;
    for (const auto& [h, o] : owner_of) held[o].push_back(HostId(h));
    std::vector<OwnerId> owners;
    for (const auto& [o, hosts] : held) owners.push_back(OwnerId(o));
    ASSERT_EQ(inv.Owners(), owners) << "step " << step;
    for (uint64_t o = 1; o <= 20; ++o) {
      ASSERT_EQ(inv.HostsOf(OwnerId(o)), held[o]) << "step " << step << ", owner " << o;
      ASSERT_EQ(inv.Holds(OwnerId(o)), !held[o].empty()) << "step " << step;
    }
  }
}

// A release leaves its owner's entry behind until half of the entries are released ones
// (inventory.h): the owners, their hosts and a new reservation by a released owner read the
// same before and after the entries are dropped.
TEST(Inventory, OwnersStayInOrderAcrossReleasesAndReservationsAgain) {
  Inventory inv = SmallPod(1, 4);  // 64 hosts
  for (uint64_t o = 1; o <= 64; ++o)
    ASSERT_TRUE(inv.Reserve(OwnerId(o), {HostId(static_cast<uint32_t>(o - 1))}).ok());
  std::vector<OwnerId> held;
  for (uint64_t o = 1; o <= 64; ++o) {
    if (o % 3 == 0) {
      EXPECT_EQ(inv.Release(OwnerId(o)), 1) << o;
      EXPECT_EQ(inv.Release(OwnerId(o)), 0) << o;  // released already
      EXPECT_FALSE(inv.Holds(OwnerId(o)));
      EXPECT_TRUE(inv.HostsOf(OwnerId(o)).empty());
    } else {
      held.push_back(OwnerId(o));
    }
  }
  EXPECT_EQ(inv.Owners(), held);
  // Owner 3 takes two hosts again (its entry is reused), then most owners leave: the released
  // entries outnumber the held ones and are dropped.
  ASSERT_TRUE(inv.Reserve(OwnerId(3), {HostId(5), HostId(2)}).ok());
  EXPECT_EQ(inv.HostsOf(OwnerId(3)), (std::vector<HostId>{HostId(2), HostId(5)}));
  for (uint64_t o = 1; o <= 60; ++o)
    if (o != 3) inv.Release(OwnerId(o));
  EXPECT_EQ(inv.Owners(),
            (std::vector<OwnerId>{OwnerId(3), OwnerId(61), OwnerId(62), OwnerId(64)}));
  EXPECT_EQ(inv.HostsOf(OwnerId(3)), (std::vector<HostId>{HostId(2), HostId(5)}));
  EXPECT_EQ(inv.HostsOf(OwnerId(62)), (std::vector<HostId>{HostId(61)}));
  EXPECT_EQ(inv.owned_chips(), 5 * 4);
  ASSERT_TRUE(inv.Reserve(OwnerId(7), {HostId(6)}).ok());  // a dropped entry, made anew
  EXPECT_EQ(inv.Owners(),
            (std::vector<OwnerId>{OwnerId(3), OwnerId(7), OwnerId(61), OwnerId(62), OwnerId(64)}));
}

// A copy is a value: changing the original after the copy leaves the copy as it was.
TEST(Inventory, ACopyIsIndependentOfTheOriginal) {
  Inventory inv = SmallPod(1, 2);
  ASSERT_TRUE(inv.Reserve(OwnerId(1), {HostId(0), HostId(5)}).ok());
  ASSERT_TRUE(inv.Reserve(OwnerId(2), {HostId(3)}).ok());
  const Inventory copy = inv;
  ASSERT_TRUE(inv.Reserve(OwnerId(1), {HostId(2)}).ok());
  EXPECT_EQ(inv.Release(OwnerId(2)), 1);
  EXPECT_EQ(copy.HostsOf(OwnerId(1)), (std::vector<HostId>{HostId(0), HostId(5)}));
  EXPECT_EQ(copy.HostsOf(OwnerId(2)), (std::vector<HostId>{HostId(3)}));
  EXPECT_EQ(copy.host(HostId(2)).owner, OwnerId());
  EXPECT_EQ(inv.HostsOf(OwnerId(1)), (std::vector<HostId>{HostId(0), HostId(2), HostId(5)}));
  EXPECT_FALSE(inv.Holds(OwnerId(2)));
  EXPECT_EQ(copy.owned_chips(), 12);
  EXPECT_EQ(inv.owned_chips(), 12);  // one host taken, one freed
}

}  // namespace
}  // namespace tessera
