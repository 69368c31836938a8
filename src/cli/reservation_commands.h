// The SliceReservation parts of the resource commands (docs/reservations.md): the table of
// `tessera get slicereservations` (short name `sr`) and `describe slicereservation` (called
// from resource_commands.cc, which owns those subcommands).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "net/http_client.h"

namespace tessera::cli {

// The names users may type for the kind in describe and delete.
bool IsReservationKind(const std::string& kind);
void PrintReservations(const nlohmann::json& items, bool wide, bool header = true);
// Phase, reason and message (while Pending: the admission reason, place in line and what would
// let it in, as `explain` gives for jobs), the held slices and hosts, the ttl, the users, events.
// `in_namespace`: "?namespace=NS", or "" for default (cli/client.h NamespaceQuery).
void DescribeReservation(net::HttpClient& client, const std::string& name,
                         const std::string& in_namespace);
// The rows of a pending workload's status.wouldHelp (the running workloads whose finishing or
// preemption would let it in) as an indented table; `kind_column` heads the name column ("JOB"
// for `explain job`, "WORKLOAD" here).
void PrintWouldHelpTable(const nlohmann::json& would_help, const char* kind_column);
// Whether a workload's status says it waits for a LocalQueue that does not exist.
bool WaitsForMissingLocalQueue(const nlohmann::json& status);
// Its fix, for `explain` and `describe`: set metadata.queue to one of the LocalQueues the head
// lists (printed), or apply a LocalQueue named `queue` (its metadata.queue, or "default").
// `label` is the first column, padded as the caller's other rows ("Fix:       "). The
// LocalQueues are those of `namespace_name`, the workload's: it may use no other.
void PrintLocalQueueFix(net::HttpClient& client, const std::string& queue, const std::string& label,
                        const std::string& namespace_name = "default");

}  // namespace tessera::cli
