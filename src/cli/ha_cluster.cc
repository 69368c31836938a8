#include "cli/ha_cluster.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "api/head_tls.h"
#include "cli/client.h"
#include "cli/etcd_tls.h"
#include "ha/election.h"
#include "ha/ha_head.h"
#include "ha/head_list.h"
#include "net/http_client.h"

namespace tessera::cli {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using std::chrono::milliseconds;

// A loopback port nobody listens on now (another process may take it before we bind: the
// start then fails and says so).
uint16_t FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw CommandError("cannot open a socket to find a free port", 1);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    throw CommandError("cannot bind a loopback port to find a free one", 1);
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

std::string FindEtcd(const std::string& given) {
  if (!given.empty()) {
    if (::access(given.c_str(), X_OK) != 0)
      throw CommandError("--etcd: '" + given + "' is not an executable file");
    return given;
  }
  if (const char* path = std::getenv("PATH")) {
    for (const std::string& dir : ha::SplitHeadList([&] {
           std::string p = path;
           for (char& c : p) c = c == ':' ? ',' : c;
           return p;
         }())) {
      const std::string candidate = dir + "/etcd";
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    }
  }
  throw CommandError(
      "--ha needs etcd, and no etcd is on PATH: install Debian's etcd-server (scripts/setup.sh "
      "does) or pass --etcd /path/to/etcd",
      1);
}

// A GET to `host`:`port`; over TLS verified against `ca_file` unless it is empty (etcd, a head
// started with --plain-http).
Result<net::Response> Get(const std::string& host, uint16_t port, const std::string& target,
                          const std::string& ca_file = "") {
  net::ClientOptions o;
  o.host = host;
  o.port = port;
  if (!ca_file.empty()) o.tls = net::ClientTlsOptions{ca_file, "", "", ""};
  o.connect_timeout = milliseconds(1'000);
  o.read_timeout = milliseconds(2'000);
  net::HttpClient client(o);
  return client.Request(net::Method::kGet, target);
}

// etcd's /health; over TLS with `up`'s own client certificate when `tls` is set.
bool EtcdHealthy(const std::string& host, uint16_t port,
                 const std::optional<net::ClientTlsOptions>& tls) {
  net::ClientOptions o;
  o.host = host;
  o.port = port;
  o.tls = tls;
  o.connect_timeout = milliseconds(1'000);
  o.read_timeout = milliseconds(2'000);
  net::HttpClient client(o);
  auto r = client.Request(net::Method::kGet, "/health");
  return r.ok() && r->status == 200 && r->body.find("\"true\"") != std::string::npos;
}

Json LeaderInfo(const std::string& host, uint16_t port, const std::string& ca_file) {
  auto r = Get(host, port, "/v1/leader", ca_file);
  if (!r.ok() || r->status != 200) return Json::object();
  Json j = Json::parse(r->body, nullptr, false);
  return j.is_object() ? j : Json::object();
}

bool Alive(pid_t pid) { return pid > 0 && ::kill(pid, 0) == 0; }

void StopGroup(pid_t pid, milliseconds grace) {
  if (!Alive(pid)) return;
  ::kill(-pid, SIGTERM);  // the supervisor's session: the shell and the head under it
  ::kill(pid, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (std::chrono::steady_clock::now() < deadline) {
    ::waitpid(pid, nullptr, WNOHANG);
    if (!Alive(pid)) return;
    std::this_thread::sleep_for(milliseconds(20));
  }
  ::kill(-pid, SIGKILL);
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, WNOHANG);
}

// The admin and join tokens every head shares (a head's tokens live in its state dir).
std::string LoadOrCreateToken(const std::string& path) {
  if (std::ifstream in(path); in) {
    std::string token;
    std::getline(in, token);
    if (token.size() >= 16) return token;
  }
  unsigned char raw[32];
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::read(fd, raw, sizeof raw) != static_cast<ssize_t>(sizeof raw)) {
    if (fd >= 0) ::close(fd);
    throw CommandError("/dev/urandom: cannot read random bytes for " + path, 1);
  }
  ::close(fd);
  static const char* kHex = "0123456789abcdef";
  std::string token;
  for (unsigned char c : raw) token += {kHex[c >> 4], kHex[c & 15]};
  std::ofstream out(path, std::ios::trunc);
  out << token << "\n";
  out.close();
  if (!out || ::chmod(path.c_str(), 0600) != 0)
    throw CommandError(path + ": cannot write the token", 1);
  return token;
}

void WriteToken(const std::string& path, const std::string& token) {
  std::ofstream out(path, std::ios::trunc);
  out << token << "\n";
  out.close();
  if (!out || ::chmod(path.c_str(), 0600) != 0)
    throw CommandError(path + ": cannot write the token", 1);
}

// The heads' supervisor: restarts a head that exits with 3 (it stepped down as leader) or is
// killed by a signal, as systemd's Restart=on-failure would; a clean stop (0) or a start error
// ends it. A shell, so there is no extra tessera process to keep alive.
const char* kSupervisor =
    "while :; do \"$@\"; c=$?; if [ $c -ne 3 ] && [ $c -lt 128 ]; then exit $c; fi; "
    "echo \"supervisor: the head exited with $c; restarting it as a standby\" >&2; sleep 0.2; "
    "done";

// The client TLS `up` and `status` speak to etcd with: the cluster CA and the client
// certificate `up` writes into the cluster's state directory.
net::ClientTlsOptions EtcdCliTls(const std::string& dir) {
  return {dir + "/" + api::kCaCertFile, dir + "/" + ha::kEtcdClientCertFile,
          dir + "/" + ha::kEtcdClientKeyFile, ""};
}

// "host:port" (or http://host:port) split; the port 0 when there is none.
std::pair<std::string, uint16_t> SplitEndpoint(std::string endpoint) {
  if (endpoint.rfind("http://", 0) == 0) endpoint = endpoint.substr(7);
  const size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos) return {endpoint, 0};
  try {
    return {endpoint.substr(0, colon),
            static_cast<uint16_t>(std::stoi(endpoint.substr(colon + 1)))};
  } catch (...) {
    return {endpoint.substr(0, colon), 0};
  }
}

}  // namespace

std::string HaHeadMember(int i) { return i == 0 ? "head" : "head-" + std::to_string(i); }
std::string HaEtcdMember(int i) { return "etcd-" + std::to_string(i); }

std::vector<std::string> HaExtraMembers(int heads) {
  std::vector<std::string> members;
  for (int i = 1; i < heads; ++i) members.push_back(HaHeadMember(i));
  for (int i = 0; i < 3; ++i) members.push_back(HaEtcdMember(i));
  return members;
}

void HaUpFlags::Add(CLI::App* cmd) {
  cmd->add_flag("--ha", ha,
                "an HA control plane (docs/ha.md): three etcd members, --ha-heads heads on them, "
                "the agents following the leader");
  cmd->add_option_function<int>(
         "--ha-heads",
         [this](int n) {
           heads = n;
           heads_given = true;
         },
         "with --ha: how many heads (2 or 3; default 3)")
      ->type_name("N");
  cmd->add_option_function<std::string>(
         "--etcd",
         [this](const std::string& v) {
           etcd = v;
           etcd_given = true;
         },
         "with --ha: the etcd binary (default: etcd on PATH)")
      ->type_name("PATH");
  auto election = [this](int64_t& field) {
    return [this, &field](int64_t v) {
      field = v;
      election_given = true;
    };
  };
  cmd->add_option_function<int64_t>("--election-lease-ms", election(election_lease_ms),
                                    "with --ha: the heads' election lease (default 15000)");
  cmd->add_option_function<int64_t>("--election-renew-deadline-ms", election(election_renew_ms),
                                    "with --ha: the heads' renew deadline (default 10000)");
  cmd->add_option_function<int64_t>("--election-retry-ms", election(election_retry_ms),
                                    "with --ha: the heads' retry period (default 2000)");
}

void CheckHaUpFlags(const HaUpFlags& f, const std::string& fence_ms) {
  if (!f.ha) {
    if (f.heads_given) throw CommandError("--ha-heads only applies with --ha; add --ha");
    if (f.etcd_given) throw CommandError("--etcd only applies with --ha; add --ha");
    if (f.election_given)
      throw CommandError("--election-* only apply with --ha (one head has no election); add --ha");
    return;
  }
  if (f.heads < 2 || f.heads > 3)
    throw CommandError("--ha-heads: " + std::to_string(f.heads) +
                       " heads; --ha runs 2 or 3 (one head needs no --ha)");
  const ha::ElectionConfig config{milliseconds(f.election_lease_ms),
                                  milliseconds(f.election_renew_ms),
                                  milliseconds(f.election_retry_ms)};
  if (Status s = ha::ValidateElectionConfig(config); !s.ok())
    throw CommandError("--election-*: " + s.message());
  if (fence_ms.empty()) return;  // up gives the agents the lease plus 5 s (AgentFenceMs)
  const int64_t fence = std::atoll(fence_ms.c_str());
  if (fence != 0 && fence <= f.election_lease_ms)
    throw CommandError("--fence-ms " + std::to_string(fence) +
                       " with --ha and an election lease of " +
                       std::to_string(f.election_lease_ms) +
                       " ms: agents would stop their training workers before a standby can "
                       "take over from a dead leader; give --fence-ms above the lease (e.g. " +
                       std::to_string(f.election_lease_ms + 5'000) +
                       ") or a shorter "
                       "--election-lease-ms");
}

HaControlPlane StartHaControlPlane(const HaUpFlags& f, const std::string& exe,
                                   const std::string& dir,
                                   const std::vector<std::string>& head_flags,
                                   std::chrono::steady_clock::time_point deadline,
                                   const HaPlacement& placement,
                                   const std::function<void(const Json&)>& on_started) {
  const std::string etcd = FindEtcd(f.etcd);
  HaControlPlane plane;
  Json& rec = plane.record;
  rec = {{"etcd", Json::array()},  {"etcdPorts", Json::array()}, {"etcdEndpoints", Json::array()},
         {"heads", Json::array()}, {"headPorts", Json::array()}, {"headEndpoints", Json::array()}};
  auto fail = [&](const std::string& what) {
    StopHaControlPlane(rec);
    throw CommandError(what, 1);
  };
  // A fresh etcd cluster each time: its members' addresses are in its data.
  std::error_code ec;
  fs::remove_all(dir + "/etcd", ec);
  fs::create_directories(dir + "/etcd");
  // On loopback every member needs ports of its own; at its own address (--netns) the defaults
  // are free.
  auto port_at = [](const std::string& address, uint16_t fixed) {
    return address == "127.0.0.1" ? FreePort() : fixed;
  };
  // One cluster CA for every head (each signs its own server certificate with it at start), in
  // the cluster's state directory too, for the CLI, the router and the agents. It signs etcd's
  // certificates as well: the members speak TLS to clients and peers and ask each for a
  // certificate; --plain-http leaves etcd plain too.
  const bool tls =
      std::find(head_flags.begin(), head_flags.end(), "--plain-http") == head_flags.end();
  const std::string scheme = tls ? "https://" : "http://";
  const std::string ca_file = tls ? dir + "/" + api::kCaCertFile : "";
  pki::CertAndKey ca;
  std::optional<net::ClientTlsOptions> etcd_tls;
  if (tls) {
    auto made = api::PrepareHeadTls(dir, {"127.0.0.1", {}});
    if (!made.ok()) fail("the cluster CA: " + made.status().message());
    auto cert = pki::ReadPemFile(ca_file);
    auto key = pki::ReadPemFile(dir + "/" + api::kCaKeyFile);
    if (!cert.ok() || !key.ok())
      fail("the cluster CA: " + (cert.ok() ? key.status() : cert.status()).message());
    ca = {*cert, *key};
    etcd_tls = EtcdCliTls(dir);
    if (Status s = MakeEtcdClientTls(ca, "up", etcd_tls->cert_file, etcd_tls->key_file); !s.ok())
      fail("etcd's client certificate for up: " + s.message());
    fs::create_directories(dir + "/etcd/tls");
  } else {
    std::cerr << "tessera up: etcd speaks PLAIN HTTP (--plain-http): its data and the heads' "
                 "writes cross the network readable, and any caller may change them"
              << std::endl;
  }
  std::vector<std::string> etcd_hosts;
  std::vector<uint16_t> client_ports, peer_ports;
  std::string initial;
  for (int i = 0; i < 3; ++i) {
    etcd_hosts.push_back(placement.address(HaEtcdMember(i)));
    client_ports.push_back(port_at(etcd_hosts[i], 2379));
    peer_ports.push_back(port_at(etcd_hosts[i], 2380));
    initial += (i ? "," : "") + std::string("e") + std::to_string(i) + "=" + scheme +
               etcd_hosts[i] + ":" + std::to_string(peer_ports.back());
  }
  std::string store = tls ? "etcds://" : "etcd://";
  for (int i = 0; i < 3; ++i) {
    const std::string endpoint = etcd_hosts[i] + ":" + std::to_string(client_ports[i]);
    const std::string c = scheme + endpoint;
    const std::string p = scheme + etcd_hosts[i] + ":" + std::to_string(peer_ports[i]);
    std::vector<std::string> tls_flags;
    if (tls) {
      auto member =
          MakeEtcdMemberTls(ca, dir + "/etcd/tls", "e" + std::to_string(i), etcd_hosts[i]);
      if (!member.ok())
        fail("etcd member e" + std::to_string(i) + ": " + member.status().message());
      tls_flags = EtcdTlsFlags(*member, ca_file);
    }
    std::vector<std::string> etcd_args = {"--name",
                                          "e" + std::to_string(i),
                                          "--data-dir",
                                          dir + "/etcd/e" + std::to_string(i),
                                          "--listen-client-urls",
                                          c,
                                          "--advertise-client-urls",
                                          c,
                                          "--listen-peer-urls",
                                          p,
                                          "--initial-advertise-peer-urls",
                                          p,
                                          "--initial-cluster",
                                          initial,
                                          "--initial-cluster-state",
                                          "new",
                                          "--initial-cluster-token",
                                          "tessera-up",
                                          "--max-txn-ops",
                                          "10000"};
    etcd_args.insert(etcd_args.end(), tls_flags.begin(), tls_flags.end());
    const pid_t pid = placement.spawn(HaEtcdMember(i), etcd, etcd_args,
                                      dir + "/logs/etcd-" + std::to_string(i) + ".log");
    rec["etcd"].push_back(pid);
    rec["etcdPorts"].push_back(client_ports[i]);
    rec["etcdEndpoints"].push_back(endpoint);
    store += (i ? "," : "") + endpoint;
  }
  rec["store"] = store;
  rec["etcdTls"] = tls;
  on_started(rec);
  for (int i = 0; i < 3; ++i) {
    while (!EtcdHealthy(etcd_hosts[i], client_ports[i], etcd_tls)) {
      if (std::chrono::steady_clock::now() > deadline || !Alive(rec["etcd"][i].get<pid_t>()))
        fail("etcd member e" + std::to_string(i) + " did not become healthy; see " + dir +
             "/logs/etcd-" + std::to_string(i) + ".log");
      std::this_thread::sleep_for(milliseconds(50));
    }
  }
  const std::string admin = LoadOrCreateToken(dir + "/admin.token");
  const std::string join = LoadOrCreateToken(dir + "/join.token");
  Json heads_list = Json::array();
  for (int i = 0; i < f.heads; ++i) {
    const std::string state = dir + "/heads/" + std::to_string(i);
    fs::create_directories(state);
    fs::permissions(state, fs::perms::owner_all, fs::perm_options::replace, ec);
    WriteToken(state + "/admin.token", admin);
    WriteToken(state + "/join.token", join);
    if (tls) {
      fs::copy_file(dir + "/ca.crt", state + "/ca.crt", fs::copy_options::overwrite_existing, ec);
      if (!ec)
        fs::copy_file(dir + "/ca.key", state + "/ca.key", fs::copy_options::overwrite_existing, ec);
      if (!ec)
        fs::permissions(state + "/ca.key", fs::perms::owner_read | fs::perms::owner_write,
                        fs::perm_options::replace, ec);
      if (ec) fail(state + ": cannot copy the cluster CA there: " + ec.message());
      // Its own client certificate for etcd, which names it (etcd's logs say who called).
      if (Status s = MakeEtcdClientTls(ca, "head:" + HaHeadMember(i),
                                       state + "/" + ha::kEtcdClientCertFile,
                                       state + "/" + ha::kEtcdClientKeyFile);
          !s.ok())
        fail(state + ": etcd's client certificate: " + s.message());
    }
    const std::string host = placement.address(HaHeadMember(i));
    const uint16_t port = port_at(host, 8080);
    const std::string endpoint = host + ":" + std::to_string(port);
    std::vector<std::string> args = {
        "-c",  kSupervisor, "tessera-head-supervisor", exe,      "head", "--store",
        store, "--port",    std::to_string(port),      "--bind", host,   "--state-dir",
        state};
    args.insert(args.end(), head_flags.begin(), head_flags.end());
    args.insert(args.end(), {"--election-lease-ms", std::to_string(f.election_lease_ms),
                             "--election-renew-deadline-ms", std::to_string(f.election_renew_ms),
                             "--election-retry-ms", std::to_string(f.election_retry_ms)});
    const pid_t pid = placement.spawn(HaHeadMember(i), "/bin/sh", args,
                                      dir + "/logs/head-" + std::to_string(i) + ".log");
    rec["heads"].push_back(pid);
    rec["headPorts"].push_back(port);
    rec["headEndpoints"].push_back(endpoint);
    plane.head_urls.push_back(scheme + endpoint);
    heads_list.push_back(scheme + endpoint);
    on_started(rec);
  }
  std::string leader_host;
  int leader_port = 0;
  while (leader_port == 0) {
    for (const Json& endpoint : rec["headEndpoints"]) {
      const auto [host, port] = SplitEndpoint(endpoint.get<std::string>());
      if (LeaderInfo(host, port, ca_file).value("role", "") == "leader") {
        leader_host = host;
        leader_port = port;
      }
    }
    if (leader_port != 0) break;
    for (const Json& pid : rec["heads"])
      if (!Alive(pid.get<pid_t>())) fail("a head did not start; see " + dir + "/logs/head-*.log");
    if (std::chrono::steady_clock::now() > deadline)
      fail("no head was elected leader in time; see " + dir + "/logs/head-*.log and etcd-*.log");
    std::this_thread::sleep_for(milliseconds(50));
  }
  plane.leader_url = scheme + leader_host + ":" + std::to_string(leader_port);
  std::ofstream out(dir + "/head.json", std::ios::trunc);
  out << Json{{"address", leader_host},
              {"port", leader_port},
              {"scheme", tls ? "https" : "http"},
              {"heads", heads_list}}
             .dump(2)
      << "\n";
  out.close();
  if (!out) fail(dir + "/head.json: cannot write it");
  return plane;
}

int StopHaControlPlane(const Json& record) {
  int stopped = 0;
  for (const char* kind : {"heads", "etcd"}) {  // the heads first: they revoke their leases
    if (!record.contains(kind)) continue;
    for (const Json& pid : record[kind]) {
      if (!Alive(pid.get<pid_t>())) continue;
      StopGroup(pid.get<pid_t>(), milliseconds(10'000));
      ++stopped;
    }
  }
  return stopped;
}

void AddStatusCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "status", "Show the control plane: each head's role and term, who leads, etcd's health");
  auto flags = std::make_shared<ClientFlags>();
  cmd->add_option("--server", flags->server,
                  "the head(s), http://HOST:PORT[,...] (default: from --state-dir)");
  cmd->add_option("--state-dir", flags->state_dir, "where `tessera up` keeps the cluster's state")
      ->capture_default_str();
  cmd->callback([flags] {
    std::vector<std::string> heads = ha::SplitHeadList(flags->server);
    if (heads.empty())
      if (const char* env = std::getenv("TESSERA_SERVER")) heads = ha::SplitHeadList(env);
    Json cluster;
    if (std::ifstream in(flags->state_dir + "/cluster.json"); in)
      cluster = Json::parse(in, nullptr, false);
    if (heads.empty()) {
      std::ifstream in(flags->state_dir + "/head.json");
      Json head = in ? Json::parse(in, nullptr, false) : Json();
      if (head.is_object() && head["heads"].is_array()) {
        for (const Json& h : head["heads"]) heads.push_back(h.get<std::string>());
      } else if (head.is_object() && head.contains("port")) {
        std::string address = head.value("address", "127.0.0.1");
        if (address == "0.0.0.0") address = "127.0.0.1";
        heads.push_back(head.value("scheme", "http") + "://" + address + ":" +
                        std::to_string(head.value("port", 0)));
      }
    }
    if (heads.empty())
      throw CommandError("no head found: " + flags->state_dir +
                             "/head.json is missing; start a cluster with `tessera up`, or pass "
                             "--server http://HOST:PORT[,...]",
                         1);
    std::printf("%-22s %-9s %-6s %s\n", "HEAD", "ROLE", "TERM", "LEADER");
    std::string leader;
    int64_t term = 0;
    for (std::string h : heads) {
      // https:// (or no scheme) is verified against the cluster CA; http:// is --plain-http.
      const std::string ca_file = h.starts_with("http://") ? "" : flags->state_dir + "/ca.crt";
      if (h.starts_with("http://")) h = h.substr(7);
      if (h.starts_with("https://")) h = h.substr(8);
      const auto [host, port] = SplitEndpoint(h);
      if (port == 0)
        throw CommandError("--server: '" + h + "' has no valid port; write https://HOST:PORT");
      Json info = LeaderInfo(host, port, ca_file);
      if (info.contains("role")) {
        std::printf("%-22s %-9s %-6lld %s\n", h.c_str(), info.value("role", "?").c_str(),
                    static_cast<long long>(info.value("term", int64_t{0})),
                    info.value("leader", "").c_str());
        if (info.value("role", "") == "leader") {
          leader = h;
          term = info.value("term", int64_t{0});
        }
        continue;
      }
      auto health = Get(host, port, "/healthz", ca_file);
      if (health.ok() && health->status == 200) {
        std::printf("%-22s %-9s %-6s %s\n", h.c_str(), "single", "-", "(one head, no election)");
        leader = h;
      } else {
        std::printf("%-22s %-9s %-6s %s\n", h.c_str(), "down", "-",
                    health.ok() ? ("HTTP " + std::to_string(health->status)).c_str()
                                : health.status().message().c_str());
      }
    }
    if (cluster.is_object() && cluster.contains("ha")) {
      const Json& ha = cluster["ha"];
      std::vector<std::string> etcd;  // a record of before --netns has the ports alone
      for (const Json& e : ha.value("etcdEndpoints", Json::array())) etcd.push_back(e);
      if (etcd.empty())
        for (const Json& port : ha.value("etcdPorts", Json::array()))
          etcd.push_back("127.0.0.1:" + std::to_string(port.get<int>()));
      for (const std::string& e : etcd) {
        const auto [host, port] = SplitEndpoint(e);
        const bool healthy =
            EtcdHealthy(host, port,
                        ha.value("etcdTls", false)
                            ? std::optional<net::ClientTlsOptions>(EtcdCliTls(flags->state_dir))
                            : std::nullopt);
        std::printf("etcd %-17s %s\n", e.c_str(), healthy ? "healthy" : "unhealthy or down");
      }
    }
    if (leader.empty()) {
      std::printf("leader: none (a failover may be in progress; retry in a few seconds)\n");
      throw CommandError("no head leads", 1);
    }
    std::printf("leader: %s%s\n", leader.c_str(),
                term ? (" (term " + std::to_string(term) + ")").c_str() : "");
  });
}

}  // namespace tessera::cli
