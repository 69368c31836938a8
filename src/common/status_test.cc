#include "common/status.h"

#include <gtest/gtest.h>

#include "common/ids.h"
#include "common/rng.h"

namespace tessera {
namespace {

TEST(Status, OkAndErrorsPrintTheirCode) {
  EXPECT_TRUE(Status::Ok().ok());
  EXPECT_EQ(Status::Ok().ToString(), "OK");
  Status s = InvalidArgument("shape: bad");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.ToString(), "INVALID_ARGUMENT: shape: bad");
}

TEST(Result, HoldsValueOrStatus) {
  Result<int> good = 7;
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 7);
  EXPECT_TRUE(good.status().ok());
  Result<int> bad = NotFound("job x");
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kNotFound);
}

TEST(StrongId, DefaultIsInvalidAndOrderFollowsValue) {
  EXPECT_FALSE(HostId().valid());
  EXPECT_TRUE(HostId(3) < HostId(4));
  EXPECT_EQ(HostId(3), HostId(3));
}

TEST(Rng, SameSeedSameSequence) {
  Rng a(42), b(42), c(43);
  for (int i = 0; i < 100; ++i) {
    uint64_t x = a.Next();
    EXPECT_EQ(x, b.Next());
    if (i == 0) {
      EXPECT_NE(x, c.Next());
    }
  }
  for (int i = 0; i < 1000; ++i) EXPECT_LT(a.Uniform(10), 10u);
}

}  // namespace
}  // namespace tessera
