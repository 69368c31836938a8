// Internal to the serving router (not part of its public API): the state that lives on the
// router's io thread, shared by the files that implement it.
//
//   serving_router.cc   RouterImpl: routing, the Service table, the dispatch of grants, the
//                       replica connection pool, start/accept/sweep/stop; ServingRouter
//   router_session.cc   Session, the client side: reading and checking a request, admission,
//                       the queue, the router's own replies, closing
//   router_relay.cc     Session, the replica side: connect, forward, the response header,
//                       relaying the body, completion, the disaggregated prefill pairing
//   router_metrics.cc   /metrics text and ServingRouter::Loads
//
// Thread-safety: everything here is touched on the io thread only, except the atomics.
#pragma once

#include <array>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/metrics.h"
#include "common/rng.h"
#include "proxy/client_stream.h"
#include "proxy/disagg_pairing.h"
#include "proxy/dispatcher.h"
#include "proxy/serving_router.h"

namespace tessera::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using SteadyClock = std::chrono::steady_clock;

inline constexpr size_t kBodyPieceBytes = 16 * 1024;
inline constexpr size_t kReadBytes = 16 * 1024;  // asked of each socket read

inline double SecondsSince(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

// Latency buckets from 100 us (the router's own cost) to 5 min (a long generation).
inline std::vector<double> LatencyBounds() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
          0.25,   0.5,     1,      2.5,   5,      10,    30,   60,    120,  300};
}

// Where a request goes: a service and the target to send it.
struct Route {
  std::string service;
  std::string target;  // path and query, prefix stripped
  bool explicit_service = false;
};

class Session;  // router_session.h

struct ServiceState {
  ServiceState(ServiceView v, size_t max_queued)
      : view(std::move(v)),
        dispatcher(max_queued),
        labels{view.name},
        first_byte_labels{{{view.name, "false"}, {view.name, "true"}}} {}
  ServiceView view;  // name, role, limit; the endpoints live in the dispatcher
  Dispatcher dispatcher;
  PrefillPairing pairing;  // a disaggregated Service's prefill replicas (view.prefill_role)
  // Metric label values, built once rather than per request: {service}, {service, stream},
  // {service, code}.
  const std::vector<std::string> labels;
  const std::array<std::vector<std::string>, 2> first_byte_labels;
  std::map<unsigned, std::vector<std::string>> code_labels;
};

// A connection to one replica, idle in the pool or held by one exchange: plain TCP, or TLS
// over it when the endpoint serves HTTPS (`tls` is the router's replica client context).
struct Upstream {
  Upstream(asio::io_context& ioc, std::string k, asio::ssl::context* tls)
      : stream(tcp::socket(ioc), tls), key(std::move(k)) {}
  ClientStream stream;
  beast::flat_buffer buffer;
  std::string key;
  SteadyClock::time_point idle_since;
  bool reused = false;
};

class RouterImpl {
 public:
  explicit RouterImpl(RouterOptions options)
      : options_(std::move(options)),
        rng_(options_.seed),
        requests_("tessera_router_requests_total",
                  "Requests answered, by service and HTTP status code (the replica's, or the "
                  "router's own 404/413/502/503/504)",
                  {"service", "code"}),
        errors_("tessera_router_errors_total",
                "Requests the router failed or cut, by service and reason", {"service", "reason"}),
        retries_("tessera_router_retries_total",
                 "Requests retried on another replica after theirs failed before the first byte",
                 {"service"}),
        latency_("tessera_router_request_duration_seconds",
                 "From the request's header to the last byte of its response", {"service"},
                 LatencyBounds()),
        first_byte_("tessera_router_time_to_first_byte_seconds",
                    "From the request's header to the first body byte written to the client "
                    "(time to first token for streams)",
                    {"service", "stream"}, LatencyBounds()),
        queue_wait_("tessera_router_queue_wait_seconds",
                    "How long requests waited for a free replica slot", {"service"},
                    LatencyBounds()),
        output_tokens_("tessera_router_output_tokens_total",
                       "Output tokens streamed (text/event-stream data events with a choice), "
                       "by service and the role that decoded them",
                       {"service", "role"}),
        role_ttft_("tessera_router_time_to_first_token_seconds",
                   "Streams' time to first token, by service and the role that prefilled (a "
                   "disaggregated Service's prefill role when decode handed the prompt off)",
                   {"service", "role"}, LatencyBounds()),
        role_tpot_("tessera_router_time_per_output_token_seconds",
                   "Streams' time per output token (first token to last, over the tokens after "
                   "the first), by service and the role that decoded",
                   {"service", "role"}, LatencyBounds()) {}
  ~RouterImpl() { Stop(); }

