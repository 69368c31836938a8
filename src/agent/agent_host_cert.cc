// The agent's host certificate in its main loop: bootstrap before any work, renewal at 3/4 of
// its life (host_credential.h). Part of Agent (agent.h); the rest of the class is in agent.cc.
#include <ctime>

#include "agent/agent.h"
#include "agent/host_credential.h"
#include "net/http_server.h"

namespace tessera::agent {
namespace {

using Clock = std::chrono::steady_clock;

int64_t UnixNow() { return static_cast<int64_t>(std::time(nullptr)); }

std::string CertLogValue(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

std::optional<net::ClientTlsOptions> Agent::HeadTls(bool with_cert) const {
  std::optional<net::ClientTlsOptions> tls = options_.head_tls;
  if (tls && with_cert && !host_cert_file_.empty()) {
    tls->cert_file = host_cert_file_;
    tls->key_file = host_cert_file_;
  }
  return tls;
}

bool Agent::EnsureHostCert() {
  if (host_cert_file_.empty()) return true;  // an http:// head: the join token alone
  std::string why;
  std::optional<HostCert> held =
      LoadHostCert(host_cert_file_, options_.head_tls->ca_file, name_, UnixNow(), &why);
  if (held) {
    host_cert_renew_at_unix_ = RenewAtUnix(held->not_before_unix, held->not_after_unix);
    host_cert_not_after_unix_ = held->not_after_unix;
    Log("agent.host_cert_loaded", "notAfterUnix=" + std::to_string(held->not_after_unix));
    return true;
  }
  Log("agent.host_cert_bootstrap", "reason=" + CertLogValue(why));
  std::chrono::milliseconds backoff = options_.backoff_initial;
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return false;
    }
    // The join token and no certificate (it has none yet), to the head in use.
    const size_t head = follower_.current();
    net::ClientOptions client_options;
    client_options.host = options_.head_host;
    client_options.port = options_.head_port;
    if (head > 0)
      std::tie(client_options.host, client_options.port) = options_.more_heads[head - 1];
    client_options.tls = HeadTls(false);
    client_options.bearer_token = options_.join_token;
    client_options.connect_timeout = request_timeout_;
    client_options.read_timeout = request_timeout_;
    net::HttpClient client(client_options);
    Result<HostCert> got = BootstrapHostCert(client, name_, credential_header_, host_cert_file_);
    if (got.ok()) {
      host_cert_renew_at_unix_ = RenewAtUnix(got->not_before_unix, got->not_after_unix);
      host_cert_not_after_unix_ = got->not_after_unix;
      Log("agent.host_cert_issued", "notAfterUnix=" + std::to_string(got->not_after_unix) +
                                        " renewAtUnix=" + std::to_string(host_cert_renew_at_unix_));
      return true;
    }
    if (got.status().code() == StatusCode::kFailedPrecondition) {
      std::lock_guard<std::mutex> lock(mu_);
      fatal_ = got.status();
      Log("agent.host_cert_refused", "error=" + CertLogValue(got.status().message()));
      return false;
    }
    Log("agent.host_cert_bootstrap_failed", "error=" + CertLogValue(got.status().message()) +
                                                " retryInMs=" + std::to_string(backoff.count()));
    if (got.status().code() == StatusCode::kUnavailable) HeadFailed(head, got.status().message());
    if (!SleepUntil(Clock::now() + backoff, false)) return false;
    backoff = std::min(backoff * 2, options_.backoff_max);
  }
}

void Agent::RenewHostCertIfDue() {
  if (host_cert_file_.empty() || UnixNow() < host_cert_renew_at_unix_) return;
  // Over the client that holds the current certificate (and the join token): a failure
  // leaves the certificate in place, and the next heartbeat tries again. Once it has expired
  // (the head was away, or the host was revoked for a while), the join token alone, as at
  // bootstrap.
  Result<HostCert> got = Unavailable("not tried");
  if (UnixNow() < host_cert_not_after_unix_) {
    got = BootstrapHostCert(HeadClient(), name_, credential_header_, host_cert_file_);
  } else {
    net::ClientOptions client_options;
    client_options.host = options_.head_host;
    client_options.port = options_.head_port;
    if (const size_t head = follower_.current(); head > 0)
      std::tie(client_options.host, client_options.port) = options_.more_heads[head - 1];
    client_options.tls = HeadTls(false);
    client_options.bearer_token = options_.join_token;
    client_options.connect_timeout = request_timeout_;
    client_options.read_timeout = request_timeout_;
    net::HttpClient client(client_options);
    got = BootstrapHostCert(client, name_, credential_header_, host_cert_file_);
  }
  if (!got.ok()) {
    Log("agent.host_cert_renew_failed", "error=" + CertLogValue(got.status().message()));
    return;
  }
  host_cert_renew_at_unix_ = RenewAtUnix(got->not_before_unix, got->not_after_unix);
  host_cert_not_after_unix_ = got->not_after_unix;
  MakeHeadClients();  // new connections present the new certificate; workers go on
  Status reloaded = server_->ReloadTls();
  Log("agent.host_cert_renewed",
      "notAfterUnix=" + std::to_string(got->not_after_unix) +
          " renewAtUnix=" + std::to_string(host_cert_renew_at_unix_) +
          (reloaded.ok() ? "" : " logServerReload=" + CertLogValue(reloaded.message())));
}

}  // namespace tessera::agent
