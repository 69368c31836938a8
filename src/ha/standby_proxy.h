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

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "net/http.h"

namespace tessera::net {
class HttpClient;
}

namespace tessera::ha {

// Set on every request a standby forwards, and on the leader's answer it relays.
inline constexpr std::string_view kProxiedByHeader = "X-Tessera-Proxied-By";

class StandbyProxy {
 public:
  explicit StandbyProxy(std::string self) : self_(std::move(self)) {}
  ~StandbyProxy();  // Close()
  StandbyProxy(const StandbyProxy&) = delete;
  StandbyProxy& operator=(const StandbyProxy&) = delete;

  // True for the paths that are forwarded: everything but the agents' (/api/v1/agents/...).
  static bool Forwarded(const net::Request& request);

  // Sends `request` to the leader at `leader` ("host:port") and returns its answer; a watch or
  // a log follow (?watch=true, ?follow=true) becomes a stream relayed line by line. A leader
  // that does not answer gives 503 naming it, so the client retries or goes elsewhere.
  net::Response Forward(const net::Request& request, const std::string& leader);

  // Cancels the forwarded requests in flight and the relayed streams, joins the streams'
  // threads; later calls answer 503 at once. Call before stopping the server. Idempotent.
  void Close();

 private:
  const std::string self_;
  std::mutex mu_;
  bool closed_ = false;                                    // guarded by mu_
  std::vector<std::shared_ptr<net::HttpClient>> streams_;  // guarded by mu_
  std::vector<std::thread> threads_;                       // guarded by mu_
  std::set<std::shared_ptr<net::HttpClient>> in_flight_;   // guarded by mu_
};

}  // namespace tessera::ha
