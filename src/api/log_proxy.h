// LogProxy: the head's reads of worker logs from the agents, off the HTTP I/O threads.
//
// A log request (GET /api/v1/jobs/NAME/logs) is answered with a streaming response at once;
// a thread of the proxy then reads the log from the worker's agent and pushes it to the
// client. So no request for a log, from a frozen or slow agent or a client that never reads,
// ever holds one of the head's I/O threads, and heartbeats stay answered.
//
// Bounds:
//   - one thread per read in progress, at most `max_per_agent` per agent (address:port) and
//     `max_total` overall; a request over a cap is answered at once with 429 (per agent) or
//     503 (overall) and `Retry-After`, and no thread is started;
//   - connecting to the agent and receiving its response header each have a deadline; a plain
//     read must also keep receiving data (`read_timeout` of silence ends it);
//   - a follow (`follow=true`) ends when the client goes away (its stream is closed: the read
//     from the agent is cancelled at once), when the agent ends the worker's log, or on an
//     error; its thread and connection are then reclaimed.
// Errors after the response header was sent (agent unreachable, timed out, 404 from the
// agent) are written into the log text as one final line starting with "[tessera] ".
//
// Ownership: the head owns one LogProxy and calls Stop() before stopping its HTTP server.
// Thread-safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "net/http.h"
#include "net/http_client.h"

namespace tessera::api {

struct LogProxyOptions {
  int max_per_agent = 4;  // reads and follows in progress from one agent
  int max_total = 64;     // reads and follows in progress in all
  std::chrono::milliseconds connect_timeout{2'000};
  // The agent's response header must arrive within this; a plain read ends after this long
  // without data (a follow may be quiet for as long as the worker is).
  std::chrono::milliseconds read_timeout{5'000};
  // The token for a Source without its own. Agents no longer take the join token for their
  // log routes: each host's log server takes only that host's log token, derived from its
  // credential (docs/agent-protocol.md "Host identity"), which the head puts in every
  // Source::bearer_token. So this is only a fallback (the head sets the join token, which an
  // agent refuses with 401).
  std::string bearer_token;
  // HTTPS to the agents' log servers (docs/security.md "Host certificates"): each must present
  // its host certificate, verified against tls->ca_file and Source::server_name. nullopt =
  // plain HTTP (a head started with --plain-http, whose agents hold no certificate).
  std::optional<net::ClientTlsOptions> tls;
};

class LogProxy {
 public:
  explicit LogProxy(LogProxyOptions options);
  // Stops (see Stop).
  ~LogProxy();
  LogProxy(const LogProxy&) = delete;
  LogProxy& operator=(const LogProxy&) = delete;

  // Where a worker's log is: its agent and the path there ("/logs/<job>/.../<rank>").
  struct Source {
    std::string address;
    uint16_t port = 0;
    std::string path;
    std::string worker;  // "worker 0 of trainjob train-demo", for the error lines
    // The bearer token that agent's log server takes (the host's own log token,
    // docs/agent-protocol.md "Host identity"); "" = LogProxyOptions::bearer_token.
    std::string bearer_token;
    // With LogProxyOptions::tls: the name the agent's certificate must carry
    // (HostDnsName of its host, api/host_certs.h).
    std::string server_name;
  };
  enum class Mode { kRead, kFollow };

  // A streaming text/plain response whose body is the log (kRead: the whole log as it is
  // now; kFollow: and then what the worker writes, until it ends), or 429/503 with
  // Retry-After when a cap is reached, or 503 after Stop().
  net::Response Serve(const Source& source, Mode mode);

  // Reads and follows in progress.
  int active() const;

  // Cancels every read in progress (their clients see the final error line and the end of
  // the stream), joins their threads, and refuses later requests with 503. Idempotent.
  void Stop();

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace tessera::api
