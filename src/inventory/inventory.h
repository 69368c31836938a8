// Inventory: the cluster as data. Hosts, their health and their owner; for 3D generations the
// pod's blocks (optical-switch domains) of 4x4x4 cubes (16 hosts of 2x2x1 chips each) and fixed
// 3D slices (provisioned TPU VM slices, never carved); for 2D generations fixed slices (node
// pools) of declared shapes.
//
// Every valid slice of every generation sits on host boundaries, so ownership is kept per host:
// a chip's owner is its host's owner. Reserve is all or nothing and Release is idempotent; no
// host (and so no chip) is ever owned twice.
//
// An Inventory is a plain value: copying it is the snapshot a scheduling cycle plans against
// (a few flat vectors and no strings: see bench/README.md for the cost).
//
// Thread-safety: none. One owner mutates it; copies may be read from other threads.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/ids.h"
#include "common/status.h"
#include "topology/topology.h"

namespace tessera {

enum class Health { kHealthy, kDegraded, kDown };
const char* HealthName(Health h);

// Hosts of a cube form a 2x2x4 grid; a host's local index inside its cube is z*4 + y*2 + x,
// which is also its bit in a cube's 16-bit host masks.
inline constexpr int kCubeHostsX = 2, kCubeHostsY = 2, kCubeHostsZ = 4;
inline constexpr int kHostsPerCube = kCubeHostsX * kCubeHostsY * kCubeHostsZ;
inline constexpr int kChipsPerCube = 64;
using HostMask = uint16_t;
inline constexpr HostMask kFullCube = 0xFFFF;
inline constexpr int CubeLocalIndex(int x, int y, int z) { return z * 4 + y * 2 + x; }

struct Host {
  HostId id;
  Health health = Health::kHealthy;
  OwnerId owner;  // invalid when free
  int chips = 4;
  // 3D: the cube and the host-grid coordinate inside it. 2D: the fixed slice and the host's
  // coordinate in that slice's host grid (z = 0).
  CubeId cube;
  SliceId slice;
  Coord coord;

  bool free() const { return !owner.valid(); }
  // Placement chooses only healthy hosts; degraded hosts keep their work but take no more.
  bool usable() const { return free() && health == Health::kHealthy; }
};

struct Cube {
  CubeId id;
  BlockId block;
  HostId hosts[kHostsPerCube];        // by local index
  HostMask free_mask = kFullCube;     // bit set: host has no owner
  HostMask healthy_mask = kFullCube;  // bit set: host is healthy
  HostMask usable_mask() const { return free_mask & healthy_mask; }
  bool whole_and_usable() const { return usable_mask() == kFullCube; }
};

struct Block {
  BlockId id;
  std::vector<CubeId> cubes;
  int usable_cubes = 0;  // cubes whose 16 hosts are all free and healthy
};

// A slice the provider made: a 2D node pool, or a provisioned 3D TPU VM slice outside any cube.
// A job gets all of it or none of it.
struct FixedSlice {
  SliceId id;
  SliceTopology topology;
  std::vector<HostId> hosts;  // in worker-id order
};

// How to build a 3D pod: blocks of cubes.
struct PodSpec {
  Generation generation = Generation::k7x;
  int blocks = 9;
  int cubes_per_block = 16;  // an optical-switch domain; the largest super-slice it can form
};

// How to build a 2D fleet: fixed slices, each of a declared shape.
struct FleetSpec {
  Generation generation = Generation::kV6e;
  std::vector<Shape> slices;
};

class Inventory {
 public:
  // Builders. Errors: InvalidArgument naming the field (a 2D generation for a pod, a shape the
  // generation does not offer, zero or negative counts, more than 2^20 hosts).
  static Result<Inventory> MakePod(const PodSpec& spec);
  // A pod whose blocks hold different numbers of cubes (block b has cubes_per_block[b]).
  static Result<Inventory> MakePod(Generation generation, const std::vector<int>& cubes_per_block);
  // Cubes (cubes_per_block, may be empty) beside fixed 3D slices: provisioned TPU VM slices
  // (a v5p-16 is a 2x2x2 of 2 hosts) that tessera gives whole and never carves. Slice i has
  // SliceId i and its hosts in worker-id order, after every cube's hosts. InvalidArgument
  // "fixedSlices[i]: ..." for a shape the generation does not offer.
  static Result<Inventory> MakePod(Generation generation, const std::vector<int>& cubes_per_block,
                                   const std::vector<Shape>& fixed_slices);
  static Result<Inventory> MakeFleet(const FleetSpec& spec);

