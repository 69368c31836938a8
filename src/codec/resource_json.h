// Resource documents: the typed resources (TrainJob, Host, Event) as the JSON the API serves
// and the store keeps, and back. Decoding a stored document fails with kInternal naming the
// object and the field, never throws.
//
// Part of the `tessera_codec` library (src/codec/README.md): codecs only, no HTTP. It sits
// below the controller (the store keeps API documents) and above the types it encodes.
//
// Thread-safety: stateless functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"
#include "inventory/host_spec.h"
#include "workload/event.h"
#include "workload/train_job.h"

namespace tessera::codec {

using Json = nlohmann::json;

inline constexpr const char* kTrainJobKind = "TrainJob";
inline constexpr const char* kHostKind = "Host";
inline constexpr const char* kEventKind = "Event";

// The full document: metadata, the spec as the user wrote it, the status. `now_ms` is the
// end of the wall time used for the recovery figures of an unfinished job.
Json TrainJobJson(const TrainJob& job, int64_t now_ms);
// A stored TrainJob document back to the job. The runtime part (TrainJobRuntime) is left
// default but for the store version, which the caller sets.
Result<TrainJob> TrainJobFromJson(const Json& doc);

// `owner`: the name of the job holding the host's chips, or "".
Json HostJson(const HostSpec& spec, const HostStatus& status, int64_t version,
              const std::string& owner);
struct StoredHost {
  HostSpec spec;
  HostStatus status;
};
Result<StoredHost> HostFromJson(const Json& doc);

// An event's object as documents show it: its namespace apart ("default" for a cluster-wide
// object), the object "kind/name" without it.
struct EventObject {
  std::string namespace_name;
  std::string object;
};
EventObject SplitEventObject(const std::string& object);

Json EventJson(const Event& event);
Result<Event> EventFromJson(const Json& doc);

Json AttemptJson(const AttemptRecord& attempt);
AttemptRecord AttemptFromJson(const Json& doc);

}  // namespace tessera::codec
