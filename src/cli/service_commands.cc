#include "cli/service_commands.h"

#include <cstdio>
#include <iostream>

#include "cli/client.h"
#include "cli/service_describe.h"

namespace tessera::cli {
namespace {

using Json = nlohmann::json;

std::string RoleSummary(const Json& role) {
  return role.value("name", "") + " " + std::to_string(role.value("readyReplicas", 0)) + "/" +
         std::to_string(role.value("desiredReplicas", 0));
}

std::string Mean(double sum, double count, double scale, const char* unit) {
  if (count <= 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", sum / count * scale, unit);
  return buf;
}

// The roles side by side: kind, shape, replicas, the router's load, mean TTFT (of the streams
// the role prefilled), mean time per output token (of those it decoded) and mean latency.
// A role's traffic is the router's last load report (status.roles[].traffic).
void PrintRoleTable(const Json& s) {
  std::printf("  %-12s %-8s %-12s %-10s %-8s %-7s %-14s %-11s %-11s %s\n", "ROLE", "KIND", "SHAPE",
              "READY/WANT", "ONGOING", "QUEUED", "QUEUED-TOKENS", "TTFT-MEAN", "TPOT-MEAN",
              "LATENCY-MEAN");
  for (const Json& role : s["status"].value("roles", Json::array())) {
    const std::string rn = role.value("name", "");
    Json spec = Json::object();
    for (const Json& r : s["spec"].value("roles", Json::array()))
      if (r.value("name", "") == rn) spec = r;
    const Json t = role.value("traffic", Json::object());
    const std::string kind = spec.value("disaggregation", "-");
    const std::string shape = spec.value("accelerator", "") + " " + spec.value("topology", "");
    const std::string ready = std::to_string(role.value("readyReplicas", 0)) + "/" +
                              std::to_string(role.value("desiredReplicas", 0));
    char ongoing[16], tokens[24];
    std::snprintf(ongoing, sizeof ongoing, "%.0f", t.value("ongoingRequests", 0.0));
    std::snprintf(tokens, sizeof tokens, "%.0f", t.value("queuedPromptTokens", 0.0));
    std::printf(
        "  %-12s %-8s %-12s %-10s %-8s %-7d %-14s %-11s %-11s %s\n", rn.c_str(), kind.c_str(),
        shape.c_str(), ready.c_str(), ongoing, t.value("queued", 0),
        kind == "prefill" ? tokens : "-",
        Mean(t.value("ttftSecondsSum", 0.0), t.value("ttftCount", 0.0), 1000, "ms").c_str(),
        Mean(t.value("tpotSecondsSum", 0.0), t.value("tpotCount", 0.0), 1000, "ms").c_str(),
        Mean(t.value("latencySecondsSum", 0.0), t.value("requests", 0.0), 1000, "ms").c_str());
  }
}

// A disaggregated Service: the KV transfer settings and, from the decode role's traffic, how
// the router paired prefill and decode replicas and where decode prefilled.
void PrintDisaggregation(const Json& s) {
  const Json kt = s["spec"].value("kvTransfer", Json());
  if (!kt.is_object()) return;
  std::cout << "Disaggregation: prompts over " << kt.value("threshold", 0)
            << " tokens prefilled by the prefill role, KV transfer timeout "
            << kt.value("timeout", "") << ", unpulled KV freed after " << kt.value("hold", "")
            << "\n";
  for (const Json& role : s["status"].value("roles", Json::array())) {
    const Json d = role.value("traffic", Json::object()).value("disagg", Json());
    if (!d.is_object()) continue;
    auto n = [&d](const char* key) { return d.value(key, uint64_t{0}); };
    const uint64_t paired = n("pairedSameSlice") + n("pairedOtherSlice");
    std::printf(
        "  Pairing: %llu same slice, %llu other slice (%s on the same slice), %llu with "
        "no prefill replica\n",
        static_cast<unsigned long long>(n("pairedSameSlice")),
        static_cast<unsigned long long>(n("pairedOtherSlice")),
        paired == 0 ? "-" : (std::to_string(100 * n("pairedSameSlice") / paired) + "%").c_str(),
        static_cast<unsigned long long>(n("noPrefillReplica")));
    std::string reasons;
    for (const auto& [key, v] : d.items())
      if (key.rfind("fallback_", 0) == 0)
        reasons += (reasons.empty() ? " (" : ", ") + key.substr(9) + " " + v.dump();
    if (!reasons.empty()) reasons += ")";
    std::printf(
        "  Handoffs: %llu prefilled remotely (KV handed off), %llu locally (short "
        "prompts), %llu fallbacks to local prefill%s\n",
        static_cast<unsigned long long>(n("prefilledRemote")),
        static_cast<unsigned long long>(n("prefilledLocal")),
        static_cast<unsigned long long>(n("fallbacks")), reasons.c_str());
  }
}

const Json& Events(net::HttpClient& client, Json& holder, const std::string& in_namespace) {
  holder = Call(client, net::Method::kGet, "/api/v1/events" + in_namespace);
  return holder["items"];
}

}  // namespace

void PrintServices(const Json& items, bool wide, bool header) {
  if (header)
    std::printf("%-24s %-12s %-22s %-10s %s\n", "NAME", "PHASE", "READY (ROLE READY/WANT)",
                "ENDPOINTS", wide ? "REASON: MESSAGE" : "REASON");
  for (const Json& s : items) {
    const Json& st = s["status"];
    std::string roles;
    for (const Json& r : st.value("roles", Json::array()))
      roles += (roles.empty() ? "" : ", ") + RoleSummary(r);
    int ready = 0, all = 0;
    for (const Json& e : st.value("endpoints", Json::array())) {
      ++all;
      ready += e.value("ready", false) ? 1 : 0;
    }
    std::string reason = st.value("reason", "");
    if (wide) reason += ": " + st.value("message", "");
    std::printf("%-24s %-12s %-22s %-10s %s\n", s["metadata"].value("name", "").c_str(),
                st.value("phase", "").c_str(), roles.c_str(),
                (std::to_string(ready) + "/" + std::to_string(all)).c_str(), reason.c_str());
  }
}

void DescribeService(net::HttpClient& client, const std::string& name,
                     const std::string& in_namespace) {
  Json s = Call(client, net::Method::kGet, "/api/v1/services/" + name + in_namespace);
  const Json& st = s["status"];
  std::cout << "Name:     " << name << "\n"
            << "Phase:    " << st.value("phase", "") << "\n"
            << "Reason:   " << st.value("reason", "") << "\n"
            << "Message:  " << st.value("message", "") << "\n";
  std::cout << "Roles:\n";
  PrintRoleTable(s);
  PrintDisaggregation(s);
  for (const Json& role : st.value("roles", Json::array())) {
    const std::string rn = role.value("name", "");
    Json spec;
    for (const Json& r : s["spec"].value("roles", Json::array()))
      if (r.value("name", "") == rn) spec = r;
    std::cout << "Role " << rn << ": " << spec.value("accelerator", "") << " "
              << spec.value("topology", "") << " per replica, generation "
              << role.value("generation", 0) << ", " << role.value("readyReplicas", 0) << " of "
              << role.value("desiredReplicas", 0) << " ready\n";
    if (const std::string settings = AutoscalingSettings(spec); !settings.empty())
      std::cout << "  Autoscaling: " << settings << "\n";
    if (role.contains("autoscaler"))
      std::cout << "  Autoscaler: " << role["autoscaler"].value("desiredReplicas", 0)
                << " replicas: " << role["autoscaler"].value("reason", "") << "\n";
    std::printf("  %-8s %-4s %-11s %-9s %-22s %-22s %s\n", "REPLICA", "GEN", "PHASE", "RESTARTS",
                "SLICE", "LEADER", "HOSTS / REASON: MESSAGE");
    for (const Json& r : role.value("replicas", Json::array())) {
      std::string hosts;
      for (const Json& h : r.value("hosts", Json::array()))
        hosts += (hosts.empty() ? "" : ",") + h.get<std::string>();
      std::string leader = "-";
      if (r.contains("leader"))
        leader =
            r["leader"].value("address", "") + ":" + std::to_string(r["leader"].value("port", 0));
      std::printf("  %-8d %-4d %-11s %-9d %-22s %-22s %s\n", r.value("replica", 0),
                  r.value("generation", 0), r.value("phase", "").c_str(), r.value("restarts", 0),
                  r.value("slice", "").c_str(), leader.c_str(),
                  (hosts.empty() ? "" : hosts + " ").c_str());
      std::printf("  %-8s %s: %s\n", "", r.value("reason", "").c_str(),
                  r.value("message", "").c_str());
    }
  }
  std::cout << "Endpoints:\n";
  for (const Json& e : st.value("endpoints", Json::array()))
    std::printf("  %s/%d gen %d %s:%d %s\n", e.value("role", "").c_str(), e.value("replica", 0),
                e.value("generation", 0), e.value("address", "").c_str(), e.value("port", 0),
                e.value("ready", false) ? "ready" : "not ready");
  Json holder;
  std::cout << "Events:\n";
  for (const Json& e : Events(client, holder, in_namespace))
    if (e.value("object", "") == "service/" + name)
      std::printf("  %-8s %-16s %s\n", e.value("type", "").c_str(), e.value("reason", "").c_str(),
                  e.value("message", "").c_str());
}

void ServiceLogs(net::HttpClient& client, const std::string& name, const std::string& role,
                 int replica, int worker, bool follow, const std::string& and_namespace) {
  const std::string target = "/api/v1/services/" + name + "/logs?role=" + role +
                             "&replica=" + std::to_string(replica) +
                             "&worker=" + std::to_string(worker) + and_namespace;
  PrintLog(client, target, follow);
}

void AddServiceCommands(CLI::App& app) {
  auto* cmd = app.add_subcommand("scale", "Set the replica count of a Service role");
  auto flags = std::make_shared<ClientFlags>();
  auto kind = std::make_shared<std::string>();
  auto name = std::make_shared<std::string>();
  auto role = std::make_shared<std::string>("server");
  auto replicas = std::make_shared<int>(-1);
  cmd->add_option("kind", *kind, "service")->required()->check(CLI::IsMember({"service", "svc"}));
  cmd->add_option("name", *name, "the service's name")->required();
  cmd->add_option("--role", *role, "the role to scale")->capture_default_str();
  cmd->add_option("--replicas", *replicas, "the new replica count")
      ->required()
      ->check(CLI::Range(0, 4096));
  flags->Add(cmd);
  flags->AddNamespace(cmd, false);
  cmd->callback([flags, kind, name, role, replicas] {  // the options write into these
    auto client = Connect(*flags);
    const Json body = {{"role", *role}, {"replicas", *replicas}};
    Json s = Call(*client, net::Method::kPost,
                  "/api/v1/services/" + *name + "/scale" + NamespaceQuery(*flags, "services"),
                  body.dump());
    std::cout << "service/" << *name << " role " << *role << " scaled to " << *replicas
              << " replicas\n";
  });
}

}  // namespace tessera::cli