  Generation generation() const { return generation_; }
  bool is_3d() const { return Info(generation_).rank == 3; }
  int64_t total_chips() const;
  int64_t usable_chips() const { return usable_chips_; }  // free and healthy
  int64_t owned_chips() const { return owned_chips_; }
  // How many times a Reserve or a Release has changed who holds a host since this inventory was
  // made (copies carry it on). Equal counts of one inventory mean the same owner on every host,
  // so a reader that derives something from ownership can skip the walk when it has not moved.
  uint64_t ownership_changes() const { return ownership_changes_; }

  const std::vector<Host>& hosts() const { return hosts_; }
  const std::vector<Cube>& cubes() const { return cubes_; }
  const std::vector<Block>& blocks() const { return blocks_; }
  const std::vector<FixedSlice>& slices() const { return slices_; }
  const Host& host(HostId id) const { return hosts_[id.value()]; }
  const Cube& cube(CubeId id) const { return cubes_[id.value()]; }
  const Block& block(BlockId id) const { return blocks_[id.value()]; }
  const FixedSlice& slice(SliceId id) const { return slices_[id.value()]; }
  // Names for people, derived from the layout ("cube-007-h05", "block-01", "slice-003-w2"), so
  // a snapshot copies no strings.
  std::string HostName(HostId id) const;
  std::string CubeName(CubeId id) const;
  std::string BlockName(BlockId id) const;
  std::string SliceName(SliceId id) const;
  // The owner of one chip of a host (chip in [0, host.chips)); invalid when free.
  OwnerId ChipOwner(HostId host, int chip) const;

  // Gives every host in `hosts` to `owner`, or changes nothing. Fails with FailedPrecondition
  // (naming the first host that is taken, down, or listed twice) or InvalidArgument (unknown
  // host, invalid owner). An owner may hold several reservations; they are released together.
  Status Reserve(OwnerId owner, const std::vector<HostId>& hosts);
  // Frees every host of `owner`. Idempotent: returns how many hosts were freed (0 the second
  // time).
  int Release(OwnerId owner);
  // Hosts held by `owner`, ascending.
  std::vector<HostId> HostsOf(OwnerId owner) const;
  // Whether `owner` holds any host.
  bool Holds(OwnerId owner) const;
  // Every owner that holds a host, ascending.
  std::vector<OwnerId> Owners() const;

  // Health changes keep ownership: work on a host that goes down is the caller's to stop.
  Status SetHealth(HostId host, Health health);

 private:
  void UpdateMasks(const Host& h, bool was_usable);
  // Appends one fixed slice per shape (errors name `field`[i]).
  Status AddFixedSlices(const std::string& field, const std::vector<Shape>& shapes);

  Generation generation_ = Generation::k7x;
  std::vector<Host> hosts_;
  std::vector<Cube> cubes_;
  std::vector<Block> blocks_;
  std::vector<FixedSlice> slices_;
  // Who holds what, kept cheap to copy (schedulers copy an inventory to try things on it): one
  // entry per owner, ascending, heading a list of its hosts (ascending) linked through next_.
  // A release leaves its entry in place with no hosts (erasing it would move every entry after
  // it, a few thousand at pod scale, for each victim of an admission cycle); the entries left
  // are dropped all at once when they are half of owned_, and Reserve takes one back.
  struct Owned {
    OwnerId owner;
    HostId first;
    int hosts = 0;  // 0: released
  };
  std::vector<Owned>::const_iterator FindOwned(OwnerId owner) const;
  std::vector<Owned> owned_;
  size_t released_ = 0;       // entries of owned_ with no hosts
  std::vector<HostId> next_;  // by host: the next host of the same owner; invalid at the end
  int64_t usable_chips_ = 0;
  int64_t owned_chips_ = 0;
  uint64_t ownership_changes_ = 0;
};

}  // namespace tessera
