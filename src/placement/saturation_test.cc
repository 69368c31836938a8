#include "placement/saturation.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

TEST(ShapeMix, ParsesAndRejectsWithTheEntry) {
  auto mix = ParseShapeMix(Generation::k7x, "2x2x1:4,2x2x2,4x4x8:0.5");
  ASSERT_TRUE(mix.ok()) << mix.status().ToString();
  ASSERT_EQ(mix->size(), 3u);
  EXPECT_EQ((*mix)[1].weight, 1);
  EXPECT_EQ((*mix)[2].shape, Shape::Of(4, 4, 8));
  EXPECT_NE(ParseShapeMix(Generation::k7x, "2x2x3:1").status().message().find("'2x2x3:1'"),
            std::string::npos);
  EXPECT_NE(ParseShapeMix(Generation::k7x, "2x2x1:-1").status().message().find("positive"),
            std::string::npos);
  EXPECT_FALSE(ParseShapeMix(Generation::k7x, "2x2x1,,").ok());
  EXPECT_FALSE(ParseShapeMix(Generation::k7x, "").ok());
  EXPECT_FALSE(ParseShapeMix(Generation::kV6e, "2x2x1").ok());
}

TEST(Saturation, SameSeedSameResultAndRunsEndSaturated) {
  auto inv = Inventory::MakePod({Generation::k7x, 2, 4});
  ASSERT_TRUE(inv.ok());
  PlannerOptions opts = PlannerOptions::Tessera();
  opts.mix = *ParseShapeMix(Generation::k7x, "2x2x1:3,2x2x2:3,2x2x4:2,2x4x4:1,4x4x4:1");
  SlicePlanner planner(opts);
  SaturationResult a = RunToSaturation(planner, *inv, {42, 0.3, 100000});
  SaturationResult b = RunToSaturation(planner, *inv, {42, 0.3, 100000});
  EXPECT_TRUE(a.saturated);
  EXPECT_EQ(a.placed, b.placed);
  EXPECT_EQ(a.allocated_chips, b.allocated_chips);
  EXPECT_EQ(a.requests, a.placed + a.rejected);
  EXPECT_GT(a.allocated_chips, 0);
  EXPECT_LE(a.allocated_chips, a.total_chips);
  // Saturated: no shape of the mix fits, and a 2x2x1 (one host) is in the mix, so every
  // healthy host is owned.
  EXPECT_EQ(a.allocated_chips, a.total_chips);
  EXPECT_GE(a.rejected, 1);
  EXPECT_FALSE(a.failed_shape.empty());
  EXPECT_LE(a.first_failure_chips, a.allocated_chips);
}

TEST(Saturation, AnyPositionPlacesAtLeastAsMuchAsAlignedFirstFitOnTheSameStream) {
  auto inv = Inventory::MakePod({Generation::k7x, 4, 8});
  ASSERT_TRUE(inv.ok());
  const ShapeMix mix = *ParseShapeMix(Generation::k7x, "2x2x1:4,2x2x2:3,2x2x4:2,2x4x4:2,4x4x4:1");
  int64_t first_fit_total = 0, tessera_total = 0;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    PlannerOptions ff = PlannerOptions::FirstFit(), ts = PlannerOptions::Tessera();
    ff.mix = ts.mix = mix;
    first_fit_total += RunToSaturation(SlicePlanner(ff), *inv, {seed, 0.3, 100000}).allocated_chips;
    tessera_total += RunToSaturation(SlicePlanner(ts), *inv, {seed, 0.3, 100000}).allocated_chips;
  }
  EXPECT_GE(tessera_total, first_fit_total);
}

}  // namespace
}  // namespace tessera
