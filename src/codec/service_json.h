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
#include <string_view>

#include "common/status.h"
#include "workload/service.h"

namespace tessera::codec {

// The spec in manifest form: {"priority", "roles": [...]}.
nlohmann::json ServiceSpecJson(const ServiceSpec& spec);
// The full document: apiVersion, kind, metadata {name, uid, resourceVersion,
// creationTimestampMs, queue, labels}, spec, status (with endpoints, and per role the router's
// last report as "traffic": head memory, which ServiceFromJson does not read back). Each
// endpoint carries `endpoint_scheme`: "https" when the head gives replica leaders a certificate
// (docs/serving.md "TLS to replicas"), "http" otherwise.
nlohmann::json ServiceJson(const Service& service, std::string_view endpoint_scheme = "http");
// A stored document back to the service; the runtime part is left default but for the store
// version, which the caller sets.
Result<Service> ServiceFromJson(const nlohmann::json& doc);

// A router's load report (POST /api/v1/services/{name}/load, docs/serving-router.md):
// ongoingRequests (required, a number >= 0), queued, perReplica, and the router's counters
// since it started: requests, latencySecondsSum, latencyBuckets {upperBounds, cumulative}.
// InvalidArgument naming the field for a wrong one; at_ms is left 0 for the caller to stamp.
Result<RouterTraffic> RouterTrafficFromJson(const nlohmann::json& report);
// The same report as the head serves it in status.roles[].traffic, with atMs.
nlohmann::json RouterTrafficJson(const RouterTraffic& traffic);

}  // namespace tessera::codec
