// The prefill/decode part of the Service manifest (docs/serving.md "Prefill and decode roles"):
// a role's `disaggregation: prefill | decode`, the Service's `spec.kvTransfer {threshold,
// timeout, hold}` and a prefill role's `autoscaling.targetQueuedPromptTokens`. ParseService
// (service_manifest.cc) calls it once every role is parsed; errors are InvalidArgument naming
// the field (422 at the API), like the rest of the manifest.
//
// Thread-safety: stateless.
#pragma once

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "workload/service.h"

namespace tessera::codec {

// `spec_json` is the document's spec (with `roles`, or one role's fields directly). Sets each
// role's kv_role and kv_transfer and a prefill role's autoscaling signal in `spec`.
Status ParseDisaggregation(const nlohmann::json& spec_json, ServiceSpec& spec);

// The stored form of the same fields, added to ServiceSpecJson's output.
void AddDisaggregationJson(const ServiceSpec& spec, nlohmann::json& spec_json);

}  // namespace tessera::codec
