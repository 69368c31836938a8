#include "topology/topology.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>

namespace tessera {
namespace {

// The largest dimension ParseShape accepts. No generation has a side longer than 32; a larger
// number is a typo, and the bound keeps every product far from overflow.
constexpr int kMaxDimension = 4096;

const std::vector<Shape> kSubCubeShapes = {Shape::Of(2, 2, 1), Shape::Of(2, 2, 2),
                                           Shape::Of(2, 2, 4), Shape::Of(2, 4, 4)};

std::vector<Shape> Shapes2D(std::initializer_list<std::pair<int, int>> dims) {
  std::vector<Shape> out;
  for (auto [x, y] : dims) out.push_back(Shape::Of(x, y));
  return out;
}

const std::vector<Shape>& ListedShapes(Generation g) {
  static const std::vector<Shape> kV2 =
      Shapes2D({{2, 2}, {4, 4}, {4, 8}, {8, 8}, {8, 16}, {16, 16}});
  static const std::vector<Shape> kV3 =
      Shapes2D({{2, 2}, {4, 4}, {4, 8}, {8, 8}, {8, 16}, {16, 16}, {16, 32}, {32, 32}});
  static const std::vector<Shape> kLite =
      Shapes2D({{1, 1}, {2, 2}, {2, 4}, {2, 8}, {4, 4}, {4, 8}, {8, 8}, {8, 16}, {16, 16}});
  switch (g) {
    case Generation::kV2:
      return kV2;
    case Generation::kV3:
      return kV3;
    case Generation::kV5e:
    case Generation::kV6e:
      return kLite;
    case Generation::kV4:
    case Generation::kV5p:
    case Generation::k7x:
      return kSubCubeShapes;
  }
  return kSubCubeShapes;
}

bool InSteps(int v, int lo, int hi, int step) { return v >= lo && v <= hi && v % step == 0; }

// The rule for slices of one or more whole cubes, per 3D generation.
bool SatisfiesCubeRule(Generation g, const Shape& s) {
  switch (g) {
    case Generation::kV4:
      return InSteps(s.x(), 4, 12, 4) && InSteps(s.y(), 4, 12, 4) && InSteps(s.z(), 4, 16, 4);
    case Generation::kV5p:
      return InSteps(s.x(), 4, 16, 4) && InSteps(s.y(), 4, 16, 4) && InSteps(s.z(), 4, 24, 4);
    case Generation::k7x:
      return s.x() % 4 == 0 && s.y() % 4 == 0 && s.z() % 4 == 0 && s.chips() <= 9216;
    default:
      return false;
  }
}

std::vector<GenerationInfo> BuildCatalog() {
  const std::string lite = "1x1, 2x2, 2x4, 2x8, 4x4, 4x8, 8x8, 8x16, 16x16";
  return {
      {Generation::kV2, "v2", {}, 2, 2, 256, "2x2, 4x4, 4x8, 8x8, 8x16, 16x16"},
      {Generation::kV3, "v3", {}, 2, 2, 1024, "2x2, 4x4, 4x8, 8x8, 8x16, 16x16, 16x32, 32x32"},
      {Generation::kV4,
       "v4",
       {},
       3,
       2,
       12 * 12 * 16,
       "2x2x1, 2x2x2, 2x2x4, 2x4x4, or AxBxC with A and B in {4, 8, 12} and C in "
       "{4, 8, 12, 16} (e.g. 4x4x4, 4x4x8, 8x8x16)"},
      {Generation::kV5e, "v5e", {"v5litepod"}, 2, 1, 256, lite},
      {Generation::kV5p,
       "v5p",
       {},
       3,
       2,
       16 * 16 * 24,
       "2x2x1, 2x2x2, 2x2x4, 2x4x4, or AxBxC with A and B multiples of 4 up to 16 and C a "
       "multiple of 4 up to 24 (e.g. 4x4x4, 8x8x16, 16x16x24)"},
      {Generation::kV6e, "v6e", {}, 2, 1, 256, lite},
      {Generation::k7x,
       "7x",
       {"v7x", "tpu7x"},
       3,
       2,
       9216,
       "2x2x1, 2x2x2, 2x2x4, 2x4x4, or AxBxC with every dimension a multiple of 4 and at "
       "most 9,216 chips (e.g. 4x4x4, 4x4x8, 8x8x8, 8x16x16)"},
  };
}

const std::vector<GenerationInfo>& Catalog() {
  static const std::vector<GenerationInfo> kCatalog = BuildCatalog();
  return kCatalog;
}

std::string GenerationList() {
  std::string out;
  for (const auto& info : Catalog()) {
    if (!out.empty()) out += ", ";
    out += info.name;
    if (!info.aliases.empty()) {
      out += " (";
      for (size_t i = 0; i < info.aliases.size(); ++i) {
        if (i) out += ", ";
        out += info.aliases[i];
      }
      out += ")";
    }
  }
  return out;
}

std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

// "2x8 or 4x4", "4x4x8, 4x8x4 or 8x4x4".
std::string ShapeList(const std::vector<Shape>& shapes) {
  std::string out;
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (i) out += i + 1 == shapes.size() ? " or " : ", ";
    out += shapes[i].ToString();
  }
  return out;
}

bool IsSingleHostShape(Generation g, const Shape& s) {
  if (g != Generation::kV5e && g != Generation::kV6e) return false;
  return s.chips() <= 8;  // 1x1, 2x2, 2x4: one host holds the whole slice
}

}  // namespace

