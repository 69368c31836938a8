// The Service manifest (kind: Service, tessera/v1): validation of the document a user applies
// into the typed ServiceSpec (workload/service.h). Errors are InvalidArgument whose message
// starts with the field path ("spec.roles[1].autoscaling.minReplicas: ...") and says what
// would be valid; the API answers them with 422. Unknown fields are errors.
//
// The document (docs/serving.md lists every field and default):
//   metadata: {name, queue, labels}                        queue as in TrainJob
//   spec: {priority, roles: [role...]}                     priority as in TrainJob
//   or the fields of a single role directly under spec (its name is "server").
//   role: {name, accelerator, topology, command, env, workingDir, terminationGracePeriod, port,
//          replicas | autoscaling {minReplicas, maxReplicas, targetOngoingRequests,
//          upscaleDelay, downscaleDelay, lookback}, maxOngoingRequests,
//          readiness {path, startupGrace, period, timeout}, rollout {maxSurge, maxUnavailable}}
//
// Thread-safety: stateless functions.
#pragma once

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "workload/service.h"

namespace tessera::codec {

inline constexpr const char* kServiceKind = "Service";

Result<ServiceSpec> ParseService(const nlohmann::json& doc);

}  // namespace tessera::codec
