#include "admission/defrag.h"

#include <algorithm>

namespace tessera {
namespace {

// Holds hosts in the scratch inventories below; far from workload ids and from the fences of
// the victim search (which count down from kInvalid - 1).
const OwnerId kHoldOwner(OwnerId::kInvalid / 2 + 1);
const OwnerId kHeadOwner(OwnerId::kInvalid / 2 + 2);

int64_t Chips(const SliceRequest& r) { return r.shape.chips() * r.num_slices; }

bool Movable(const MoveCandidate& c, int64_t now_s, const DefragOptions& o) {
  if (c.request.num_slices != 1 || c.request.shape.rank != 3 || c.request.shape.chips() >= 64)
    return false;
  return c.last_moved_s < 0 || now_s - c.last_moved_s >= o.min_interval_s;
}

// `inv` with every wholly free cube held, so that a plan on it packs into cubes in use.
Result<Inventory> HoldFreeCubes(const Inventory& inv) {
  Inventory out = inv;
  std::vector<HostId> hold;
  for (const Cube& c : inv.cubes())
    if (c.whole_and_usable())
      for (HostId h : c.hosts) hold.push_back(h);
  if (!hold.empty()) {
    const Status s = out.Reserve(kHoldOwner, hold);
    if (!s.ok()) return s;
  }
  return out;
}

}  // namespace

bool NeedsWholeCubes(const SliceRequest& request) {
  return request.shape.rank == 3 && request.shape.chips() >= 64;
}

DefragPlan PlanDefrag(const Inventory& inv, const SlicePlanner& planner,
                      const SliceRequest& request, const std::vector<MoveCandidate>& candidates,
                      int64_t now_s, int64_t budget_chip_s, const DefragOptions& options) {
  DefragPlan out;
  if (!NeedsWholeCubes(request)) {
    out.message = "defragmentation is for shapes of whole cubes";
    return out;
  }
  const int64_t need = Chips(request);
  if (inv.usable_chips() < need) {
    out.message = "not enough free chips (" + std::to_string(inv.usable_chips()) + " of " +
                  std::to_string(need) + "): moving jobs would not help";
    return out;
  }
  std::vector<PreemptionCandidate> movable;
  std::vector<const MoveCandidate*> by_index;
  for (const MoveCandidate& c : candidates)
    if (Movable(c, now_s, options)) {
      movable.push_back({c.workload, c.priority, c.lost_work_chip_s * 1000, 0});
      by_index.push_back(&c);
    }
  if (movable.empty()) {
    out.message = "no sub-cube job may move (each moved within the last " +
                  std::to_string(options.min_interval_s) + " s, or none runs)";
    return out;
  }
  // A set is acceptable when it fits the budget and the move count; whether the moved jobs
  // fit again is checked below, on the chosen room.
  const VictimSetCheck check = [&](const std::vector<int>& idx) {
    if (static_cast<int>(idx.size()) > options.max_moves) return false;
    int64_t lost = 0;
    for (int i : idx) lost += by_index[i]->lost_work_chip_s;
    return lost <= budget_chip_s;
  };
  VictimSet v = FindVictims(inv, planner, request, movable, check);
  if (!v.found) {
    out.message = "no set of movable sub-cube jobs frees the room within the budget (" +
                  std::to_string(budget_chip_s / 3600) + " chip-h left)";
    return out;
  }
  if (v.victims.empty()) {  // it fits as it is: nothing to move
    out.found = true;
    out.plan = std::move(v.plan);
    return out;
  }
  Inventory scratch = inv;
  for (WorkloadId w : v.victims) scratch.Release(OwnerOf(w));
  if (Status s = ApplyPlan(scratch, kHeadOwner, v.plan); !s.ok()) {
    out.message = "the victim search's plan does not apply: " + s.message();
    return out;
  }
  std::vector<const MoveCandidate*> moved;
  for (WorkloadId w : v.victims)
    for (const MoveCandidate* c : by_index)
      if (c->workload == w) moved.push_back(c);
  std::stable_sort(moved.begin(), moved.end(), [](const MoveCandidate* a, const MoveCandidate* b) {
    return Chips(a->request) > Chips(b->request);
  });
  for (const MoveCandidate* c : moved) {
    PlanResult p;
    Result<Inventory> packed = HoldFreeCubes(scratch);
    if (packed.ok()) p = planner.Plan(*packed, c->request);
    if (!p.placed()) p = planner.Plan(scratch, c->request);
    if (!p.placed()) {
      out.message = "a moved job would not fit again: " + p.message;
      return out;
    }
    if (Status s = ApplyPlan(scratch, OwnerOf(c->workload), p); !s.ok()) {
      out.message = "a moved job's plan does not apply: " + s.message();
      return out;
    }
    out.lost_work_chip_s += c->lost_work_chip_s;
    out.moves.push_back({c->workload, std::move(p)});
  }
  std::sort(out.moves.begin(), out.moves.end(),
            [](const Move& a, const Move& b) { return a.workload < b.workload; });
  out.found = true;
  out.plan = std::move(v.plan);
  return out;
}

}  // namespace tessera
