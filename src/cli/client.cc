#include "cli/client.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "ha/head_list.h"

namespace tessera::cli {

void ClientFlags::Add(CLI::App* cmd) {
  cmd->add_option("--server", server,
                  "the head, https://HOST:PORT (http:// for a head started with --plain-http), "
                  "or several heads comma-separated (the leader among them is used; default: "
                  "from --state-dir)");
  cmd->add_option("--state-dir", state_dir, "where `tessera up` keeps the cluster's state")
      ->capture_default_str();
  cmd->add_option("--token-file", token_file, "admin token (default: <state-dir>/admin.token)");
  cmd->add_option("--ca-file", ca_file,
                  "the cluster CA the head's certificate must be signed by (default: "
                  "$TESSERA_CA_FILE, then <state-dir>/ca.crt)");
  cmd->add_option("--config", config,
                  "a user's config file, as `tessera user create` writes it: server and token "
                  "(default: $TESSERA_CONFIG; --server and --token-file win over it)");
}

void ClientFlags::AddNamespace(CLI::App* cmd, bool lists) {
  cmd->add_option("-n,--namespace", namespace_name,
                  "the namespace (default: the config file's, else default)");
  if (lists)
    cmd->add_flag("-A,--all-namespaces", all_namespaces,
                  "every namespace (cluster admins; others are refused naming their namespace)");
}

std::string NamespaceQuery(const ClientFlags& f, const std::string& kind_path, char sep) {
  static const std::set<std::string> kNamespaced = {"jobs",        "services", "slicereservations",
                                                    "localqueues", "secrets",  "events"};
  if (!kNamespaced.contains(kind_path)) return "";
  if (f.all_namespaces) return std::string(1, sep) + "allNamespaces=true";
  std::string ns = f.namespace_name;
  if (ns.empty()) ns = ReadUserConfig(f).namespace_name;
  if (ns.empty() || ns == "default") return "";
  for (char c : ns)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
      throw CommandError("--namespace: '" + ns +
                         "' is not a namespace (lower-case letters, digits and '-')");
  return std::string(1, sep) + "namespace=" + ns;
}

UserConfig ReadUserConfig(const ClientFlags& f) {
  std::string path = f.config;
  if (path.empty())
    if (const char* env = std::getenv("TESSERA_CONFIG")) path = env;
  UserConfig out;
  if (path.empty()) return out;
  std::ifstream in(path);
  if (!in)
    throw CommandError(path + ": cannot read this config file (--config, TESSERA_CONFIG)", 1);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (!j.is_object() || !j.contains("server") || !j["server"].is_string() || !j.contains("token") ||
      !j["token"].is_string())
    throw CommandError(path +
                           ": not a tessera config file (it needs \"server\" and \"token\"); "
                           "`tessera user create` writes one",
                       1);
  out.path = path;
  out.server = j["server"].get<std::string>();
  out.token = j["token"].get<std::string>();
  out.namespace_name = j.value("namespace", "default");
  out.ca_file = j.value("caFile", "");
  return out;
}

std::string ReadFileOrStdin(const std::string& path) {
  std::stringstream ss;
  if (path == "-") {
    ss << std::cin.rdbuf();
    return ss.str();
  }
  std::ifstream in(path);
  if (!in) throw CommandError(path + ": cannot read this file", 1);
  ss << in.rdbuf();
  return ss.str();
}

namespace {

// The client options of "https://HOST:PORT", "http://HOST:PORT" or "HOST:PORT" (https), TLS
// verified against `ca_file`; throws CommandError naming `flag`.
net::ClientOptions ParseServer(const std::string& server, const std::string& ca_file,
                               const std::string& flag) {
  Result<net::ClientOptions> o = net::ClientOptionsForUrl(server, ca_file, flag);
  if (!o.ok()) throw CommandError(o.status().message());
  return *o;
}

// Who leads among several heads (docs/ha.md "Following the leader"): each is asked GET
// /v1/leader (no token needed); the one that says "leader" is it, and a standby's answer names
// it. Retried while a failover is in progress, for TESSERA_LEADER_WAIT_MS (default 30 s).
net::ClientOptions FindLeader(const std::vector<std::string>& heads, const std::string& ca_file,
                              const std::string& flag) {
  int64_t wait_ms = 30'000;
  if (const char* env = std::getenv("TESSERA_LEADER_WAIT_MS")) wait_ms = std::atoll(env);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  std::string answers;
  while (true) {
    answers.clear();
    std::vector<std::string> to_ask = heads;
    for (size_t i = 0; i < to_ask.size() && i < heads.size() + 2; ++i) {
      net::ClientOptions o = ParseServer(to_ask[i], ca_file, flag);
      o.connect_timeout = std::chrono::milliseconds(1'000);
      o.read_timeout = std::chrono::milliseconds(2'000);
      net::HttpClient client(o);
      auto r = client.Request(net::Method::kGet, "/v1/leader");
      std::string answer;
      if (!r.ok()) {
        answer = r.status().message();
      } else {
        nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
        if (r->status == 200 && j.is_object() && j.value("role", "") == "leader") {
          return o;
        }
        // A standby names the leader as HOST:PORT; it speaks what the standby speaks.
        std::string leader = j.is_object() && j["leader"].is_string() ? j.value("leader", "") : "";
        if (!leader.empty() && leader.find("://") == std::string::npos)
          leader = (o.tls ? "https://" : "http://") + leader;
        answer = r->status != 200 ? "HTTP " + std::to_string(r->status)
                 : j.is_object()  ? "role " + j.value("role", "?") +
                                       (leader.empty() ? ", no leader known" : ", leader " + leader)
                                 : "not a tessera head";
        // A standby names the leader: ask it next (it may be one of ours, or not listed).
        if (!leader.empty() && leader != to_ask[i] &&
            std::find(to_ask.begin() + static_cast<std::ptrdiff_t>(i) + 1, to_ask.end(), leader) ==
                to_ask.end()) {
          to_ask.insert(to_ask.begin() + static_cast<std::ptrdiff_t>(i) + 1, leader);
        }
      }
      answers += (answers.empty() ? "" : "; ") + to_ask[i] + ": " + answer;
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  throw CommandError("no leader among the heads " + flag + " names after " +
                         std::to_string(wait_ms) + " ms (" + answers +
                         "); check that a majority of etcd and one head are up, or set "
                         "TESSERA_LEADER_WAIT_MS to wait longer",
                     1);
}

}  // namespace

std::string CaFile(const ClientFlags& f, const UserConfig& config) {
  if (!f.ca_file.empty()) return f.ca_file;
  if (f.server.empty() && !config.ca_file.empty()) return config.ca_file;  // its own server's
  if (const char* env = std::getenv("TESSERA_CA_FILE")) return env;
  return f.state_dir + "/ca.crt";
}

std::unique_ptr<net::HttpClient> Connect(const ClientFlags& f) {
  const UserConfig config = ReadUserConfig(f);
  std::string server = f.server;
  std::string flag = "--server";
  if (server.empty() && !config.path.empty()) {
    server = config.server;
    flag = config.path;
  }
  if (server.empty()) {
    if (const char* env = std::getenv("TESSERA_SERVER")) {
      server = env;
      flag = "TESSERA_SERVER";
    }
  }
  const std::string ca_file = CaFile(f, config);
  net::ClientOptions o;
  std::vector<std::string> heads = ha::SplitHeadList(server);
  if (heads.empty()) {
    // `tessera up --ha` lists every head in head.json.
    std::ifstream in(f.state_dir + "/head.json");
    nlohmann::json head = in ? nlohmann::json::parse(in, nullptr, false) : nlohmann::json();
    if (head.is_object() && head["heads"].is_array()) {
      for (const auto& h : head["heads"])
        if (h.is_string()) heads.push_back(h.get<std::string>());
      flag = f.state_dir + "/head.json";
    }
  }
  if (heads.size() > 1) {
    o = FindLeader(heads, ca_file, flag);
  } else if (heads.size() == 1) {
    o = ParseServer(heads[0], ca_file, flag);
  } else {
    std::ifstream in(f.state_dir + "/head.json");
    if (!in)
      throw CommandError("no head found: " + f.state_dir +
                             "/head.json is missing; start a cluster with `tessera up`, or pass "
                             "--server https://HOST:PORT",
                         1);
    nlohmann::json head = nlohmann::json::parse(in, nullptr, false);
    if (head.is_discarded() || !head.contains("port"))
      throw CommandError(f.state_dir + "/head.json is not valid; restart the head", 1);
    o.host = head.value("address", "127.0.0.1");
    if (o.host == "0.0.0.0") o.host = "127.0.0.1";
    o.port = head["port"].get<uint16_t>();
    // A head started with --plain-http says "http"; one from before TLS says nothing.
    if (head.value("scheme", "http") == "https") o.tls = net::ClientTlsOptions{ca_file, "", "", ""};
  }
  std::string token;
  if (f.token_file.empty()) token = config.token;
  if (const char* env = std::getenv("TESSERA_TOKEN"); env && token.empty() && f.token_file.empty())
    token = env;
  if (token.empty()) {
    const std::string path = f.token_file.empty() ? f.state_dir + "/admin.token" : f.token_file;
    std::ifstream in(path);
    if (!in) throw CommandError(path + ": cannot read the admin token; pass --token-file", 1);
    std::getline(in, token);
  }
  o.bearer_token = token;
  return std::make_unique<net::HttpClient>(o);
}

nlohmann::json Call(net::HttpClient& client, net::Method method, const std::string& target,
                    const std::string& body) {
  auto r = client.Request(method, target, body);
  if (!r.ok()) throw CommandError("cannot reach the head: " + r.status().message(), 1);
  nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
  if (r->status >= 400) {
    std::string msg =
        j.is_object() && j.contains("error") ? j["error"].get<std::string>() : r->body;
    throw CommandError(msg, r->status == 404 ? 1 : r->status >= 500 ? 1 : 2);
  }
  return j;
}

void PrintLog(net::HttpClient& client, const std::string& target, bool follow) {
  if (!follow) {
    auto r = client.Request(net::Method::kGet, target);
    if (!r.ok()) throw CommandError("cannot reach the head: " + r.status().message(), 1);
    if (r->status >= 400) {
      nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
      throw CommandError(j.is_object() ? j.value("error", r->body) : r->body, 1);
    }
    std::cout << r->body << std::flush;
    return;
  }
  Status s = client.Stream(net::Method::kGet, target + "&follow=true", [](std::string_view line) {
    std::cout << line << "\n" << std::flush;
    return true;
  });
  if (!s.ok()) throw CommandError(s.message(), 1);
}

}  // namespace tessera::cli
