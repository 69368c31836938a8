// Head: the tessera control-plane server. It opens the store in its state directory, loads the
// controller, serves the HTTP API (users with the admin token, agents with the join token),
// pushes watch streams, proxies worker logs from agents, and runs the controller loop.
//
// State directory layout (the directory mode 0700, every file 0600, tightened at each start
// when they exist with wider modes; docs/security.md):
//   tessera.db     the SQLite store (and its -wal file)
//   admin.token    bearer token for users (created at first start)
//   join.token     bearer token for agents (created at first start)
//   head.json      {"address", "port", "pid", "portSeed"} of the running head, for the CLI and
//                  `tessera up` (portSeed: see HeadOptions::port_seed)
//
// Thread-safety: Start/Stop from one thread; everything else is internal.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "api/audit_log.h"
#include "api/log_proxy.h"
#include "common/status.h"
#include "controller/controller.h"

namespace tessera::net {
class HttpServer;
}

namespace tessera::api {

struct HeadOptions {
  std::string state_dir = ".tessera";
  std::string bind_address = "127.0.0.1";
  int port = 0;  // 0: an ephemeral port, written to head.json
  // Handlers that take the controller's lock hold their io thread while they wait for it;
  // with several threads, requests that take no lock (/healthz, /v1/leader) and streams still
  // find one while agents' heartbeats queue for the lock.
  int io_threads = 6;
  // The controller's options. Two are the head's own: controller.seed is replaced by port_seed
  // below, and an unset controller.port_taken by a bind probe (net::PortTakenHere).
  controller::ControllerOptions controller;
  // The seed of the ports the controller hands to workers (MASTER_PORT, ...). Unset: a random
  // one per start, in head.json and Head::port_seed(), so two heads on one machine draw
  // different ports (and the probe skips what the other's workers hold); set: that run's ports
  // again.
  std::optional<uint64_t> port_seed;
  int64_t tick_ms = 100;        // controller loop period (it also runs after every change)
  LogProxyOptions logs;         // caps and deadlines of log reads from agents (bearer_token unused)
  size_t watch_history = 1024;  // changes kept per kind for watches resuming from a version
  // HA heads (src/ha/ha_head.h): when set, Start() takes its store from here instead of
  // opening tessera.db, and /healthz and GET /v1/leader include what leader_info returns (a
  // JSON object: role, term, leader).
  std::function<Result<std::unique_ptr<store::Store>>()> open_store;
  std::function<std::string()> leader_info;
  // TLS (docs/security.md): the head serves HTTPS only, with the CA and server certificate
  // PrepareHeadTls (head_tls.h) keeps in state_dir, unless plain_http (--plain-http: insecure,
  // for debugging; every token crosses the network readable).
  bool plain_http = false;
  std::vector<std::string> tls_sans;  // more names for the server certificate (--tls-san)
  // The audit log's file (audit_log.h); an empty path is state_dir/audit.log.
  AuditFileOptions audit_file;
  // The lifetime of the host certificates the head signs at bootstrap (--host-cert-ttl-s;
  // api/host_certs.h). Agents renew at 3/4 of it.
  std::chrono::seconds host_cert_ttl{std::chrono::hours(24)};
  // Service replicas (docs/serving.md "TLS to replicas"): unless this or plain_http is set,
  // each replica leader gets a server certificate from the cluster CA (replica_certs.h; valid
  // for host_cert_ttl) in its assignment, endpoints say "https" and readiness probes verify it.
  // Set (--replicas-plain-http): replicas serve and are probed in plain HTTP, logged at start.
  bool replicas_plain_http = false;
};

class Head {
 public:
  explicit Head(HeadOptions options);
  ~Head();

  // Creates the state directory and tokens if needed, opens the store, loads the controller,
  // starts the server and the loop. Errors name the path or address.
  Status Start();
  void Stop();
  int port() const;
  uint64_t port_seed() const { return port_seed_; }  // after Start: the seed its ports came from
  const std::string& admin_token() const { return admin_token_; }
  const std::string& join_token() const { return join_token_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  HeadOptions options_;
  std::string admin_token_, join_token_;
  uint64_t port_seed_ = 0;
};

// Reads a token file (and makes it mode 0600 if it was wider), or creates one with 32 random
// bytes (hex) and mode 0600.
Result<std::string> LoadOrCreateToken(const std::string& path);

}  // namespace tessera::api
