// Resource commands: apply, get, describe, logs, delete.
#include <yaml-cpp/yaml.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <set>

#include "cli/client.h"
#include "cli/job_describe.h"
#include "cli/queue_describe.h"
#include "cli/reservation_commands.h"
#include "cli/resource_kinds.h"
#include "cli/service_commands.h"

namespace tessera::cli {
namespace {

using Json = nlohmann::json;

YAML::Node ToYaml(const Json& j) {
  if (j.is_object()) {
    YAML::Node n(YAML::NodeType::Map);
    for (auto it = j.begin(); it != j.end(); ++it) n[it.key()] = ToYaml(*it);
    return n;
  }
  if (j.is_array()) {
    YAML::Node n(YAML::NodeType::Sequence);
    for (const auto& v : j) n.push_back(ToYaml(v));
    return n;
  }
  if (j.is_string()) return YAML::Node(j.get<std::string>());
  if (j.is_null()) return YAML::Node();
  return YAML::Node(j.dump());
}

void PrintAs(const Json& j, const std::string& output) {
  if (output == "json") {
    std::cout << j.dump(2) << "\n";
  } else {
    YAML::Emitter e;
    e << ToYaml(j);
    std::cout << e.c_str() << "\n";
  }
}

// An object's (or event's) metadata.namespace; "default" when it has none.
std::string NamespaceOfObject(const Json& object) {
  const Json meta = object.value("metadata", Json::object());
  return meta.is_object() ? meta.value("namespace", std::string("default")) : "default";
}

std::string Age(int64_t since_ms, int64_t now_ms) {
  if (since_ms <= 0) return "-";
  const int64_t s = (now_ms - since_ms) / 1000;
  if (s < 120) return std::to_string(s) + "s";
  if (s < 7200) return std::to_string(s / 60) + "m";
  return std::to_string(s / 3600) + "h";
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string SlicesOf(const Json& spec) {
  if (!spec.contains("slices")) return "1";
  const Json& s = spec["slices"];
  if (s.is_object())
    return std::to_string(s.value("min", 1)) + "-" + std::to_string(s.value("max", 1));
  return s.dump();
}

void PrintJobs(const Json& items, bool wide, bool header = true) {
  const int64_t now = NowMs();
  if (header)
    std::printf("%-24s %-11s %-7s %-9s %-7s %-8s %-6s %s\n", "NAME", "PHASE", "ACCEL", "TOPOLOGY",
                "SLICES", "ATTEMPT", "AGE", wide ? "REASON / MESSAGE" : "REASON");
  for (const Json& j : items) {
    const Json& st = j["status"];
    std::string reason = st.value("reason", "");
    if (wide) reason += ": " + st.value("message", "");
    // A GPU job (spec.gpu): its system, and its hosts where a TPU job's shape goes.
    std::string accel = j["spec"].value("accelerator", "");
    std::string topology = j["spec"].value("topology", "");
    if (const Json& gpu = j["spec"].value("gpu", Json()); gpu.is_object()) {
      accel = gpu.value("system", "");
      topology = std::to_string(gpu.value("hosts", 0)) + " hosts";
    }
    std::printf(
        "%-24s %-11s %-7s %-9s %-7s %-8d %-6s %s\n",
        j["metadata"]["name"].get<std::string>().c_str(), st.value("phase", "").c_str(),
        accel.c_str(), topology.c_str(), SlicesOf(j["spec"]).c_str(), st.value("attempt", -1),
        Age(j["metadata"].value("creationTimestampMs", int64_t{0}), now).c_str(), reason.c_str());
  }
}

void PrintHosts(const Json& items, bool wide, bool header = true) {
  const int64_t now = NowMs();
  if (header)
    std::printf("%-22s %-6s %-5s %-12s %-6s %-10s %-16s%s\n", "NAME", "STATE", "GEN", "SLICE/CUBE",
                "WORKER", "HEARTBEAT", "JOB",
                wide ? " ADDRESS  GPUS (NVLINK DOMAIN; WHY ALONE)" : "");
  for (const Json& h : items) {
    const Json& sp = h["spec"];
    std::string where, worker;
    if (const Json& fixed = h["status"].value("slice", Json()); fixed.is_object()) {
      // A fixed slice (a discovered TPU slice or a 2D one): its name and the host's worker id.
      where = fixed.value("name", "");
      worker = std::to_string(fixed.value("worker", 0));
    } else if (sp.contains("slice")) {
      where = sp["slice"].value("name", "");
      worker = std::to_string(sp["slice"].value("worker", 0));
    } else if (sp.contains("cube")) {
      where = sp["cube"].value("name", "");
      const Json& c = sp["cube"]["coord"];
      worker = c.dump();
    }
    std::string addr;
    if (wide) addr = " " + sp.value("address", "") + ":" + std::to_string(sp.value("agentPort", 0));
    // A GPU host: its system, GPUs and NVLink domain, and why it is a domain of its own.
    if (const Json& gpu = h["status"].value("gpu", Json()); wide && gpu.is_object()) {
      const Json& system = gpu.value("system", Json());
      addr += "  " + (system.is_string() ? system.get<std::string>() : std::string("?")) + " x" +
              std::to_string(gpu.value("gpus", 0)) + " (" + gpu.value("domain", "");
      if (!gpu.value("reason", "").empty()) addr += "; " + gpu.value("reason", "");
      addr += ")";
    }
    std::printf("%-22s %-6s %-5s %-12s %-6s %-10s %-16s%s\n",
                h["metadata"]["name"].get<std::string>().c_str(),
                h["status"].value("state", "").c_str(), sp.value("generation", "").c_str(),
                where.c_str(), worker.c_str(),
                (Age(h["status"].value("lastHeartbeatMs", int64_t{0}), now) + " ago").c_str(),
                h["status"].value("job", "").c_str(), addr.c_str());
  }
  // A fixed slice is placeable only when every worker id has a live host: say which do not
  // (after a listing, not after each row of a watch).
  if (!header) return;
  std::map<std::string, std::string> partial;
  for (const Json& h : items) {
    const Json& fixed = h["status"].value("slice", Json());
    if (!fixed.is_object() || fixed.value("placeable", true)) continue;
    std::string gaps;
    for (const char* kind : {"missing", "lost"}) {
      std::string ids;
      for (const Json& w : fixed.value(kind, Json::array()))
        ids += (ids.empty() ? "" : ", ") + w.dump();
      if (!ids.empty()) gaps += (gaps.empty() ? "" : "; ") + ("workers " + ids + " " + kind);
    }
    partial[fixed.value("name", "")] = fixed.value("topology", "") + " of " +
                                       std::to_string(fixed.value("workers", 0)) +
                                       " hosts: " + gaps;
  }
  for (const auto& [name, gaps] : partial)
    std::printf("slice %s is not placeable (%s)\n", name.c_str(), gaps.c_str());
}

void PrintEventRow(const Json& e, int64_t now) {
  std::printf("%-6s %-8s %-15s %-26s %s\n", Age(e.value("timeMs", int64_t{0}), now).c_str(),
              e.value("type", "").c_str(), e.value("reason", "").c_str(),
              e.value("object", "").c_str(), e.value("message", "").c_str());
}

// With `namespaces`, a NAMESPACE column first (tessera get events -A).
void PrintEvents(const Json& items, const std::string& object, bool namespaces = false) {
  const int64_t now = NowMs();
  if (namespaces) std::printf("%-16s ", "NAMESPACE");
  std::printf("%-6s %-8s %-15s %-26s %s\n", "AGE", "TYPE", "REASON", "OBJECT", "MESSAGE");
  for (const Json& e : items) {
    if (!object.empty() && e.value("object", "") != object) continue;
    if (namespaces) std::printf("%-16s ", NamespaceOfObject(e).c_str());
    PrintEventRow(e, now);
  }
}

// `tessera get events --watch`: the list, then one row per new event until interrupted. One
// watch without a resourceVersion: the head sends the list and the changes after it with no
// gap and no repeat (docs/runtime.md "Watches"), so there is no separate list call.
void WatchEvents(net::HttpClient& client, const std::string& object, const std::string& output,
                 const std::string& in_namespace) {
  if (output == "table")
    std::printf("%-6s %-8s %-15s %-26s %s\n", "AGE", "TYPE", "REASON", "OBJECT", "MESSAGE");
  std::fflush(stdout);
  std::string error;
  const std::string target = "/api/v1/events?watch=true" + in_namespace;
  Status s = client.Stream(net::Method::kGet, target, [&](std::string_view l) {
    Json change = Json::parse(l, nullptr, false);
    if (change.is_discarded() || !change.contains("object")) return true;
    if (change.value("type", "") == "ERROR") {
      error = change["object"].value("message", "the head ended the watch");
      return false;
    }
    const Json& e = change["object"];
    if (!object.empty() && e.value("object", "") != object) return true;
    if (output == "json") {
      std::cout << e.dump() << "\n";
    } else if (output == "yaml") {
      PrintAs(e, output);
      std::cout << "---\n";
    } else {
      PrintEventRow(e, NowMs());
    }
    std::cout.flush();
    std::fflush(stdout);
    return true;
  });
  if (!s.ok()) throw CommandError("watching events: " + s.message(), 1);
  if (!error.empty()) throw CommandError("watching events: " + error, 1);
}

std::string Ms(int64_t ms) {
  if (ms < 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fs", static_cast<double>(ms) / 1000.0);
  return buf;
}

std::string Secs(double s) {
  if (s < 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1fs", s);
  return buf;
}

// `tessera describe job`: the failure budget, every attempt with how it ended and the figures of
// the recovery that led to it (docs/elastic.md), goodput and checkpoint-interval advice.
void PrintRecovery(const Json& st) {
  const Json& attempts = st.value("attempts", Json::array());
  if (attempts.empty()) return;
  const Json& rec = st.value("recovery", Json::object());
  const int max_failures = rec.value("maxFailures", 0);
  std::cout << "Failures:    " << st.value("failures", 0) << " of "
            << (max_failures < 0 ? std::string("unlimited") : std::to_string(max_failures))
            << " allowed\n";
  std::cout << "Attempts:\n  #   SLICES  STEPS       ENDED         RANKS   DETECT  SCHEDULE  "
               "1ST STEP  RESTORE  RECOVER  LOST\n";
  for (const Json& a : attempts) {
    std::string steps = "-";
    if (a.value("lastStep", int64_t{-1}) >= 0)
      steps = std::to_string(a.value("firstStep", int64_t{0})) + ".." +
              std::to_string(a.value("lastStep", int64_t{0}));
    std::string ranks;
    for (const Json& r : a.value("failedRanks", Json::array()))
      ranks += (ranks.empty() ? "" : ",") + std::to_string(r.get<int>());
    const Json f = a.value("recovery", Json::object());
    const int64_t lost = f.value("stepsLost", int64_t{-1});
    std::printf("  %-3d %-7d %-11s %-13s %-7s %-7s %-9s %-9s %-8s %-8s %s\n", a.value("attempt", 0),
                a.value("slices", 0), steps.c_str(),
                a.value("endReason", "").empty() ? "(current)" : a.value("endReason", "").c_str(),
                ranks.empty() ? "-" : ranks.c_str(),
                Ms(f.value("timeToDetectMs", int64_t{-1})).c_str(),
                Ms(f.value("timeToScheduleMs", int64_t{-1})).c_str(),
                Ms(f.value("timeToFirstStepMs", int64_t{-1})).c_str(),
                Ms(f.value("timeToRestoreMs", int64_t{-1})).c_str(),
                Ms(f.value("timeToRecoverMs", int64_t{-1})).c_str(),
                lost < 0 ? "-" : std::to_string(lost).c_str());
  }
  std::cout << GoodputLines(st, NowMs());
  const Json& c = rec.value("checkpoint", Json::object());
  std::cout << "Checkpoints: save " << Secs(c.value("saveSeconds", -1.0)) << ", every "
            << Secs(c.value("intervalSeconds", -1.0)) << "; Young/Daly advises every "
            << Secs(c.value("advisedIntervalSeconds", -1.0)) << " (MTBF "
            << Secs(c.value("mtbfSeconds", -1.0))
            << (c.value("mtbfSource", "").empty() ? "" : ", " + c.value("mtbfSource", "")) << ")\n";
}

// `tessera get queues`: one row per ClusterQueue, from the latest admission cycle.
void PrintClusterQueues(const Json& items, bool header = true) {
  if (header)
    std::printf("%-20s %-12s %-9s %-9s %-9s %-8s %s\n", "NAME", "COHORT", "NOMINAL", "USED",
                "BORROWED", "PENDING", "ADMITTED");
  for (const Json& q : items) {
    const Json& st = q["status"];
    std::printf("%-20s %-12s %-9lld %-9lld %-9lld %-8d %d\n",
                q["metadata"].value("name", "").c_str(), q["spec"].value("cohort", "-").c_str(),
                static_cast<long long>(st.value("nominalChips", int64_t{0})),
                static_cast<long long>(st.value("usedChips", int64_t{0})),
                static_cast<long long>(st.value("borrowedChips", int64_t{0})),
                st.value("pendingWorkloads", 0), st.value("admittedWorkloads", 0));
  }
}

void PrintLocalQueues(const Json& items, bool header = true) {
  if (header) std::printf("%-24s %s\n", "NAME", "CLUSTERQUEUE");
  for (const Json& q : items)
    std::printf("%-24s %s\n", q["metadata"].value("name", "").c_str(),
                q["spec"].value("clusterQueue", "").c_str());
}

// Secrets as `kubectl get secrets` lists them: the head serves no value, only keys and lengths.
void PrintSecrets(const Json& items, bool header = true) {
  if (header) std::printf("%-24s %-8s %-5s %s\n", "NAME", "TYPE", "DATA", "KEYS");
  for (const Json& s : items) {
    const Json data = s.value("data", Json::object());
    std::string keys;
    for (auto it = data.begin(); it != data.end(); ++it)
      keys += (keys.empty() ? "" : ",") + it.key();
    std::printf("%-24s %-8s %-5zu %s\n", s["metadata"].value("name", "").c_str(),
                s.value("type", "Opaque").c_str(), data.size(), keys.empty() ? "-" : keys.c_str());
  }
}

// `tessera describe secret NAME`: kubectl's layout (each key with its length), then its events.
void DescribeSecret(net::HttpClient& client, const std::string& name,
                    const std::string& in_namespace) {
  const Json s = Call(client, net::Method::kGet, "/api/v1/secrets/" + name + in_namespace);
  std::cout << "Name:        " << name << "\n"
            << "Namespace:   " << s["metadata"].value("namespace", "default") << "\n"
            << "Type:        " << s.value("type", "Opaque") << "\n\nData\n====\n";
  const Json data = s.value("data", Json::object());
  for (auto it = data.begin(); it != data.end(); ++it) {
    // The head sends "<redacted: N bytes>" in place of each value.
    const std::string shown = it->is_string() ? it->get<std::string>() : "";
    const size_t colon = shown.find(": ");
    const std::string bytes =
        colon == std::string::npos ? shown : shown.substr(colon + 2, shown.size() - colon - 3);
    std::cout << it.key() << ":  " << bytes << "\n";
  }
  std::cout << "\nEvents:\n" << std::flush;
  Json events = Call(client, net::Method::kGet,
                     "/api/v1/events" + (in_namespace.empty() ? "" : in_namespace));
  PrintEvents(events["items"], "secret/" + name);
}

void PrintPriorityClasses(const Json& items, bool header = true) {
  if (header) std::printf("%-24s %s\n", "NAME", "VALUE");
  for (const Json& q : items)
    std::printf("%-24s %d\n", q["metadata"].value("name", "").c_str(), q.value("value", 0));
}

// `tessera get KIND --watch`: one watch without a resourceVersion (the list as ADDED lines,
// then every change, with no gap and no repeat); rows as the table prints them, or with -o json
// one change per line ({"type", "object"}), -o yaml one document per change.
// With `only`, the changes of those names alone.
// `in_namespace` is the query's namespace part ("&namespace=NS", "&allNamespaces=true" or "").
void WatchKind(net::HttpClient& client, const std::string& path, const std::string& in_namespace,
               const std::string& output, const std::function<void(const Json&, bool)>& print_rows,
               const std::set<std::string>& only = {}) {
  bool header = true;
  std::string error;
  const std::string target = "/api/v1/" + path + "?watch=true" + in_namespace;
  Status s = client.Stream(net::Method::kGet, target, [&](std::string_view l) {
    Json change = Json::parse(l, nullptr, false);
    if (change.is_discarded() || !change.contains("object")) return true;
    const std::string type = change.value("type", "");
    if (type == "ERROR") {
      error = change["object"].value("message", "the head ended the watch");
      return false;
    }
    if (!only.empty() && !only.count(change["object"]["metadata"].value("name", ""))) return true;
    if (output == "json") {
      std::cout << Json{{"type", type}, {"object", change["object"]}}.dump() << "\n" << std::flush;
    } else if (output == "yaml") {
      PrintAs(Json{{"type", type}, {"object", change["object"]}}, output);
      std::cout << "---\n" << std::flush;
    } else if (type == "DELETED" && output != "name") {
      std::cout << change["object"]["metadata"].value("name", "") << " deleted\n" << std::flush;
    } else {
      print_rows(Json::array({change["object"]}), header);
      header = false;
    }
    return true;
  });
  if (!s.ok()) throw CommandError("watching " + path + ": " + s.message(), 1);
  if (!error.empty()) throw CommandError("watching " + path + ": " + error, 1);
}

// The whole list of `path` in pages of `chunk` items (kubectl's --chunk-size): each request
// asks for ?limit=chunk and follows metadata.continue until the head gives none. The list
// answered has every page's items and the first page's metadata.resourceVersion. A head without
// pages answers the whole list to the first request. chunk 0: one request for the whole list.
Json ListInChunks(net::HttpClient& client, const std::string& path, const std::string& in_namespace,
                  int64_t chunk) {
  const std::string base = "/api/v1/" + path + in_namespace;
  if (chunk <= 0) return Call(client, net::Method::kGet, base);
  const char sep = in_namespace.empty() ? '?' : '&';
  const std::string first = base + sep + "limit=" + std::to_string(chunk);
  Json list = Call(client, net::Method::kGet, first);
  if (!list.contains("items") || !list["items"].is_array()) return list;
  std::string token = list.value("metadata", Json::object()).value("continue", "");
  while (!token.empty()) {
    Json page = Call(client, net::Method::kGet, first + "&continue=" + token);
    for (Json& item : page["items"]) list["items"].push_back(std::move(item));
    token = page.value("metadata", Json::object()).value("continue", "");
  }
  list["metadata"].erase("continue");
  list["metadata"].erase("remainingItemCount");
  return list;
}

}  // namespace

void AddResourceCommands(CLI::App& app) {
  // get
  {
    auto* cmd =
        app.add_subcommand("get", "List objects of a kind, or show the named ones: " + KindHelp());
    auto flags = std::make_shared<ClientFlags>();
    auto kind = std::make_shared<std::string>();
    auto names = std::make_shared<std::vector<std::string>>();
    auto output = std::make_shared<std::string>("table");
    auto watch = std::make_shared<bool>(false);
    auto object = std::make_shared<std::string>();
    auto chunk_size = std::make_shared<int64_t>(500);
    cmd->add_option("kind", *kind, "the kind: " + KindHelp())->required();
    cmd->add_option("names", *names,
                    "only these objects (tessera get job NAME); a name not found is an error "
                    "(exit 1) after the others are printed");
    cmd->add_option("-o,--output", *output,
                    "table, wide, json, yaml or name (KIND/NAME); with one NAME, json and yaml "
                    "print the object itself")
        ->check(CLI::IsMember({"table", "wide", "json", "yaml", "name"}));
    cmd->add_flag("-w,--watch", *watch,
                  "after the list, print every change until interrupted (rows, or one JSON "
                  "change per line with -o json); with NAMEs, only their changes");
    cmd->add_option("--for", *object, "events: only those about this object, e.g. trainjob/demo");
    cmd->add_option("--chunk-size", *chunk_size,
                    "list in pages of this many objects (?limit= and continue, as kubectl); 0 "
                    "asks for the whole list at once")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    flags->Add(cmd);
    flags->AddNamespace(cmd, true);
    cmd->callback([flags, kind, names, output, watch, object, chunk_size] {
      // kubectl's KIND/NAME form: `tessera get trainjob/demo`.
      if (const size_t slash = kind->find('/'); slash != std::string::npos) {
        names->insert(names->begin(), kind->substr(slash + 1));
        kind->resize(slash);
      }
      const std::string path = KindPath(*kind);
      for (const std::string& name : *names)
        if (name.empty() ||
            name.find_first_not_of("abcdefghijklmnopqrstuvwxyz"
                                   "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._") != std::string::npos)
          throw CommandError("NAME: '" + name +
                             "' is not an object name (letters, digits, '-', '.' and '_'); "
                             "`tessera get " +
                             path + "` lists them");
      if (!object->empty() && path != "events")
        throw CommandError("--for: only for events (tessera get events --for trainjob/NAME)");
      if (*output == "name" && path == "events")
        throw CommandError("-o name: events have no names; use -o table, json or yaml");
      if (!names->empty() && path == "events")
        throw CommandError(
            "events have no names; to see those about one object, use "
            "`tessera get events --for trainjob/NAME`");
      auto client = Connect(*flags);
      const std::string in_namespace = NamespaceQuery(*flags, path);
      const std::string watch_namespace = NamespaceQuery(*flags, path, '&');
      if (*watch && path == "events")
        return WatchEvents(*client, *object, *output, watch_namespace);
      const bool wide = *output == "wide";
      std::function<void(const Json&, bool)> print_table;
      auto print_rows = [&](const Json& items, bool header) {
        // -A: a NAMESPACE column before each kind's own (kubectl's layout).
        if (flags->all_namespaces && (*output == "table" || wide) && !in_namespace.empty()) {
          if (header) {
            std::printf("%-16s ", "NAMESPACE");
            std::fflush(stdout);
            print_table(Json::array(), true);
          }
          for (const Json& item : items) {
            std::printf("%-16s ", NamespaceOfObject(item).c_str());
            std::fflush(stdout);
            print_table(Json::array({item}), false);
          }
          return;
        }
        print_table(items, header);
      };
      print_table = [&](const Json& items, bool header) {
        if (*output == "name") {
          for (const Json& i : items)
            std::cout << KindObjectPrefix(path) << "/" << i["metadata"].value("name", "") << "\n";
          std::cout << std::flush;
          return;
        }
        // Watch rows: the table's header once, then one row per change.
        if (!header) std::fflush(stdout);
        if (path == "jobs") PrintJobs(items, wide, header);
        if (path == "hosts") PrintHosts(items, wide, header);
        if (path == "services") PrintServices(items, wide, header);
        if (path == "clusterqueues") PrintClusterQueues(items, header);
        if (path == "localqueues") PrintLocalQueues(items, header);
        if (path == "priorityclasses") PrintPriorityClasses(items, header);
        if (path == "secrets") PrintSecrets(items, header);
        if (path == "slicereservations") PrintReservations(items, wide, header);
        std::fflush(stdout);
      };
      if (*watch) {
        if (names->empty()) return WatchKind(*client, path, watch_namespace, *output, print_rows);
        // Only the named objects' changes; the watch's first lines are the current list, so a
        // name that is not there yet is not an error: it is printed once it is created.
        return WatchKind(*client, path, watch_namespace, *output, print_rows,
                         std::set<std::string>(names->begin(), names->end()));
      }
      Json list;
      std::vector<std::string> missing;
      if (names->empty()) {
        list = ListInChunks(*client, path, in_namespace, *chunk_size);
      } else if (KindHasGetRoute(path)) {
        // One GET per name; a 404 is collected, any other refusal stops here.
        list = {{"kind", "List"}, {"items", Json::array()}};
        for (const std::string& name : *names) {
          const std::string target = "/api/v1/" + path + "/" + name + in_namespace;
          auto r = client->Request(net::Method::kGet, target);
          if (r.ok() && r->status == 404) {
            missing.push_back(name);
            continue;
          }
          Json item = r.ok() && r->status == 200 ? Json::parse(r->body, nullptr, false) : Json();
          // Anything else: Call asks again and throws with the head's own message.
          if (!item.is_object()) item = Call(*client, net::Method::kGet, target);
          list["items"].push_back(std::move(item));
        }
      } else {
        Json all = ListInChunks(*client, path, in_namespace, *chunk_size);
        NamedItems picked = SelectNamed(all.value("items", Json::array()), *names);
        list = {{"kind", all.value("kind", "List")}, {"items", picked.found}};
        missing = picked.missing;
      }
      if (!object->empty()) {
        Json kept = Json::array();
        for (const Json& e : list["items"])
          if (e.value("object", "") == *object) kept.push_back(e);
        list["items"] = kept;
      }
      if (*output == "json" || *output == "yaml") {
        // kubectl: one named object prints as itself, several as a List.
        if (names->size() == 1 && list["items"].size() == 1)
          PrintAs(list["items"][0], *output);
        else if (names->empty() || !list["items"].empty())
          PrintAs(list, *output);
      } else if (path == "events") {
        PrintEvents(list["items"], *object, flags->all_namespaces);
      } else if (names->empty() || !list["items"].empty()) {
        print_rows(list["items"], true);
      }
      if (!missing.empty()) throw CommandError(NotFoundMessage(path, missing), 1);
    });
  }
  // explain
  {
    auto* cmd = app.add_subcommand(
        "explain", "Why a job is pending: the reason, its place in line, what would let it in");
    auto flags = std::make_shared<ClientFlags>();
    auto kind = std::make_shared<std::string>();
    auto name = std::make_shared<std::string>();
    cmd->add_option("kind", *kind, "job")->required()->check(CLI::IsMember({"job", "trainjob"}));
    cmd->add_option("name", *name, "the job's name")->required();
    flags->Add(cmd);
    flags->AddNamespace(cmd, false);
    cmd->callback([flags, kind, name] {
      auto client = Connect(*flags);
      Json j = Call(*client, net::Method::kGet,
                    "/api/v1/jobs/" + *name + NamespaceQuery(*flags, "jobs"));
      const Json& st = j["status"];
      const std::string phase = st.value("phase", "");
      std::cout << "Job:       " << *name << "\n"
                << "Queue:     " << j["metadata"].value("queue", "(default)") << "\n"
                << "Priority:  " << j["spec"].value("priority", "(none)") << "\n"
                << "Phase:     " << phase << "\n";
      if (phase != "Pending") {
        std::cout << "Reason:    " << st.value("reason", "") << "\n"
                  << "Message:   " << st.value("message", "") << "\n"
                  << (phase == "Restarting"
                          ? "It is restarting: its workers are being stopped (and, for a lost "
                            "host, its fence waited for) before the next attempt is placed.\n"
                          : "It is not waiting.\n");
        return;
      }
      const int position = st.value("queuePosition", 0);
      std::cout << "Reason:    " << st.value("pendingReason", st.value("reason", "")) << "\n"
                << "Message:   " << st.value("message", "") << "\n"
                << "Position:  " << (position > 0 ? std::to_string(position) : "-") << "\n";
      if (WaitsForMissingLocalQueue(st))
        return PrintLocalQueueFix(*client, j["metadata"].value("queue", "default"),
                                  "Fix:       ", j["metadata"].value("namespace", "default"));
      const Json help = st.value("wouldHelp", Json::array());
      if (help.empty()) {
        std::cout << "Would help: nothing running (wait for the reason above to clear)\n";
        return;
      }
      std::cout << "Would help (these running jobs finishing or being preempted):\n";
      PrintWouldHelpTable(help, "JOB");
    });
  }
  // describe
  {
    auto* cmd =
        app.add_subcommand("describe", "Show a job's status, placement, workers and events");
    auto flags = std::make_shared<ClientFlags>();
    auto kind = std::make_shared<std::string>();
    auto name = std::make_shared<std::string>();
    cmd->add_option("kind", *kind,
                    "job, service, slicereservation (sr), clusterqueue (queue) or secret")
        ->required()
        ->check(CLI::IsMember({"job", "trainjob", "service", "svc", "slicereservation", "sr",
                               "reservation", "clusterqueue", "queue", "secret"}));
    cmd->add_option("name", *name, "the job's name")->required();
    flags->Add(cmd);
    flags->AddNamespace(cmd, false);
    cmd->callback([flags, kind, name] {
      auto client = Connect(*flags);
      const std::string in_namespace = NamespaceQuery(*flags, "jobs");
      if (*kind == "service" || *kind == "svc")
        return DescribeService(*client, *name, NamespaceQuery(*flags, "services"));
      if (IsReservationKind(*kind))
        return DescribeReservation(*client, *name, NamespaceQuery(*flags, "slicereservations"));
      if (*kind == "secret")
        return DescribeSecret(*client, *name, NamespaceQuery(*flags, "secrets"));
      if (*kind == "clusterqueue" || *kind == "queue") {
        // Spec, usage, counts and the settings that cannot take effect (cli/queue_describe.h),
        // then the queue's events (IneffectiveSetting warnings among them).
        Json list = Call(*client, net::Method::kGet, "/api/v1/clusterqueues");
        for (const Json& q : list["items"]) {
          if (q["metadata"].value("name", "") != *name) continue;
          std::cout << DescribeClusterQueue(q) << "Events:\n" << std::flush;
          Json events = Call(*client, net::Method::kGet, "/api/v1/events");
          PrintEvents(events["items"], "clusterqueue/" + *name);
          return;
        }
        throw CommandError("clusterqueue '" + *name + "' not found (tessera get queues lists them)",
                           1);
      }
      Json j = Call(*client, net::Method::kGet, "/api/v1/jobs/" + *name + in_namespace);
      const Json& st = j["status"];
      const Json& sp = j["spec"];
      std::cout << "Name:        " << *name << "\n"
                << "Accelerator: " << sp.value("accelerator", "") << " " << sp.value("topology", "")
                << " x " << SlicesOf(sp) << " slice(s)\n"
                << "Phase:       " << st.value("phase", "") << "\n"
                << "Reason:      " << st.value("reason", "") << "\n"
                << "Message:     " << st.value("message", "") << "\n"
                << "Attempt:     " << st.value("attempt", -1) << "\n"
                << "Slices:      " << st.value("slices", 0) << " (spec " << SlicesOf(sp) << ")\n"
                << "Last step:   " << st.value("lastStep", int64_t{-1}) << "\n";
      PrintRecovery(st);
      if (!st["placement"].empty()) {
        std::cout << "Placement:\n";
        for (const Json& p : st["placement"]) {
          std::cout << "  " << p.value("slice", "") << ":";
          for (const Json& h : p["hosts"]) std::cout << " " << h.get<std::string>();
          std::cout << "\n";
        }
        std::cout << "Workers:\n  RANK  SLICE  WORKER  HOST                  STATE      EXIT\n";
        for (const Json& w : st["workers"])
          std::printf("  %-5d %-6d %-7d %-21s %-10s %d%s\n", w.value("rank", 0),
                      w.value("slice", 0), w.value("worker", 0), w.value("host", "").c_str(),
                      w.value("state", "").c_str(), w.value("exitCode", 0),
                      w.value("signal", 0)
                          ? (" (signal " + std::to_string(w.value("signal", 0)) + ")").c_str()
                          : "");
      }
      Json events = Call(*client, net::Method::kGet, "/api/v1/events" + in_namespace);
      Json mine = Json::array();
      for (const Json& e : events["items"])
        if (e.value("object", "") == "trainjob/" + *name) mine.push_back(e);
      std::cout << "Events:\n";
      PrintEvents(mine, "");
    });
  }
  // logs
  {
    auto* cmd = app.add_subcommand("logs", "Print a worker's log (stdout and stderr)");
    auto flags = std::make_shared<ClientFlags>();
    auto kind = std::make_shared<std::string>();
    auto name = std::make_shared<std::string>();
    auto worker = std::make_shared<int>(0);
    auto follow = std::make_shared<bool>(false);
    auto role = std::make_shared<std::string>("server");
    auto replica = std::make_shared<int>(0);
    cmd->add_option("kind", *kind, "job or service")
        ->required()
        ->check(CLI::IsMember({"job", "trainjob", "service", "svc"}));
    cmd->add_option("name", *name, "the job's name")->required();
    cmd->add_option("--worker", *worker, "worker rank (a service: worker index in the replica)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--role", *role, "service: the role")->capture_default_str();
    cmd->add_option("--replica", *replica, "service: the replica")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    cmd->add_flag("-f,--follow", *follow, "keep printing as the worker writes");
    flags->Add(cmd);
    flags->AddNamespace(cmd, false);
    cmd->callback([flags, kind, name, worker, follow, role, replica] {
      auto client = Connect(*flags);
      if (*kind == "service" || *kind == "svc")
        return ServiceLogs(*client, *name, *role, *replica, *worker, *follow,
                           NamespaceQuery(*flags, "services", '&'));
      PrintLog(*client,
               "/api/v1/jobs/" + *name + "/logs?worker=" + std::to_string(*worker) +
                   NamespaceQuery(*flags, "jobs", '&'),
               *follow);
    });
  }
  // delete
  {
    auto* cmd = app.add_subcommand(
        "delete",
        "Delete a job (stop every worker, release its chips), a clusterqueue, localqueue or "
        "priorityclass (refused while in use, naming the users), or a host (so a new agent may "
        "register its name; refused while it runs workers, unless it is Lost)");
    auto flags = std::make_shared<ClientFlags>();
    auto kind = std::make_shared<std::string>();
    auto name = std::make_shared<std::string>();
    auto ignore = std::make_shared<bool>(false);
    auto force = std::make_shared<bool>(false);
    cmd->add_option("kind", *kind,
                    "job, service, clusterqueue, localqueue, priorityclass, host, "
                    "hostrevocation (lets a deleted host bootstrap again), slicereservation (sr) "
                    "or secret")
        ->required()
        ->check(CLI::IsMember({"job", "trainjob", "service", "clusterqueue", "localqueue",
                               "priorityclass", "host", "hostrevocation", "slicereservation", "sr",
                               "reservation", "secret"}));
    cmd->add_option("name", *name, "the object's name")->required();
    cmd->add_flag("--ignore-not-found", *ignore, "succeed when the object does not exist");
    cmd->add_flag("--force", *force,
                  "slicereservation: stop the workloads running inside it, then release it "
                  "(without it, a reservation in use is refused naming them)");
    flags->Add(cmd);
    flags->AddNamespace(cmd, false);
    cmd->callback([flags, kind, name, ignore, force] {
      const bool job = *kind == "job" || *kind == "trainjob";
      const bool reservation = IsReservationKind(*kind);
      if (*force && !reservation)
        throw CommandError("--force: only for slicereservations (it stops their workloads)");
      const std::string object = (job           ? std::string("trainjob")
                                  : reservation ? std::string("slicereservation")
                                                : *kind) +
                                 "/" + *name;
      const std::string path = job                        ? "/api/v1/jobs/"
                               : reservation              ? "/api/v1/slicereservations/"
                               : *kind == "priorityclass" ? "/api/v1/priorityclasses/"
                               : *kind == "host"          ? "/api/v1/hosts/"
                               : *kind == "service"       ? "/api/v1/services/"
                                                          : "/api/v1/" + *kind + "s/";
      auto client = Connect(*flags);
      // The route's kind ("jobs", ...) decides whether the object lives in a namespace.
      const std::string kind_path = path.substr(8, path.size() - 9);
      const std::string in_namespace = NamespaceQuery(*flags, kind_path);
      auto r = client->Request(
          net::Method::kDelete,
          path + *name + in_namespace +
              (*force ? (in_namespace.empty() ? "?force=true" : "&force=true") : ""));
      if (!r.ok()) throw CommandError("cannot reach the head: " + r.status().message(), 1);
      if (r->status == 404 && *ignore) {
        std::cout << object << " not found\n";
        return;
      }
      Json j = Json::parse(r->body, nullptr, false);
      if (r->status >= 400)
        throw CommandError(j.is_object() ? j.value("error", r->body) : r->body, 1);
      std::cout << object << " "
                << (j.value("status", "") == "Deleted" ? "deleted" : "terminating");
      if (j.contains("stopped"))
        std::cout << " (stopping " << j["stopped"].size()
                  << " workload(s) inside it; released once they have stopped)";
      if (j.value("pendingJobs", 0) > 0)
        std::cout << " (" << j["pendingJobs"].get<int>()
                  << " pending job(s) wait with LocalQueueNotFound until it exists again)";
      std::cout << "\n";
    });
  }
}

}  // namespace tessera::cli