std::string Shape::ToString() const {
  std::string out = std::to_string(dims[0]) + "x" + std::to_string(dims[1]);
  if (rank == 3) out += "x" + std::to_string(dims[2]);
  return out;
}

const GenerationInfo& Info(Generation g) { return Catalog()[static_cast<size_t>(g)]; }

const std::vector<Generation>& AllGenerations() {
  static const std::vector<Generation> kAll = {Generation::kV2,  Generation::kV3,  Generation::kV4,
                                               Generation::kV5e, Generation::kV5p, Generation::kV6e,
                                               Generation::k7x};
  return kAll;
}

std::string_view GenerationName(Generation g) { return Info(g).name; }

Result<Generation> ParseGeneration(std::string_view text) {
  std::string lower = Lower(text);
  // Ray's accelerator_type spelling: "TPU-V6E".
  std::string_view name = lower;
  if (name.size() > 4 && name.substr(0, 4) == "tpu-") name.remove_prefix(4);
  for (const auto& info : Catalog()) {
    if (name == info.name) return info.generation;
    for (auto alias : info.aliases)
      if (name == alias) return info.generation;
  }
  if (text.empty()) return InvalidArgument("generation is empty; valid: " + GenerationList());
  return InvalidArgument("generation '" + std::string(text) +
                         "' is unknown; valid: " + GenerationList());
}

