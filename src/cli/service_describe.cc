#include "cli/service_describe.h"

#include <sstream>

#include "workload/autoscaler.h"

namespace tessera::cli {

std::string AutoscalingSettings(const nlohmann::json& role) {
  if (!role.is_object() || !role.contains("autoscaling") || !role["autoscaling"].is_object())
    return "";
  const nlohmann::json& a = role["autoscaling"];
  AutoscalerConfig config;  // what the spec sets; the autoscaler's own defaults for the rest
  config.min_replicas = a.value("minReplicas", config.min_replicas);
  config.initial_replicas = a.value("initialReplicas", config.initial_replicas);
  config.target_ongoing_requests = a.value("targetOngoingRequests", 0.0);
  config.target_ttft_ms = a.value("targetTTFTMs", 0.0);
  config.target_tpot_ms = a.value("targetTPOTMs", 0.0);
  std::ostringstream out;
  out << "min " << config.min_replicas << ", max " << a.value("maxReplicas", 0) << ", initial "
      << AutoscaleInitialReplicas(config) << ", target ";
  if (a.contains("targetQueuedPromptTokens"))  // a prefill role (codec/service_disagg_manifest)
    out << a.value("targetQueuedPromptTokens", 0.0) << " queued prompt tokens";
  else
    out << AutoscaleTarget(config, role.value("maxOngoingRequests", 0)) << " ongoing requests";
  out << " per replica, TTFT " << AutoscaleTtftTarget(config) << " ms, TPOT "
      << AutoscaleTpotTarget(config) << " ms, upscale delay " << a.value("upscaleDelay", "-")
      << ", downscale delay " << a.value("downscaleDelay", "-") << ", lookback "
      << a.value("lookback", "-");
  return out.str();
}

}  // namespace tessera::cli
