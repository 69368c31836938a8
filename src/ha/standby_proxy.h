// A standby head's forwarding of client requests to the leader (docs/ha.md "What a standby
// serves"). Reads, writes and watches of users and the CLI are sent on to the leader and its
// answer returned as is, so any head's address works for them. The agents' endpoints are not
// forwarded: an agent is told where the leader is (503 naming it) and goes there itself, so that
// an answered heartbeat always means the leader itself heard the agent (the fence counts
// answered heartbeats) and a standby's freeze or death never stands between them.
//
// Thread-safety: Forward may be called from any server thread; Close from one thread, once,
// after the server that calls Forward has stopped.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "net/http.h"
#include "net/http_client.h"

namespace tessera::ha {

// Set on every request a standby forwards, and on the leader's answer it relays.
inline constexpr std::string_view kProxiedByHeader = "X-Tessera-Proxied-By";

class StandbyProxy {
 public:
  // `leader_tls`: how to reach the leader over TLS (the cluster CA); nullopt = plain HTTP (heads
  // started with --plain-http).
  explicit StandbyProxy(std::string self,
                        std::optional<net::ClientTlsOptions> leader_tls = std::nullopt)
      : self_(std::move(self)), leader_tls_(std::move(leader_tls)) {}
  ~StandbyProxy();  // Close()
  StandbyProxy(const StandbyProxy&) = delete;
  StandbyProxy& operator=(const StandbyProxy&) = delete;

  // True for the paths that are forwarded: everything but the agents' (/api/v1/agents/...).
  static bool Forwarded(const net::Request& request);

  // Sends `request` to the leader at `leader` ("host:port") and returns its answer; a watch or
  // a log follow (?watch=true, ?follow=true) becomes a stream relayed line by line. A leader
  // that does not answer gives 503 naming it, so the client retries or goes elsewhere.
  net::Response Forward(const net::Request& request, const std::string& leader);

  // The leader is now `leader` (empty: none is known): requests in flight to any other
  // address are cancelled and answered 503, so that their clients retry at once rather than
  // wait out the read timeout on a leader that froze or lost its lease. Relayed streams are
  // left to end with their leader.
  void LeaderChanged(const std::string& leader);

  // Cancels the forwarded requests in flight and the relayed streams, joins the streams'
  // threads; later calls answer 503 at once. Call before stopping the server. Idempotent.
  void Close();

  // Forwarded requests waiting for an answer (tests).
  size_t in_flight() const;

 private:
  const std::string self_;
  const std::optional<net::ClientTlsOptions> leader_tls_;
  mutable std::mutex mu_;
  bool closed_ = false;                                    // guarded by mu_
  std::vector<std::shared_ptr<net::HttpClient>> streams_;  // guarded by mu_
  std::vector<std::thread> threads_;                       // guarded by mu_
  // Each with the leader it was sent to.
  std::map<std::shared_ptr<net::HttpClient>, std::string> in_flight_;  // guarded by mu_
};

}  // namespace tessera::ha
