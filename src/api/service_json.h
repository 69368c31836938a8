// Service documents: the typed Service (workload/service.h) as the JSON the API serves, the
// store keeps and the watch stream carries, and back. The spec is written in manifest form
// (every role under spec.roles, durations as "Nms"), so a stored document re-validates through
// ParseService; the status carries the contract's fields (docs/serving.md) plus the lifecycle's
// own bookkeeping (owner ids, incarnations, backoff, hosts still to confirm a stop), which is
// what lets a restarted head carry on. Decoding a stored document fails with kInternal naming
// the service and the field, never throws.
//
// Thread-safety: stateless functions.
#pragma once

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "workload/service.h"

namespace tessera::api {

// The spec in manifest form: {"priority", "roles": [...]}.
nlohmann::json ServiceSpecJson(const ServiceSpec& spec);
// The full document: apiVersion, kind, metadata {name, uid, resourceVersion,
// creationTimestampMs, queue, labels}, spec, status (with endpoints).
nlohmann::json ServiceJson(const Service& service);
// A stored document back to the service; the runtime part is left default but for the store
// version, which the caller sets.
Result<Service> ServiceFromJson(const nlohmann::json& doc);

}  // namespace tessera::api
