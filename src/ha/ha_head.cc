#include "ha/ha_head.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>

#include "api/head_tls.h"
#include "ha/elector.h"
#include "ha/head_list.h"
#include "ha/history_compactor.h"
#include "ha/job_cache.h"
#include "ha/standby_proxy.h"
#include "net/http_server.h"
#include "store/etcd_store.h"

namespace tessera::ha {

using nlohmann::json;

namespace {

int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// One step of a takeover, timestamped so that a failover's time can be split among them
// (bench/control_plane/run.py reads these lines): the election, the warm copy's catch-up, the
// head's start (its store load) and its serving.
void LogTakeover(const char* phase, int64_t term, std::chrono::steady_clock::time_point elected) {
  const auto since = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - elected);
  std::cerr << "tessera head: event=takeover phase=" << phase << " term=" << term
            << " unix_ms=" << UnixMs() << " since_election_ms=" << since.count() << std::endl;
}

// `serving` is false on the standby's server: an elected head says "starting" there, never
// "leader", until its full head serves on the port (a client that waits for "leader" and then
// writes would otherwise meet the gap between the two servers).
std::string InfoJson(const LeaderInfo& info, const std::string& self, bool serving) {
  const std::string role =
      !serving && info.role == Role::kLeader ? "starting" : std::string(RoleName(info.role));
  return json{{"role", role},
              {"term", info.term},
              {"leader", info.leader},
              {"self", self},
              {"last_error", info.last_error}}
      .dump();
}

// The standby's server: who leads; the clients' requests forwarded to the leader
// (standby_proxy.h); the agents', and everything while no leader is known, 503 naming the
// leader (or nobody yet) in the message, the "leader" field and the X-Tessera-Leader header.
Result<std::unique_ptr<net::HttpServer>> StartStandbyServer(const api::HeadOptions& head,
                                                            const Elector& elector,
                                                            StandbyProxy& proxy,
                                                            const std::string& self) {
  net::ServerOptions so;
  so.bind_address = head.bind_address;
  so.port = static_cast<uint16_t>(head.port);
  so.io_threads = 4;  // a forwarded request holds its thread until the leader answers
  so.stop_grace = std::chrono::milliseconds(500);
  if (!head.plain_http) {
    auto tls = api::PrepareHeadTls(head.state_dir, {head.bind_address, head.tls_sans});
    if (!tls.ok()) return tls.status();
    so.tls = *tls;
  }
  auto server = std::make_unique<net::HttpServer>(so);
  TESSERA_RETURN_IF_ERROR(server->Handle(net::Method::kGet, "/healthz", [&](const net::Request&) {
    return net::Response::Json(
        200, R"({"status":"standby","ha":)" + InfoJson(elector.Snapshot(), self, false) + "}");
  }));
  TESSERA_RETURN_IF_ERROR(server->Handle(net::Method::kGet, "/v1/leader", [&](const net::Request&) {
    return net::Response::Json(200, InfoJson(elector.Snapshot(), self, false));
  }));
  auto serve = [&](const net::Request& request) {
    const LeaderInfo info = elector.Snapshot();
    // A head restarted by its supervisor finds the leader key still naming its previous run
    // until that run's lease expires: forwarding to that address is forwarding to itself, and
    // each such request would hold a server thread waiting on the next one. A request another
    // standby already forwarded is not forwarded again either (two standbys with stale views
    // would pass it back and forth): both get the 503 below, and the client retries.
    const bool other_leads =
        info.role != Role::kLeader && !info.leader.empty() && info.leader != self;
    if (other_leads && StandbyProxy::Forwarded(request) && request.Header(kProxiedByHeader).empty())
      return proxy.Forward(request, info.leader);
    net::Response r = net::Response::Json(
        503, json{{"error",
                   "this head (" + self + ") is a standby; " +
                       (info.role == Role::kLeader
                            ? "it was elected (term " + std::to_string(info.term) +
                                  ") and is starting; retry shortly"
                        : info.leader.empty() ? "no leader is elected yet, retry shortly"
                        : info.leader == self
                            ? "the leader key still names this head's previous run, whose lease "
                              "has not expired yet; retry shortly"
                            : std::string(kLeaderIsAt) + info.leader + " (term " +
                                  std::to_string(info.term) + ")")},
                  {"leader", other_leads ? json(info.leader) : json(nullptr)}}
                 .dump());
    if (other_leads) r.headers.emplace(std::string(kLeaderHeader), info.leader);
    return r;
  };
  for (net::Method m : {net::Method::kGet, net::Method::kPost, net::Method::kPut,
                        net::Method::kPatch, net::Method::kDelete}) {
    TESSERA_RETURN_IF_ERROR(server->Handle(m, "/{path...}", serve));
  }
  TESSERA_RETURN_IF_ERROR(server->Start());
  return server;
}

}  // namespace

