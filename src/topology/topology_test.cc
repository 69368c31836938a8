#include "topology/topology.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace tessera {
namespace {

SliceTopology MustParse(std::string_view gen, std::string_view shape) {
  auto t = SliceTopology::Parse(gen, shape);
  EXPECT_TRUE(t.ok()) << gen << " " << shape << ": " << t.status().ToString();
  return *t;
}

std::string ErrorOf(std::string_view gen, std::string_view shape) {
  auto t = SliceTopology::Parse(gen, shape);
  EXPECT_FALSE(t.ok()) << gen << " " << shape << " parsed but should not";
  return t.ok() ? "" : t.status().message();
}

TEST(Generation, NamesAndAliases) {
  EXPECT_EQ(*ParseGeneration("v5litepod"), Generation::kV5e);
  EXPECT_EQ(*ParseGeneration("v5e"), Generation::kV5e);
  EXPECT_EQ(*ParseGeneration("7x"), Generation::k7x);
  EXPECT_EQ(*ParseGeneration("v7x"), Generation::k7x);
  EXPECT_EQ(*ParseGeneration("tpu7x"), Generation::k7x);
  for (Generation g : AllGenerations()) EXPECT_EQ(*ParseGeneration(GenerationName(g)), g);
}

// Ray's accelerator_type ("TPU-V6E") and any case name the same generation.
TEST(Generation, RaySpellingAndAnyCase) {
  EXPECT_EQ(*ParseGeneration("TPU-V6E"), Generation::kV6e);
  EXPECT_EQ(*ParseGeneration("tpu-v5p"), Generation::kV5p);
  EXPECT_EQ(*ParseGeneration("TPU-V5LITEPOD"), Generation::kV5e);
  EXPECT_EQ(*ParseGeneration("TPU-V7X"), Generation::k7x);
  EXPECT_EQ(*ParseGeneration("V6E"), Generation::kV6e);
  EXPECT_EQ(*ParseGeneration("TPU7X"), Generation::k7x);
  EXPECT_FALSE(ParseGeneration("tpu-").ok());
  EXPECT_FALSE(ParseGeneration("TPU-V9").ok());
  EXPECT_FALSE(ParseGeneration("v6e ").ok());
}

TEST(Accelerator, PodTypesCountTensorCores) {
  auto a = ParseAccelerator("v6e-16");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->generation, Generation::kV6e);
  EXPECT_EQ(a->chips, 16);
  a = ParseAccelerator("TPU-V5P-128");  // 2 TensorCores per chip
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->generation, Generation::kV5p);
  EXPECT_EQ(a->chips, 64);
  a = ParseAccelerator("TPU-V6E");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->chips, 0);
  EXPECT_NE(ParseAccelerator("v5p-15").status().message().find("must be even"), std::string::npos);
  EXPECT_NE(ParseAccelerator("v6e-0").status().message().find("from 1 to 256"), std::string::npos);
  EXPECT_FALSE(ParseAccelerator("v6e-99999999999999999999").ok());
  EXPECT_FALSE(ParseAccelerator("v9-16").ok());
}

// Every slice's own pod type resolves back to it when no other shape has its chips.
TEST(Accelerator, PodTypeRoundTrips) {
  for (Generation g : AllGenerations()) {
    std::map<int64_t, int> per_chips;
    const std::vector<Shape> shapes = ValidShapes(g);
    for (const Shape& s : shapes) ++per_chips[s.chips()];
    // 7x has about a thousand shapes: every seventh of them keeps the test fast under ASan.
    const size_t step = shapes.size() > 100 ? 7 : 1;
    for (size_t i = 0; i < shapes.size(); i += step) {
      const Shape& s = shapes[i];
      auto t = SliceTopology::Make(g, s);
      ASSERT_TRUE(t.ok());
      auto r = ResolveAccelerator(t->PodType(), "");
      if (per_chips[s.chips()] == 1) {
        ASSERT_TRUE(r.ok()) << t->PodType() << ": " << r.status().ToString();
        EXPECT_EQ(r->shape(), s) << t->PodType();
      } else {
        ASSERT_FALSE(r.ok()) << t->PodType();
        EXPECT_NE(r.status().message().find(s.ToString()), std::string::npos)
            << r.status().message();
      }
      auto explicit_shape = ResolveAccelerator(t->PodType(), s.ToString());
      ASSERT_TRUE(explicit_shape.ok()) << explicit_shape.status().ToString();
      EXPECT_EQ(explicit_shape->shape(), s);
    }
  }
}

