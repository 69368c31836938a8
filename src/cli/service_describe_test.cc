#include "cli/service_describe.h"

#include <gtest/gtest.h>

namespace tessera::cli {
namespace {

using Json = nlohmann::json;

// Roles as the stored spec has them (codec/service_json.cc, RoleSpecJson).
TEST(AutoscalingSettings, ShowsWhatTheSpecSetsAndTheAutoscalersDefaultsForTheRest) {
  const Json role = Json::parse(R"({
    "name": "server", "maxOngoingRequests": 8,
    "autoscaling": {"minReplicas": 1, "maxReplicas": 4, "upscaleDelay": "1000ms",
                    "downscaleDelay": "4000ms", "lookback": "2000ms"}})");
  EXPECT_EQ(AutoscalingSettings(role),
            "min 1, max 4, initial 1, target 4 ongoing requests per replica, TTFT 2000 ms, "
            "TPOT 50 ms, upscale delay 1000ms, downscale delay 4000ms, lookback 2000ms");
}

TEST(AutoscalingSettings, ShowsTheSetInitialSizeAndTargets) {
  const Json role = Json::parse(R"({
    "name": "server", "maxOngoingRequests": 8,
    "autoscaling": {"minReplicas": 0, "maxReplicas": 6, "initialReplicas": 3,
                    "targetOngoingRequests": 1.5, "targetTTFTMs": 500, "targetTPOTMs": 20,
                    "upscaleDelay": "15000ms", "downscaleDelay": "300000ms",
                    "lookback": "60000ms"}})");
  EXPECT_EQ(AutoscalingSettings(role),
            "min 0, max 6, initial 3, target 1.5 ongoing requests per replica, TTFT 500 ms, "
            "TPOT 20 ms, upscale delay 15000ms, downscale delay 300000ms, lookback 60000ms");
}

TEST(AutoscalingSettings, APrefillRoleTargetsQueuedPromptTokens) {
  const Json role = Json::parse(R"({
    "name": "prefill", "maxOngoingRequests": 8, "disaggregation": "prefill",
    "autoscaling": {"minReplicas": 1, "maxReplicas": 3, "targetQueuedPromptTokens": 4096,
                    "upscaleDelay": "15000ms", "downscaleDelay": "300000ms",
                    "lookback": "60000ms"}})");
  EXPECT_NE(AutoscalingSettings(role).find("target 4096 queued prompt tokens per replica"),
            std::string::npos)
      << AutoscalingSettings(role);
}

TEST(AutoscalingSettings, AFixedSizeRoleHasNone) {
  EXPECT_EQ(AutoscalingSettings(Json::parse(R"({"name": "server", "replicas": 2})")), "");
  EXPECT_EQ(AutoscalingSettings(Json()), "");
}

}  // namespace
}  // namespace tessera::cli
