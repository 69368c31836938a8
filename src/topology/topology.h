// The topology catalog: accelerator generations, slice shapes, hosts and worker ids.
//
// Everything here is a pure function of its inputs (docs/topology.md has the tables). Parsing
// never throws: bad input comes back as an InvalidArgument Status whose message names what is
// wrong and lists what would be valid.
//
// Thread-safety: the catalog is immutable after static initialisation; all functions are safe
// to call from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tessera {

enum class Generation { kV2, kV3, kV4, kV5e, kV5p, kV6e, k7x };

// A point or an extent in a grid of up to three dimensions. 2D values have z == 1 (extent) or
// z == 0 (point), so 2D and 3D code share one type.
struct Coord {
  int x = 0, y = 0, z = 0;
  friend constexpr auto operator<=>(const Coord&, const Coord&) = default;
};

// A slice shape: the extent of its chip grid, e.g. 4x4 (rank 2) or 2x2x4 (rank 3).
struct Shape {
  int rank = 0;  // 2 or 3
  std::array<int, 3> dims = {1, 1, 1};

  int x() const { return dims[0]; }
  int y() const { return dims[1]; }
  int z() const { return dims[2]; }
  int64_t chips() const { return int64_t{dims[0]} * dims[1] * dims[2]; }
  std::string ToString() const;  // "4x4", "2x2x4"
  friend bool operator==(const Shape&, const Shape&) = default;
  friend auto operator<=>(const Shape&, const Shape&) = default;

  static Shape Of(int x, int y) { return Shape{2, {x, y, 1}}; }
  static Shape Of(int x, int y, int z) { return Shape{3, {x, y, z}}; }
};

// Static facts about one generation.
struct GenerationInfo {
  Generation generation;
  std::string_view name;                  // canonical: "v6e", "7x"
  std::vector<std::string_view> aliases;  // also accepted: "v5litepod", "tpu7x"
  int rank;                               // 2 (fixed slices) or 3 (cubes)
  int cores_per_chip;                     // TensorCores per chip; the N of a pod type counts these
  int64_t max_slice_chips;                // the largest slice the generation offers
  std::string valid_shapes_text;          // for error messages: what would be valid
};

const GenerationInfo& Info(Generation g);
const std::vector<Generation>& AllGenerations();
std::string_view GenerationName(Generation g);

// Accepts canonical names and aliases in any case, also with Ray's "TPU-" prefix ("v6e",
// "V5LITEPOD", "tpu7x", "TPU-V6E"). Pod types ("v6e-16") are ParseAccelerator's.
Result<Generation> ParseGeneration(std::string_view text);

// An accelerator as users write it: a generation (ParseGeneration), or a pod type
// "<generation>-<TensorCores>" as SliceTopology::PodType prints it ("v6e-16", "TPU-V5P-128"),
// which also fixes the chip count (TensorCores / cores per chip).
struct AcceleratorName {
  Generation generation = Generation::kV6e;
  int64_t chips = 0;  // from a pod type; 0 when the text named only a generation
};
Result<AcceleratorName> ParseAccelerator(std::string_view text);

// Parses "AxB" or "AxBxC": positive decimal integers joined by 'x', nothing else (no spaces,
// no signs). Syntax only: whether the shape is valid for a generation is ValidateShape's job.
Result<Shape> ParseShape(std::string_view text);

// OK if `shape` is a slice shape that `g` offers; otherwise says why and what would be valid.
Status ValidateShape(Generation g, const Shape& shape);

// Every valid shape of `g`, in a stable order (by chips, then dimensions). For 7x this includes
// every multiple-of-4 box up to 9,216 chips.
std::vector<Shape> ValidShapes(Generation g);

// A resolved slice: the facts a scheduler and a worker need about one slice of a shape.
class SliceTopology {
 public:
  // Validates the pair and computes the derived facts.
  static Result<SliceTopology> Make(Generation g, const Shape& shape);
  // Parses both strings first; errors name the field ("generation" or "topology").
  static Result<SliceTopology> Parse(std::string_view generation, std::string_view shape);

  Generation generation() const { return generation_; }
  const Shape& shape() const { return shape_; }
  int64_t chips() const { return shape_.chips(); }
  int chips_per_host() const { return chips_per_host_; }
  int hosts() const { return hosts_; }
  // Chips one host covers in the grid: 2x2x1 on 3D generations, 2x2 on 2D, or the whole shape
  // for single-host slices.
  const Shape& host_extent() const { return host_extent_; }
  // The host grid's bounds: shape / host_extent per dimension.
  const Shape& host_grid() const { return host_grid_; }
  // "<generation>-<TensorCores>", e.g. v6e-16, v4-16.
  std::string PodType() const;
  // 4x4x4 cubes this slice needs (3D only): chips / 64, and 1 for a sub-cube slice.
  int cubes() const;
  bool is_sub_cube() const { return shape_.rank == 3 && shape_.chips() < 64; }

  // Host-grid coordinate of a worker, and its inverse. id = hz*(Bx*By) + hy*Bx + hx.
  Coord HostCoordOf(int worker_id) const;
  int WorkerIdOf(const Coord& host_coord) const;
  // HostCoordOf(0..hosts-1).
  std::vector<Coord> WorkerGrid() const;

 private:
  Generation generation_ = Generation::kV6e;
  Shape shape_;
  int chips_per_host_ = 4;
  int hosts_ = 1;
  Shape host_extent_;
  Shape host_grid_;
};

// The slice an accelerator and an optional topology name: with a topology, the pair as
// SliceTopology::Parse checks it (and a pod type's chips must match the shape's); without
// one, the pod type's shape when exactly one valid shape has its chips. Errors start with the
// field ("accelerator: ..." or "topology: ...") and list the shapes that would be valid, e.g.
// "topology: required: v6e-16 is 16 chips, which is 2x8 or 4x4; set topology to one of them".
Result<SliceTopology> ResolveAccelerator(std::string_view accelerator, std::string_view topology);

}  // namespace tessera
