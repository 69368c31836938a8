// The head's TLS files: at every start, PrepareHeadTls makes sure <state_dir> holds the cluster
// CA (ca.crt, and ca.key mode 0600, made at the first start; the key never leaves the state
// directory) and a server certificate signed by it (server.crt, server.key 0600) that names
// every address clients may use to reach the head: the bind address (every address of this
// machine when it binds to 0.0.0.0 or ::), 127.0.0.1, ::1, localhost, the host name, and the
// extra names of --tls-san. A server certificate that lacks one of those names, expires within
// 30 days, or was not signed by the CA on disk is made again.
//
// `tessera up` calls it before it starts anything, so the CA is in the state directory for the
// agents and the router it starts (--ca-file); the head's own start then finds it in place.
//
// Stateless; call it from one thread per state directory.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "net/http_server.h"

namespace tessera::api {

// File names inside the head's state directory.
inline constexpr char kCaCertFile[] = "ca.crt";
inline constexpr char kCaKeyFile[] = "ca.key";
inline constexpr char kServerCertFile[] = "server.crt";
inline constexpr char kServerKeyFile[] = "server.key";

struct HeadTlsFiles {
  std::string bind_address = "127.0.0.1";
  // More subjectAltNames for the server certificate: DNS names or IP literals (--tls-san).
  std::vector<std::string> extra_names;
};

// Makes or keeps the CA and the server certificate in `state_dir` (which must exist) and
// returns the server's TLS options for them. InvalidArgument naming the file when one is
// unreadable or does not parse (the fix: move it away and restart, docs/security.md);
// Unavailable when a file cannot be written.
Result<net::ServerTlsOptions> PrepareHeadTls(const std::string& state_dir,
                                             const HeadTlsFiles& files);

}  // namespace tessera::api
