#include "placement/naive_planner.h"

#include <algorithm>

namespace tessera {

PlanResult NaivePlanner::Plan(const Inventory& inv, const SliceRequest& req) const {
  PlanResult r;
  const Shape& shape = req.shape;
  if (SubCubeShapeIndex(shape) < 0) {
    const int64_t k = shape.chips() / kChipsPerCube;
    for (const Block& b : inv.blocks()) {
      std::vector<CubeId> whole;
      for (CubeId id : b.cubes) {
        const Cube& c = inv.cube(id);
        bool all = true;
        for (HostId h : c.hosts) all = all && inv.host(h).usable();
        if (all) whole.push_back(id);
        if (static_cast<int64_t>(whole.size()) == k) break;
      }
      if (static_cast<int64_t>(whole.size()) < k) continue;
      SlicePlacement p;
      p.cubes = whole;
      p.block = b.id;
      p.physical = shape;
      for (CubeId id : whole)
        for (HostId h : inv.cube(id).hosts) p.hosts.push_back(h);
      r.slices.push_back(std::move(p));
      return r;
    }
    r.reason = NoFit::kNoFreeBox;
    r.message = "no block has enough whole free cubes";
    return r;
  }
  std::array<int, 3> perm = {0, 1, 2};
  do {
    if (positions_ == PositionMode::kAligned && perm != std::array<int, 3>{0, 1, 2}) continue;
    const int px = shape.dims[perm[0]], py = shape.dims[perm[1]], pz = shape.dims[perm[2]];
    if (px % 2 || py % 2) continue;
    const int bx = px / 2, by = py / 2, bz = pz;
    for (const Cube& c : inv.cubes())
      for (int oz = 0; oz + bz <= kCubeHostsZ; ++oz)
        for (int oy = 0; oy + by <= kCubeHostsY; ++oy)
          for (int ox = 0; ox + bx <= kCubeHostsX; ++ox) {
            if (positions_ == PositionMode::kAligned && (ox % bx || oy % by || oz % bz)) continue;
            SlicePlacement p;
            bool ok = true;
            for (int z = oz; z < oz + bz && ok; ++z)
              for (int y = oy; y < oy + by && ok; ++y)
                for (int x = ox; x < ox + bx && ok; ++x) {
                  const HostId h = c.hosts[CubeLocalIndex(x, y, z)];
                  ok = inv.host(h).usable();
                  p.hosts.push_back(h);
                }
            if (!ok) continue;
            p.cubes = {c.id};
            p.block = c.block;
            p.physical = Shape::Of(px, py, pz);
            p.offset = Coord{ox, oy, oz};
            r.slices.push_back(std::move(p));
            return r;
          }
  } while (std::next_permutation(perm.begin(), perm.end()));
  r.reason = NoFit::kNoFreeBox;
  r.message = "no free box in any cube";
  return r;
}

}  // namespace tessera
