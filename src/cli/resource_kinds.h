// The kinds the resource commands name, and their API paths: `get jobs`, `wait job`,
// `delete clusterqueue` all resolve through KindPath.
#pragma once

#include <string>

namespace tessera::cli {

// The API collection of a kind as users write it ("job", "jobs", "trainjob", "svc", "cq"...):
// "jobs", "services", "hosts", "events", "clusterqueues", "localqueues", "priorityclasses",
// "slicereservations".
// Throws CommandError listing the kinds for anything else.
std::string KindPath(const std::string& kind);
// The object prefix of a collection, as events and `-o name` print it: "trainjob", "service".
std::string KindObjectPrefix(const std::string& path);
// Every kind name users may type, space-separated (for shell completion).
std::string KindNames();
std::string Lower(std::string s);

}  // namespace tessera::cli
