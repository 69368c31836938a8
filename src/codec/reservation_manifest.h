// SliceReservation documents (docs/reservations.md): the manifest users apply, validated into
// SliceReservationSpec (workload/reservation.h), and the full document the API serves and the
// store keeps, and back.
//
//   apiVersion: tessera/v1
//   kind: SliceReservation
//   metadata: {name, queue (LocalQueue), labels}
//   spec: {accelerator, topology, numSlices (default 1), priority, ttl}
//
// The queue and the priority use TrainJob's fields (metadata.queue, spec.priority); spec.queue,
// spec.queueName and spec.priorityClassName get a 422 pointing at them. Errors are
// InvalidArgument naming the field ("spec.ttl: ...").
//
// Thread-safety: stateless functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"
#include "workload/reservation.h"

namespace tessera::codec {

inline constexpr const char* kSliceReservationKind = "SliceReservation";

Result<SliceReservationSpec> ParseSliceReservation(const nlohmann::json& doc);

// The spec as stored and served: canonical accelerator and topology, numSlices, and only the
// optional fields that were given (priority; ttl as written and as ttlSeconds).
nlohmann::json SliceReservationSpecJson(const SliceReservationSpec& spec,
                                        const nlohmann::json& written);

// The full document (status.users as the controller last set them).
nlohmann::json SliceReservationJson(const SliceReservation& r);
// A stored document back (the version is the caller's to set); kInternal naming the object.
Result<SliceReservation> SliceReservationFromJson(const nlohmann::json& doc);

}  // namespace tessera::codec
