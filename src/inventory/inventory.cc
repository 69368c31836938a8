#include "inventory/inventory.h"

#include <algorithm>
#include <utility>

namespace tessera {
namespace {

constexpr int64_t kMaxHosts = int64_t{1} << 20;

std::string Pad(int v, int width) {
  std::string s = std::to_string(v);
  return s.size() >= static_cast<size_t>(width) ? s : std::string(width - s.size(), '0') + s;
}

}  // namespace

const char* HealthName(Health h) {
  switch (h) {
    case Health::kHealthy:
      return "healthy";
    case Health::kDegraded:
      return "degraded";
    case Health::kDown:
      return "down";
  }
  return "unknown";
}

Result<Inventory> Inventory::MakePod(const PodSpec& spec) {
  if (spec.blocks <= 0) return InvalidArgument("blocks must be at least 1");
  if (spec.cubes_per_block <= 0) return InvalidArgument("cubesPerBlock must be at least 1");
  if (int64_t{spec.blocks} * spec.cubes_per_block * kHostsPerCube > kMaxHosts)
    return InvalidArgument("blocks x cubesPerBlock: at most " +
                           std::to_string(kMaxHosts / kHostsPerCube) + " cubes in one pod");
  return MakePod(spec.generation, std::vector<int>(spec.blocks, spec.cubes_per_block));
}

Result<Inventory> Inventory::MakePod(Generation generation,
                                     const std::vector<int>& cubes_per_block) {
  if (cubes_per_block.empty()) return InvalidArgument("blocks must be at least 1");
  return MakePod(generation, cubes_per_block, {});
}

Result<Inventory> Inventory::MakePod(Generation generation, const std::vector<int>& cubes_per_block,
                                     const std::vector<Shape>& fixed_slices) {
  if (Info(generation).rank != 3)
    return InvalidArgument("generation: " + std::string(GenerationName(generation)) +
                           " has fixed 2D slices, not cubes; describe it as a fleet of slices");
  if (cubes_per_block.empty() && fixed_slices.empty())
    return InvalidArgument("blocks: a pod needs at least one block or fixed slice");
  int64_t cubes = 0;
  for (int n : cubes_per_block) {
    if (n <= 0) return InvalidArgument("cubesPerBlock must be at least 1");
    cubes += n;
  }
  if (cubes * kHostsPerCube > kMaxHosts)
    return InvalidArgument("blocks x cubesPerBlock: at most " +
                           std::to_string(kMaxHosts / kHostsPerCube) + " cubes in one pod");
  Inventory inv;
  inv.generation_ = generation;
  for (size_t b = 0; b < cubes_per_block.size(); ++b) {
    Block block{BlockId(static_cast<uint32_t>(b)), {}, cubes_per_block[b]};
    for (int c = 0; c < cubes_per_block[b]; ++c) {
      Cube cube;
      cube.id = CubeId(static_cast<uint32_t>(inv.cubes_.size()));
      cube.block = block.id;
      for (int z = 0; z < kCubeHostsZ; ++z)
        for (int y = 0; y < kCubeHostsY; ++y)
          for (int x = 0; x < kCubeHostsX; ++x) {
            Host h;
            h.id = HostId(static_cast<uint32_t>(inv.hosts_.size()));
            h.cube = cube.id;
            h.coord = Coord{x, y, z};
            cube.hosts[CubeLocalIndex(x, y, z)] = h.id;
            inv.hosts_.push_back(std::move(h));
          }
      block.cubes.push_back(cube.id);
      inv.cubes_.push_back(std::move(cube));
    }
    inv.blocks_.push_back(std::move(block));
  }
  inv.usable_chips_ = static_cast<int64_t>(inv.hosts_.size()) * 4;
  TESSERA_RETURN_IF_ERROR(inv.AddFixedSlices("fixedSlices", fixed_slices));
  inv.next_.assign(inv.hosts_.size(), HostId());
  return inv;
}

Result<Inventory> Inventory::MakeFleet(const FleetSpec& spec) {
  if (Info(spec.generation).rank != 2)
    return InvalidArgument("generation: " + std::string(GenerationName(spec.generation)) +
                           " is built from cubes; describe it as a pod of blocks");
  if (spec.slices.empty()) return InvalidArgument("slices: a fleet needs at least one slice");
  Inventory inv;
  inv.generation_ = spec.generation;
  TESSERA_RETURN_IF_ERROR(inv.AddFixedSlices("slices", spec.slices));
  inv.next_.assign(inv.hosts_.size(), HostId());
  return inv;
}

Status Inventory::AddFixedSlices(const std::string& field, const std::vector<Shape>& shapes) {
  for (size_t i = 0; i < shapes.size(); ++i) {
    auto topo = SliceTopology::Make(generation_, shapes[i]);
    if (!topo.ok())
      return InvalidArgument(field + "[" + std::to_string(i) + "]: " + topo.status().message());
    if (static_cast<int64_t>(hosts_.size()) + topo->hosts() > kMaxHosts)
      return InvalidArgument(field + ": at most " + std::to_string(kMaxHosts) + " hosts");
    FixedSlice slice{SliceId(static_cast<uint32_t>(slices_.size())), *topo, {}};
    for (int w = 0; w < topo->hosts(); ++w) {
      Host h;
      h.id = HostId(static_cast<uint32_t>(hosts_.size()));
      h.slice = slice.id;
      h.chips = topo->chips_per_host();
      h.coord = topo->HostCoordOf(w);
      slice.hosts.push_back(h.id);
      usable_chips_ += h.chips;
      hosts_.push_back(std::move(h));
    }
    slices_.push_back(std::move(slice));
  }
  return Status::Ok();
}

std::string Inventory::HostName(HostId id) const {
  const Host& h = hosts_[id.value()];
  if (h.cube.valid())
    return CubeName(h.cube) + "-h" + Pad(CubeLocalIndex(h.coord.x, h.coord.y, h.coord.z), 2);
  const FixedSlice& s = slices_[h.slice.value()];
  const int worker =
      static_cast<int>(std::find(s.hosts.begin(), s.hosts.end(), id) - s.hosts.begin());
  return SliceName(s.id) + "-w" + std::to_string(worker);
}

std::string Inventory::CubeName(CubeId id) const {
  return "cube-" + Pad(static_cast<int>(id.value()), 3);
}
std::string Inventory::BlockName(BlockId id) const {
  return "block-" + Pad(static_cast<int>(id.value()), 2);
}
std::string Inventory::SliceName(SliceId id) const {
  return "slice-" + Pad(static_cast<int>(id.value()), 3);
}

int64_t Inventory::total_chips() const {
  int64_t n = 0;
  for (const Host& h : hosts_) n += h.chips;
  return n;
}

OwnerId Inventory::ChipOwner(HostId host, int chip) const {
  if (host.value() >= hosts_.size()) return OwnerId();
  const Host& h = hosts_[host.value()];
  return (chip >= 0 && chip < h.chips) ? h.owner : OwnerId();
}

void Inventory::UpdateMasks(const Host& h, bool was_usable) {
  if (was_usable != h.usable()) usable_chips_ += h.usable() ? h.chips : -h.chips;
  if (!h.cube.valid()) return;
  Cube& cube = cubes_[h.cube.value()];
  const bool was_whole = cube.whole_and_usable();
  const HostMask bit = HostMask(1u << CubeLocalIndex(h.coord.x, h.coord.y, h.coord.z));
  cube.free_mask = h.free() ? (cube.free_mask | bit) : (cube.free_mask & ~bit);
  cube.healthy_mask =
      h.health == Health::kHealthy ? (cube.healthy_mask | bit) : (cube.healthy_mask & ~bit);
  if (was_whole != cube.whole_and_usable())
    blocks_[cube.block.value()].usable_cubes += cube.whole_and_usable() ? 1 : -1;
}

Status Inventory::Reserve(OwnerId owner, const std::vector<HostId>& hosts) {
  if (!owner.valid()) return InvalidArgument("owner: an invalid owner id cannot reserve");
  if (hosts.empty()) return InvalidArgument("hosts: a reservation needs at least one host");
  std::vector<HostId> sorted = hosts;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i].value() >= hosts_.size())
      return InvalidArgument("hosts: unknown host id " + std::to_string(sorted[i].value()));
    if (i > 0 && sorted[i] == sorted[i - 1])
      return FailedPrecondition("host " + HostName(sorted[i]) +
                                " is listed twice in one reservation");
    const Host& h = hosts_[sorted[i].value()];
    if (!h.free())
      return FailedPrecondition("host " + HostName(h.id) + " is already owned by " +
                                std::to_string(h.owner.value()));
    if (h.health == Health::kDown) return FailedPrecondition("host " + HostName(h.id) + " is down");
  }
  for (HostId id : sorted) {
    Host& h = hosts_[id.value()];
    const bool was_usable = h.usable();
    h.owner = owner;
    owned_chips_ += h.chips;
    UpdateMasks(h, was_usable);
  }
  // The owner's list, merged with the new hosts (both ascending).
  auto it = std::lower_bound(owned_.begin(), owned_.end(), owner,
                             [](const Owned& o, OwnerId id) { return o.owner < id; });
  if (it == owned_.end() || it->owner != owner)
    it = owned_.insert(it, Owned{owner, HostId(), 0});
  else if (it->hosts == 0)
    --released_;  // a released entry, taken back
  std::vector<HostId> merged;
  merged.reserve(static_cast<size_t>(it->hosts) + sorted.size());
  for (HostId h = it->first; h.valid(); h = next_[h.value()]) merged.push_back(h);
  const auto mid = static_cast<std::ptrdiff_t>(merged.size());
  merged.insert(merged.end(), sorted.begin(), sorted.end());
  std::inplace_merge(merged.begin(), merged.begin() + mid, merged.end());
  for (size_t i = 0; i < merged.size(); ++i)
    next_[merged[i].value()] = i + 1 < merged.size() ? merged[i + 1] : HostId();
  it->first = merged.front();
  it->hosts = static_cast<int>(merged.size());
  ++ownership_changes_;
  return Status::Ok();
}

