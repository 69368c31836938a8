// ReplicaCertIssuer and the certificate request of a replica leader (replica_certs.h).
#include "api/replica_certs.h"

#include <arpa/inet.h>

#include <ctime>
#include <iostream>
#include <utility>

#include "api/host_certs.h"

namespace tessera::api {
namespace {

bool IsIpLiteral(const std::string& address) {
  unsigned char bytes[16];
  return ::inet_pton(AF_INET, address.c_str(), bytes) == 1 ||
         ::inet_pton(AF_INET6, address.c_str(), bytes) == 1;
}

}  // namespace

pki::ServerCertOptions ReplicaServerCertOptions(const controller::ReplicaCertRequest& request,
                                                std::chrono::seconds ttl,
                                                std::optional<int64_t> not_before_unix) {
  pki::ServerCertOptions out;
  out.common_name = "tessera replica";
  if (!request.address.empty()) {
    if (IsIpLiteral(request.address)) {
      out.ip_addresses.push_back(request.address);
    } else {
      out.dns_names.push_back(request.address);
    }
  }
  if (!request.host.empty()) out.dns_names.push_back(HostDnsName(request.host));
  out.validity = {ttl, not_before_unix};
  return out;
}

Status ReplicaCertIssuer::Load() {
  Result<pki::CertAndKey> ca = pki::ReadCa(options_.ca_cert_file, options_.ca_key_file);
  if (!ca.ok()) return ca.status();
  ca_ = std::move(*ca);
  return Status::Ok();
}

Result<protocol::WorkerTls> ReplicaCertIssuer::Issue(const controller::ReplicaCertRequest& request,
                                                     int64_t now_unix) {
  std::lock_guard lock(mu_);
  // Expired entries go: a deleted Service's certificates do not pile up.
  std::erase_if(cache_,
                [now_unix](const auto& entry) { return entry.second.not_after_unix <= now_unix; });
  const Key key{request.service, request.uid,  request.role,
                request.replica, request.host, request.address};
  auto it = cache_.find(key);
  if (it != cache_.end()) {
    Cached& c = it->second;
    const int64_t life = c.not_after_unix - c.not_before_unix;
    const int64_t left = c.not_after_unix - now_unix;
    // The same incarnation keeps its certificate to 3/4 of its life; a recreated group takes
    // it over while half of it is left.
    const bool keep = c.incarnation == request.incarnation ? left * 4 > life : left * 2 >= life;
    if (keep) {
      c.incarnation = request.incarnation;
      return protocol::WorkerTls{c.cert.cert_pem, c.cert.key_pem, ca_.cert_pem};
    }
  }
  // A minute back, as pki's default, for hosts whose clocks are a little behind ours.
  const int64_t not_before = now_unix - 60;
  Result<pki::CertAndKey> fresh =
      pki::MakeServerCert(ca_, ReplicaServerCertOptions(request, options_.ttl, not_before));
  if (!fresh.ok()) return fresh.status();
  ++made_;
  Cached& c = cache_[key];
  c = {request.incarnation, std::move(*fresh), not_before,
       not_before + static_cast<int64_t>(options_.ttl.count())};
  return protocol::WorkerTls{c.cert.cert_pem, c.cert.key_pem, ca_.cert_pem};
}

std::optional<protocol::WorkerTls> ReplicaCertIssuer::For(
    const controller::ReplicaCertRequest& request) {
  Result<protocol::WorkerTls> tls = Issue(request, static_cast<int64_t>(std::time(nullptr)));
  if (tls.ok()) return std::move(*tls);
  std::cerr << "head: event=replica_cert_failed service=" << request.service
            << " role=" << request.role << " replica=" << request.replica
            << " host=" << request.host << " error=\"" << tls.status().message() << "\""
            << std::endl;
  return std::nullopt;
}

uint64_t ReplicaCertIssuer::made() const {
  std::lock_guard lock(mu_);
  return made_;
}

}  // namespace tessera::api
