// Simulated clusters: a description (generation, blocks of cubes or fixed slices, unhealthy
// hosts) and the named presets, turned into an Inventory the simulator owns.
//
// Presets (docs/simulator.md):
//   ironwood   7x pod: 9 blocks x 16 cubes = 144 cubes, 9,216 chips.
//   v5p        v5p pod: 10 blocks x 14 cubes = 140 cubes, 8,960 chips. The optical-switch
//              domain is taken to be 14 cubes, so super-slices stop at 14 cubes (896 chips);
//              describe it as --blocks 1 --cubes-per-block 140 to allow the whole pod.
//   v6e-fleet  v6e node pools: 64 slices of 4x4 and 16 of 8x8 = 2,048 chips.
//
// Pure. Thread-safety: values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "inventory/inventory.h"

namespace tessera::sim {

struct ClusterSpec {
  std::string name = "ironwood";
  Generation generation = Generation::k7x;
  int blocks = 9;            // 3D
  int cubes_per_block = 16;  // 3D
  std::string fleet;         // 2D: "4x4:64,8x8:16" = 64 slices of 4x4 and 16 of 8x8
  // Hosts down for the whole run, chosen with Rng(unhealthy_seed) without repetition.
  int unhealthy_hosts = 0;
  uint64_t unhealthy_seed = 1;
};

// "ironwood", "v5p", "v6e-fleet"; anything else is InvalidArgument listing them.
Result<ClusterSpec> Preset(std::string_view name);

// Builds the inventory; errors name the field.
Result<Inventory> BuildCluster(const ClusterSpec& spec);

// One line for people: "ironwood: 7x, 144 cubes in 9 blocks of 16, 9,216 chips".
std::string Describe(const ClusterSpec& spec, const Inventory& inv);

}  // namespace tessera::sim
