// Per-host certificates (docs/security.md "Host certificates"): an agent holding the join token
// sends a CSR to POST /api/v1/agents/bootstrap and gets back a short-lived certificate signed
// by the cluster CA whose subject CN is its host identity, "host:NAME" (O "host"). Every other
// agent call is then authorised by that certificate (Request::peer_identity): a host speaks
// only for itself. `tessera delete host NAME` puts the host on a deny-list kept in the store
// (kind HostRevocation), so it survives a restart and holds on every head of an HA control
// plane; the host may bootstrap again only once an admin lifts the entry
// (`tessera delete hostrevocation NAME`).
//
// The pure part (identities and the authorisation rule) is free functions; HostCertIssuer
// holds the CA and the deny-list. Thread-safety: HostCertIssuer's methods may be called from
// any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "net/http.h"
#include "pki/pki.h"
#include "store/store.h"

namespace tessera::api {

// The store kind of the deny-list: one object per revoked host, named after it.
inline constexpr char kHostRevocationKind[] = "HostRevocation";

// "host:NAME": the CN of a host's certificate and the identity the head authorises.
std::string HostIdentity(std::string_view host);
// NAME for "host:NAME" with a non-empty NAME; nullopt for anything else ("user:alice", "").
std::optional<std::string> HostOfIdentity(std::string_view identity);
// "NAME.host.tessera": the DNS subjectAltName of a host's certificate, which the head's log
// proxy expects the agent's log server to present.
std::string HostDnsName(std::string_view host);

// What the head answers an agent's call about `host` (the path's {name}, or the name a
// registration carries).
struct HostCallDecision {
  bool allowed = false;
  int status = 403;    // when refused
  std::string reason;  // when refused: names the certificate's host and `host`
};

// The rule for every agent call after bootstrap: the caller's verified client certificate
// (`peer_identity`, "" without one) must name `host`, and `host` must not be revoked.
HostCallDecision AuthorizeHostCall(std::string_view peer_identity, std::string_view host,
                                   bool revoked);

struct HostCertOptions {
  std::string ca_cert_file;  // the cluster CA (ca.crt, ca.key in the head's state directory)
  std::string ca_key_file;
  std::chrono::seconds ttl{24 * 3600};  // --host-cert-ttl
};

// A signed certificate and the CA it chains to, as the bootstrap route returns them.
struct IssuedHostCert {
  std::string cert_pem;
  std::string ca_pem;
  int64_t not_after_unix = 0;
};

class HostCertIssuer {
 public:
  HostCertIssuer(store::Store& store, HostCertOptions options);

  // Reads the CA files and the deny-list. InvalidArgument naming the file when the CA does
  // not load; the store's error otherwise.
  Status Load();

  // Signs `csr_pem` for `host` for options.ttl. FailedPrecondition naming the revocation when
  // the host is on the deny-list; InvalidArgument naming "csr" for a bad request.
  Result<IssuedHostCert> Issue(const std::string& host, std::string_view csr_pem);

  // Puts `host` on the deny-list (idempotent) / takes it off (NotFound when it is not on it).
  Status Revoke(const std::string& host, int64_t now_ms);
  Status Readmit(const std::string& host);
  bool IsRevoked(const std::string& host) const;

 private:
  store::Store& store_;
  const HostCertOptions options_;
  pki::CertAndKey ca_;  // set by Load(), then read-only
  mutable std::mutex mu_;
  std::map<std::string, int64_t> revoked_;  // host -> when (ms since the epoch)
};

// The head's side (head.cc wires the routes).
//
// nullopt when the request may speak for `host`; the 403 of AuthorizeHostCall otherwise.
// Without an issuer (a head started with --plain-http, whose agents hold no certificate) every
// request passes here: the join token and the host credential header decide alone.
std::optional<net::Response> RefuseHostCall(const HostCertIssuer* issuer, const net::Request& r,
                                            const std::string& host);

// Whether `credential` is the one `host` registered with; NotFound for a host not registered.
using CredentialCheck =
    std::function<Result<bool>(const std::string& host, std::string_view credential)>;

// POST /api/v1/agents/bootstrap (join token): body {"name": NAME, "csr": PEM}; answers 200
// {"certificate": PEM, "ca": PEM, "notAfterUnix": N}. A host already registered must also send
// its host credential (X-Tessera-Host-Credential), so the join token alone cannot get a
// certificate for a host another agent runs; 403 for that and for a revoked host, 400 naming
// the field for a bad body, 404 without an issuer.
net::Response BootstrapHost(HostCertIssuer* issuer, const net::Request& r,
                            const CredentialCheck& credential_matches);

}  // namespace tessera::api
