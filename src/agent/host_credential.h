// The agent's host certificate (docs/security.md "Host certificates", like kubelet's TLS
// bootstrap): with an https:// head, an agent that holds no valid certificate makes a key and
// a CSR and sends them with the join token to POST /api/v1/agents/bootstrap; the head answers
// with a short-lived certificate for "host:NAME" (24 h by default). The agent keeps key and
// certificate together in <state_dir>/host.pem (mode 0600, replaced atomically, so a
// connection opened at any moment loads a matching pair), presents it on every later call to
// the head and serves its log server with it, and renews it at 3/4 of its life.
//
// Thread-safety: free functions; BootstrapHostCert writes one file, call it from one thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"
#include "net/http.h"
#include "net/http_client.h"

namespace tessera::agent {

// <state_dir>/host.pem: the certificate, then its key.
std::string HostCertPath(const std::string& state_dir);

// When a certificate valid from `not_before_unix` to `not_after_unix` is renewed: 3/4 of the
// way through its life (kubelet renews between 70% and 90%), so a head that is away for a
// quarter of the lifetime does not leave the agent without a certificate.
int64_t RenewAtUnix(int64_t not_before_unix, int64_t not_after_unix);

// What the agent holds.
struct HostCert {
  int64_t not_before_unix = 0;
  int64_t not_after_unix = 0;
};

// The certificate in `path` when it is there, its key matches, it names "host:<host>", it
// verifies against the CA in `ca_file` and has not expired at `now_unix`; nullopt otherwise
// (the agent bootstraps then). `why` (when given) says what was wrong.
std::optional<HostCert> LoadHostCert(const std::string& path, const std::string& ca_file,
                                     const std::string& host, int64_t now_unix,
                                     std::string* why = nullptr);

// Makes a key and a CSR, asks the head (`client` carries the join token) for a certificate for
// `host` (`headers` carry the host credential) and writes certificate and key to `path`.
// FailedPrecondition with the head's reason when it refuses (401/403: a revoked host, the
// join token); Unavailable for a transport error or another answer (retry later);
// InvalidArgument when the answer is not a certificate for that key.
Result<HostCert> BootstrapHostCert(net::HttpClient& client, const std::string& host,
                                   const net::Headers& headers, const std::string& path);

}  // namespace tessera::agent
