// spec.warmStart of a TrainJob, and of a Service's template (spec, or each of spec.roles[]):
// the modules the workload's restarts should find already imported.
//
//   spec:
//     warmStart: {preload: [torch]}
//
// A TrainJob's workers get TESSERA_WARM_PRELOAD=torch in their environment; each agent then
// keeps one interpreter per such job with those modules imported, in the job's environment,
// for the job's next attempt on that host (src/agent/job_warm_pools.h, docs/agent-protocol.md
// "Warm workers"). A Service role keeps the list (ServiceRoleSpec::warm_preload) and the head
// sets the same variable in its groups' assignments (docs/serving.md "Warm start"). The command
// must be a Python interpreter with a script or -m module; any other command starts cold as
// before.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"

namespace tessera::codec {

inline constexpr char kWarmPreloadEnv[] = "TESSERA_WARM_PRELOAD";

// The modules of `obj`.warmStart.preload, empty when there is no warmStart; `path` names `obj`
// in errors ("spec", "spec.roles[1]"). InvalidArgument naming the field and the fix otherwise.
Result<std::vector<std::string>> ParseWarmPreload(const nlohmann::json& obj,
                                                  const std::string& path);

// Reads spec.warmStart from `spec` (the document's spec object) when present and sets
// TESSERA_WARM_PRELOAD in `env`. InvalidArgument naming the field and the fix otherwise.
Status ParseWarmStart(const nlohmann::json& spec, std::map<std::string, std::string>& env);

}  // namespace tessera::codec
