// The agent's host certificate: loading, bootstrap and renewal timing (host_credential.h).
#include "agent/host_credential.h"

#include <nlohmann/json.hpp>

#include "pki/pki.h"

namespace tessera::agent {

std::string HostCertPath(const std::string& state_dir) { return state_dir + "/host.pem"; }

int64_t RenewAtUnix(int64_t not_before_unix, int64_t not_after_unix) {
  if (not_after_unix <= not_before_unix) return not_before_unix;
  return not_before_unix + (not_after_unix - not_before_unix) * 3 / 4;
}

std::optional<HostCert> LoadHostCert(const std::string& path, const std::string& ca_file,
                                     const std::string& host, int64_t now_unix, std::string* why) {
  auto fail = [&](const std::string& reason) -> std::optional<HostCert> {
    if (why != nullptr) *why = reason;
    return std::nullopt;
  };
  Result<std::string> pem = pki::ReadPemFile(path);
  if (!pem.ok()) return fail(pem.status().message());
  Result<std::string> ca = pki::ReadPemFile(ca_file);
  if (!ca.ok()) return fail(ca.status().message());
  Result<pki::CertInfo> info = pki::ReadCertificate(*pem, path);
  if (!info.ok()) return fail(info.status().message());
  if (info->common_name != "host:" + host) {
    return fail(path + ": the certificate is for '" + info->common_name + "', not 'host:" + host +
                "'");
  }
  Status matches = pki::CheckKeyMatchesCert(*pem, *pem);
  if (!matches.ok()) return fail(path + ": " + matches.message());
  Status verified = pki::VerifyCertificate(*ca, *pem, now_unix);
  if (!verified.ok()) return fail(path + ": " + verified.message());
  return HostCert{info->not_before_unix, info->not_after_unix};
}

Result<HostCert> BootstrapHostCert(net::HttpClient& client, const std::string& host,
                                   const net::Headers& headers, const std::string& path) {
  Result<pki::CsrAndKey> csr = pki::MakeCsr("host:" + host);
  if (!csr.ok()) return csr.status();
  const std::string body = nlohmann::json{{"name", host}, {"csr", csr->csr_pem}}.dump();
  auto response = client.Request(net::Method::kPost, "/api/v1/agents/bootstrap", body, headers);
  if (!response.ok()) return Unavailable("bootstrap: " + response.status().message());
  const nlohmann::json reply = nlohmann::json::parse(response->body, nullptr, false);
  const std::string error =
      reply.is_object() && reply.contains("error") && reply["error"].is_string()
          ? reply["error"].get<std::string>()
          : response->body.substr(0, 200);
  if (response->status == 401 || response->status == 403) {
    return FailedPrecondition("the head refused the bootstrap (HTTP " +
                              std::to_string(response->status) + "): " + error);
  }
  if (response->status != 200) {
    return Unavailable("bootstrap: HTTP " + std::to_string(response->status) + ": " + error);
  }
  if (!reply.is_object() || !reply.contains("certificate") || !reply["certificate"].is_string())
    return InvalidArgument("bootstrap: the head's answer holds no certificate");
  const std::string cert = reply["certificate"].get<std::string>();
  TESSERA_RETURN_IF_ERROR(pki::CheckKeyMatchesCert(cert, csr->key_pem));
  Result<pki::CertInfo> info = pki::ReadCertificate(cert, "bootstrap: the head's certificate");
  if (!info.ok()) return info.status();
  TESSERA_RETURN_IF_ERROR(pki::WriteKeyFile(path, cert + csr->key_pem));
  return HostCert{info->not_before_unix, info->not_after_unix};
}

}  // namespace tessera::agent
