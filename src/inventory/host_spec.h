// HostSpec: a host as its agent registered it (generation, chips, where its agent listens, and
// its place in the fabric: a member of a fixed 2D slice, or a position in a 3D cube), and
// HostStatus: what the head knows of it now. The registry in the controller keeps these and
// builds the Inventory (inventory.h) from the memberships.
//
// Thread-safety: values.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "topology/topology.h"

namespace tessera {

// A 2D host: worker `worker` of the fixed slice `name` of shape `topology`.
struct SliceMembership {
  std::string name;
  std::string topology;  // "4x4"
  int worker = 0;
  friend bool operator==(const SliceMembership&, const SliceMembership&) = default;
};

// A 3D host: position `coord` (x, y in 0..1, z in 0..3) of cube `name` in block `block`.
struct CubeMembership {
  std::string name;
  std::string block = "block-00";
  Coord coord;
  friend bool operator==(const CubeMembership&, const CubeMembership&) = default;
};

struct HostSpec {
  std::string name;
  Generation generation = Generation::kV6e;
  int chips = 4;
  std::string address = "127.0.0.1";
  int agent_port = 0;
  std::optional<SliceMembership> slice;  // 2D generations
  std::optional<CubeMembership> cube;    // 3D generations
  std::map<std::string, std::string> labels;
  // What the agent discovered of the host (protocol::DiscoveredJson, docs/discovery.md), as the
  // JSON text it sent; "" for an emulated host. Kept and shown, not planned on.
  std::string discovered;

  // Same slice worker or cube position (the inventory does not change when only the address,
  // port or labels do).
  bool SameMembership(const HostSpec& other) const {
    return slice == other.slice && cube == other.cube;
  }
};

struct HostStatus {
  bool lost = false;
  int64_t registered_ms = 0;
  int64_t last_heartbeat_ms = 0;
  // What the agent last reported of its workers' use: cpuPercent, memoryBytes, and for a
  // device that knows it, chipUtilizationPercent.
  std::map<std::string, double> usage;
};

}  // namespace tessera
