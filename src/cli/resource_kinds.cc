#include "cli/resource_kinds.h"

#include <cctype>
#include <utility>
#include <vector>

#include "cli/commands.h"

namespace tessera::cli {
namespace {

struct KindNamesOf {
  const char* path;
  const char* object;
  std::vector<const char*> names;
};

const std::vector<KindNamesOf>& Kinds() {
  static const std::vector<KindNamesOf> kKinds = {
      {"jobs", "trainjob", {"jobs", "job", "trainjobs", "trainjob"}},
      {"services", "service", {"services", "service", "svc"}},
      {"hosts", "host", {"hosts", "host"}},
      {"events", "event", {"events", "event"}},
      {"clusterqueues", "clusterqueue", {"queues", "queue", "clusterqueues", "clusterqueue", "cq"}},
      {"localqueues", "localqueue", {"localqueues", "localqueue", "lq"}},
      {"priorityclasses", "priorityclass", {"priorityclasses", "priorityclass", "pc"}},
      {"slicereservations",
       "slicereservation",
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
  throw CommandError("kind '" + kind +
                     "' is unknown; valid: jobs, services, hosts, events, queues (clusterqueues), "
                     "localqueues, priorityclasses, slicereservations (sr)");
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

}  // namespace tessera::cli
