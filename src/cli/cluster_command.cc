// `tessera up` and `tessera down`: a local emulated cluster on this machine. `up` starts a head,
// the serving router (`tessera router`, its port in <state-dir>/router.json) and one emulated
// agent per host, each in its own session, waits until every host has registered, and records
// the processes in <state-dir>/cluster.json; `down` stops them. With --netns the head and each
// agent run in a network namespace of their own at their own address (netns.h, docs/netns.md),
// and `down` removes the namespaces too.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <thread>

#include "api/head_tls.h"
#include "cli/client.h"
#include "cli/gpu_up_plan.h"
#include "cli/ha_cluster.h"
#include "cli/netns.h"
#include "cli/up_plan.h"
#include "pki/pki.h"
#include "placement/gpu_domains.h"
#include "topology/topology.h"

namespace tessera::cli {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

std::string SelfExe() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw CommandError("cannot find the tessera binary: " + ec.message(), 1);
  return p.string();
}

// Starts `args` detached (own session), output appended to `log`. Returns the pid.
pid_t Spawn(const std::string& exe, const std::vector<std::string>& args, const std::string& log) {
  pid_t pid = ::fork();
  if (pid < 0) throw CommandError("fork failed", 1);
  if (pid == 0) {
    ::setsid();
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    if (devnull >= 0) ::dup2(devnull, 0);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(exe.c_str()));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(exe.c_str(), argv.data());
    ::_exit(127);
  }
  return pid;
}

bool Alive(pid_t pid) { return pid > 0 && ::kill(pid, 0) == 0; }