  Status Start();
  void Stop();
  void DoAccept();
  void Sweep();

  // io thread only, below.
  std::optional<Route> Resolve(std::string_view target, std::string* error) const;
  // "services: /services/a/, /namespaces/team-x/services/b/" (or that none is known): for the
  // 404 of a path no Service answers.
  std::string KnownServices() const;
  ServiceState* Find(const std::string& service) {
    auto it = services_.find(service);
    return it == services_.end() ? nullptr : it->second.get();
  }
  void Upsert(ServiceView view);
  void Remove(const std::string& name);
  void Release(const std::string& service, const std::string& key);
  void Dispatch(ServiceState& state, std::vector<Grant> grants);
  std::unique_ptr<Upstream> TakeIdle(const std::string& key);
  void PutIdle(std::unique_ptr<Upstream> up);
  std::string MetricsText();
  void DisaggMetrics(metrics::ExpositionWriter& w) const;
  // Label values for the families above (the Service's own when it is known).
  const std::vector<std::string>& ServiceLabels(const std::string& service) {
    if (ServiceState* state = Find(service)) return state->labels;
    scratch_labels_ = {service};
    return scratch_labels_;
  }
  const std::vector<std::string>& FirstByteLabels(const std::string& service, bool stream) {
    if (ServiceState* state = Find(service)) return state->first_byte_labels[stream ? 1 : 0];
    scratch_labels_ = {service, stream ? "true" : "false"};
    return scratch_labels_;
  }
  const std::vector<std::string>& CodeLabels(const std::string& service, unsigned code) {
    if (ServiceState* state = Find(service)) {
      auto it = state->code_labels.find(code);
      if (it == state->code_labels.end()) {
        it = state->code_labels
                 .emplace(code, std::vector<std::string>{service, std::to_string(code)})
                 .first;
      }
      return it->second;
    }
    scratch_labels_ = {service, std::to_string(code)};
    return scratch_labels_;
  }

  RouterOptions options_;
  std::atomic<bool> started_{false};
  std::atomic<bool> stopped_{false};
  std::atomic<uint16_t> port_{0};
  std::atomic<int> head_connected_{-1};  // -1: no head (static endpoints)

  Rng rng_;
  RequestId next_request_ = 0;
  size_t sessions_ = 0;
  std::map<std::string, std::unique_ptr<ServiceState>> services_;
  struct Waiter {
    std::shared_ptr<Session> session;  // owns the session while it has no pending operation
    std::string service;
  };
  std::unordered_map<RequestId, Waiter> waiting_;
  std::map<std::string, std::deque<std::unique_ptr<Upstream>>> pool_;
  std::unordered_set<Session*> live_;  // every session, for the deadline sweep

  metrics::CounterFamily requests_, errors_, retries_;
  metrics::HistogramFamily latency_, first_byte_, queue_wait_;
  // Streams by role (token_counter.h): time to first token by the role that prefilled (a
  // disaggregated Service's prefill role for a handoff, else the role that answered), output
  // tokens and time per output token by the role that decoded.
  metrics::CounterFamily output_tokens_;
  metrics::HistogramFamily role_ttft_, role_tpot_;
  std::vector<std::string> scratch_labels_;

  // Last: destroyed first, so handlers it destroys still find the state above.
  asio::io_context ioc_{1};  // one thread runs it: the scheduler skips the multi-thread paths
  tcp::acceptor acceptor_{ioc_};
  std::shared_ptr<asio::ssl::context> tls_context_;  // set by Start() when options_.tls is
  // Dialling replicas that serve HTTPS: verifies them against options_.replicas_ca_file (set by
  // Start() when that is not empty).
  std::shared_ptr<asio::ssl::context> replica_tls_context_;
  asio::steady_timer sweep_{ioc_};
  std::thread thread_;
};

}  // namespace tessera::proxy
