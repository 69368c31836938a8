#include "cli/reservation_commands.h"

#include <cstdio>
#include <iostream>

#include "cli/client.h"
#include "cli/commands.h"

namespace tessera::cli {

using Json = nlohmann::json;

bool IsReservationKind(const std::string& kind) {
  return kind == "slicereservation" || kind == "slicereservations" || kind == "sr" ||
         kind == "reservation" || kind == "reservations";
}

void PrintReservations(const Json& items, bool wide, bool header) {
  if (header)
    std::printf("%-24s %-8s %-18s %-7s %-6s %-8s %s\n", "NAME", "PHASE", "SHAPE", "SLICES", "HOSTS",
                "USERS", wide ? "REASON: MESSAGE" : "REASON");
  for (const Json& r : items) {
    const Json& sp = r["spec"];
    const Json& st = r["status"];
    const std::string shape = sp.value("accelerator", "") + " " + sp.value("topology", "");
    std::string reason = st.value("reason", "");
    if (wide) reason += ": " + st.value("message", "");
    std::printf("%-24s %-8s %-18s %-7s %-6zu %-8zu %s\n", r["metadata"].value("name", "").c_str(),
                st.value("phase", "").c_str(), shape.c_str(),
                (std::to_string(st.value("slices", Json::array()).size()) + "/" +
                 std::to_string(sp.value("slices", 1)))
                    .c_str(),
                st.value("hosts", Json::array()).size(), st.value("users", Json::array()).size(),
                reason.c_str());
  }
}

void PrintWouldHelpTable(const Json& would_help, const char* kind_column) {
  std::printf("  %-24s %-16s %-9s %-6s %s\n", kind_column, "CLUSTERQUEUE", "PRIORITY", "CHIPS",
              "PREEMPTIBLE");
  for (const Json& b : would_help)
    std::printf("  %-24s %-16s %-9d %-6lld %s\n", b.value("name", "").c_str(),
                b.value("clusterQueue", "").c_str(), b.value("priority", 0),
                static_cast<long long>(b.value("chips", int64_t{0})),
                b.value("preemptible", false) ? "yes" : "no");
}

bool WaitsForMissingLocalQueue(const Json& status) {
  return status.value("pendingReason", "") == "LocalQueueNotFound" ||
         status.value("reason", "") == "LocalQueueNotFound";
}

void PrintLocalQueueFix(net::HttpClient& client, const std::string& queue, const std::string& label,
                        const std::string& namespace_name) {
  // A workload uses only its own namespace's LocalQueues (docs/security.md "Namespaces").
  const bool elsewhere = namespace_name != "default";
  const std::string there = elsewhere ? " with metadata.namespace: " + namespace_name : "";
  const Json queues =
      Call(client, net::Method::kGet,
           "/api/v1/localqueues" + (elsewhere ? "?namespace=" + namespace_name : ""));
  const Json items = queues.value("items", Json::array());
  const std::string indent(label.size(), ' ');
  if (items.empty()) {
    std::cout << label << "no LocalQueue exists" << (elsewhere ? " in namespace " : "")
              << (elsewhere ? namespace_name : "") << ": apply one named " << queue << there
              << " (kind: LocalQueue, spec.clusterQueue: NAME)\n";
    return;
  }
  std::cout << label
            << "set metadata.queue: NAME to one of these LocalQueues (delete it and apply it "
               "again):\n";
  for (const Json& q : items)
    std::cout << indent << "  " << q.value("metadata", Json::object()).value("name", "")
              << " (ClusterQueue " << q.value("spec", Json::object()).value("clusterQueue", "")
              << ")\n";
  std::cout << indent << "or apply a LocalQueue named " << queue << there << "\n";
}

void DescribeReservation(net::HttpClient& client, const std::string& name,
                         const std::string& in_namespace) {
  Json r = Call(client, net::Method::kGet, "/api/v1/slicereservations/" + name + in_namespace);
  const Json& sp = r["spec"];
  const Json& st = r["status"];
  const std::string phase = st.value("phase", "");
  std::cout << "Name:        " << name << "\n"
            << "Queue:       " << r["metadata"].value("queue", "(default)") << "\n"
            << "Priority:    " << sp.value("priority", "(none)") << "\n"
            << "Accelerator: " << sp.value("accelerator", "") << " " << sp.value("topology", "")
            << " x " << sp.value("slices", 1) << " slice(s)\n"
            << "TTL:         " << (sp.contains("ttl") ? sp["ttl"].dump() : "(until deleted)")
            << "\n"
            << "Phase:       " << phase << "\n"
            << "Reason:      " << st.value("reason", "") << "\n"
            << "Message:     " << st.value("message", "") << "\n";
  if (phase == "Pending") {
    const int position = st.value("queuePosition", 0);
    std::cout << "Position:    " << (position > 0 ? std::to_string(position) : "-") << "\n";
    const Json help = st.value("wouldHelp", Json::array());
    if (WaitsForMissingLocalQueue(st)) {
      PrintLocalQueueFix(client, r["metadata"].value("queue", "default"),
                         "Fix:         ", r["metadata"].value("namespace", "default"));
    } else if (help.empty()) {
      std::cout << "Would help:  nothing running (wait for the reason above to clear)\n";
    } else {
      std::cout << "Would help (these running workloads finishing or being preempted):\n";
      PrintWouldHelpTable(help, "WORKLOAD");
    }
  }
  if (st.value("expiresAtMs", int64_t{0}) > 0)
    std::cout << "Expires at:  " << st["expiresAtMs"].get<int64_t>() << " ms (head clock)\n";
  if (!st.value("slices", Json::array()).empty()) {
    std::cout << "Slices:\n";
    for (const Json& s : st["slices"]) {
      std::cout << "  " << s.value("name", "") << ":";
      for (const Json& h : s["hosts"]) std::cout << " " << h.get<std::string>();
      std::cout << "\n";
    }
  }
  if (!st.value("lostSlices", Json::array()).empty()) {
    std::cout << "Lost slices (docs/reservations.md, \"A lost host\"):\n";
    for (const Json& s : st["lostSlices"]) {
      std::cout << "  " << s.value("name", "") << ": host " << s.value("lostHost", "") << " ("
                << s.value("why", "") << "); hosts "
                << (s.value("held", false) ? "held until its workloads stop:" : "released:");
      for (const Json& h : s["hosts"]) std::cout << " " << h.get<std::string>();
      std::cout << "\n";
    }
  }
  std::cout << "Users:";
  const Json users = st.value("users", Json::array());
  if (users.empty()) std::cout << " (none)";
  for (const Json& u : users) std::cout << " " << u.get<std::string>();
  std::cout << "\n";
  Json events = Call(client, net::Method::kGet, "/api/v1/events" + in_namespace);
  std::cout << "Events:\n";
  for (const Json& e : events["items"])
    if (e.value("object", "") == "slicereservation/" + name)
      std::cout << "  " << e.value("type", "") << "  " << e.value("reason", "") << "  "
                << e.value("message", "") << "\n";
}

}  // namespace tessera::cli
