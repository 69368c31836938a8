// Replica certificates (docs/serving.md "TLS to replicas"): the server certificate a Service
// replica's leader serves HTTPS with, signed by the cluster CA for the address its endpoint
// names, so the router and the head's readiness prober can verify whom they reach. The
// controller asks for one where it builds the leader's assignment
// (ControllerOptions::replica_tls); the head wires ReplicaCertIssuer::For there.
//
// Key generation and signing cost about a millisecond, and the assignment is rebuilt on every
// heartbeat and watch update, so certificates are cached per (service, uid, role, replica,
// host, address): the same incarnation gets the same one until 3/4 of its life has passed (the
// agent then replaces the running leader's files; the replica reloads them), and a recreated
// group reuses it while at least half of its life is left, else gets a new one.
//
// The key is a secret: it leaves this class only in the assignment to the host that runs the
// leader. Nothing here logs it. Thread-safety: For may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>

#include "common/status.h"
#include "controller/controller.h"
#include "pki/pki.h"
#include "protocol/wire.h"

namespace tessera::api {

// What the certificate of `request`'s leader says: CN "tessera replica", subjectAltNames its
// address (an IP entry for an IP literal, else a DNS entry) and its host's DNS name
// (NAME.host.tessera, as the host certificate), valid for `ttl` from `not_before_unix`
// (nullopt = now). Pure.
pki::ServerCertOptions ReplicaServerCertOptions(const controller::ReplicaCertRequest& request,
                                                std::chrono::seconds ttl,
                                                std::optional<int64_t> not_before_unix);

struct ReplicaCertOptions {
  std::string ca_cert_file;  // the cluster CA (ca.crt, ca.key in the head's state directory)
  std::string ca_key_file;
  std::chrono::seconds ttl{24 * 3600};  // the head's --host-cert-ttl-s
};

class ReplicaCertIssuer {
 public:
  explicit ReplicaCertIssuer(ReplicaCertOptions options) : options_(std::move(options)) {}

  // Reads the CA. InvalidArgument naming the file when it does not load.
  Status Load();

  // The certificate, key and CA for `request`'s leader at `now_unix` (cached as the header
  // says). The error of pki::MakeServerCert when one cannot be made.
  Result<protocol::WorkerTls> Issue(const controller::ReplicaCertRequest& request,
                                    int64_t now_unix);
  // Issue at the wall clock's now; nullopt (logged, without the key) when it fails.
  std::optional<protocol::WorkerTls> For(const controller::ReplicaCertRequest& request);

  // Certificates made since the start (cache misses), for tests.
  uint64_t made() const;

 private:
  struct Cached {
    int incarnation = 0;
    pki::CertAndKey cert;
    int64_t not_before_unix = 0;
    int64_t not_after_unix = 0;
  };
  using Key = std::tuple<std::string, uint64_t, std::string, int, std::string, std::string>;

  const ReplicaCertOptions options_;
  pki::CertAndKey ca_;  // set by Load(), then read-only
  mutable std::mutex mu_;
  std::map<Key, Cached> cache_;
  uint64_t made_ = 0;
};

}  // namespace tessera::api
