// The kinds the resource commands name, and their API paths: `get jobs`, `wait job`,
// `delete clusterqueue` all resolve through KindPath. Pure (no I/O): cli_core_test.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tessera::cli {

// The API collection of a kind as users write it ("job", "jobs", "trainjob", "svc", "cq"...):
// "jobs", "services", "hosts", "events", "clusterqueues", "localqueues", "priorityclasses",
// "slicereservations", "secrets".
// Throws CommandError listing the kinds for anything else.
std::string KindPath(const std::string& kind);
// The object prefix of a collection, as events and `-o name` print it: "trainjob", "service".
std::string KindObjectPrefix(const std::string& path);
// Every kind name users may type, space-separated (for shell completion).
std::string KindNames();
// Every kind for help texts: "jobs (job, trainjob), services (service, svc), ...".
std::string KindHelp();
// Whether the head serves one object of the collection at /api/v1/PATH/NAME (jobs, services,
// slicereservations, secrets); the others are found in their list.
bool KindHasGetRoute(const std::string& path);
std::string Lower(std::string s);

// `tessera get KIND NAME...`: the items of `list_items` named in `names`, in the order of
// `names` (a name given twice is printed twice, as kubectl does), and the names not found.
struct NamedItems {
  nlohmann::json found = nlohmann::json::array();
  std::vector<std::string> missing;
};
NamedItems SelectNamed(const nlohmann::json& list_items, const std::vector<std::string>& names);
// What `get` says for names it did not find, "; "-separated, in kubectl's words:
// `trainjob "x" not found`.
std::string NotFoundMessage(const std::string& path, const std::vector<std::string>& missing);

}  // namespace tessera::cli