TEST(Accelerator, ResolveErrorsNameTheFieldAndTheShapes) {
  auto r = ResolveAccelerator("v6e-16", "");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "topology: required: v6e-16 is 16 chips, which is 2x8 or 4x4; set topology to one "
            "of them");
  r = ResolveAccelerator("TPU-V6E-32", "");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->shape(), Shape::Of(4, 8));
  EXPECT_EQ(r->generation(), Generation::kV6e);
  r = ResolveAccelerator("v6e-16", "4x8");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(
      r.status().message().rfind("topology: '4x8' is 32 chips but accelerator v6e-16 is 16", 0), 0u)
      << r.status().message();
  r = ResolveAccelerator("v6e-24", "");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().rfind("accelerator: no v6e slice has 24 chips", 0), 0u)
      << r.status().message();
  r = ResolveAccelerator("tpu-v9", "4x4");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().rfind("accelerator: ", 0), 0u);
  r = ResolveAccelerator("TPU-V6E", "");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().rfind("topology: required", 0), 0u);
  r = ResolveAccelerator("TPU-V6E", "4x5");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().rfind("topology: ", 0), 0u);
  r = ResolveAccelerator("7X-256", "");  // 128 chips: three rotations of 4x4x8
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("4x4x8, 4x8x4 or 8x4x4"), std::string::npos)
      << r.status().message();
}

// domain.md section 1, row by row: every listed shape is valid.
TEST(Catalog, EveryListedShapeOfDomainTableIsValid) {
  for (const char* gen : {"v5e", "v6e"})
    for (const char* s : {"1x1", "2x2", "2x4", "2x8", "4x4", "4x8", "8x8", "8x16", "16x16"})
      MustParse(gen, s);
  for (const char* gen : {"v4", "v5p", "7x"})
    for (const char* s : {"2x2x1", "2x2x2", "2x2x4", "2x4x4"}) MustParse(gen, s);
  for (int a : {4, 8, 12})
    for (int b : {4, 8, 12})
      for (int c = 4; c <= 16; c += 4) MustParse("v4", Shape::Of(a, b, c).ToString());
  for (int a = 4; a <= 16; a += 4)
    for (int b = 4; b <= 16; b += 4)
      for (int c = 4; c <= 24; c += 4) MustParse("v5p", Shape::Of(a, b, c).ToString());
  for (const char* s : {"4x4x4", "4x4x8", "4x8x8", "8x8x8", "8x8x16", "8x16x16", "16x24x24"})
    MustParse("7x", s);
}

TEST(Catalog, ShapesOutsideTheRulesAreRejected) {
  ErrorOf("v4", "16x4x4");    // A only in {4, 8, 12}
  ErrorOf("v4", "4x4x20");    // C at most 16
  ErrorOf("v5p", "4x4x28");   // C at most 24
  ErrorOf("v5p", "20x4x4");   // A at most 16
  ErrorOf("7x", "16x24x28");  // 10,752 chips > 9,216
  ErrorOf("7x", "4x4x6");     // not a multiple of 4
  ErrorOf("v6e", "4x2");      // not listed
  ErrorOf("v6e", "32x32");
  ErrorOf("v2", "1x1");
}

TEST(Catalog, ValidShapesAgreesWithValidate) {
  for (Generation g : AllGenerations()) {
    auto shapes = ValidShapes(g);
    ASSERT_FALSE(shapes.empty());
    std::set<std::string> seen;
    for (const Shape& s : shapes) {
      EXPECT_TRUE(ValidateShape(g, s).ok()) << GenerationName(g) << " " << s.ToString();
      EXPECT_TRUE(seen.insert(s.ToString()).second) << "duplicate " << s.ToString();
      EXPECT_LE(s.chips(), Info(g).max_slice_chips);
    }
  }
  EXPECT_EQ(ValidShapes(Generation::kV6e).size(), 9u);
  EXPECT_EQ(ValidShapes(Generation::kV4).size(), 4u + 3 * 3 * 4);
  EXPECT_EQ(ValidShapes(Generation::kV5p).size(), 4u + 4 * 4 * 6);
}

