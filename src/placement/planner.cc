#include "placement/planner.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <tuple>

namespace tessera {
namespace {

constexpr int kMasks = 1 << kHostsPerCube;

const std::array<Shape, 4> kSubShapes = {Shape::Of(2, 2, 1), Shape::Of(2, 2, 2), Shape::Of(2, 2, 4),
                                         Shape::Of(2, 4, 4)};

// The hosts a mask holds. Inline: without -mpopcnt, std::popcount calls into libgcc, and the
// planner counts a mask for every cube it compares.
int Popcount(HostMask m) {
  unsigned x = m;
  x -= (x >> 1) & 0x5555u;
  x = (x & 0x3333u) + ((x >> 2) & 0x3333u);
  x = (x + (x >> 4)) & 0x0F0Fu;
  return static_cast<int>((x + (x >> 8)) & 0x1Fu);
}

bool Fits(HostMask usable, HostMask want) { return (want & ~usable) == 0; }

bool HasFixedSlice(const Inventory& inv, const Shape& shape) {
  for (const FixedSlice& fs : inv.slices())
    if (fs.topology.shape() == shape) return true;
  return false;
}

bool WholeAndUsable(const Inventory& inv, const FixedSlice& slice) {
  for (HostId h : slice.hosts)
    if (!inv.host(h).usable()) return false;
  return true;
}

}  // namespace

int SubCubeShapeIndex(const Shape& shape) {
  for (int i = 0; i < 4; ++i)
    if (kSubShapes[i] == shape) return i;
  return -1;
}

const char* NoFitName(NoFit reason) {
  switch (reason) {
    case NoFit::kNone:
      return "Placed";
    case NoFit::kInvalidRequest:
      return "InvalidRequest";
    case NoFit::kNeverFits:
      return "NeverFits";
    case NoFit::kNotEnoughChips:
      return "NotEnoughChips";
    case NoFit::kNoFreeBox:
      return "NoFreeBox";
    case NoFit::kCubesSplitOverBlocks:
      return "CubesSplitOverBlocks";
    case NoFit::kNoFreeSlice:
      return "NoFreeSlice";
  }
  return "Unknown";
}

std::vector<HostId> PlanResult::AllHosts() const {
  std::vector<HostId> out;
  for (const auto& s : slices) out.insert(out.end(), s.hosts.begin(), s.hosts.end());
  return out;
}

PlannerOptions PlannerOptions::FirstFit() {
  return {PositionMode::kAligned, Scoring::kFirstFit, {}};
}
PlannerOptions PlannerOptions::TightestFit() {
  return {PositionMode::kAligned, Scoring::kTightestFit, {}};
}
PlannerOptions PlannerOptions::Tessera() {
  return {PositionMode::kAny, Scoring::kFragmentationAware, {}};
}

Result<PlannerOptions> PlannerOptions::Named(std::string_view name) {
  if (name == "first-fit") return FirstFit();
  if (name == "tightest-fit") return TightestFit();
  if (name == "tessera") return Tessera();
  return InvalidArgument("policy '" + std::string(name) +
                         "' is unknown; valid: first-fit, tightest-fit, tessera");
}

std::string PlannerOptions::Name() const {
  if (positions == PositionMode::kAligned && scoring == Scoring::kFirstFit) return "first-fit";
  if (positions == PositionMode::kAligned && scoring == Scoring::kTightestFit)
    return "tightest-fit";
  if (positions == PositionMode::kAny && scoring == Scoring::kFragmentationAware) return "tessera";
  std::string out = positions == PositionMode::kAny ? "any" : "aligned";
  out += scoring == Scoring::kFirstFit      ? "/first-fit"
         : scoring == Scoring::kTightestFit ? "/tightest-fit"
                                            : "/fragmentation-aware";
  return out;
}

// Cubes already promised to earlier slices of the same request.
struct SlicePlanner::Overlay {
  std::vector<std::pair<uint32_t, HostMask>> taken;

