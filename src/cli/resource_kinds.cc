#include "cli/resource_kinds.h"

#include <cctype>
#include <utility>

#include "cli/commands.h"

namespace tessera::cli {
namespace {

struct KindNamesOf {
  const char* path;
  const char* object;
  bool get_route;  // GET /api/v1/PATH/NAME exists
  std::vector<const char*> names;
};

const std::vector<KindNamesOf>& Kinds() {
  static const std::vector<KindNamesOf> kKinds = {
      {"jobs", "trainjob", true, {"jobs", "job", "trainjobs", "trainjob"}},
      {"services", "service", true, {"services", "service", "svc"}},
      {"hosts", "host", false, {"hosts", "host"}},
      {"events", "event", false, {"events", "event"}},
      {"clusterqueues",
       "clusterqueue",
       false,
       {"clusterqueues", "clusterqueue", "queues", "queue", "cq"}},
      {"localqueues", "localqueue", false, {"localqueues", "localqueue", "lq"}},
      {"priorityclasses", "priorityclass", false, {"priorityclasses", "priorityclass", "pc"}},
      {"secrets", "secret", true, {"secrets", "secret"}},
      {"slicereservations",
       "slicereservation",
       true,
       {"slicereservations", "slicereservation", "sr", "reservations", "reservation"}},
  };
  return kKinds;
}

}  // namespace

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string KindPath(const std::string& kind) {
  const std::string k = Lower(kind);
  for (const auto& entry : Kinds())
    for (const char* n : entry.names)
      if (k == n) return entry.path;
  throw CommandError("kind '" + kind + "' is unknown; valid: " + KindHelp());
}

std::string KindObjectPrefix(const std::string& path) {
  for (const auto& entry : Kinds())
    if (path == entry.path) return entry.object;
  return path;
}

std::string KindNames() {
  std::string out;
  for (const auto& entry : Kinds())
    for (const char* n : entry.names) out += (out.empty() ? "" : " ") + std::string(n);
  return out;
}

std::string KindHelp() {
  std::string out;
  for (const auto& entry : Kinds()) {
    std::string aliases;
    for (const char* n : entry.names)
      if (std::string(n) != entry.path) aliases += (aliases.empty() ? "" : ", ") + std::string(n);
    out += (out.empty() ? "" : ", ") + std::string(entry.path) + " (" + aliases + ")";
  }
  return out;
}

bool KindHasGetRoute(const std::string& path) {
  for (const auto& entry : Kinds())
    if (path == entry.path) return entry.get_route;
  return false;
}

NamedItems SelectNamed(const nlohmann::json& list_items, const std::vector<std::string>& names) {
  NamedItems out;
  for (const std::string& name : names) {
    bool found = false;
    if (list_items.is_array())
      for (const nlohmann::json& item : list_items)
        if (item.is_object() && item.contains("metadata") && item["metadata"].is_object() &&
            item["metadata"].value("name", "") == name) {
          out.found.push_back(item);
          found = true;
          break;
        }
    if (!found) out.missing.push_back(name);
  }
  return out;
}

std::string NotFoundMessage(const std::string& path, const std::vector<std::string>& missing) {
  std::string out;
  for (const std::string& name : missing)
    out += (out.empty() ? "" : "; ") + KindObjectPrefix(path) + " \"" + name + "\" not found";
  return out;
}

}  // namespace tessera::cli