// Waits for a pid we may or may not be the parent of.
bool WaitGone(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    ::waitpid(pid, nullptr, WNOHANG);
    if (!Alive(pid)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

struct UpFlags {
  // --gpu: emulated GPU hosts (gpu_up_plan.h) instead of TPU slices, sized by --domains and
  // --trays (gb200-nvl72) or --hosts (h100, h200).
  std::string gpu;
  int domains = 0, trays = 0, hosts = 0;
  std::string generation = "v6e";
  std::string topology = "4x4";
  int slices = 2;
  int cubes = 0;
  std::string state_dir = ".tessera";
  int timeout_s = 60;
  int64_t lease_ms = 5000;
  int64_t heartbeat_ms = 1000;
  // Passed to every agent (docs/agent-protocol.md, "Warm workers"); off when both are empty.
  std::string warm_python;
  std::string warm_preload;
  std::string warm_pool;
  std::string warm_refill_delay_ms;
  std::string fence_ms;       // passed to every agent; "" = AgentFenceMs's choice (up_plan.h)
  HaUpFlags ha;               // --ha: etcd members and several heads (ha_cluster.h)
  std::string backfill;       // passed to the head's --backfill; "" = its default
  bool defrag = false;        // the head's --defrag
  bool fair_sharing = false;  // the head's --fair-sharing
  bool plain_http = false;    // the head's --plain-http: insecure, for debugging
  bool replicas_plain_http = false;  // the head's and the router's --replicas-plain-http
  // The head's --help-factor, --help-quantile, --help-window; "" = its default (the head checks).
  std::string help_factor, help_quantile, help_window;
  std::string host_cert_ttl_s;  // the head's --host-cert-ttl-s; "" = its default (24 h)
  bool netns = false;           // each host and the head in a network namespace (docs/netns.md)
};

void Down(const std::string& state_dir, bool purge, bool quiet);

// The serving router's HTTPS files in `dir`, made again at every `up`: router.crt, signed by the
// cluster CA there, for 127.0.0.1, ::1, localhost and `bridge_address` when not empty (under
// --netns the router stays in the root namespace and the members reach it at the bridge's
// address), and its key router.key; both 0600. Throws CommandError naming what failed.
void MakeRouterTls(const std::string& dir, const std::string& bridge_address) {
  auto ca_cert = pki::ReadPemFile(dir + "/" + api::kCaCertFile);
  auto ca_key = pki::ReadPemFile(dir + "/" + api::kCaKeyFile);
  if (!ca_cert.ok() || !ca_key.ok()) {
    throw CommandError("the router's certificate: " +
                           (ca_cert.ok() ? ca_key.status() : ca_cert.status()).message(),
                       1);
  }
  pki::ServerCertOptions options;
  options.common_name = "tessera router";
  options.dns_names = {"localhost"};
  options.ip_addresses = {"127.0.0.1", "::1"};
  if (!bridge_address.empty()) options.ip_addresses.push_back(bridge_address);
  auto made = pki::MakeServerCert({*ca_cert, *ca_key}, options);
  if (!made.ok()) throw CommandError("the router's certificate: " + made.status().message(), 1);
  Status s = pki::WriteFile(dir + "/router.crt", made->cert_pem, 0600);
  if (s.ok()) s = pki::WriteKeyFile(dir + "/router.key", made->key_pem);
  if (!s.ok()) throw CommandError("the router's certificate: " + s.message(), 1);
}

// The agents' names and layout flags, in the order `up` starts them.
std::vector<std::vector<std::string>> AgentLayouts(const UpFlags& f, bool three_d,
                                                   int hosts_per_slice) {
  std::vector<std::vector<std::string>> agents;
  if (three_d) {
    for (int c = 0; c < f.cubes; ++c)
      for (int z = 0; z < 4; ++z)
        for (int y = 0; y < 2; ++y)
          for (int x = 0; x < 2; ++x) {
            char name[64], cube[32];
            std::snprintf(cube, sizeof cube, "cube-%03d", c);
            std::snprintf(name, sizeof name, "%s-h%02d", cube, z * 4 + y * 2 + x);
            agents.push_back(
                {name, "--cube", cube, "--block", "block-00", "--coord",
                 std::to_string(x) + "," + std::to_string(y) + "," + std::to_string(z)});
          }
  } else {
    for (int s = 0; s < f.slices; ++s)
      for (int w = 0; w < hosts_per_slice; ++w) {
        char name[64], slice[32];
        std::snprintf(slice, sizeof slice, "slice-%03d", s);
        std::snprintf(name, sizeof name, "%s-w%d", slice, w);
        agents.push_back(
            {name, "--slice", slice, "--topology", f.topology, "--worker", std::to_string(w)});
      }
  }
  return agents;
}

void Up(const UpFlags& f) {
  CheckHaUpFlags(f.ha, f.fence_ms);
  if (f.netns) {
    if (const std::string why = NetnsUnsupportedReason(); !why.empty()) throw CommandError(why);
  }
  std::vector<GpuUpHost> gpu_hosts;
  if (!f.gpu.empty()) {
    auto hosts = GpuUpHosts({f.gpu, f.domains, f.trays, f.hosts});
    if (!hosts.ok()) throw CommandError(hosts.status().message());
    gpu_hosts = std::move(*hosts);
  }
  // GPU hosts register as one-host v6e slices of their GPU count (gpu_up_plan.h).
  const std::string generation = gpu_hosts.empty() ? f.generation : "v6e";
  auto gen = ParseGeneration(generation);
  if (!gen.ok()) throw CommandError("--generation: " + gen.status().message());
  const bool three_d = Info(*gen).rank == 3;
  int hosts_per_slice = 0;
  if (!gpu_hosts.empty()) {
    // sized by GpuUpHosts
  } else if (three_d) {
    if (f.cubes < 1 || f.cubes > 16)
      throw CommandError("--cubes: a " + f.generation +
                         " cluster needs 1 to 16 cubes, e.g. --cubes 2");
  } else {
    auto topo = SliceTopology::Parse(f.generation, f.topology);
    if (!topo.ok()) throw CommandError("--topology: " + topo.status().message());
    if (f.slices < 1 || f.slices > 16) throw CommandError("--slices: must be 1 to 16");
    hosts_per_slice = topo->hosts();
  }
  const std::string dir = fs::absolute(f.state_dir).string();
  if (std::ifstream in(dir + "/cluster.json"); in) {
    Json c = Json::parse(in, nullptr, false);
    if (!c.is_discarded() && Alive(c.value("head", 0)))
      throw CommandError("a cluster is already running from " + dir + " (head pid " +
                             std::to_string(c.value("head", 0)) + "); run `tessera down` first",
                         1);
  }
  fs::create_directories(dir + "/logs");
  fs::remove(dir + "/head.json");
  const std::string exe = SelfExe();
  std::vector<std::vector<std::string>> agents = AgentLayouts(f, three_d, hosts_per_slice);
  if (!gpu_hosts.empty()) {
    agents.clear();
    // Each host's nvidia-smi: a script that prints the output GpuUpHosts wrote for it.
    fs::create_directories(dir + "/gpus");
    for (const GpuUpHost& h : gpu_hosts) {
      const std::string xml = dir + "/gpus/" + h.name + ".xml";
      const std::string script = dir + "/gpus/" + h.name + ".sh";
      std::ofstream(xml, std::ios::trunc) << h.nvidia_smi;
      std::ofstream(script, std::ios::trunc) << "#!/bin/sh\nexec cat '" << xml << "'\n";
      std::error_code ec;
      fs::permissions(script, fs::perms::owner_all | fs::perms::group_read | fs::perms::others_read,
                      ec);
      if (ec || !fs::exists(xml))
        throw CommandError("cannot write " + script + ": " + ec.message());
      agents.push_back({h.name, "--slice", h.name, "--topology", h.topology, "--worker", "0",
                        "--devices", "nvidia", "--nvidia-smi", script, "--label",
                        std::string(kGpuSystemLabel) + "=" + f.gpu});
    }
  }
  // Leftovers of a cluster that crashed from this directory go first (netns.h proves them ours).
  RemoveNetns(dir, true);
  std::optional<NetnsPlan> netns;
  if (f.netns) {
    // Under --ha the other heads and the etcd members get namespaces too, before the agents.
    std::vector<std::string> names;
    if (f.ha.ha) names = HaExtraMembers(f.ha.heads);
    for (const auto& a : agents) names.push_back(a[0]);
    netns = MakeNetns(dir, names);
  }
  // `program` with `args`, in member `name`'s namespace under --netns.
  auto spawn_program = [&](const std::string& name, const std::string& program,
                           const std::vector<std::string>& args, const std::string& log) {
    if (!netns) return Spawn(program, args, log);
    std::vector<std::string> argv = {program};
    argv.insert(argv.end(), args.begin(), args.end());
    argv = InNetns(netns->Find(name)->ns, argv);
    return Spawn(argv[0], std::vector<std::string>(argv.begin() + 1, argv.end()), log);
  };
  // `args` of the tessera binary, the same way.
  auto spawn_member = [&](const std::string& name, const std::vector<std::string>& args,
                          const std::string& log) { return spawn_program(name, exe, args, log); };
  // Where the head and each agent listen and are reached: their namespace's address, or loopback.
  auto address_of = [&](const std::string& name) -> std::string {
    return netns ? netns->Find(name)->address : "127.0.0.1";
  };
  Json cluster = {{"head", 0}, {"agents", Json::array()}, {"generation", generation}};
  if (!gpu_hosts.empty()) cluster["gpu"] = f.gpu;
  std::vector<std::string> head_args = {"head", "--state-dir", dir, "--port", "0"};
  if (netns && !f.ha.ha) head_args.insert(head_args.end(), {"--bind", address_of("head")});
  head_args.insert(head_args.end(), {"--lease-ms", std::to_string(f.lease_ms), "--heartbeat-ms",
                                     std::to_string(f.heartbeat_ms)});
  if (!f.backfill.empty()) head_args.insert(head_args.end(), {"--backfill", f.backfill});
  if (f.defrag) head_args.push_back("--defrag");
  if (f.fair_sharing) head_args.push_back("--fair-sharing");
  if (f.plain_http) head_args.push_back("--plain-http");
  if (f.replicas_plain_http) head_args.push_back("--replicas-plain-http");
  // The head makes the cluster CA in the state directory at its first start (before it writes
  // head.json, which this waits for); the router and the agents verify the head with it.
  const std::string scheme = f.plain_http ? "http://" : "https://";
  const std::string ca_file = dir + "/ca.crt";
  const std::pair<const char*, const std::string*> help_flags[] = {
      {"--help-factor", &f.help_factor},
      {"--help-quantile", &f.help_quantile},
      {"--help-window", &f.help_window},
      {"--host-cert-ttl-s", &f.host_cert_ttl_s}};
  for (const auto& [flag, value] : help_flags)
    if (!value->empty()) head_args.insert(head_args.end(), {flag, *value});
  auto save = [&] {
    std::ofstream out(dir + "/cluster.json");
    out << cluster.dump(2) << "\n";
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(f.timeout_s);
  std::string head_url;  // with --ha every head's, comma-separated: the agents follow the leader
  std::vector<std::string> head_urls;
  std::string leader_url;
  if (f.ha.ha) {
    HaControlPlane plane;
    try {
      plane = StartHaControlPlane(
          f.ha, exe, dir, std::vector<std::string>(head_args.begin() + 5, head_args.end()),
          deadline, HaPlacement{address_of, spawn_program}, [&](const Json& record) {
            cluster["ha"] = record;
            if (!record["heads"].empty()) cluster["head"] = record["heads"][0];
            save();
          });
    } catch (const CommandError&) {
      Down(dir, false, true);  // what it started is stopped; the namespaces go too
      throw;
    }
    for (const std::string& url : plane.head_urls) head_url += (head_url.empty() ? "" : ",") + url;
    head_urls = plane.head_urls;
    leader_url = plane.leader_url;
  } else {
    const pid_t head = spawn_member("head", head_args, dir + "/logs/head.log");
    cluster["head"] = head;
    save();
    int port = 0;
    while (port == 0) {
      if (std::chrono::steady_clock::now() > deadline || !Alive(head)) {
        Down(dir, false, true);
        throw CommandError("the head did not start; see " + dir + "/logs/head.log", 1);
      }
      std::ifstream in(dir + "/head.json");
      Json h = in ? Json::parse(in, nullptr, false) : Json();
      if (h.is_object() && h.value("pid", 0) == head) port = h.value("port", 0);
      if (port == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    head_url = scheme + address_of("head") + ":" + std::to_string(port);
    head_urls = {head_url};
    leader_url = head_url;
  }
  // The serving router: its own process, so requests keep flowing while the head is down.
  // HTTPS with a certificate from the cluster CA, like the head; plain only with --plain-http.
  fs::remove(dir + "/router.json");
  std::vector<std::string> router_args = {
      "router", "--head", head_url, "--token-file", dir + "/admin.token", "--ca-file",
      ca_file,  "--port", "0",      "--info-file",  dir + "/router.json"};
  if (f.replicas_plain_http) router_args.push_back("--replicas-plain-http");
  if (f.plain_http) {
    router_args.push_back("--plain-http");
  } else {
    try {
      MakeRouterTls(dir, netns ? netns->bridge_address : "");
    } catch (const CommandError&) {
      Down(dir, false, true);
      throw;
    }
    router_args.insert(router_args.end(), {"--tls-cert-file", dir + "/router.crt", "--tls-key-file",
                                           dir + "/router.key"});
  }
  const pid_t router = Spawn(exe, router_args, dir + "/logs/router.log");
  cluster["router"] = router;
  save();
  int router_port = 0;
  while (router_port == 0) {
    if (std::chrono::steady_clock::now() > deadline || !Alive(router)) {
      Down(dir, false, true);
      throw CommandError("the router did not start; see " + dir + "/logs/router.log", 1);
    }
    std::ifstream in(dir + "/router.json");
    Json r = in ? Json::parse(in, nullptr, false) : Json();
    if (r.is_object() && r.value("pid", 0) == router) router_port = r.value("port", 0);
    if (router_port == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  cluster["routerPort"] = router_port;
  const std::string router_url = scheme + "127.0.0.1:" + std::to_string(router_port);
  cluster["routerUrl"] = router_url;
  const std::string fence_ms = AgentFenceMs(f.ha.ha, f.ha.election_lease_ms, f.fence_ms);
  for (const auto& a : agents) {
    // The agent keeps the highest head term it has seen (fence/seen, docs/ha.md "Fencing"); the
    // control plane `up` starts may number its terms afresh (a new etcd with --ha), and no
    // deposed head of an earlier `up` is left to refuse, so it starts from nothing.
    std::error_code forget;
    fs::remove(dir + "/agents/" + a[0] + "/fence/seen", forget);
    std::vector<std::string> args = {
        "agent",    "--head",    head_url,        "--join-token-file",     dir + "/join.token",
        "--name",   a[0],        "--state-dir",   dir + "/agents/" + a[0], "--generation",
        generation, "--address", address_of(a[0])};
    args.insert(args.end(), {"--bind", address_of(a[0]), "--ca-file", ca_file});
    args.insert(args.end(), a.begin() + 1, a.end());
    // The layout above is the host, whatever this machine is (no discovery: docs/discovery.md);
    // a GPU host discovers its emulated GPUs through its nvidia-smi script.
    if (gpu_hosts.empty()) args.insert(args.end(), {"--devices", "emulated"});
    if (!fence_ms.empty()) args.insert(args.end(), {"--fence-ms", fence_ms});
    if (!f.warm_python.empty() || !f.warm_preload.empty()) {
      const std::string python = f.warm_python.empty() ? "/usr/bin/python3" : f.warm_python;
      args.insert(args.end(), {"--warm-python", python});
      if (!f.warm_preload.empty()) args.insert(args.end(), {"--warm-preload", f.warm_preload});
      if (!f.warm_pool.empty()) args.insert(args.end(), {"--warm-pool", f.warm_pool});
      if (!f.warm_refill_delay_ms.empty()) {
        args.insert(args.end(), {"--warm-refill-delay-ms", f.warm_refill_delay_ms});
      }
    }
    cluster["agents"].push_back(spawn_member(a[0], args, dir + "/logs/agent-" + a[0] + ".log"));
  }
  save();
  ClientFlags cf;
  cf.state_dir = dir;
  auto client = Connect(cf);
  size_t ready = 0;
  while (ready < agents.size()) {
    if (std::chrono::steady_clock::now() > deadline) {
      Down(dir, false, true);
      throw CommandError("only " + std::to_string(ready) + " of " + std::to_string(agents.size()) +
                             " hosts registered within " + std::to_string(f.timeout_s) +
                             " s; see " + dir + "/logs/",
                         1);
    }
    auto r = client->Request(net::Method::kGet, "/api/v1/hosts");
    ready = 0;
    if (r.ok() && r->status == 200) {
      Json hosts = Json::parse(r->body, nullptr, false);
      if (hosts.is_object())
        for (const Json& h : hosts["items"]) ready += h["status"].value("state", "") == "Ready";
    }
    if (ready < agents.size()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  UpCluster summary{std::string(GenerationName(*gen)), three_d, f.topology, f.slices, f.cubes,
                    static_cast<int>(agents.size()),   "",      0};
  if (!gpu_hosts.empty()) {
    summary.gpu_system = f.gpu;
    summary.gpu_domains = f.domains > 0 ? f.domains : static_cast<int>(gpu_hosts.size());
  }
  // A job the user can apply at once: the example when it fits this cluster, else one written
  // for it (a 7x cluster cannot run the example's v6e slices).
  std::string demo_job = "examples/train/job.yaml";
  if (!ExampleJobFits(summary)) {
    demo_job = dir + "/demo-job.yaml";
    std::ofstream out(demo_job, std::ios::trunc);
    out << (gpu_hosts.empty() ? DemoJobYaml(summary)
                              : GpuDemoJobYaml({f.gpu, f.domains, f.trays, f.hosts}));
    out.close();
    if (!out) {
      std::cerr << "warning: " << demo_job << ": cannot write the demo job\n";
      demo_job =
          "examples/train/job.yaml (after setting its accelerator and topology to this "
          "cluster's)";
    }
  }
  std::cout << UpSummary(summary, head_urls, leader_url, router_url, dir, demo_job);
}

void Down(const std::string& state_dir, bool purge, bool quiet) {
  const std::string dir = fs::absolute(state_dir).string();
  std::ifstream in(dir + "/cluster.json");
  Json c = in ? Json::parse(in, nullptr, false) : Json();
  int stopped = 0;
  if (c.is_object()) {
    // Agents first: each stops its workers (their whole process groups) before exiting.
    std::vector<pid_t> pids;
    for (const Json& p : c.value("agents", Json::array())) pids.push_back(p.get<pid_t>());
    for (pid_t p : pids)
      if (Alive(p) && ::kill(p, SIGTERM) == 0) ++stopped;
    for (pid_t p : pids) {
      if (WaitGone(p, std::chrono::seconds(15))) continue;
      ::kill(-p, SIGKILL);  // the agent's session, in case it left anything behind
      ::kill(p, SIGKILL);
      WaitGone(p, std::chrono::seconds(2));
    }
    // The router next: it only reads from the head.
    const pid_t router = c.value("router", 0);
    if (Alive(router) && ::kill(router, SIGTERM) == 0) {
      ++stopped;
      if (!WaitGone(router, std::chrono::seconds(10))) ::kill(router, SIGKILL);
      WaitGone(router, std::chrono::seconds(2));
    }
    if (c.contains("ha")) stopped += StopHaControlPlane(c["ha"]);  // heads, then etcd
    const pid_t head = c.value("head", 0);
    if (Alive(head) && ::kill(head, SIGTERM) == 0) {
      ++stopped;
      if (!WaitGone(head, std::chrono::seconds(10))) ::kill(head, SIGKILL);
      WaitGone(head, std::chrono::seconds(2));
    }
  }
  fs::remove(dir + "/cluster.json");
  fs::remove(dir + "/head.json");
  fs::remove(dir + "/router.json");
  // Once their processes are gone (also after a crash: the record outlives cluster.json).
  const int namespaces = RemoveNetns(dir, quiet);
  if (purge && !fs::exists(dir + "/netns.json")) fs::remove_all(dir);
  if (!quiet)
    std::cout << "tessera cluster down: " << stopped << " process(es) stopped"
              << (namespaces ? ", " + std::to_string(namespaces) + " network namespace(s) removed"
                             : "")
              << (purge ? ", state removed" : "") << "\n";
}

}  // namespace

void AddClusterCommands(CLI::App& app) {
  {
    auto* cmd =
        app.add_subcommand("up", "Start a local emulated cluster: a head and one agent per host");
    auto f = std::make_shared<UpFlags>();
    cmd->add_option("--generation", f->generation, "accelerator generation")->capture_default_str();
    cmd->add_option("--gpu", f->gpu,
                    "emulated GPU hosts of this system instead of TPU slices: gb200-nvl72 "
                    "(with --domains, --trays), h100 or h200 (with --hosts)");
    cmd->add_option("--domains", f->domains, "--gpu gb200-nvl72: NVLink domains (racks), 1 to 8");
    cmd->add_option("--trays", f->trays,
                    "--gpu gb200-nvl72: trays (hosts) per domain, 1 to 18 (default 18)");
    cmd->add_option("--hosts", f->hosts, "--gpu h100 or h200: hosts, 1 to 64");
    cmd->add_option("--topology", f->topology, "2D: shape of each slice")->capture_default_str();
    cmd->add_option("--slices", f->slices, "2D: number of slices")->capture_default_str();
    cmd->add_option("--cubes", f->cubes, "3D: number of 4x4x4 cubes (16 hosts each)");
    cmd->add_option("--state-dir", f->state_dir, "where state and logs go")->capture_default_str();
    cmd->add_option("--timeout", f->timeout_s, "seconds to wait for every host")
        ->capture_default_str();
    cmd->add_option("--lease-ms", f->lease_ms, "host lease")->capture_default_str();
    cmd->add_option("--heartbeat-ms", f->heartbeat_ms, "agent heartbeat interval")
        ->capture_default_str();
    cmd->add_option("--warm-python", f->warm_python,
                    "agents keep pre-started interpreters of this Python for its workers "
                    "(default /usr/bin/python3 when --warm-preload is given)");
    cmd->add_option("--warm-preload", f->warm_preload,
                    "modules the warm interpreters import ahead of time, e.g. torch");
    cmd->add_option("--warm-pool", f->warm_pool, "warm interpreters per agent (default 1)");
    cmd->add_option("--warm-refill-delay-ms", f->warm_refill_delay_ms,
                    "agents start a used warm interpreter's replacement this much later "
                    "(default 0)");
    cmd->add_option("--fence-ms", f->fence_ms,
                    "agents stop training workers once no head has answered for this long "
                    "(docs/ha.md \"Fencing\"; default 15000, with --ha the election lease "
                    "plus 5000; 0 = never)");
    cmd->add_option("--backfill", f->backfill, "the head's --backfill (none or easy)")
        ->check(CLI::IsMember({"none", "easy"}));
    cmd->add_flag("--defrag", f->defrag, "the head's --defrag (with --backfill easy)");
    cmd->add_flag("--plain-http", f->plain_http,
                  "INSECURE, for debugging only: the head serves plain HTTP instead of HTTPS and "
                  "every token crosses the network readable (docs/security.md)");
    cmd->add_flag("--replicas-plain-http", f->replicas_plain_http,
                  "the head's and the router's --replicas-plain-http: Service replicas serve "
                  "plain HTTP, on a network you trust (logged); default HTTPS with a "
                  "certificate from the cluster CA");
    cmd->add_flag("--fair-sharing", f->fair_sharing,
                  "the head's --fair-sharing: fair sharing across the ClusterQueues of a cohort "
                  "(docs/admission.md)");
    cmd->add_option("--help-factor", f->help_factor, "the head's --help-factor (--backfill easy)");
    cmd->add_option("--help-quantile", f->help_quantile, "the head's --help-quantile");
    cmd->add_option("--help-window", f->help_window, "the head's --help-window");
    cmd->add_option("--host-cert-ttl-s", f->host_cert_ttl_s,
                    "the head's --host-cert-ttl-s: how long the agents' host certificates live");
    cmd->add_flag("--netns", f->netns,
                  "the head and every host's agent each in a network namespace of its own, at "
                  "its own address in 198.18.0.0/15 (needs root and iproute2; docs/netns.md)");
    f->ha.Add(cmd);
    cmd->callback([f] { Up(*f); });
  }
  {
    auto* cmd = app.add_subcommand("down", "Stop the local cluster that `tessera up` started");
    auto dir = std::make_shared<std::string>(".tessera");
    auto purge = std::make_shared<bool>(false);
    cmd->add_option("--state-dir", *dir, "the cluster's state directory")->capture_default_str();
    cmd->add_flag("--purge", *purge, "also remove the state directory");
    cmd->callback([dir, purge] { Down(*dir, *purge, false); });
  }
  AddStatusCommand(app);
}

}  // namespace tessera::cli