Result<AcceleratorName> ParseAccelerator(std::string_view text) {
  const size_t dash = text.rfind('-');
  if (dash != std::string_view::npos && dash + 1 < text.size()) {
    std::string_view count = text.substr(dash + 1);
    if (std::all_of(count.begin(), count.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      Result<Generation> g = ParseGeneration(text.substr(0, dash));
      if (!g.ok()) return g.status();
      const GenerationInfo& info = Info(*g);
      const std::string pod = std::string(info.name) + "-N";
      int64_t cores = 0;
      auto [ptr, ec] = std::from_chars(count.data(), count.data() + count.size(), cores);
      const int64_t most = info.max_slice_chips * info.cores_per_chip;
      if (ec != std::errc() || cores <= 0 || cores > most)
        return InvalidArgument("pod type '" + std::string(text) + "': " + pod +
                               " counts TensorCores, from " + std::to_string(info.cores_per_chip) +
                               " to " + std::to_string(most));
      if (cores % info.cores_per_chip != 0)
        return InvalidArgument("pod type '" + std::string(text) + "': " + pod +
                               " counts TensorCores, " + std::to_string(info.cores_per_chip) +
                               " per " + std::string(info.name) + " chip, so N must be even");
      return AcceleratorName{*g, cores / info.cores_per_chip};
    }
  }
  Result<Generation> g = ParseGeneration(text);
  if (!g.ok()) return g.status();
  return AcceleratorName{*g, 0};
}

Result<Shape> ParseShape(std::string_view text) {
  const std::string quoted = "'" + std::string(text) + "'";
  const std::string how = "write it as AxB (e.g. 4x4) or AxBxC (e.g. 2x2x4)";
  if (text.empty()) return InvalidArgument("topology is empty; " + how);
  if (text.find_first_of(" \t\r\n\v\f") != std::string_view::npos)
    return InvalidArgument("topology " + quoted + " contains whitespace; " + how +
                           ", with no spaces");
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    size_t pos = text.find('x', start);
    parts.push_back(text.substr(start, pos == std::string_view::npos ? pos : pos - start));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  if (parts.size() < 2 || parts.size() > 3)
    return InvalidArgument("topology " + quoted + " has " + std::to_string(parts.size()) +
                           " dimension" + (parts.size() == 1 ? "" : "s") +
                           "; a slice has 2 or 3: " + how);
  Shape shape;
  shape.rank = static_cast<int>(parts.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    std::string_view p = parts[i];
    bool digits =
        !p.empty() && std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits)
      return InvalidArgument("topology " + quoted + ": dimension '" + std::string(p) +
                             "' is not a positive whole number; " + how);
    // Skip leading zeros so "0004" is not mistaken for an overflow; it is still a number.
    size_t first = p.find_first_not_of('0');
    if (first == std::string_view::npos)
      return InvalidArgument("topology " + quoted + ": dimension 0 must be at least 1");
    std::string_view significant = p.substr(first);
    int v = 0;
    auto [ptr, ec] =
        std::from_chars(significant.data(), significant.data() + significant.size(), v);
    if (ec != std::errc() || v > kMaxDimension)
      return InvalidArgument("topology " + quoted + ": dimension '" + std::string(p) +
                             "' is too large (at most " + std::to_string(kMaxDimension) + ")");
    shape.dims[i] = v;
  }
  return shape;
}

Status ValidateShape(Generation g, const Shape& shape) {
  const GenerationInfo& info = Info(g);
  if (shape.rank == info.rank) {
    const auto& listed = ListedShapes(g);
    if (std::find(listed.begin(), listed.end(), shape) != listed.end()) return Status::Ok();
    if (info.rank == 3 && SatisfiesCubeRule(g, shape)) return Status::Ok();
  }
  const std::string name(info.name);  // only for the error: a valid shape allocates nothing
  if (shape.rank != info.rank)
    return InvalidArgument("topology '" + shape.ToString() + "' has " + std::to_string(shape.rank) +
                           " dimensions but " + name + " slices have " + std::to_string(info.rank) +
                           "; valid " + name + " shapes: " + info.valid_shapes_text);
  std::string why = "is not a " + name + " slice shape";
  if (info.rank == 3 && shape.chips() > info.max_slice_chips)
    why += " (" + std::to_string(shape.chips()) + " chips; the largest " + name + " slice has " +
           std::to_string(info.max_slice_chips) + ")";
  return InvalidArgument("topology '" + shape.ToString() + "' " + why + "; valid " + name +
                         " shapes: " + info.valid_shapes_text);
}

std::vector<Shape> ValidShapes(Generation g) {
  std::vector<Shape> out = ListedShapes(g);
  if (Info(g).rank == 3) {
    const int64_t max_chips = Info(g).max_slice_chips;
    for (int x = 4; x * 16 <= max_chips; x += 4)
      for (int y = 4; int64_t{x} * y * 4 <= max_chips; y += 4)
        for (int z = 4; int64_t{x} * y * z <= max_chips; z += 4) {
          Shape s = Shape::Of(x, y, z);
          if (SatisfiesCubeRule(g, s)) out.push_back(s);
        }
  }
  std::sort(out.begin(), out.end(), [](const Shape& a, const Shape& b) {
    if (a.chips() != b.chips()) return a.chips() < b.chips();
    return a.dims < b.dims;
  });
  return out;
}

