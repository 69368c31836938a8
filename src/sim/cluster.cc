#include "sim/cluster.h"

#include <algorithm>
#include <charconv>
#include <numeric>
#include <vector>

#include "common/rng.h"

namespace tessera::sim {

Result<ClusterSpec> Preset(std::string_view name) {
  ClusterSpec s;
  s.name = std::string(name);
  if (name == "ironwood") {
    s.generation = Generation::k7x;
    s.blocks = 9;
    s.cubes_per_block = 16;
  } else if (name == "v5p") {
    s.generation = Generation::kV5p;
    s.blocks = 10;
    s.cubes_per_block = 14;
  } else if (name == "v6e-fleet") {
    s.generation = Generation::kV6e;
    s.fleet = "4x4:64,8x8:16";
  } else {
    return InvalidArgument("preset: '" + std::string(name) +
                           "' is not one of ironwood, v5p, v6e-fleet");
  }
  return s;
}

Result<Inventory> BuildCluster(const ClusterSpec& spec) {
  Result<Inventory> inv = InvalidArgument("unreachable");
  if (Info(spec.generation).rank == 3) {
    inv = Inventory::MakePod({spec.generation, spec.blocks, spec.cubes_per_block});
  } else {
    if (spec.fleet.empty())
      return InvalidArgument("fleet: a 2D generation needs fixed slices, e.g. 4x4:64,8x8:16");
    FleetSpec fleet{spec.generation, {}};
    std::string_view text = spec.fleet;
    while (!text.empty()) {
      const size_t comma = text.find(',');
      std::string_view entry = text.substr(0, comma);
      text = comma == text.npos ? std::string_view() : text.substr(comma + 1);
      const size_t colon = entry.find(':');
      auto shape = ParseShape(entry.substr(0, colon));
      if (!shape.ok())
        return InvalidArgument("fleet: entry '" + std::string(entry) +
                               "': " + shape.status().message());
      int count = 1;
      if (colon != entry.npos) {
        std::string_view c = entry.substr(colon + 1);
        auto [p, ec] = std::from_chars(c.data(), c.data() + c.size(), count);
        if (ec != std::errc() || p != c.data() + c.size() || count < 1)
          return InvalidArgument("fleet: entry '" + std::string(entry) +
                                 "': the count must be a positive integer");
      }
      for (int i = 0; i < count; ++i) fleet.slices.push_back(*shape);
    }
    inv = Inventory::MakeFleet(fleet);
  }
  if (!inv.ok()) return inv.status();
  const int hosts = static_cast<int>(inv->hosts().size());
  if (spec.unhealthy_hosts < 0 || spec.unhealthy_hosts > hosts)
    return InvalidArgument("unhealthyHosts: must be in [0, " + std::to_string(hosts) + "]");
  // A partial Fisher-Yates shuffle picks distinct hosts, the same ones for the same seed.
  std::vector<uint32_t> ids(hosts);
  std::iota(ids.begin(), ids.end(), 0u);
  Rng rng(spec.unhealthy_seed);
  for (int i = 0; i < spec.unhealthy_hosts; ++i) {
    const size_t j = i + rng.Uniform(static_cast<uint64_t>(hosts - i));
    std::swap(ids[i], ids[j]);
    TESSERA_RETURN_IF_ERROR(inv->SetHealth(HostId(ids[i]), Health::kDown));
  }
  return inv;
}

std::string Describe(const ClusterSpec& spec, const Inventory& inv) {
  std::string s = spec.name + ": " + std::string(GenerationName(spec.generation)) + ", ";
  if (inv.is_3d())
    s += std::to_string(inv.cubes().size()) + " cubes in " + std::to_string(spec.blocks) +
         " blocks of " + std::to_string(spec.cubes_per_block);
  else
    s += std::to_string(inv.slices().size()) + " fixed slices (" + spec.fleet + ")";
  s += ", " + std::to_string(inv.total_chips()) + " chips";
  if (spec.unhealthy_hosts > 0)
    s += ", " + std::to_string(spec.unhealthy_hosts) + " hosts down for the whole run";
  return s;
}

}  // namespace tessera::sim
