// The TLS files of the etcd that `tessera up --ha` runs (docs/security.md "etcd"): each member
// gets one certificate, signed by the cluster CA, that it presents both to clients and to its
// peers (so it carries serverAuth and clientAuth, and names the member's address); each head,
// and `up` itself for its health checks, gets a client certificate, since the members run with
// --client-cert-auth and --peer-client-cert-auth and refuse a caller without one.
//
// Stateless; the files are written with pki::WriteFile (keys 0600). Call from one thread.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "pki/pki.h"

namespace tessera::cli {

// A member's certificate and key, as files.
struct EtcdMemberTls {
  std::string cert_file;
  std::string key_file;
};

// Makes `<dir>/<name>.crt` and `<dir>/<name>.key` for the member at `address` (an IP literal
// or a host name; 127.0.0.1 and localhost are always named too), signed by `ca`.
Result<EtcdMemberTls> MakeEtcdMemberTls(const pki::CertAndKey& ca, const std::string& dir,
                                        const std::string& name, const std::string& address);

// Writes a client certificate for `identity` ("head:head-1") and its key to the given files.
Status MakeEtcdClientTls(const pki::CertAndKey& ca, const std::string& identity,
                         const std::string& cert_file, const std::string& key_file);

// etcd's flags for client and peer TLS with `member`'s files, verifying callers against
// `ca_file` and refusing those without a certificate it signed.
std::vector<std::string> EtcdTlsFlags(const EtcdMemberTls& member, const std::string& ca_file);

}  // namespace tessera::cli