Status ValidateHaHeadOptions(const HaHeadOptions& o) {
  TESSERA_RETURN_IF_ERROR(store::ParseEtcdEndpoints(o.store_url, "--store").status());
  if (o.head.port == 0) {
    return InvalidArgument(
        "--port: an HA head (--store etcd://...) needs a fixed port, not 0: its address is "
        "what the standbys and agents are told");
  }
  if (!store::EtcdUrlUsesTls(o.store_url)) {
    for (const auto& [flag, value] : {std::pair{"--etcd-ca-file", &o.etcd_ca_file},
                                      std::pair{"--etcd-cert-file", &o.etcd_cert_file},
                                      std::pair{"--etcd-key-file", &o.etcd_key_file}}) {
      if (!value->empty())
        return InvalidArgument(std::string(flag) +
                               " only applies to etcd over TLS: write --store etcds://...");
    }
  }
  TESSERA_RETURN_IF_ERROR(ValidateElectionConfig(o.election));
  if (o.store_timeout.count() < 0) return InvalidArgument("--store-timeout-ms: must be >= 0");
  const int64_t compaction = o.etcd_compaction_interval.count();
  if (compaction != 0 && compaction < 1000)
    return InvalidArgument("--etcd-compaction-interval-ms: " + std::to_string(compaction) +
                           " is too short: give 0 (never compact) or at least 1000 (one "
                           "interval of etcd's history is kept for reads pinned to a revision; "
                           "default 60000, a minute)");
  return Status::Ok();
}

Result<store::EtcdOptions> HaEtcdOptions(const HaHeadOptions& options) {
  auto endpoints = store::ParseEtcdEndpoints(options.store_url, "--store");
  if (!endpoints.ok()) return endpoints.status();
  store::EtcdOptions etcd;
  etcd.endpoints = *std::move(endpoints);
  if (store::EtcdUrlUsesTls(options.store_url)) {
    const std::string& dir = options.head.state_dir;
    auto or_default = [&](const std::string& given, const char* file) {
      return given.empty() ? dir + "/" + file : given;
    };
    etcd.tls = store::EtcdTls{or_default(options.etcd_ca_file, api::kCaCertFile),
                              or_default(options.etcd_cert_file, kEtcdClientCertFile),
                              or_default(options.etcd_key_file, kEtcdClientKeyFile)};
  }
  return etcd;
}

