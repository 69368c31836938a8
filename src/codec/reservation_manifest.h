// SliceReservation documents (docs/reservations.md): the manifest users apply, validated into
// SliceReservationSpec (workload/reservation.h), and the full document the API serves and the
// store keeps, and back.
//
//   apiVersion: tessera/v1
//   kind: SliceReservation
//   metadata: {name, queue (LocalQueue), labels}
//   spec: {accelerator, topology, slices (default 1), priority, ttl}
//
// The queue, the priority and the number of slices use TrainJob's fields (metadata.queue,
// spec.priority, spec.slices); spec.queue, spec.queueName, spec.priorityClassName and
// spec.numSlices (this kind's name for spec.slices before it was renamed) get a 422 pointing at
// them. Errors are InvalidArgument naming the field ("spec.ttl: ...").
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

// The spec as stored and served: canonical accelerator and topology, slices, and only the
// optional fields that were given (priority; ttl as written and as ttlSeconds).
nlohmann::json SliceReservationSpecJson(const SliceReservationSpec& spec,
                                        const nlohmann::json& written);

// The full document (status.users as the controller last set them).
nlohmann::json SliceReservationJson(const SliceReservation& r);
// A stored document back (the version is the caller's to set); kInternal naming the object.
// A document stored before the rename (spec.numSlices) loads as if it said spec.slices, and its
// served spec says slices (MigrateSliceReservationSpec).
Result<SliceReservation> SliceReservationFromJson(const nlohmann::json& doc);

// Rewrites a stored spec of before the rename, spec.numSlices, to spec.slices in place; true if
// it changed anything. Heads before the rename wrote numSlices into the store.
bool MigrateSliceReservationSpec(nlohmann::json& spec);

}  // namespace tessera::codec
