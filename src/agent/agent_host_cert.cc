// The agent's host certificate in its main loop: bootstrap before any work, renewal at 3/4 of
// its life (host_credential.h). Part of Agent (agent.h); the rest of the class is in agent.cc.
#include <ctime>

#include "agent/agent.h"
#include "agent/host_credential.h"
#include "agent/logfmt.h"
#include "net/http_server.h"

namespace tessera::agent {
namespace {

using Clock = std::chrono::steady_clock;

int64_t UnixNow() { return static_cast<int64_t>(std::time(nullptr)); }

}  // namespace

std::optional<net::ClientTlsOptions> Agent::HeadTls(bool with_cert) const {
  std::optional<net::ClientTlsOptions> tls = options_.head_tls;
  if (tls && with_cert && !host_cert_file_.empty()) {
    tls->cert_file = host_cert_file_;
    tls->key_file = host_cert_file_;
  }
  return tls;
}

net::ClientOptions Agent::JoinTokenClientOptions() const {
  net::ClientOptions o;
  o.host = options_.head_host;
  o.port = options_.head_port;
  if (const size_t head = follower_.current(); head > 0)
    std::tie(o.host, o.port) = options_.more_heads[head - 1];
  o.tls = HeadTls(false);
  o.bearer_token = options_.join_token;
  o.connect_timeout = request_timeout_;
  o.read_timeout = request_timeout_;
  return o;
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
  Log("agent.host_cert_bootstrap", "reason=" + LogfmtQuoted(why));
  std::chrono::milliseconds backoff = options_.backoff_initial;
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return false;
    }
    const size_t head = follower_.current();
    net::HttpClient client(JoinTokenClientOptions());  // it has no certificate yet
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
      Log("agent.host_cert_refused", "error=" + LogfmtQuoted(got.status().message()));
      return false;
    }
    Log("agent.host_cert_bootstrap_failed", "error=" + LogfmtQuoted(got.status().message()) +
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
    net::HttpClient client(JoinTokenClientOptions());
    got = BootstrapHostCert(client, name_, credential_header_, host_cert_file_);
  }
  if (!got.ok()) {
    Log("agent.host_cert_renew_failed", "error=" + LogfmtQuoted(got.status().message()));
    return;
  }
  host_cert_renew_at_unix_ = RenewAtUnix(got->not_before_unix, got->not_after_unix);
  host_cert_not_after_unix_ = got->not_after_unix;
  MakeHeadClients();  // new connections present the new certificate; workers go on
  Status reloaded = server_->ReloadTls();
  Log("agent.host_cert_renewed",
      "notAfterUnix=" + std::to_string(got->not_after_unix) +
          " renewAtUnix=" + std::to_string(host_cert_renew_at_unix_) +
          (reloaded.ok() ? "" : " logServerReload=" + LogfmtQuoted(reloaded.message())));
}

}  // namespace tessera::agent