TEST(SliceTopology, ChipsHostsAndPodTypes) {
  auto t = MustParse("v6e", "4x4");
  EXPECT_EQ(t.chips(), 16);
  EXPECT_EQ(t.chips_per_host(), 4);
  EXPECT_EQ(t.hosts(), 4);
  EXPECT_EQ(t.PodType(), "v6e-16");
  EXPECT_EQ(t.host_grid(), Shape::Of(2, 2));

  auto v4 = MustParse("v4", "2x2x2");
  EXPECT_EQ(v4.PodType(), "v4-16");
  EXPECT_EQ(v4.hosts(), 2);
  EXPECT_EQ(v4.cubes(), 1);
  EXPECT_TRUE(v4.is_sub_cube());

  auto cube = MustParse("7x", "4x4x4");
  EXPECT_EQ(cube.hosts(), 16);
  EXPECT_EQ(cube.cubes(), 1);
  EXPECT_EQ(cube.PodType(), "7x-128");
  EXPECT_EQ(MustParse("7x", "8x8x8").cubes(), 8);
  EXPECT_EQ(MustParse("v5p", "16x16x24").chips(), 6144);
  EXPECT_EQ(MustParse("v5e", "8x8").PodType(), "v5e-64");
}

TEST(SliceTopology, SingleHostLiteShapes) {
  for (auto [s, chips] : {std::pair{"1x1", 1}, {"2x2", 4}, {"2x4", 8}}) {
    auto t = MustParse("v5e", s);
    EXPECT_EQ(t.hosts(), 1) << s;
    EXPECT_EQ(t.chips_per_host(), chips) << s;
  }
  EXPECT_EQ(MustParse("v6e", "2x8").hosts(), 4);
}

TEST(SliceTopology, WorkerIdsFollowTheDomainFormula) {
  auto t = MustParse("v4", "4x4x8");  // host grid 2x2x8
  EXPECT_EQ(t.host_grid(), Shape::Of(2, 2, 8));
  auto grid = t.WorkerGrid();
  ASSERT_EQ(grid.size(), 32u);
  for (int id = 0; id < 32; ++id) {
    Coord c = grid[id];
    EXPECT_EQ(id, c.z * (2 * 2) + c.y * 2 + c.x);
    EXPECT_EQ(t.WorkerIdOf(c), id);
  }
  EXPECT_EQ(grid[5], (Coord{1, 0, 1}));
}

TEST(ParseErrors, EveryBadInputNamesTheProblemAndListsValidShapes) {
  EXPECT_NE(ErrorOf("v9", "4x4").find("generation 'v9' is unknown; valid: v2, v3"),
            std::string::npos);
  EXPECT_NE(ErrorOf("v6e", "4x5").find("valid v6e shapes: 1x1, 2x2"), std::string::npos);
  EXPECT_NE(ErrorOf("v6e", "0x4").find("dimension 0 must be at least 1"), std::string::npos);
  EXPECT_NE(ErrorOf("v4", "2x2x3").find("valid v4 shapes"), std::string::npos);
  EXPECT_NE(ErrorOf("7x", "4x4x4x4").find("has 4 dimensions"), std::string::npos);
  EXPECT_NE(ErrorOf("v6e", "99999999999999999999x4").find("too large"), std::string::npos);
  EXPECT_NE(ErrorOf("v6e", "").find("topology is empty"), std::string::npos);
  EXPECT_NE(ErrorOf("v6e", " 4x4").find("whitespace"), std::string::npos);
  EXPECT_NE(ErrorOf("v6e", "4x4 ").find("whitespace"), std::string::npos);
  EXPECT_NE(ErrorOf("v6e", "4 x4").find("whitespace"), std::string::npos);
  EXPECT_NE(ErrorOf("v6e", "4x-4").find("not a positive whole number"), std::string::npos);
  EXPECT_NE(ErrorOf("v6e", "4x4x4").find("has 3 dimensions but v6e slices have 2"),
            std::string::npos);
  EXPECT_NE(ErrorOf("v4", "4x4").find("valid v4 shapes"), std::string::npos);
  EXPECT_NE(ErrorOf("", "4x4").find("generation is empty"), std::string::npos);
  EXPECT_NE(ErrorOf("v6e", "x").find("not a positive whole number"), std::string::npos);
  EXPECT_NE(ErrorOf("v6e", "4").find("has 1 dimension;"), std::string::npos);
  EXPECT_NE(ErrorOf("7x", "16x24x28").find("9,216"), std::string::npos);
}

}  // namespace
}  // namespace tessera
