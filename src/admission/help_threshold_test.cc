#include "admission/help_threshold.h"

#include <gtest/gtest.h>

#include <cmath>

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

TEST(HelpThreshold, OnlySmallStartsCount) {
  // Small: fewer chips than reserve_min_chips (64), the ones that never reserve.
  EXPECT_TRUE(HelpThreshold::IsSmall(32, 64));
  EXPECT_FALSE(HelpThreshold::IsSmall(64, 64));
  EXPECT_FALSE(HelpThreshold::IsSmall(1, 0));  // 0: every workload reserves, none is small
  HelpThreshold t({.factor = 1, .quantile = 1.0, .window = 8});
  t.AddStart(64, 64, 9000);  // large: not counted
  EXPECT_EQ(t.recent(), 0u);
  t.AddStart(16, 64, 300);
  EXPECT_EQ(t.recent(), 1u);
  EXPECT_EQ(t.Seconds(), 300);
}

TEST(HelpThreshold, WrongOptionsNameTheFlagAndTheRange) {
  EXPECT_TRUE(ValidateHelpThreshold({}).ok());
  EXPECT_TRUE(ValidateHelpThreshold({.factor = 4, .quantile = 0.8, .window = 64}).ok());
  const Status factor = ValidateHelpThreshold({.factor = -1});
  EXPECT_EQ(factor.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(factor.message().find("--help-factor: -1 is not in [0, 1000]"), std::string::npos)
      << factor.message();
  EXPECT_NE(ValidateHelpThreshold({.factor = 1e9}).message().find("--help-factor"),
            std::string::npos);
  EXPECT_NE(ValidateHelpThreshold({.factor = std::nan("")}).message().find("--help-factor"),
            std::string::npos);
  const Status quantile = ValidateHelpThreshold({.quantile = 1.5});
  EXPECT_NE(quantile.message().find("--help-quantile: 1.5 is not in [0, 1]"), std::string::npos)
      << quantile.message();
  const Status window = ValidateHelpThreshold({.window = 0});
  EXPECT_NE(window.message().find("--help-window: 0 is not in [1, 1048576]"), std::string::npos)
      << window.message();
  EXPECT_FALSE(ValidateHelpThreshold({.window = (size_t{1} << 20) + 1}).ok());
  // `--help-window -1`, parsed into the unsigned field, is shown as given.
  EXPECT_NE(ValidateHelpThreshold({.window = static_cast<size_t>(-1)})
                .message()
                .find("--help-window: -1 is not in"),
            std::string::npos);
  EXPECT_TRUE(ValidateHelpThreshold({.window = size_t{1} << 20}).ok());
}

}  // namespace
}  // namespace tessera
