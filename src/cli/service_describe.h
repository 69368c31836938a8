// The settings line of `tessera describe service` for an autoscaled role: what the Service's
// stored spec says (codec/service_json.cc), each default filled in as the autoscaler takes it
// (workload/autoscaler.h), so a user sees the bounds, the start size and the targets the
// decisions on the next line come from. Pure: renders JSON into text.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace tessera::cli {

// `role`: one of the stored spec's roles. "" when it has no `autoscaling` (a fixed size);
// else, e.g., "min 1, max 4, initial 1, target 2 ongoing requests per replica, TTFT 2000 ms,
// TPOT 50 ms, upscale delay 15000ms, downscale delay 300000ms, lookback 60000ms".
std::string AutoscalingSettings(const nlohmann::json& role);

}  // namespace tessera::cli