Result<SliceTopology> SliceTopology::Make(Generation g, const Shape& shape) {
  TESSERA_RETURN_IF_ERROR(ValidateShape(g, shape));
  SliceTopology t;
  t.generation_ = g;
  t.shape_ = shape;
  if (IsSingleHostShape(g, shape)) {
    t.host_extent_ = shape;
  } else if (shape.rank == 3) {
    t.host_extent_ = Shape::Of(2, 2, 1);
  } else {
    t.host_extent_ = Shape::Of(2, 2);
  }
  t.chips_per_host_ = static_cast<int>(t.host_extent_.chips());
  t.hosts_ = static_cast<int>(shape.chips() / t.chips_per_host_);
  t.host_grid_ = shape;
  for (int i = 0; i < 3; ++i) t.host_grid_.dims[i] = shape.dims[i] / t.host_extent_.dims[i];
  return t;
}

Result<SliceTopology> SliceTopology::Parse(std::string_view generation, std::string_view shape) {
  Result<Generation> g = ParseGeneration(generation);
  if (!g.ok()) return g.status();
  Result<Shape> s = ParseShape(shape);
  if (!s.ok())
    return InvalidArgument(s.status().message() + "; valid " + std::string(Info(*g).name) +
                           " shapes: " + Info(*g).valid_shapes_text);
  return Make(*g, *s);
}

Result<SliceTopology> ResolveAccelerator(std::string_view accelerator, std::string_view topology) {
  Result<AcceleratorName> name = ParseAccelerator(accelerator);
  if (!name.ok()) return InvalidArgument("accelerator: " + name.status().message());
  const GenerationInfo& info = Info(name->generation);
  const std::string gen(info.name);
  const std::string pod = gen + "-" + std::to_string(name->chips * info.cores_per_chip);
  // Enumerated only for a pod type without a topology, or one whose chips differ from it (7x
  // has about a thousand shapes).
  auto matching_shapes = [&]() -> Result<std::vector<Shape>> {
    std::vector<Shape> out;
    for (const Shape& s : ValidShapes(name->generation))
      if (s.chips() == name->chips) out.push_back(s);
    if (out.empty())
      return InvalidArgument("accelerator: no " + gen + " slice has " +
                             std::to_string(name->chips) + " chips (pod type " + pod + "); valid " +
                             gen + " shapes: " + info.valid_shapes_text);
    return out;
  };
  if (topology.empty()) {
    if (name->chips == 0)
      return InvalidArgument("topology: required, e.g. " +
                             ValidShapes(name->generation)[1].ToString() + "; valid " + gen +
                             " shapes: " + info.valid_shapes_text);
    auto matching = matching_shapes();
    if (!matching.ok()) return matching.status();
    if (matching->size() > 1)
      return InvalidArgument("topology: required: " + pod + " is " + std::to_string(name->chips) +
                             " chips, which is " + ShapeList(*matching) +
                             "; set topology to one of them");
    return SliceTopology::Make(name->generation, matching->front());
  }
  Result<SliceTopology> t = SliceTopology::Parse(gen, topology);
  if (!t.ok()) return InvalidArgument("topology: " + t.status().message());
  if (name->chips > 0 && t->chips() != name->chips) {
    auto matching = matching_shapes();
    if (!matching.ok()) return matching.status();
    return InvalidArgument("topology: '" + t->shape().ToString() + "' is " +
                           std::to_string(t->chips()) + " chips but accelerator " + pod + " is " +
                           std::to_string(name->chips) + "; use " + ShapeList(*matching) +
                           ", or name the accelerator " + gen + " or " + t->PodType());
  }
  return t;
}

std::string SliceTopology::PodType() const {
  return std::string(GenerationName(generation_)) + "-" +
         std::to_string(chips() * Info(generation_).cores_per_chip);
}

int SliceTopology::cubes() const {
  if (shape_.rank != 3) return 0;
  return is_sub_cube() ? 1 : static_cast<int>(chips() / 64);
}

Coord SliceTopology::HostCoordOf(int worker_id) const {
  const int bx = host_grid_.x(), by = host_grid_.y();
  return Coord{worker_id % bx, (worker_id / bx) % by, worker_id / (bx * by)};
}

int SliceTopology::WorkerIdOf(const Coord& c) const {
  return c.z * (host_grid_.x() * host_grid_.y()) + c.y * host_grid_.x() + c.x;
}

std::vector<Coord> SliceTopology::WorkerGrid() const {
  std::vector<Coord> out;
  out.reserve(hosts_);
  for (int id = 0; id < hosts_; ++id) out.push_back(HostCoordOf(id));
  return out;
}

}  // namespace tessera
