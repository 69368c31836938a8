#include "inventory/slice_claims.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

SliceClaim V5p16(int worker, std::string slice = "tpu-a") {
  return {std::move(slice), "v5p-16", "2x2x2", worker};
}

bool Has(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

TEST(SliceClaims, AClaimAloneMustNameATopologyOfItsType) {
  Status bad_shape = CheckSliceClaim("h1", {"tpu-a", "v5p-16", "2x2x4", 0}, {}).status();
  EXPECT_EQ(bad_shape.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(bad_shape, "discovered.topology")) << bad_shape.message();
  Status bad_type = CheckSliceClaim("h1", {"tpu-a", "v9z-16", "2x2x2", 0}, {}).status();
  EXPECT_EQ(bad_type.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(bad_type, "discovered.acceleratorType")) << bad_type.message();
  Status bad_worker = CheckSliceClaim("h1", V5p16(2), {}).status();
  EXPECT_EQ(bad_worker.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(bad_worker, "discovered.workerId")) << bad_worker.message();
  EXPECT_TRUE(Has(bad_worker, "workers 0..1")) << bad_worker.message();
  EXPECT_TRUE(CheckSliceClaim("h1", V5p16(1), {}).ok());
}

TEST(SliceClaims, HostsOfOneSliceMustAgreeOnTypeAndTopology) {
  const std::vector<ClaimHolder> others = {{"h0", V5p16(0), false}};
  Status type = CheckSliceClaim("h1", {"tpu-a", "v5p-32", "2x2x4", 1}, others).status();
  EXPECT_EQ(type.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Has(type, "discovered.acceleratorType")) << type.message();
  EXPECT_TRUE(Has(type, "v5p-32 2x2x4")) << type.message();
  EXPECT_TRUE(Has(type, "v5p-16 2x2x2")) << type.message();
  EXPECT_TRUE(Has(type, "host h0")) << type.message();
  // v6e-16 has two shapes: same type, another topology.
  const std::vector<ClaimHolder> flat = {{"h0", {"tpu-b", "v6e-16", "4x4", 0}, false}};
  Status topo = CheckSliceClaim("h1", {"tpu-b", "v6e-16", "2x8", 1}, flat).status();
  EXPECT_EQ(topo.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Has(topo, "discovered.topology")) << topo.message();
  EXPECT_TRUE(Has(topo, "2x8")) << topo.message();
  EXPECT_TRUE(Has(topo, "4x4")) << topo.message();
  // An alias of the same type agrees; a declared slice of the generation agrees too.
  EXPECT_TRUE(CheckSliceClaim("h1", {"tpu-b", "v6e-16", "4x4", 1},
                              {{"h0", {"tpu-b", "v6e", "4x4", 0}, false}})
                  .ok());
  // Another slice's claims are not compared.
  EXPECT_TRUE(CheckSliceClaim("h1", {"tpu-c", "v5p-32", "2x2x4", 0}, others).ok());
}

TEST(SliceClaims, ATakenWorkerIdIsRefusedUnlessItsHolderIsLost) {
  Status taken = CheckSliceClaim("h9", V5p16(0), {{"h0", V5p16(0), false}}).status();
  EXPECT_EQ(taken.code(), StatusCode::kAlreadyExists);
  EXPECT_TRUE(Has(taken, "h9")) << taken.message();
  EXPECT_TRUE(Has(taken, "live host h0")) << taken.message();
  auto replaced = CheckSliceClaim("h9", V5p16(0), {{"h0", V5p16(0), true}});
  ASSERT_TRUE(replaced.ok()) << replaced.status().ToString();
  EXPECT_EQ(replaced->replaces, "h0");
  // The host itself registering again is no conflict.
  auto again = CheckSliceClaim("h0", V5p16(0), {{"h0", V5p16(0), false}});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->replaces, "");
}

TEST(SliceClaims, ARosterListsMissingAndLostWorkers) {
  const std::vector<ClaimHolder> holders = {
      {"a0", {"v4-slice", "v4-32", "2x2x4", 0}, false},
      {"a2", {"v4-slice", "v4-32", "2x2x4", 2}, true},
      {"b0", V5p16(0), false},
      {"b1", V5p16(1), false},
  };
  const std::vector<SliceRoster> rosters = SliceRosters(holders);
  ASSERT_EQ(rosters.size(), 2u);
  EXPECT_EQ(rosters[0].slice, "tpu-a");
  EXPECT_EQ(rosters[0].workers, 2);
  EXPECT_TRUE(rosters[0].complete());
  EXPECT_EQ(RosterGaps(rosters[0]), "");
  EXPECT_EQ(rosters[1].slice, "v4-slice");
  EXPECT_EQ(rosters[1].workers, 4);
  EXPECT_EQ(rosters[1].missing, (std::vector<int>{1, 3}));
  EXPECT_EQ(rosters[1].lost, (std::vector<int>{2}));
  EXPECT_FALSE(rosters[1].complete());
  EXPECT_EQ(RosterGaps(rosters[1]), "workers 1, 3 missing; worker 2 lost");
}

TEST(SliceClaims, AClaimMustMatchTheMembershipItCameWith) {
  HostSpec flat;
  flat.generation = Generation::kV6e;
  flat.slice = SliceMembership{"tpu-b", "4x4", 1};
  EXPECT_TRUE(ValidateClaim(flat, {"tpu-b", "v6e-16", "4x4", 1}).ok());
  EXPECT_TRUE(Has(ValidateClaim(flat, {"tpu-b", "v6e-16", "4x4", 2}), "discovered.workerId"));
  EXPECT_TRUE(Has(ValidateClaim(flat, {"tpu-b", "v6e-16", "2x8", 1}), "discovered.topology"));
  EXPECT_TRUE(Has(ValidateClaim(flat, {"tpu-x", "v6e-16", "4x4", 1}), "discovered.sliceName"));
  HostSpec cube;
  cube.generation = Generation::kV4;
  cube.cube = CubeMembership{"tpu-a", "block-00", {0, 0, 1}};
  EXPECT_TRUE(ValidateClaim(cube, {"tpu-a", "v4-16", "2x2x2", 1}).ok());
  Status gen = ValidateClaim(cube, V5p16(1));
  EXPECT_EQ(gen.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(gen, "discovered.acceleratorType")) << gen.message();
}

}  // namespace
}  // namespace tessera