std::vector<Inventory::Owned>::const_iterator Inventory::FindOwned(OwnerId owner) const {
  auto it = std::lower_bound(owned_.begin(), owned_.end(), owner,
                             [](const Owned& o, OwnerId id) { return o.owner < id; });
  return it != owned_.end() && it->owner == owner && it->hosts > 0 ? it : owned_.end();
}

int Inventory::Release(OwnerId owner) {
  auto found = FindOwned(owner);
  if (found == owned_.end()) return 0;
  const auto it = owned_.begin() + (found - owned_.cbegin());
  for (HostId id = it->first; id.valid();) {
    Host& h = hosts_[id.value()];
    const bool was_usable = h.usable();
    h.owner = OwnerId();
    owned_chips_ -= h.chips;
    UpdateMasks(h, was_usable);
    id = std::exchange(next_[id.value()], HostId());
  }
  const int freed = it->hosts;
  it->first = HostId();
  it->hosts = 0;
  if (++released_ > owned_.size() / 2) {
    std::erase_if(owned_, [](const Owned& o) { return o.hosts == 0; });
    released_ = 0;
  }
  ++ownership_changes_;
  return freed;
}

std::vector<HostId> Inventory::HostsOf(OwnerId owner) const {
  std::vector<HostId> out;
  auto it = FindOwned(owner);
  if (it == owned_.end()) return out;
  out.reserve(static_cast<size_t>(it->hosts));
  for (HostId h = it->first; h.valid(); h = next_[h.value()]) out.push_back(h);
  return out;
}

bool Inventory::Holds(OwnerId owner) const { return FindOwned(owner) != owned_.end(); }

std::vector<OwnerId> Inventory::Owners() const {
  std::vector<OwnerId> out;
  out.reserve(owned_.size() - released_);
  for (const Owned& o : owned_)
    if (o.hosts > 0) out.push_back(o.owner);
  return out;
}

Status Inventory::SetHealth(HostId id, Health health) {
  if (id.value() >= hosts_.size())
    return InvalidArgument("host: unknown host id " + std::to_string(id.value()));
  Host& h = hosts_[id.value()];
  const bool was_usable = h.usable();
  h.health = health;
  UpdateMasks(h, was_usable);
  return Status::Ok();
}

}  // namespace tessera
