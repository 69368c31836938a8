// PrepareHeadTls (head_tls.h): the CA and the head's server certificate in its state directory.
#include "api/head_tls.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>

#include "pki/pki.h"

namespace tessera::api {
namespace {

// A server certificate lives a year and is made again at the start after which it would
// expire within 30 days, so a head restarted at least monthly never serves an expired one.
constexpr int64_t kRenewBeforeSeconds = int64_t{30} * 24 * 3600;

void AddUnique(std::vector<std::string>& names, const std::string& name) {
  if (!name.empty() && std::find(names.begin(), names.end(), name) == names.end()) {
    names.push_back(name);
  }
}

bool IsIp(const std::string& text) {
  unsigned char buf[sizeof(in6_addr)];
  return ::inet_pton(AF_INET, text.c_str(), buf) == 1 ||
         ::inet_pton(AF_INET6, text.c_str(), buf) == 1;
}

// Every IPv4 and IPv6 address of this machine's interfaces.
std::vector<std::string> LocalAddresses() {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr) continue;
    char text[INET6_ADDRSTRLEN] = {};
    if (a->ifa_addr->sa_family == AF_INET) {
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text,
                  sizeof text);
    } else if (a->ifa_addr->sa_family == AF_INET6) {
      auto* in6 = reinterpret_cast<sockaddr_in6*>(a->ifa_addr);
      if (IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr)) continue;  // needs a scope; nobody dials it
      ::inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text);
    } else {
      continue;
    }
    AddUnique(out, text);
  }
  ::freeifaddrs(list);
  return out;
}

pki::ServerCertOptions WantedNames(const HeadTlsFiles& files) {
  std::vector<std::string> names = {"127.0.0.1", "::1", "localhost"};
  if (files.bind_address == "0.0.0.0" || files.bind_address == "::") {
    for (const std::string& a : LocalAddresses()) AddUnique(names, a);
  } else {
    AddUnique(names, files.bind_address);
  }
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0) AddUnique(names, host);
  for (const std::string& n : files.extra_names) AddUnique(names, n);
  pki::ServerCertOptions options;
  for (const std::string& n : names) {
    (IsIp(n) ? options.ip_addresses : options.dns_names).push_back(n);
  }
  return options;
}

// True when the certificate on disk is signed by `ca`, names everything wanted, and does not
// expire within kRenewBeforeSeconds.
bool ServerCertStillGood(const std::string& ca_pem, const std::string& cert_pem,
                         const std::string& key_pem, const pki::ServerCertOptions& wanted) {
  if (!pki::VerifyCertificate(ca_pem, cert_pem).ok()) return false;
  if (!pki::CheckKeyMatchesCert(cert_pem, key_pem).ok()) return false;
  Result<pki::CertInfo> info = pki::ReadCertificate(cert_pem);
  if (!info.ok()) return false;
  if (info->not_after_unix - static_cast<int64_t>(std::time(nullptr)) < kRenewBeforeSeconds) {
    return false;
  }
  auto has_all = [](const std::vector<std::string>& have, const std::vector<std::string>& want) {
    return std::all_of(want.begin(), want.end(), [&](const std::string& w) {
      return std::find(have.begin(), have.end(), w) != have.end();
    });
  };
  return has_all(info->dns_names, wanted.dns_names) &&
         has_all(info->ip_addresses, wanted.ip_addresses);
}

// Holds an exclusive lock on a file for its lifetime: heads that share a state directory (HA
// tests start several on one) must not both make a CA.
class FileLock {
 public:
  explicit FileLock(const std::string& path)
      : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600)) {
    if (fd_ >= 0 && ::flock(fd_, LOCK_EX) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  bool held() const { return fd_ >= 0; }

 private:
  int fd_;
};

}  // namespace

Result<net::ServerTlsOptions> PrepareHeadTls(const std::string& state_dir,
                                             const HeadTlsFiles& files) {
  std::error_code made_dir;
  std::filesystem::create_directories(state_dir, made_dir);
  if (made_dir) return Unavailable(state_dir + ": cannot create it: " + made_dir.message());
  FileLock lock(state_dir + "/tls.lock");
  if (!lock.held()) return Unavailable(state_dir + "/tls.lock: cannot lock it");
  const std::string ca_cert_path = state_dir + "/" + kCaCertFile;
  const std::string ca_key_path = state_dir + "/" + kCaKeyFile;
  const std::string cert_path = state_dir + "/" + kServerCertFile;
  const std::string key_path = state_dir + "/" + kServerKeyFile;

  pki::CertAndKey ca;
  Result<std::string> ca_cert = pki::ReadPemFile(ca_cert_path);
  Result<std::string> ca_key = pki::ReadPemFile(ca_key_path);
  if (ca_cert.status().code() == StatusCode::kNotFound &&
      ca_key.status().code() == StatusCode::kNotFound) {
    Result<pki::CertAndKey> made = pki::MakeCa({});
    if (!made.ok()) return made.status();
    ca = *made;
    // The key first: a crash between the two leaves no certificate without its key.
    TESSERA_RETURN_IF_ERROR(pki::WriteKeyFile(ca_key_path, ca.key_pem));
    TESSERA_RETURN_IF_ERROR(pki::WriteFile(ca_cert_path, ca.cert_pem));
  } else {
    if (!ca_cert.ok()) return ca_cert.status();
    if (!ca_key.ok()) {
      return FailedPrecondition(ca_key.status().message() + " (" + ca_cert_path +
                                " is there without its key; restore " + kCaKeyFile +
                                " or move both away to make a new CA, docs/security.md)");
    }
    ca = {*ca_cert, *ca_key};
    Result<pki::CertInfo> info = pki::ReadCertificate(ca.cert_pem, ca_cert_path);
    if (!info.ok()) return info.status();
    Status matches = pki::CheckKeyMatchesCert(ca.cert_pem, ca.key_pem);
    if (!matches.ok()) {
      return InvalidArgument(ca_key_path + ": not the key of " + ca_cert_path + " (" +
                             matches.message() + ")");
    }
  }

  pki::ServerCertOptions wanted = WantedNames(files);
  Result<std::string> cert = pki::ReadPemFile(cert_path);
  Result<std::string> key = pki::ReadPemFile(key_path);
  if (!cert.ok() || !key.ok() || !ServerCertStillGood(ca.cert_pem, *cert, *key, wanted)) {
    Result<pki::CertAndKey> made = pki::MakeServerCert(ca, wanted);
    if (!made.ok()) return made.status();
    TESSERA_RETURN_IF_ERROR(pki::WriteKeyFile(key_path, made->key_pem));
    // The chain ends with the CA, so a client told to trust the CA's key (a browser started
    // with --ignore-certificate-errors-spki-list) finds it in what the head sends.
    TESSERA_RETURN_IF_ERROR(pki::WriteFile(cert_path, made->cert_pem + ca.cert_pem));
  }
  net::ServerTlsOptions tls;
  tls.cert_chain_file = cert_path;
  tls.key_file = key_path;
  return tls;
}

}  // namespace tessera::api
