// Manifests: the documents users send (YAML or JSON) and their validation.
//
// Every resource is a Kubernetes-style document: apiVersion tessera/v1, kind, metadata, spec,
// status. Parsing turns YAML or JSON text into JSON; validation checks one kind's document and
// returns either its typed spec or an InvalidArgument whose message starts with the field path
// ("spec.topology: ...") and says what would be valid. Unknown fields are errors, so a typo is
// never silently ignored.
//
// Thread-safety: stateless functions.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "admission/model.h"
#include "common/json_limits.h"
#include "common/status.h"
#include "topology/topology.h"
#include "workload/train_job.h"

namespace tessera::codec {

using Json = nlohmann::json;

inline constexpr const char* kApiVersion = "tessera/v1";

// What ParseDocument accepts at most. Larger or deeper documents are refused before they are
// built (tessera's documents are a few KiB and 5 levels deep).
inline constexpr size_t kMaxDocumentBytes = size_t{1} << 20;
inline constexpr size_t kMaxDocumentValues = 100'000;  // scalars, lists and mappings

// Parses one YAML or JSON document (JSON is YAML, but JSON text gets the stricter JSON
// parser's error messages). Errors name the line and column, or the field path. Refused, with
// an InvalidArgument starting "body: ": malformed text; more than kMaxDocumentBytes; more than
// kMaxDocumentValues values; nesting deeper than kMaxJsonDepth (64, common/json_limits.h); a key
// repeated in one mapping (JSON as YAML); in YAML, anchors and aliases (refused before anything
// is expanded: a few hundred bytes of nested aliases would expand to gigabytes), more than one
// document, mapping keys that read as numbers, booleans or null (quote them), and scalars or
// keys that are not UTF-8 (JSON text that is not UTF-8 is malformed JSON).
Result<Json> ParseDocument(std::string_view text);

// A name usable in URLs and as a host label: 1-63 characters of [a-z0-9-], starting and ending
// with a letter or digit (DNS-1123 label).
Status ValidateName(std::string_view field, std::string_view name);

// TrainJobSpec and HostLossPolicy are the workload layer's types (workload/train_job.h).
// Validates a TrainJob document. Status fields are ignored (they belong to the server).
Result<TrainJobSpec> ParseTrainJob(const Json& doc);

// The admission resources (docs/admission.md "Resources" and "In the head"). Each decodes the
// document into the admission model's struct and runs its Validate; errors name the document
// field ("spec.quotas[0].lendingLimit: ...", "metadata.name: ...").
//   ClusterQueue: metadata.name; spec: cohort, quotas[] {resource (google.com/tpu, the
//     default, with generation; nvidia.com/gpu with gpuSystem), nominalQuota, borrowingLimit,
//     lendingLimit}, queueingStrategy, preemption {withinClusterQueue,
//     reclaimWithinCohort, borrowWithinCohort {policy, maxPriorityThreshold}},
//     fairSharing {weight}.
//   LocalQueue: metadata.name; spec.clusterQueue.
//   PriorityClass: metadata.name; value (as in Kubernetes), optional description.
Result<ClusterQueueSpec> ParseClusterQueue(const Json& doc);
Result<LocalQueueSpec> ParseLocalQueue(const Json& doc);
Result<PriorityClass> ParsePriorityClass(const Json& doc);

// The kind of a document after checking apiVersion: one of kKinds, or InvalidArgument naming
// apiVersion or kind.
inline constexpr const char* kKinds =
    "TrainJob, Service, ClusterQueue, LocalQueue, PriorityClass, SliceReservation";
Result<std::string> DocumentKind(const Json& doc);
// The same checks, but any kind name is returned: for a head whose registered workload kinds
// (controller/workload_kind.h) decide which it knows.
Result<std::string> DocumentKindName(const Json& doc);

// Parses a duration: "30s", "1500ms", "2m", "1h" or a bare number of seconds.
Result<int64_t> ParseDurationMs(std::string_view field, const Json& value);

}  // namespace tessera::codec
