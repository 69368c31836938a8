#include "cli/etcd_tls.h"

#include <arpa/inet.h>

namespace tessera::cli {

Result<EtcdMemberTls> MakeEtcdMemberTls(const pki::CertAndKey& ca, const std::string& dir,
                                        const std::string& name, const std::string& address) {
  pki::ServerCertOptions options;
  options.common_name = "etcd " + name;
  options.dns_names = {"localhost"};
  options.ip_addresses = {"127.0.0.1"};
  unsigned char ip[16];
  const bool literal = ::inet_pton(AF_INET, address.c_str(), ip) == 1 ||
                       ::inet_pton(AF_INET6, address.c_str(), ip) == 1;
  if (literal && address != "127.0.0.1") options.ip_addresses.push_back(address);
  if (!literal && address != "localhost") options.dns_names.push_back(address);
  options.also_client_auth = true;
  auto made = pki::MakeServerCert(ca, options);
  if (!made.ok()) return made.status();
  EtcdMemberTls files{dir + "/" + name + ".crt", dir + "/" + name + ".key"};
  TESSERA_RETURN_IF_ERROR(pki::WriteFile(files.cert_file, made->cert_pem));
  TESSERA_RETURN_IF_ERROR(pki::WriteKeyFile(files.key_file, made->key_pem));
  return files;
}

Status MakeEtcdClientTls(const pki::CertAndKey& ca, const std::string& identity,
                         const std::string& cert_file, const std::string& key_file) {
  auto made = pki::MakeClientCert(ca, {identity, "etcd-client"},
                                  pki::Validity{std::chrono::hours(24 * 365), std::nullopt});
  if (!made.ok()) return made.status();
  TESSERA_RETURN_IF_ERROR(pki::WriteFile(cert_file, made->cert_pem));
  return pki::WriteKeyFile(key_file, made->key_pem);
}

std::vector<std::string> EtcdTlsFlags(const EtcdMemberTls& member, const std::string& ca_file) {
  return {"--cert-file",
          member.cert_file,
          "--key-file",
          member.key_file,
          "--trusted-ca-file",
          ca_file,
          "--client-cert-auth",
          "--peer-cert-file",
          member.cert_file,
          "--peer-key-file",
          member.key_file,
          "--peer-trusted-ca-file",
          ca_file,
          "--peer-client-cert-auth"};
}

}  // namespace tessera::cli