  HostMask Usable(const Cube& c) const {
    HostMask m = c.usable_mask();
    for (const auto& [id, mask] : taken)
      if (id == c.id.value()) m &= HostMask(~mask);
    return m;
  }
  void Take(CubeId id, HostMask mask) { taken.emplace_back(id.value(), mask); }
};

namespace {

// Every placement of `shape` inside a 2x2x4-host cube, in a fixed order: rotations in
// lexicographic permutation order, then offsets z, y, x.
template <typename Placement>
std::vector<Placement> EnumeratePlacements(const Shape& shape, PositionMode mode) {
  std::vector<Placement> out;
  std::array<int, 3> perm = {0, 1, 2};
  std::set<std::array<int, 3>> seen;
  do {
    if (mode == PositionMode::kAligned && perm != std::array<int, 3>{0, 1, 2}) continue;
    std::array<int, 3> phys = {shape.dims[perm[0]], shape.dims[perm[1]], shape.dims[perm[2]]};
    if (!seen.insert(phys).second) continue;
    if (phys[0] % 2 || phys[1] % 2) continue;  // a host is 2x2x1 chips: keep hosts whole
    const int bx = phys[0] / 2, by = phys[1] / 2, bz = phys[2];
    if (bx > kCubeHostsX || by > kCubeHostsY || bz > kCubeHostsZ) continue;
    for (int oz = 0; oz + bz <= kCubeHostsZ; ++oz)
      for (int oy = 0; oy + by <= kCubeHostsY; ++oy)
        for (int ox = 0; ox + bx <= kCubeHostsX; ++ox) {
          if (mode == PositionMode::kAligned && (ox % bx || oy % by || oz % bz)) continue;
          Placement p;
          p.mask = 0;
          p.physical = Shape::Of(phys[0], phys[1], phys[2]);
          p.offset = Coord{ox, oy, oz};
          // Worker ids follow the logical shape: order hosts by their logical coordinates.
          std::vector<std::pair<std::array<int, 3>, uint8_t>> hosts;
          for (int c = 0; c < bz; ++c)
            for (int b = 0; b < by; ++b)
              for (int a = 0; a < bx; ++a) {
                const int local = CubeLocalIndex(ox + a, oy + b, oz + c);
                p.mask |= HostMask(1u << local);
                std::array<int, 3> phys_chip = {2 * a, 2 * b, c};
                std::array<int, 3> logical = {0, 0, 0};
                for (int i = 0; i < 3; ++i) logical[perm[i]] = phys_chip[i];
                hosts.push_back({{logical[2], logical[1], logical[0]}, uint8_t(local)});
              }
          std::sort(hosts.begin(), hosts.end());
          for (const auto& h : hosts) p.worker_local.push_back(h.second);
          out.push_back(std::move(p));
        }
  } while (std::next_permutation(perm.begin(), perm.end()));
  return out;
}

// Chips of `mask` covered by at least one placement that fits in it.
template <typename Placement>
std::vector<uint8_t> CoverTable(const std::vector<Placement>& placements) {
  std::vector<uint8_t> cover(kMasks);
  for (int m = 0; m < kMasks; ++m) {
    HostMask covered = 0;
    for (const auto& p : placements)
      if (Fits(HostMask(m), p.mask)) covered |= p.mask;
    cover[m] = uint8_t(Popcount(covered) * 4);
  }
  return cover;
}

}  // namespace

SlicePlanner::SlicePlanner(PlannerOptions options) : options_(std::move(options)) { BuildTables(); }

void SlicePlanner::BuildTables() {
  // The mix, split into its 3D sub-cube, 3D whole-cube and 2D families, each normalised.
  double total3 = 0;
  for (const auto& sw : options_.mix) {
    if (sw.weight <= 0) continue;
    if (sw.shape.rank == 2) {
      flat_weight_.push_back({sw.shape, sw.weight});
    } else if (int s = SubCubeShapeIndex(sw.shape); s >= 0) {
      sub_weight_[s] += sw.weight;
      total3 += sw.weight;
    } else if (sw.shape.chips() % kChipsPerCube == 0) {
      cube_weight_.push_back({static_cast<int>(sw.shape.chips() / kChipsPerCube), sw.weight});
      total3 += sw.weight;
    }
  }
  if (total3 == 0) {
    sub_weight_ = {1, 1, 1, 1};
    cube_weight_ = {{1, 1}};
    total3 = 5;
  }
  for (double& w : sub_weight_) w /= total3;
  for (auto& [k, w] : cube_weight_) w /= total3;
  double total2 = 0;
  for (const auto& [s, w] : flat_weight_) total2 += w;
  for (auto& [s, w] : flat_weight_) w /= total2;

  double whole_cube_weight = 0;
  for (const auto& [k, w] : cube_weight_) whole_cube_weight += w;

  std::array<std::vector<uint8_t>, 4> cover;
  for (int s = 0; s < 4; ++s) {
    placements_[s] = EnumeratePlacements<CubePlacement>(kSubShapes[s], options_.positions);
    for (const CubePlacement& p : placements_[s])
      if (std::find(sub_masks_[s].begin(), sub_masks_[s].end(), p.mask) == sub_masks_[s].end())
        sub_masks_[s].push_back(p.mask);
    cover[s] = CoverTable(placements_[s]);
    any_cover_[s] =
        options_.positions == PositionMode::kAny
            ? cover[s]
            : CoverTable(EnumeratePlacements<CubePlacement>(kSubShapes[s], PositionMode::kAny));
  }
  // usable[m]: capacity a cube with usable hosts m keeps for the mix, in weighted chips.
  std::vector<float> usable(kMasks);
  for (int m = 0; m < kMasks; ++m) {
    double u = m == kFullCube ? whole_cube_weight * kChipsPerCube : 0;
    for (int s = 0; s < 4; ++s) u += sub_weight_[s] * cover[s][m];
    usable[m] = static_cast<float>(u);
  }
  for (int s = 0; s < 4; ++s) {
    best_[s].assign(kMasks, -1);
    loss_[s].assign(kMasks, 0);
    for (int m = 0; m < kMasks; ++m) {
      float best_loss = std::numeric_limits<float>::infinity();
      for (size_t i = 0; i < placements_[s].size(); ++i) {
        const HostMask pm = placements_[s][i].mask;
        if (!Fits(HostMask(m), pm)) continue;
        const float loss = usable[m] - usable[m & ~pm];
        if (options_.scoring != Scoring::kFragmentationAware) {
          best_[s][m] = int8_t(i);
          loss_[s][m] = loss;
          break;
        }
        if (loss < best_loss) {
          best_loss = loss;
          best_[s][m] = int8_t(i);
          loss_[s][m] = loss;
        }
      }
    }
  }
}

PlanResult SlicePlanner::Plan(const Inventory& inv, const SliceRequest& req) const {
  return Plan(inv, req, nullptr);
}

PlanResult SlicePlanner::Plan(const Inventory& inv, const SliceRequest& req,
                              SubCubeIndex& index) const {
  return Plan(inv, req, &index);
}

PlanResult SlicePlanner::Plan(const Inventory& inv, const SliceRequest& req,
                              SubCubeIndex* index) const {
  PlanResult r;
  auto invalid = [&](std::string msg) {
    r.reason = NoFit::kInvalidRequest;
    r.message = std::move(msg);
    return r;
  };
  if (req.generation != inv.generation())
    return invalid("accelerator: this cluster has " +
                   std::string(GenerationName(inv.generation())) + " hosts; the request asks for " +
                   std::string(GenerationName(req.generation)));
  if (req.num_slices < 1)
    return invalid("slices: must be at least 1, got " + std::to_string(req.num_slices));
  Status valid = ValidateShape(req.generation, req.shape);
  if (!valid.ok()) return invalid(valid.message());
  if (!inv.is_3d()) return PlanFixedSlices(inv, req);
  // A provisioned 3D slice of exactly the shape comes first: it is what the job asked for and
  // no other shape can use it, while the cubes stay free for what only they can hold. Fixed
  // slices are never carved, and one placement never mixes them with cube hosts.
  if (inv.cubes().empty() || HasFixedSlice(inv, req.shape)) {
    PlanResult fixed = PlanFixedSlices(inv, req);
    if (fixed.placed() || inv.cubes().empty()) return fixed;
  }
  const auto topo = SliceTopology::Make(req.generation, req.shape);
  const int64_t need = req.shape.chips() * req.num_slices;
  if (int s = SubCubeShapeIndex(req.shape); s >= 0) {
    if (need > inv.usable_chips()) {
      r.reason = NoFit::kNotEnoughChips;
      r.message = "needs " + std::to_string(need) + " healthy free chips; " +
                  std::to_string(inv.usable_chips()) + " are free";
      r.largest_free = LargestFree(inv);
      return r;
    }
    return PlanSubCube(inv, req, s, index);
  }
  return PlanSuperSlice(inv, req, *topo);
}

bool SlicePlanner::PlaceOneSubCube(const Inventory& inv, const std::vector<CubeId>* cubes, int s,
                                   Overlay& overlay, SlicePlacement& out, double& loss) const {
  const Cube* best = nullptr;
  int best_index = -1;
  // The least (loss, usable hosts, cube id); the hosts are counted only on a tie of loss.
  float best_loss = 0;
  HostMask best_mask = 0;
  const bool frag = options_.scoring == Scoring::kFragmentationAware;
  const size_t n = cubes != nullptr ? cubes->size() : inv.cubes().size();
  for (size_t i = 0; i < n; ++i) {
    const Cube& c = cubes != nullptr ? inv.cube((*cubes)[i]) : inv.cubes()[i];
    const HostMask m = overlay.Usable(c);
    const int idx = best_[s][m];
    if (idx < 0) continue;
    if (options_.scoring == Scoring::kFirstFit) {
      best = &c;
      best_index = idx;
      best_mask = m;
      break;
    }
    const float l = frag ? loss_[s][m] : 0.0f;
    if (best != nullptr) {
      if (l > best_loss) continue;
      if (l == best_loss) {
        const int hosts = Popcount(m), best_hosts = Popcount(best_mask);
        if (hosts > best_hosts || (hosts == best_hosts && c.id.value() > best->id.value()))
          continue;
      }
    }
    best = &c;
    best_index = idx;
    best_loss = l;
    best_mask = m;
  }
  if (best == nullptr) return false;
  PlaceIn(*best, best_mask, s, out);
  loss += loss_[s][best_mask];
  overlay.Take(best->id, placements_[s][best_index].mask);
  return true;
}

void SlicePlanner::PlaceIn(const Cube& cube, HostMask usable, int s, SlicePlacement& out) const {
  const CubePlacement& p = placements_[s][best_[s][usable]];
  out = SlicePlacement{};
  for (uint8_t local : p.worker_local) out.hosts.push_back(cube.hosts[local]);
  out.cubes = {cube.id};
  out.block = cube.block;
  out.physical = p.physical;
  out.offset = p.offset;
}

SubCubeIndex::Key SlicePlanner::KeyOf(const Cube& cube, int s) const {
  const HostMask m = cube.usable_mask();
  if (best_[s][m] < 0) return {};
  switch (options_.scoring) {
    case Scoring::kFirstFit:
      return {0.0f, 0, cube.id.value()};  // the first by id
    case Scoring::kTightestFit:
      return {0.0f, Popcount(m), cube.id.value()};
    case Scoring::kFragmentationAware:
      break;
  }
  return {loss_[s][m], Popcount(m), cube.id.value()};
}

const Cube* SlicePlanner::BestCube(const Inventory& inv, int s, SubCubeIndex& index) const {
  using Key = SubCubeIndex::Key;
  if (index.planner_ != this || index.inv_ != &inv || index.changes_ != inv.ownership_changes() ||
      index.leaves_ < inv.cubes().size()) {
    for (std::vector<Key>& tree : index.trees_) tree.clear();
    index.planner_ = this;
    index.inv_ = &inv;
    index.changes_ = inv.ownership_changes();
    index.leaves_ = 1;
    while (index.leaves_ < inv.cubes().size()) index.leaves_ *= 2;
  }
  std::vector<Key>& tree = index.trees_[s];
  if (tree.empty()) {
    tree.assign(2 * index.leaves_, Key{});
    for (const Cube& c : inv.cubes()) tree[index.leaves_ + c.id.value()] = KeyOf(c, s);
    for (size_t n = index.leaves_ - 1; n >= 1; --n)
      tree[n] = std::min(tree[2 * n], tree[2 * n + 1]);
  }
  return tree[1].cube == Key::kNone ? nullptr : &inv.cubes()[tree[1].cube];
}

void SubCubeIndex::OwnersChanged(const Inventory& inv, const std::vector<HostId>& hosts) {
  Changed(inv, hosts, 1);
}

void SubCubeIndex::HealthChanged(const Inventory& inv, HostId host) { Changed(inv, {host}, 0); }

void SubCubeIndex::Changed(const Inventory& inv, const std::vector<HostId>& hosts,
                           uint64_t changes) {
  if (planner_ == nullptr) return;  // nothing built: nothing to keep
  if (inv_ != &inv || inv.ownership_changes() != changes_ + changes) {
    planner_ = nullptr;  // a change it was not told of: built again at the next plan
    return;
  }
  changes_ = inv.ownership_changes();
  CubeId last;
  for (HostId h : hosts) {
    const CubeId cube = inv.host(h).cube;
    if (!cube.valid() || cube == last) continue;  // a slice's hosts come cube by cube
    last = cube;
    for (int s = 0; s < static_cast<int>(trees_.size()); ++s) {
      std::vector<Key>& tree = trees_[s];
      if (tree.empty()) continue;
      size_t n = leaves_ + cube.value();
      tree[n] = planner_->KeyOf(inv.cube(cube), s);
      for (n /= 2; n >= 1; n /= 2) tree[n] = std::min(tree[2 * n], tree[2 * n + 1]);
    }
  }
}

PlanResult SlicePlanner::PlanSubCube(const Inventory& inv, const SliceRequest& req, int s,
                                     SubCubeIndex* index) const {
  PlanResult r;
  if (req.num_slices > 1) {
    // Prefer one block: the block where all N fit at the least loss, then the tightest block.
    std::tuple<double, int, uint32_t> best_key{};
    bool found = false;
    for (const Block& b : inv.blocks()) {
      Overlay overlay;
      std::vector<SlicePlacement> slices(req.num_slices);
      double loss = 0;
      bool ok = true;
      for (int i = 0; i < req.num_slices && ok; ++i)
        ok = PlaceOneSubCube(inv, &b.cubes, s, overlay, slices[i], loss);
      if (!ok) continue;
      int free_hosts = 0;
      for (CubeId id : b.cubes) free_hosts += Popcount(inv.cube(id).usable_mask());
      if (options_.scoring == Scoring::kFirstFit) {
        r.slices = std::move(slices);
        return r;
      }
      const double l = options_.scoring == Scoring::kFragmentationAware ? loss : 0;
      std::tuple<double, int, uint32_t> key{l, free_hosts, b.id.value()};
      if (!found || key < best_key) {
        found = true;
        best_key = key;
        r.slices = std::move(slices);
      }
    }
    if (found) return r;
  }
  // One slice with an index: its best cube, without walking every cube. A cube the shape no
  // longer fits in is a change the caller did not tell: the index starts over, and the walk
  // below answers.
  if (index != nullptr && req.num_slices == 1) {
    if (const Cube* best = BestCube(inv, s, *index); best != nullptr) {
      if (best_[s][best->usable_mask()] >= 0) {
        r.slices.resize(1);
        PlaceIn(*best, best->usable_mask(), s, r.slices[0]);
        return r;
      }
      index->planner_ = nullptr;
    }
  }
  Overlay overlay;
  double loss = 0;
  r.slices.resize(req.num_slices);
  for (int i = 0; i < req.num_slices; ++i) {
    if (!PlaceOneSubCube(inv, nullptr, s, overlay, r.slices[i], loss)) {
      r.slices.clear();
      r.reason = NoFit::kNoFreeBox;
      r.largest_free = LargestFree(inv);
      r.message = "no free " + req.shape.ToString() + " box" +
                  (options_.positions == PositionMode::kAligned ? " at an aligned position" : "") +
                  " in any cube" +
                  (req.num_slices > 1 ? " for slice " + std::to_string(i + 1) + " of " +
                                            std::to_string(req.num_slices)
                                      : "") +
                  " (" + std::to_string(inv.usable_chips()) +
                  " healthy chips are free, scattered; largest free box: " + r.largest_free + ")";
      return r;
    }
  }
  return r;
}

PlanResult SlicePlanner::PlanSuperSlice(const Inventory& inv, const SliceRequest& req,
                                        const SliceTopology& topo) const {
  PlanResult r;
  const int k = topo.cubes();
  const int n = req.num_slices;
  int max_block = 0, usable_cubes = 0, best_block_cubes = 0;
  BlockId best_block;
  for (const Block& b : inv.blocks()) {
    max_block = std::max(max_block, static_cast<int>(b.cubes.size()));
    usable_cubes += b.usable_cubes;
    if (b.usable_cubes > best_block_cubes) {
      best_block_cubes = b.usable_cubes;
      best_block = b.id;
    }
  }
  const std::string what = std::to_string(n) + " x " + req.shape.ToString();
  if (k > max_block) {
    r.reason = NoFit::kNeverFits;
    r.message = req.shape.ToString() + " needs " + std::to_string(k) +
                " cubes in one block; the largest block of this cluster has " +
                std::to_string(max_block);
    return r;
  }
  if (int64_t{k} * n > static_cast<int64_t>(inv.cubes().size())) {
    r.reason = NoFit::kNeverFits;
    r.message = what + " needs " + std::to_string(int64_t{k} * n) + " cubes; this cluster has " +
                std::to_string(inv.cubes().size());
    return r;
  }
  const int64_t need = int64_t{k} * n * kChipsPerCube;
  r.largest_free = LargestFree(inv);
  if (need > inv.usable_chips()) {
    r.reason = NoFit::kNotEnoughChips;
    r.message = "needs " + std::to_string(need) + " healthy free chips; " +
                std::to_string(inv.usable_chips()) + " are free";
    return r;
  }
  // Remaining whole cubes per block as slices are promised.
  std::vector<int> left(inv.blocks().size());
  for (const Block& b : inv.blocks()) left[b.id.value()] = b.usable_cubes;
  auto choose_block = [&](int cubes_needed) -> int {
    int chosen = -1;
    for (const Block& b : inv.blocks()) {
      const int l = left[b.id.value()];
      if (l < cubes_needed) continue;
      if (options_.scoring == Scoring::kFirstFit) return static_cast<int>(b.id.value());
      if (chosen < 0 || l < left[chosen]) chosen = static_cast<int>(b.id.value());
    }
    return chosen;
  };
  std::vector<std::vector<bool>> used(inv.blocks().size());
  auto take = [&](int block) {
    const Block& b = inv.blocks()[block];
    auto& u = used[block];
    u.resize(b.cubes.size(), false);
    std::vector<CubeId> cubes;
    for (size_t i = 0; i < b.cubes.size() && static_cast<int>(cubes.size()) < k; ++i) {
      if (u[i] || !inv.cube(b.cubes[i]).whole_and_usable()) continue;
      u[i] = true;
      cubes.push_back(b.cubes[i]);
    }
    left[block] -= k;
    SlicePlacement p;
    p.cubes = cubes;
    p.block = b.id;
    p.physical = req.shape;
    const int tx = req.shape.x() / 4, ty = req.shape.y() / 4;
    p.hosts.reserve(topo.hosts());
    for (int w = 0; w < topo.hosts(); ++w) {
      const Coord hc = topo.HostCoordOf(w);
      const int tile = (hc.z / 4) * (tx * ty) + (hc.y / 2) * tx + hc.x / 2;
      p.hosts.push_back(inv.cube(cubes[tile]).hosts[CubeLocalIndex(hc.x % 2, hc.y % 2, hc.z % 4)]);
    }
    return p;
  };
  int one_block = n > 1 ? choose_block(k * n) : -1;
  for (int i = 0; i < n; ++i) {
    const int block = one_block >= 0 ? one_block : choose_block(k);
    if (block < 0) {
      r.slices.clear();
      if (usable_cubes >= k * n) {
        r.reason = NoFit::kCubesSplitOverBlocks;
        r.message = what + " needs " + std::to_string(k) + " whole free cubes in one block" +
                    (n > 1 ? " per slice" : "") + "; " + std::to_string(usable_cubes) +
                    " are free but split over blocks (at most " + std::to_string(best_block_cubes) +
                    " in one block)";
      } else {
        r.reason = NoFit::kNoFreeBox;
        r.message = what + " needs " + std::to_string(int64_t{k} * n) +
                    " whole free healthy cubes; " + std::to_string(usable_cubes) +
                    " cubes have every host free and healthy (largest free box: " + r.largest_free +
                    ")";
      }
      return r;
    }
    r.slices.push_back(take(block));
  }
  r.largest_free.clear();
  return r;
}

PlanResult SlicePlanner::PlanFixedSlices(const Inventory& inv, const SliceRequest& req) const {
  PlanResult r;
  std::vector<SliceId> free;
  int of_shape = 0;
  std::map<std::string, int> shapes;
  for (const FixedSlice& fs : inv.slices()) {
    ++shapes[fs.topology.shape().ToString()];
    if (fs.topology.shape() != req.shape) continue;
    ++of_shape;
    if (WholeAndUsable(inv, fs) && static_cast<int>(free.size()) < req.num_slices)
      free.push_back(fs.id);
  }
  if (static_cast<int>(free.size()) == req.num_slices) {
    for (SliceId id : free) {
      const FixedSlice& fs = inv.slice(id);
      SlicePlacement p;
      p.hosts = fs.hosts;
      p.fixed_slice = id;
      p.physical = fs.topology.shape();
      r.slices.push_back(std::move(p));
    }
    return r;
  }
  r.largest_free = LargestFree(inv);
  std::string have;
  for (const auto& [shape, count] : shapes)
    have += (have.empty() ? "" : ", ") + std::to_string(count) + " x " + shape;
  if (of_shape < req.num_slices) {
    r.reason = NoFit::kNeverFits;
    r.message = "needs " + std::to_string(req.num_slices) + " x " + req.shape.ToString() +
                " slices; this cluster has " + std::to_string(of_shape) + " of that shape (" +
                have + ")";
    return r;
  }
  r.reason = NoFit::kNoFreeSlice;
  r.message = "needs " + std::to_string(req.num_slices) + " free " + req.shape.ToString() +
              " slices; " + std::to_string(free.size()) + " of " + std::to_string(of_shape) +
              " are free and healthy";
  return r;
}

std::string SlicePlanner::LargestFree(const Inventory& inv) const {
  const FixedSlice* best_fixed = nullptr;
  for (const FixedSlice& fs : inv.slices())
    if (WholeAndUsable(inv, fs) &&
        (best_fixed == nullptr || fs.topology.chips() > best_fixed->topology.chips()))
      best_fixed = &fs;
  const std::string fixed = best_fixed ? best_fixed->topology.shape().ToString() + " (" +
                                             inv.SliceName(best_fixed->id) + ")"
                                       : "none";
  if (!inv.is_3d() || inv.cubes().empty()) return fixed;
  const Block* best = nullptr;
  for (const Block& b : inv.blocks())
    if (b.usable_cubes > 0 && (best == nullptr || b.usable_cubes > best->usable_cubes)) best = &b;
  if (best != nullptr)
    return std::to_string(best->usable_cubes) + " whole cube" +
           (best->usable_cubes == 1 ? "" : "s") + " in " + inv.BlockName(best->id);
  for (int s = 3; s >= 0; --s)
    for (const Cube& c : inv.cubes())
      if (any_cover_[s][c.usable_mask()] > 0) return kSubShapes[s].ToString();
  return fixed;
}

double SlicePlanner::Fragmentation(const Inventory& inv) const {
  const int64_t free = inv.usable_chips();
  if (free == 0) return 0;
  double usable = 0;
  if (inv.is_3d()) {
    for (const Cube& c : inv.cubes()) {
      const HostMask m = c.usable_mask();
      for (int s = 0; s < 4; ++s) usable += sub_weight_[s] * any_cover_[s][m];
    }
    for (const auto& [k, w] : cube_weight_)
      for (const Block& b : inv.blocks())
        usable += w * double((b.usable_cubes / k) * k) * kChipsPerCube;
    // A whole free fixed 3D slice is usable by the jobs that ask for its shape, whatever the mix.
    for (const FixedSlice& fs : inv.slices())
      if (WholeAndUsable(inv, fs)) usable += static_cast<double>(fs.topology.chips());
  } else {
    for (const FixedSlice& fs : inv.slices()) {
      if (!WholeAndUsable(inv, fs)) continue;
      if (flat_weight_.empty()) {
        usable += static_cast<double>(fs.topology.chips());
        continue;
      }
      for (const auto& [shape, w] : flat_weight_)
        if (shape == fs.topology.shape()) usable += w * static_cast<double>(fs.topology.chips());
    }
  }
  return std::clamp(1.0 - usable / static_cast<double>(free), 0.0, 1.0);
}

Status ApplyPlan(Inventory& inv, OwnerId owner, const PlanResult& plan) {
  if (!plan.placed()) return FailedPrecondition("plan did not place the request: " + plan.message);
  return inv.Reserve(owner, plan.AllHosts());
}

}  // namespace tessera
