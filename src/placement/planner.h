// SlicePlanner: decides where a slice request goes in an Inventory. Pure: it reads a snapshot
// and returns a plan or the reasons nothing fits; it never changes the inventory (ApplyPlan
// does that, atomically).
//
// What it places:
//  - sub-slices (2x2x1, 2x2x2, 2x2x4, 2x4x4) inside one 4x4x4 cube, on host boundaries, with
//    mesh connectivity and no wraparound; at the fixed aligned positions only (as GKE dynamic
//    slicing allows today) or at every free position and rotation;
//  - super-slices (4x4x4 and larger) from whole healthy free cubes inside one block, worker
//    ids laid out over the logical shape;
//  - N slices of one shape, all or nothing, preferring one block;
//  - on 2D generations, whole free fixed slices of exactly the requested shape;
//  - on 3D generations, whole free fixed 3D slices (provisioned TPU VM slices) of exactly the
//    requested shape first, before any cube: a fixed slice is never carved, and one placement
//    never mixes its hosts with cube hosts (N slices are all fixed or all from cubes).
// Unhealthy (degraded or down) and owned hosts are never chosen. Ties are broken by id, so the
// same inventory and request always give the same answer.
//
// docs/placement.md defines the fragmentation measure and the scoring.
//
// Thread-safety: a SlicePlanner is immutable after construction; Plan may be called from any
// number of threads at once.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "common/ids.h"
#include "inventory/inventory.h"
#include "topology/topology.h"

namespace tessera {

// Where a sub-slice may sit inside a cube.
enum class PositionMode {
  kAligned,  // offsets that are multiples of the shape, canonical orientation only
  kAny,      // every host-aligned offset and every rotation that keeps hosts whole
};

// How to choose among feasible placements.
enum class Scoring {
  kFirstFit,            // the first cube (by id) and first position that fit
  kTightestFit,         // the cube or block with the least free room that fits (Kueue-like)
  kFragmentationAware,  // the placement that keeps the most capacity usable for the mix
};

// A shape the cluster sees, and how often (any positive scale; weights are normalised).
struct ShapeWeight {
  Shape shape;
  double weight = 1;
};
using ShapeMix = std::vector<ShapeWeight>;

struct PlannerOptions {
  PositionMode positions = PositionMode::kAny;
  Scoring scoring = Scoring::kFragmentationAware;
  // The shapes to keep room for. Empty: every sub-cube shape and 4x4x4, equally weighted
  // (3D); every valid shape (2D).
  ShapeMix mix;

  // Named policies, compared side by side in `tessera plan`, the simulator and the benchmarks.
  static PlannerOptions FirstFit();     // aligned positions, first fit: today's fixed slicing
  static PlannerOptions TightestFit();  // aligned positions, tightest cube: Kueue-like
  static PlannerOptions Tessera();      // any position and rotation, fragmentation-aware
  // "first-fit", "tightest-fit", "tessera"; anything else is InvalidArgument listing these.
  static Result<PlannerOptions> Named(std::string_view name);
  std::string Name() const;
};

struct SliceRequest {
  Generation generation = Generation::k7x;
  Shape shape;
  int num_slices = 1;
};

// One placed slice.
struct SlicePlacement {
  std::vector<HostId> hosts;  // hosts[w] runs TPU_WORKER_ID w
  std::vector<CubeId> cubes;  // 3D: the cube(s) it uses; for super-slices in logical tile order
  BlockId block;              // 3D
  SliceId fixed_slice;        // 2D
  Shape physical;             // sub-slices: the box as laid in the cube (a rotation of the shape)
  Coord offset;               // sub-slices: host-grid offset of the box inside its cube
};

enum class NoFit {
  kNone,                  // placed
  kInvalidRequest,        // wrong generation, invalid shape, num_slices < 1
  kNeverFits,             // this cluster can never hold it, even empty
  kNotEnoughChips,        // fewer healthy free chips than the request needs
  kNoFreeBox,             // enough chips, but no free box of that shape
  kCubesSplitOverBlocks,  // enough whole cubes, but not inside one block
  kNoFreeSlice,           // 2D: every fixed slice of that shape is taken or unhealthy
};
const char* NoFitName(NoFit reason);

struct PlanResult {
  std::vector<SlicePlacement> slices;  // num_slices entries when placed; empty otherwise
  NoFit reason = NoFit::kNone;
  std::string message;       // for people: which constraint failed, with the numbers
  std::string largest_free;  // e.g. "2x2x4", "3 whole cubes in block-02", "none"

  bool placed() const { return reason == NoFit::kNone; }
  std::vector<HostId> AllHosts() const;
};

class SlicePlanner;

// The cube a one-slice sub-cube plan would choose, per shape, kept up to date as cubes change:
// what SlicePlanner's walk of every cube finds, from a tournament tree over the cubes instead.
// For a caller that plans many times on one inventory and changes a few cubes between (an
// admission cycle: thousands of plans on a pod of 1,568 cubes). Tell it of every change, just
// after it: a change it was not told of (the inventory's ownership count moved more than it
// was told, or another inventory) makes it start over, so it never answers for a state it does
// not know.
class SubCubeIndex {
 public:
  // After one Reserve or Release that moved `hosts` (a Release of an owner holding nothing
  // moves none and is not a change).
  void OwnersChanged(const Inventory& inv, const std::vector<HostId>& hosts);
  // After a health change of `host`.
  void HealthChanged(const Inventory& inv, HostId host);

