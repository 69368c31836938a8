// The cluster's public-key infrastructure: a self-signed cluster CA, the server certificates
// the head presents, the client certificates that name who is calling (a host, a user), and
// the certificate requests (CSRs) an agent sends to get its per-host certificate signed.
//
// Keys are ECDSA P-256 (every TLS stack in use speaks it: OpenSSL, Python's ssl, Chromium).
// Everything here works on PEM text; the file helpers at the end read and write it, keys with
// mode 0600. Nothing here opens a socket: src/net loads the files these functions write.
//
// Every function returns a Status naming what was wrong ("ca.key: not a PEM private key"),
// never throws, and keeps no state: thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tessera::pki {

// A certificate and its private key, both PEM.
struct CertAndKey {
  std::string cert_pem;
  std::string key_pem;
};

// The validity every certificate made here gets: from `not_before` (default: now, less a
// minute for clocks a little behind ours) for `validity`.
struct Validity {
  std::chrono::seconds validity{std::chrono::hours(24)};
  // Seconds since the Unix epoch; nullopt = now. Tests set it to make expired certificates.
  std::optional<int64_t> not_before_unix;
};

struct CaOptions {
  std::string common_name = "tessera cluster CA";
  // Ten years: the CA is rotated by hand (docs/security.md), not by expiry.
  Validity validity{std::chrono::hours(24 * 365 * 10), std::nullopt};
};

// A new self-signed CA (basicConstraints CA:TRUE, keyUsage keyCertSign and cRLSign).
Result<CertAndKey> MakeCa(const CaOptions& options);

struct ServerCertOptions {
  std::string common_name = "tessera head";
  std::vector<std::string> dns_names;     // subjectAltName DNS entries ("localhost")
  std::vector<std::string> ip_addresses;  // subjectAltName IP entries ("127.0.0.1", "::1")
  Validity validity{std::chrono::hours(24 * 365), std::nullopt};
  // Also extendedKeyUsage clientAuth: for a server that presents the same certificate when it
  // calls out (an etcd member to its peers, and its HTTP gateway to its own client port).
  bool also_client_auth = false;
};

// A new key and a server certificate (extendedKeyUsage serverAuth) for the names in `options`,
// signed by `ca`. InvalidArgument when there is no name at all or an IP entry is not an IP
// literal; InvalidArgument naming "ca" when `ca` does not parse or its key does not match.
Result<CertAndKey> MakeServerCert(const CertAndKey& ca, const ServerCertOptions& options);

// Who a client certificate names: subject CN = `identity` ("host:node-3", "user:alice"),
// subject O = `kind` ("host", "user").
struct ClientIdentity {
  std::string identity;
  std::string kind;
};

// A new key and a client certificate (extendedKeyUsage clientAuth) for `who`, signed by `ca`.
// InvalidArgument when `who.identity` is empty or longer than 64 characters (the CN limit).
Result<CertAndKey> MakeClientCert(const CertAndKey& ca, const ClientIdentity& who,
                                  const Validity& validity = {});

// A certificate request and the key it was made with.
struct CsrAndKey {
  std::string csr_pem;
  std::string key_pem;
};

// A new key and a CSR for it whose subject CN is `common_name` (what the requester would like;
// the signer decides).
Result<CsrAndKey> MakeCsr(std::string_view common_name);

// Signs the public key of `csr_pem` as a client certificate for `who` (the identity the caller
// has already authorised: the CSR's own subject and every extension it asks for are ignored)
// valid for `validity` (default 24 h). InvalidArgument naming "csr" when it does not parse or
// its signature does not verify (the requester does not hold the key).
Result<std::string> SignCsr(const CertAndKey& ca, std::string_view csr_pem,
                            const ClientIdentity& who, const Validity& validity = {});

// SignCsr for a host's certificate (docs/security.md "Host certificates"): the same certificate
// authenticates the agent to the head (clientAuth) and serves the agent's log server
// (serverAuth), so it carries both usages and names `dns_name` ("node-3.host.tessera", what
// the head's log proxy checks) as its one subjectAltName. InvalidArgument naming "dns_name"
// when it is empty or holds a comma or a space.
Result<std::string> SignHostCsr(const CertAndKey& ca, std::string_view csr_pem,
                                const ClientIdentity& who, const std::string& dns_name,
                                const Validity& validity = {});

// What a certificate says about itself.
struct CertInfo {
  std::string common_name;
  std::string organization;
  std::string issuer_common_name;
  int64_t not_before_unix = 0;
  int64_t not_after_unix = 0;
  std::vector<std::string> dns_names;
  std::vector<std::string> ip_addresses;
  bool is_ca = false;
};

// Parses the first certificate in `cert_pem`. InvalidArgument "<what>: ..." when it is not one.
Result<CertInfo> ReadCertificate(std::string_view cert_pem, std::string_view what = "certificate");

// OK when `cert_pem` was signed by the CA `ca_cert_pem` and is valid at `now_unix` (default:
// now). FailedPrecondition naming the reason ("certificate has expired", "unable to get local
// issuer certificate") otherwise; InvalidArgument when either does not parse.
Status VerifyCertificate(std::string_view ca_cert_pem, std::string_view cert_pem,
                         std::optional<int64_t> now_unix = std::nullopt);

// OK when `key_pem` is the private key of `cert_pem`.
Status CheckKeyMatchesCert(std::string_view cert_pem, std::string_view key_pem);

// File helpers. ReadPemFile: NotFound when absent, Unavailable on another read error.
// WriteFile replaces `path` atomically (a temporary file in the same folder, then rename) with
// mode `mode`; WriteKeyFile is WriteFile with 0600.
Result<std::string> ReadPemFile(const std::string& path);
Status WriteFile(const std::string& path, std::string_view contents, uint32_t mode = 0644);
Status WriteKeyFile(const std::string& path, std::string_view key_pem);

// The CA a head signs with: both files read, and InvalidArgument when the key is not the
// certificate's ("KEY_FILE: not the key of CERT_FILE (...)").
Result<CertAndKey> ReadCa(const std::string& cert_file, const std::string& key_file);

}  // namespace tessera::pki
