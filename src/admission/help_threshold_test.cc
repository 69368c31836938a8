#include "admission/help_threshold.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

TEST(HelpThreshold, OffIsTheFloor) {
  HelpThreshold t({.factor = 0, .floor_s = 3600});
  t.AddSmallStart(100000);
  EXPECT_EQ(t.Seconds(), 3600);
  EXPECT_EQ(t.recent(), 0u);
  EXPECT_FALSE(t.Helps(3599));
  EXPECT_TRUE(t.Helps(3600));
}

TEST(HelpThreshold, NoSmallStartYetIsTheFloor) {
  HelpThreshold t({.factor = 2, .floor_s = 60});
  EXPECT_EQ(t.Seconds(), 60);
}

TEST(HelpThreshold, FactorTimesTheQuantileOfRecentWaits) {
  HelpThreshold t({.factor = 2, .quantile = 0.5, .window = 10});
  for (int64_t w : {0, 0, 100, 200, 300}) t.AddSmallStart(w);
  // Nearest rank: ceil(0.5 * 5) = 3rd smallest = 100.
  EXPECT_EQ(t.Seconds(), 200);
  HelpThreshold top({.factor = 1, .quantile = 1.0, .window = 10});
  for (int64_t w : {5, 50, 7}) top.AddSmallStart(w);
  EXPECT_EQ(top.Seconds(), 50);
  HelpThreshold bottom({.factor = 1, .quantile = 0.0, .window = 10});
  for (int64_t w : {5, 50, 7}) bottom.AddSmallStart(w);
  EXPECT_EQ(bottom.Seconds(), 5);
}

TEST(HelpThreshold, OnlyTheLastWindowCounts) {
  HelpThreshold t({.factor = 1, .quantile = 1.0, .window = 3});
  for (int64_t w : {1000, 10, 20, 30}) t.AddSmallStart(w);
  EXPECT_EQ(t.recent(), 3u);
  EXPECT_EQ(t.Seconds(), 30);  // 1000 has left the window
}

TEST(HelpThreshold, FloorAndNegativeWaits) {
  HelpThreshold t({.factor = 3, .quantile = 1.0, .window = 4, .floor_s = 500});
  t.AddSmallStart(-40);  // counts as 0
  EXPECT_EQ(t.Seconds(), 500);
  t.AddSmallStart(400);
  EXPECT_EQ(t.Seconds(), 1200);
  EXPECT_TRUE(t.Helps(1200));
  EXPECT_FALSE(t.Helps(1199));
}

TEST(HelpThreshold, FollowsTheLoad) {
  // Busy: small jobs waited hours; quiet again: they start at once, so help comes sooner.
  HelpThreshold t({.factor = 2, .quantile = 0.95, .window = 20});
  for (int i = 0; i < 20; ++i) t.AddSmallStart(4 * 3600);
  EXPECT_EQ(t.Seconds(), 8 * 3600);
  for (int i = 0; i < 20; ++i) t.AddSmallStart(0);
  EXPECT_EQ(t.Seconds(), 0);
}

}  // namespace
}  // namespace tessera