Result<int> RunHaHead(const HaHeadOptions& options, const sigset_t& stop) {
  TESSERA_RETURN_IF_ERROR(ValidateHaHeadOptions(options));
  auto etcd_options = HaEtcdOptions(options);
  if (!etcd_options.ok()) return etcd_options.status();
  const std::string self = options.advertise.empty()
                               ? options.head.bind_address + ":" + std::to_string(options.head.port)
                               : options.advertise;

  store::EtcdStoreOptions so;
  so.etcd = *etcd_options;
  so.prefix = options.prefix;
  so.open_timeout = options.store_timeout;
  so.on_open_retry = [](const Status& error, std::chrono::milliseconds wait) {
    std::cerr << "tessera head: etcd not reachable (" << error.message() << "); retrying in "
              << wait.count() << " ms" << std::endl;
  };
  auto opened = store::EtcdStore::Open(so);
  if (!opened.ok()) return opened.status();
  std::unique_ptr<store::EtcdStore> etcd_store = std::move(opened).value();
  store::EtcdStore* store = etcd_store.get();

  std::mutex mu;
  int64_t elected_term = 0;                          // guarded by mu
  std::chrono::steady_clock::time_point elected_at;  // guarded by mu
  std::string stepped_down_reason;                   // guarded by mu
  std::atomic<bool> changed{false};
  ElectorOptions eo;
  eo.etcd = so.etcd;
  eo.prefix = options.prefix;
  eo.identity = self;
  eo.config = options.election;
  eo.on_elected = [&](int64_t term) {
    // Fence first: from here every write carries the term, before anything is written.
    store->SetFence(options.prefix + "leader", term);
    std::lock_guard lock(mu);
    elected_term = term;
    elected_at = std::chrono::steady_clock::now();
    changed = true;
  };
  eo.on_stepped_down = [&](const std::string& reason) {
    std::lock_guard lock(mu);
    stepped_down_reason = reason;
    changed = true;
  };
  Elector elector(eo);
  // The leader's certificate is signed by the cluster CA every head holds (`up --ha` copies it).
  StandbyProxy proxy(self, options.head.plain_http
                               ? std::nullopt
                               : std::optional<net::ClientTlsOptions>(net::ClientTlsOptions{
                                     options.head.state_dir + "/" + api::kCaCertFile, "", "", ""}));
  auto standby = StartStandbyServer(options.head, elector, proxy, self);
  if (!standby.ok()) return standby.status();
  TESSERA_RETURN_IF_ERROR(elector.Start());
  std::cerr << "tessera head: " << self << " is a standby, campaigning in etcd "
            << options.store_url << " (lease " << options.election.lease.count() << " ms)"
            << std::endl;

  std::unique_ptr<api::Head> head;
  // The leader's, once it serves; destroyed before the head, which owns the store.
  std::unique_ptr<HistoryCompactor> compactor;
  int exit_code = 0;
  // Short: an election is acted on within one tick (the elector cannot wake sigtimedwait).
  const timespec tick{0, 20'000'000};
  // A warm standby: its copy of the store follows etcd every retry period, so that once
  // elected it reads only what changed since (EtcdStore::Follow) and loads from memory.
  auto next_follow = std::chrono::steady_clock::now();
  std::string follow_error;  // the last one logged: a lasting failure is said once
  std::string known_leader;  // as the elector last said, for the proxy
  // The copy's TrainJobs, decoded as they change (job_cache.h): once elected, the controller
  // takes them instead of parsing every stored job.
  JobCache jobs;
  auto follow = [&]() -> bool {
    auto followed = store->Follow();
    next_follow = std::chrono::steady_clock::now() + options.election.retry;
    if (followed.ok()) {
      jobs.Refresh(*store);
      if (!follow_error.empty())
        std::cerr << "tessera head: following etcd again (revision "
                  << store->following_revision().value_or(0) << ")" << std::endl;
      follow_error.clear();
      return true;
    }
    if (followed.status().message() != follow_error)
      std::cerr << "tessera head: the standby's copy of the store could not follow etcd ("
                << followed.status().message() << "); retrying" << std::endl;
    follow_error = followed.status().message();
    return false;
  };
  while (true) {
    siginfo_t info;
    const int sig = sigtimedwait(&stop, &info, &tick);
    if (sig > 0) {
      std::cerr << "tessera head: stopping (signal " << sig << ")" << std::endl;
      break;
    }
    if (!head && !changed && std::chrono::steady_clock::now() >= next_follow) follow();
    if (!head) {
      // A request forwarded to a leader that has since lost the key would wait out the read
      // timeout (a frozen leader still accepts connections): its client retries instead.
      const std::string leader = elector.Snapshot().leader;
      if (leader != known_leader) proxy.LeaderChanged(leader);
      known_leader = leader;
    }
    if (head && store->outcome_unknown()) {
      // The controller's view may differ from etcd's: only a reload from etcd is safe.
      std::cerr << "tessera head: a commit's outcome is unknown (etcd did not answer); exiting "
                   "for a restart as a standby, which reloads the state from etcd"
                << std::endl;
      exit_code = 3;
      break;
    }
    if (!changed.exchange(false)) continue;
    int64_t term;
    std::string reason;
    std::chrono::steady_clock::time_point elected;
    {
      std::lock_guard lock(mu);
      term = elected_term;
      reason = stepped_down_reason;
      elected = elected_at;
    }
    if (!reason.empty()) {
      std::cerr << "tessera head: no longer the leader: " << reason
                << "; exiting for a restart as a standby" << std::endl;
      if (head) {
        // At once, as a Kubernetes controller manager does when it loses its lease: a graceful
        // Stop would wait for the controller's tick, itself waiting out a connect timeout per
        // etcd endpoint when etcd is cut off (15 s). Nothing is lost: every write it still had
        // in flight carries its old term, which etcd refuses, and clients retry elsewhere.
        std::cout.flush();
        std::_Exit(3);
      }
      exit_code = 3;
      break;
    }
    if (term != 0 && !head) {
      LogTakeover("elected", term, elected);
      // Caught up after the election: from here only this head can write (the fence). When
      // that fails, the head reads the whole store instead.
      const int64_t from = store->following_revision().value_or(0);
      if (follow()) {
        std::cerr << "tessera head: the standby's copy caught up from revision " << from << " to "
                  << store->following_revision().value_or(0) << std::endl;
      } else {
        store->StopFollowing();
        jobs.Clear();  // the head reads the whole store: nothing cached is known to be current
      }
      LogTakeover("caught_up", term, elected);
      proxy.Close();  // first: a forwarded request to a frozen leader would hold Stop()
      (*standby)->Stop();
      standby->reset();  // destroyed, not only stopped: its port is free for the head
      api::HeadOptions ho = options.head;
      ho.controller.term = static_cast<uint64_t>(term);
      ho.open_store = [&]() -> Result<std::unique_ptr<store::Store>> {
        return std::unique_ptr<store::Store>(std::move(etcd_store));
      };
      ho.leader_info = [&elector, self] { return InfoJson(elector.Snapshot(), self, true); };
      ho.controller.decoded_job = [&jobs](const store::Object& object) {
        return jobs.Take(object);
      };
      head = std::make_unique<api::Head>(ho);
      LogTakeover("standby_stopped", term, elected);
      Status started = head->Start();
      jobs.Clear();  // what the controller did not take is stale: free it
      if (!started.ok()) {
        std::cerr << "tessera head: elected at term " << term
                  << " but the head failed to start: " << started.ToString() << std::endl;
        exit_code = 1;
        break;
      }
      const auto serving_after = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::steady_clock::now() - elected);
      std::cerr << "tessera head: " << self << " is the leader (term " << term << "; serving "
                << serving_after.count() << " ms after the election)" << std::endl;
      LogTakeover("serving", term, elected);
      if (options.etcd_compaction_interval.count() > 0) {
        compactor = std::make_unique<HistoryCompactor>(
            *store, options.etcd_compaction_interval,
            [](const std::string& line) { std::cerr << "tessera head: " << line << std::endl; });
        compactor->Start();
        std::cerr << "tessera head: compacting etcd's history every "
                  << options.etcd_compaction_interval.count() << " ms, one interval kept"
                  << std::endl;
      }
    }
  }
  compactor.reset();
  if (head) head->Stop();  // stop writing before handing over
  elector.Stop();          // revokes the lease when leading: a standby takes over at once
  proxy.Close();
  if (*standby) (*standby)->Stop();  // never elected
  return exit_code;
}

}  // namespace tessera::ha