 private:
  // Keys the cubes of `hosts` again if inv is the state it knew with `changes` more ownership
  // changes; starts over otherwise.
  void Changed(const Inventory& inv, const std::vector<HostId>& hosts, uint64_t changes);
  friend class SlicePlanner;
  // A cube's rank for a shape: the least (loss, usable hosts, cube id) wins; cube kNone: the
  // shape does not fit in it.
  struct Key {
    static constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
    float loss = std::numeric_limits<float>::infinity();
    int hosts = std::numeric_limits<int>::max();
    uint32_t cube = kNone;
    bool operator<(const Key& o) const {
      return std::tie(loss, hosts, cube) < std::tie(o.loss, o.hosts, o.cube);
    }
  };
  // Per sub-cube shape: leaves (a power of two, cubes by id) then the winners, node 1 the best.
  // Empty: not built yet.
  std::array<std::vector<Key>, 4> trees_;
  size_t leaves_ = 0;
  const SlicePlanner* planner_ = nullptr;  // the planner whose tables built it
  const Inventory* inv_ = nullptr;         // the inventory it follows, at changes_
  uint64_t changes_ = 0;
};

class SlicePlanner {
 public:
  explicit SlicePlanner(PlannerOptions options = PlannerOptions::Tessera());

  const PlannerOptions& options() const { return options_; }

  PlanResult Plan(const Inventory& inv, const SliceRequest& request) const;
  // The same plan, a one-slice sub-cube request's cube taken from `index` (kept for `inv` by
  // the caller) instead of a walk of every cube.
  PlanResult Plan(const Inventory& inv, const SliceRequest& request, SubCubeIndex& index) const;

  // Free healthy chips that no shape of the mix could use, weighted by the mix, over free
  // healthy chips: 0 is no fragmentation, 1 is none of the free chips usable. Measured with
  // every position and rotation (what the hardware allows), whatever this planner's mode.
  double Fragmentation(const Inventory& inv) const;

  // The largest free box the inventory has now, in words ("2x4x4", "4 whole cubes in
  // block-01", "none").
  std::string LargestFree(const Inventory& inv) const;

  // The host masks of the placements of sub-cube shape `shape_index` (SubCubeShapeIndex) in one
  // cube, in this planner's position mode: each mask once, in placement order (rotations, then
  // offsets z, y, x).
  const std::vector<HostMask>& SubCubeMasks(int shape_index) const {
    return sub_masks_[shape_index];
  }

  // One slice of sub-cube shape `shape_index` on the hosts `hosts` of `cube`, whoever holds them
  // now: the placement Plan gives on a cube where exactly those hosts are free and healthy.
  // False when the shape does not fit them (or `shape_index` is not a sub-cube shape's).
  bool PlaceOnHosts(const Cube& cube, HostMask hosts, int shape_index, SlicePlacement& out) const {
    if (shape_index < 0 || shape_index >= static_cast<int>(best_.size())) return false;
    if (best_[shape_index][hosts] < 0) return false;
    PlaceIn(cube, hosts, shape_index, out);
    return true;
  }

 private:
  struct CubePlacement {
    HostMask mask;
    Shape physical;
    Coord offset;
    std::vector<uint8_t> worker_local;  // worker id -> local host index in the cube
  };
  struct Overlay;  // planned-but-not-reserved cubes while placing several slices

  friend class SubCubeIndex;
  void BuildTables();
  PlanResult Plan(const Inventory& inv, const SliceRequest& request, SubCubeIndex* index) const;
  PlanResult PlanSubCube(const Inventory& inv, const SliceRequest& req, int shape_index,
                         SubCubeIndex* index) const;
  // The cube that index's tree for shape s holds best (built or rebuilt first as needed), or
  // nullptr when the shape fits in no cube.
  const Cube* BestCube(const Inventory& inv, int s, SubCubeIndex& index) const;
  SubCubeIndex::Key KeyOf(const Cube& cube, int s) const;
  // The placement of shape s in `cube` whose usable hosts are `usable`.
  void PlaceIn(const Cube& cube, HostMask usable, int s, SlicePlacement& out) const;
  PlanResult PlanSuperSlice(const Inventory& inv, const SliceRequest& req,
                            const SliceTopology& topo) const;
  PlanResult PlanFixedSlices(const Inventory& inv, const SliceRequest& req) const;
  // Best cube for one sub-slice among `cubes` (nullptr: every cube), given overlay; false if
  // none.
  bool PlaceOneSubCube(const Inventory& inv, const std::vector<CubeId>* cubes, int shape_index,
                       Overlay& overlay, SlicePlacement& out, double& loss) const;

  PlannerOptions options_;
  // Per sub-cube shape (2x2x1, 2x2x2, 2x2x4, 2x4x4): placements in this planner's mode.
  std::array<std::vector<CubePlacement>, 4> placements_;
  std::array<std::vector<HostMask>, 4> sub_masks_;  // SubCubeMasks
  // best_[s][mask]: index into placements_[s] to use in a cube whose usable hosts are `mask`,
  // or -1 when the shape does not fit.
  std::array<std::vector<int8_t>, 4> best_;
  std::array<std::vector<float>, 4> loss_;  // usable-capacity lost by that best placement
  // any_cover_[s][mask]: chips of `mask` that some any-mode placement of shape s covers.
  std::array<std::vector<uint8_t>, 4> any_cover_;
  std::array<double, 4> sub_weight_ = {0, 0, 0, 0};    // normalised mix weight per sub shape
  std::vector<std::pair<int, double>> cube_weight_;    // (cubes per slice, weight) for big shapes
  std::vector<std::pair<Shape, double>> flat_weight_;  // 2D mix
};

// Reserves every host of a placed plan for `owner` in one atomic step.
Status ApplyPlan(Inventory& inv, OwnerId owner, const PlanResult& plan);

// The index (0..3) of a sub-cube shape in canonical order, or -1.
int SubCubeShapeIndex(const Shape& shape);

}  // namespace tessera
