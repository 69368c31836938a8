// ServingRouter: the serving data path. An asynchronous HTTP/1.1 reverse proxy (Boost.Beast,
// behind a pimpl) that sends each request to a ready replica of a Service.
//
//   /services/<name>/<rest>  -> service <name> of the namespace "default", forwarded as
//                               /<rest> (query kept)
//   /namespaces/<ns>/services/<name>/<rest>
//                            -> service <name> of namespace <ns>, likewise
//   any other path           -> the default service (options.default_service, or the only
//                               Service when exactly one is known); otherwise 404
//   /healthz, /metrics       -> the router itself (Prometheus text on /metrics)
//
// Per request: the Dispatcher picks a replica (power of two choices under each replica's
// maxOngoingRequests) or queues the request (FIFO, bounded; 503 + Retry-After beyond the
// bound or after queue_timeout). The response is relayed as it arrives: each piece the replica
// sends is written to the client at once (text/event-stream and chunked streams are never
// buffered). A replica that fails before sending any response byte (refused, reset, closed)
// gets the request retried once on another replica; after the first byte, never. Connections
// to replicas are kept alive in per-endpoint pools.
//
// Ownership: the caller owns the router. Thread-safety: every data-path object lives on one io
// thread; the public methods may be called from any thread (they post to it).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "proxy/disagg_pairing.h"
#include "proxy/dispatcher.h"
#include "proxy/service_view.h"

namespace tessera::proxy {

class RouterImpl;  // defined in serving_router.cc

// HTTPS on the router's port: its certificate (PEM, the chain) and key; docs/security.md.
struct RouterTls {
  std::string cert_file;
  std::string key_file;
};

struct RouterOptions {
  std::string bind_address = "127.0.0.1";
  uint16_t port = 0;  // 0 = an ephemeral port; see port()
  // Requests outside /services/<name>/ go here (NAME, or NS/NAME for a Service of another
  // namespace); empty = the only Service, if exactly one.
  std::string default_service;
  // Requests waiting per Service when every replica is full; more get 503.
  size_t max_queued = 100;
  // A queued request waits at most this long, then gets 503; 0 = no limit.
  std::chrono::milliseconds queue_timeout{60'000};
  // Retry-After (seconds) on a 503 from a full queue or a queue timeout.
  int retry_after_s = 1;
  // Client connections open at once; more are closed as soon as they are accepted.
  size_t max_connections = 10'000;
  uint32_t max_header_bytes = 16 * 1024;         // request and response headers; more -> 431 / 502
  uint64_t max_body_bytes = uint64_t{16} << 20;  // request bodies; more -> 413
  std::chrono::milliseconds idle_timeout{60'000};    // keep-alive client with nothing to say
  std::chrono::milliseconds header_timeout{10'000};  // a request header, from its first byte
  std::chrono::milliseconds body_timeout{30'000};    // a request body, after its header
  std::chrono::milliseconds write_timeout{30'000};   // each write to a client or a replica
  std::chrono::milliseconds connect_timeout{2'000};  // TCP connect to a replica
  // A replica must start its response within this (LLM servers queue and prefill first).
  std::chrono::milliseconds response_timeout{300'000};
  // ... and then send something at least this often until it is done.
  std::chrono::milliseconds stream_idle_timeout{300'000};
  // Idle keep-alive connections kept per replica, and for how long.
  size_t max_idle_per_endpoint = 64;
  std::chrono::milliseconds pool_idle_timeout{30'000};
  uint64_t seed = 1;  // the power-of-two-choices draws
  // nullopt = plain HTTP on the router's port. With TLS, a client's handshake must finish
  // within header_timeout; a plain-HTTP request gets a plain 400 saying the port speaks HTTPS
  // only, then the connection is closed; a handshake that fails closes it.
  std::optional<RouterTls> tls;
  // TLS to replicas (docs/serving.md "TLS to replicas"): an endpoint whose scheme is https is
  // dialled over TLS, its certificate verified against this CA (PEM; the cluster CA) and the
  // endpoint's address. "" = none: such an endpoint's requests get 502 naming the flag.
  std::string replicas_ca_file;
  // Every replica is dialled in plain HTTP whatever its endpoint says (--replicas-plain-http:
  // for a head started with it, whose replicas serve plain HTTP on a trusted network).
  bool replicas_plain_http = false;
};

// One Service's load at an instant (for the load reports to the head).
struct ServiceLoad {
  std::string service;
  std::string role;
  DispatchLoad load;
  // Since the router started: requests relayed to their end and their latency histogram
  // (tessera_router_request_duration_seconds), cumulative counts with the total last.
  uint64_t requests = 0;
  double latency_sum_s = 0;
  std::vector<double> latency_bounds;
  std::vector<uint64_t> latency_cumulative;
  // Streams' time to first token of the requests this role prefilled (for a disaggregated
  // Service: the prefill role those decode handed off, the decode role the rest), and the
  // output tokens and time per output token of those it decoded
  // (tessera_router_time_to_first_token_seconds, _output_tokens_total,
  // _time_per_output_token_seconds; token_counter.h).
  uint64_t ttft_count = 0;
  double ttft_sum_s = 0;
  uint64_t output_tokens = 0;
  uint64_t tpot_count = 0;  // streams of two tokens or more
  double tpot_sum_s = 0;
  // Disaggregated Services (disagg_pairing.h): the decode role's report carries the pairing
  // and handoff counts; the prefill role's report its queued prompt tokens.
  std::optional<PairingCounts> pairing;
  double queued_prompt_tokens = 0;
};

class ServingRouter {
 public:
  explicit ServingRouter(RouterOptions options);
  // Stops the router if it is running.
  ~ServingRouter();
  ServingRouter(const ServingRouter&) = delete;
  ServingRouter& operator=(const ServingRouter&) = delete;

  // Binds, listens and starts the io thread. Unavailable naming address:port if the address
  // cannot be bound; InvalidArgument naming the file when a TLS file (the router's, or
  // replicas_ca_file) does not load;
  // FailedPrecondition if already started.
  Status Start();
  // The bound port; 0 before Start().
  uint16_t port() const;
  // Closes every connection and joins the io thread. Requests in progress are cut. Idempotent.
  void Stop();

  // The view of Services: replace all of them, add or change one, remove one. Queued requests
  // of a removed Service get 503; requests in flight finish. Safe from any thread; applied
  // on the io thread in call order.
  void ReplaceServices(std::vector<ServiceView> services);
  void UpsertService(ServiceView service);
  void RemoveService(std::string name);

  // Every known Service's load, read on the io thread (waits for it up to 1 s; empty if the
  // router is not running).
  std::vector<ServiceLoad> Loads();
  // Marks whether the head's watch is connected (the tessera_router_head_connected gauge).
  void SetHeadConnected(bool connected);

 private:
  std::unique_ptr<RouterImpl> impl_;
};

}  // namespace tessera::proxy
