// Host identities, the rule for agents' calls and HostCertIssuer (host_certs.h).
#include "api/host_certs.h"

#include <algorithm>
#include <ctime>
#include <nlohmann/json.hpp>
#include <utility>

#include "protocol/credential.h"
#include "protocol/wire.h"

namespace tessera::api {
namespace {

constexpr std::string_view kHostPrefix = "host:";
constexpr std::string_view kHostDnsSuffix = ".host.tessera";

std::string RevokedReason(std::string_view host) {
  return "host '" + std::string(host) +
         "' is revoked (tessera delete host); its certificate is refused until a cluster admin "
         "lifts the revocation (tessera delete hostrevocation " +
         std::string(host) + ") and the agent bootstraps again";
}

}  // namespace

std::string HostIdentity(std::string_view host) {
  return std::string(kHostPrefix) + std::string(host);
}

std::optional<std::string> HostOfIdentity(std::string_view identity) {
  if (!identity.starts_with(kHostPrefix) || identity.size() == kHostPrefix.size())
    return std::nullopt;
  return std::string(identity.substr(kHostPrefix.size()));
}

std::string HostDnsName(std::string_view host) {
  return std::string(host) + std::string(kHostDnsSuffix);
}

HostCallDecision AuthorizeHostCall(std::string_view peer_identity, std::string_view host,
                                   bool revoked) {
  const std::optional<std::string> caller = HostOfIdentity(peer_identity);
  if (!caller) {
    return {false, 403,
            peer_identity.empty()
                ? "this endpoint needs the host's client certificate (from POST "
                  "/api/v1/agents/bootstrap); the join token alone no longer opens it"
                : "the client certificate names '" + std::string(peer_identity) +
                      "', not a host; agents' calls need a host certificate (host:NAME)"};
  }
  if (*caller != host) {
    return {false, 403,
            "the client certificate is host '" + *caller + "''s; it may not speak for host '" +
                std::string(host) + "'"};
  }
  if (revoked) return {false, 403, RevokedReason(host)};
  return {true, 0, ""};
}

HostCertIssuer::HostCertIssuer(store::Store& store, HostCertOptions options)
    : store_(store), options_(std::move(options)) {}

Status HostCertIssuer::Load() {
  Result<pki::CertAndKey> ca = pki::ReadCa(options_.ca_cert_file, options_.ca_key_file);
  if (!ca.ok()) return ca.status();
  ca_ = std::move(*ca);
  auto objects = store_.List(kHostRevocationKind);
  if (!objects.ok()) return objects.status();
  std::lock_guard lock(mu_);
  revoked_.clear();
  for (const store::Object& o : *objects) {
    const nlohmann::json j = nlohmann::json::parse(o.body, nullptr, false);
    revoked_[o.name] = j.is_object() ? j.value("revokedMs", int64_t{0}) : 0;
  }
  return Status::Ok();
}

Result<IssuedHostCert> HostCertIssuer::Issue(const std::string& host, std::string_view csr_pem) {
  if (IsRevoked(host)) return FailedPrecondition(RevokedReason(host));
  // Valid from a little before now (a tenth of the lifetime, at most a minute: for clocks a
  // little behind ours) until `ttl` from now.
  const std::chrono::seconds skew =
      std::min<std::chrono::seconds>(std::chrono::seconds(60), options_.ttl / 10);
  pki::Validity validity;
  validity.not_before_unix = static_cast<int64_t>(std::time(nullptr)) - skew.count();
  validity.validity = options_.ttl + skew;
  Result<std::string> cert =
      pki::SignHostCsr(ca_, csr_pem, {HostIdentity(host), "host"}, HostDnsName(host), validity);
  if (!cert.ok()) return cert.status();
  Result<pki::CertInfo> info = pki::ReadCertificate(*cert);
  if (!info.ok()) return info.status();
  return IssuedHostCert{std::move(*cert), ca_.cert_pem, info->not_after_unix};
}

Status HostCertIssuer::Revoke(const std::string& host, int64_t now_ms) {
  std::lock_guard lock(mu_);
  if (revoked_.contains(host)) return Status::Ok();
  store::WriteBatch batch;
  batch.Put(kHostRevocationKind, host, nlohmann::json{{"revokedMs", now_ms}}.dump());
  auto committed = store_.Commit(batch);
  if (!committed.ok()) return committed.status();
  revoked_[host] = now_ms;
  return Status::Ok();
}

Status HostCertIssuer::Readmit(const std::string& host) {
  std::lock_guard lock(mu_);
  if (!revoked_.contains(host))
    return NotFound("hostrevocation '" + host + "' not found: the host is not revoked");
  store::WriteBatch batch;
  batch.Delete(kHostRevocationKind, host);
  auto committed = store_.Commit(batch);
  if (!committed.ok()) return committed.status();
  revoked_.erase(host);
  return Status::Ok();
}

bool HostCertIssuer::IsRevoked(const std::string& host) const {
  std::lock_guard lock(mu_);
  return revoked_.contains(host);
}

std::optional<net::Response> RefuseHostCall(const HostCertIssuer* issuer, const net::Request& r,
                                            const std::string& host) {
  if (issuer == nullptr) return std::nullopt;
  HostCallDecision d = AuthorizeHostCall(r.peer_identity, host, issuer->IsRevoked(host));
  if (d.allowed) return std::nullopt;
  return net::Response::Error(d.status, d.reason);
}

net::Response BootstrapHost(HostCertIssuer* issuer, const net::Request& r,
                            const CredentialCheck& credential_matches) {
  if (issuer == nullptr) {
    return net::Response::Error(404,
                                "this head serves plain HTTP (--plain-http): it issues no host "
                                "certificates; agents use the join token alone");
  }
  const nlohmann::json body = nlohmann::json::parse(r.body, nullptr, false);
  if (!body.is_object()) return net::Response::Error(400, "body: not a JSON object", "body");
  if (!body.contains("name") || !body["name"].is_string())
    return net::Response::Error(400, "name: required, the host's name (a string)", "name");
  if (!body.contains("csr") || !body["csr"].is_string())
    return net::Response::Error(400, "csr: required, a PEM certificate request", "csr");
  auto host = protocol::NormalizeHostName(body["name"].get<std::string>());
  if (!host.ok()) return net::Response::Error(400, "name: " + host.status().message(), "name");
  // A renewal comes with the current certificate: it may renew only its own host's.
  if (auto caller = HostOfIdentity(r.peer_identity); caller && *caller != *host) {
    return net::Response::Error(403, "the client certificate is host '" + *caller +
                                         "''s; it may not get a certificate for host '" + *host +
                                         "'");
  }
  if (issuer->IsRevoked(*host)) {
    return net::Response::Error(403, "bootstrap refused: " + RevokedReason(*host));
  }
  auto matches = credential_matches(*host, r.Header(protocol::kHostCredentialHeader));
  if (matches.ok() && !*matches) {
    return net::Response::Error(403,
                                "credential: host '" + *host +
                                    "' is registered by another agent; only the agent holding " +
                                    "its credential (" + protocol::kHostCredentialHeader +
                                    ") may get its certificate, until an admin deletes the host",
                                "credential");
  }
  if (!matches.ok() && matches.status().code() != StatusCode::kNotFound)
    return net::Response::Error(503, matches.status().message());
  auto issued = issuer->Issue(*host, body["csr"].get<std::string>());
  if (!issued.ok()) {
    const StatusCode code = issued.status().code();
    if (code == StatusCode::kFailedPrecondition)  // revoked meanwhile
      return net::Response::Error(403, "bootstrap refused: " + issued.status().message());
    const bool bad_csr = code == StatusCode::kInvalidArgument;
    return net::Response::Error(bad_csr ? 400 : 500, issued.status().message(),
                                bad_csr ? "csr" : "");
  }
  return net::Response::Json(200, nlohmann::json{{"certificate", issued->cert_pem},
                                                 {"ca", issued->ca_pem},
                                                 {"notAfterUnix", issued->not_after_unix}}
                                      .dump());
}

}  // namespace tessera::api
