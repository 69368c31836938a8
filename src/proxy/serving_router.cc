#include "proxy/serving_router.h"

#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <cstdio>
#include <deque>
#include <future>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "common/metrics.h"
#include "common/rng.h"
#include "proxy/disagg_pairing.h"
#include "proxy/token_counter.h"

namespace tessera::proxy {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using SteadyClock = std::chrono::steady_clock;
using Json = nlohmann::json;

constexpr size_t kBodyPieceBytes = 16 * 1024;
constexpr size_t kReadBytes = 16 * 1024;  // asked of each socket read

double SecondsSince(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

// Headers that describe one connection, not the message (RFC 9110 section 7.6.1); the router
// sets its own framing.
bool IsHopByHop(beast::string_view name) {
  static constexpr std::array<std::string_view, 10> kNames = {
      "connection",        "keep-alive", "proxy-connection", "proxy-authenticate", "te", "trailer",
      "transfer-encoding", "upgrade",    "expect",           "proxy-authorization"};
  for (std::string_view n : kNames) {
    if (beast::iequals(name, beast::string_view(n.data(), n.size()))) return true;
  }
  return false;
}

// Whether `name` is one of the comma-separated tokens of a Connection header (those headers
// are hop-by-hop too).
bool NamedIn(beast::string_view connection, beast::string_view name) {
  while (!connection.empty()) {
    const size_t comma = connection.find(',');
    beast::string_view token = connection.substr(0, comma);
    connection =
        comma == beast::string_view::npos ? beast::string_view() : connection.substr(comma + 1);
    while (!token.empty() && (token.front() == ' ' || token.front() == '\t'))
      token.remove_prefix(1);
    while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) token.remove_suffix(1);
    if (!token.empty() && beast::iequals(token, name)) return true;
  }
  return false;
}

void AppendField(std::string& out, beast::string_view name, beast::string_view value) {
  out.append(name.data(), name.size());
  out += ": ";
  out.append(value.data(), value.size());
  out += "\r\n";
}

// Latency buckets from 100 us (the router's own cost) to 5 min (a long generation).
std::vector<double> LatencyBounds() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
          0.25,   0.5,     1,      2.5,   5,      10,    30,   60,    120,  300};
}

// Where a request goes: a service and the target to send it.
struct Route {
  std::string service;
  std::string target;  // path and query, prefix stripped
  bool explicit_service = false;
};

}  // namespace

class Session;

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

// A connection to one replica, idle in the pool or held by one exchange.
struct Upstream {
  Upstream(asio::io_context& ioc, std::string k) : socket(ioc), key(std::move(k)) {}
  tcp::socket socket;
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
  asio::steady_timer sweep_{ioc_};
  std::thread thread_;
};

// One client connection; at most one request in progress (HTTP/1.1 without pipelining). Every
// member is touched on the io thread only.
//
// The hot path avoids trips through the event loop: bytes already buffered are parsed at once
// (basic_parser::put) instead of through an asynchronous read that would complete by a post,
// and writes go straight to the non-blocking socket (Send), falling back to an asynchronous
// write only for what the kernel did not take. A proxied request then costs one epoll wait per
// direction, a read and a write on each side.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(RouterImpl& router, tcp::socket socket)
      : router_(router), client_(std::move(socket)), queue_timer_(router.ioc_) {
    ++router_.sessions_;
    router_.live_.insert(this);
    error_code ec;
    tcp::endpoint peer = client_.remote_endpoint(ec);
    if (!ec) peer_address_ = peer.address().to_string(ec);
    client_.set_option(tcp::no_delay(true), ec);
    client_.non_blocking(true, ec);
    body_buffer_.resize(kBodyPieceBytes);
  }
  ~Session() {
    --router_.sessions_;
    router_.live_.erase(this);
    if (!router_.stopped_) ReleaseSlot();
  }

  void Start() { DoIdleWait(); }

  // When the operation in progress must have finished (the router's sweep checks it).
  SteadyClock::time_point deadline() const { return deadline_; }

  // The sweep found the deadline passed: cut the side being waited on. Its handler then sees
  // the error as a timeout (Timed()) and answers as the phase requires (504, retry, close).
  void OnDeadline() {
    deadline_ = SteadyClock::time_point::max();
    timed_out_ = true;
    if (upstream_op_ && upstream_) {
      error_code ignored;
      upstream_->socket.close(ignored);
    } else {
      Close();
    }
  }

  // The dispatcher gave this queued request a replica.
  void OnGranted(const Endpoint& endpoint) {
    if (phase_ != Phase::kQueued) {
      // Not waiting any more (cannot happen while the grant is pending; be safe).
      router_.Release(route_.service, endpoint.Key());
      return;
    }
    queue_timer_.cancel();
    router_.queue_wait_.Observe(router_.ServiceLabels(route_.service), SecondsSince(start_));
    has_slot_ = true;
    endpoint_ = endpoint;
    Forward();
  }

  // The Service went away while this request waited.
  void OnServiceRemoved() {
    if (phase_ != Phase::kQueued) return;
    queue_timer_.cancel();
    router_.errors_.Add({route_.service, "service_gone"});
    ReplyError(503, "service '" + route_.service + "' was removed while the request waited");
  }

 private:
  enum class Phase { kIdle, kHeader, kBody, kQueued, kUpstream, kRelaying, kWriting, kDone };

  // Up to four pieces written in one go (header, chunk size line, data, chunk end).
  using Pieces = std::array<asio::const_buffer, 4>;

  // ---- writing ----

  // Writes `pieces` to `socket`: at once when the kernel takes them all (the usual case: no
  // trip through the event loop), else the rest asynchronously under the write timeout. Then
  // calls `then(ec)`, inline in the first case.
  template <class Then>
  void Send(tcp::socket& socket, Pieces pieces, bool upstream, Then then) {
    error_code ec;
    size_t total = 0;
    for (const auto& p : pieces) total += p.size();
    const size_t sent = asio::write(socket, pieces, ec);
    if (sent == total) return then(error_code{});
    if (ec != asio::error::would_block && ec != asio::error::try_again) return then(ec);
    size_t skip = sent;
    for (auto& p : pieces) {
      const size_t n = std::min(skip, p.size());
      p += n;
      skip -= n;
    }
    if (upstream) {
      ArmUpstream(router_.options_.write_timeout);
    } else {
      ArmClient(router_.options_.write_timeout);
    }
    asio::async_write(socket, pieces,
                      [self = shared_from_this(), then = std::move(then)](
                          error_code wec, size_t) mutable { then(self->Timed(wec)); });
  }

  // ---- the client's request ----

  void DoIdleWait() {
    phase_ = Phase::kIdle;
    if (router_.stopped_) return Close();
    parser_.emplace();
    parser_->header_limit(router_.options_.max_header_bytes);
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());  // checked in OnHeader
    if (client_buffer_.size() > 0) return StartHeader();
    ArmClient(router_.options_.idle_timeout);
    ReadClient();
  }

  // One read from the client; what it means depends on the phase.
  void ReadClient() {
    client_.async_read_some(client_buffer_.prepare(kReadBytes),
                            [self = shared_from_this()](error_code ec, size_t n) {
                              self->client_buffer_.commit(n);
                              self->OnClientBytes(ec);
                            });
  }

  void OnClientBytes(error_code ec) {
    // A read error while idle, in a header or in a body (timeout, disconnect, reset): close.
    if (ec) return Close();
    switch (phase_) {
      case Phase::kIdle:
        return StartHeader();
      case Phase::kHeader:
        return ParseHeader();
      case Phase::kBody:
        return ParseBody();
      default:
        return Close();
    }
  }

  void StartHeader() {
    phase_ = Phase::kHeader;
    ArmClient(router_.options_.header_timeout);
    ParseHeader();
  }

  // Parses what the client sent so far; reads on until the header is whole.
  void ParseHeader() {
    error_code ec = http::error::need_more;
    if (client_buffer_.size() > 0) client_buffer_.consume(parser_->put(client_buffer_.data(), ec));
    if (ec == http::error::need_more) return ReadClient();
    OnHeader(ec);
  }

  void OnHeader(error_code ec) {
    if (ec == http::error::header_limit) {
      return ReplyLocal(
          431,
          "request header exceeds " + std::to_string(router_.options_.max_header_bytes) + " bytes",
          "headers", /*close=*/true);
    }
    if (ec) return ReplyLocal(400, "malformed request: " + ec.message(), "request", true);
    start_ = SteadyClock::now();
    auto& msg = parser_->get();
    client_version_ = msg.version();
    client_keep_alive_ = msg.keep_alive();
    head_request_ = msg.method() == http::verb::head;
    const beast::string_view raw_target = msg.target();
    const std::string_view target(raw_target.data(), raw_target.size());
    const std::string_view path = target.substr(0, target.find('?'));

    if (path == "/healthz") return ReplyLocalText(200, "ok\n", "text/plain");
    if (path == "/metrics") {
      return ReplyLocalText(200, router_.MetricsText(), "text/plain; version=0.0.4");
    }
    std::string error;
    std::optional<Route> route = router_.Resolve(target, &error);
    if (!route) {
      router_.errors_.Add({"", "unknown_service"});
      router_.requests_.Add({"", "404"});
      return ReplyLocal(404, error, "path", !parser_->is_done());
    }
    route_ = std::move(*route);
    if (auto length = parser_->content_length();
        length && *length > router_.options_.max_body_bytes) {
      router_.errors_.Add({route_.service, "body_too_large"});
      return ReplyError(
          413, "request body exceeds " + std::to_string(router_.options_.max_body_bytes) + " bytes",
          /*close=*/true);
    }
    if (parser_->is_done()) return OnRequest();
    parser_->body_limit(router_.options_.max_body_bytes);
    parser_->eager(true);  // each put() takes all the body bytes buffered
    if (beast::iequals(msg[http::field::expect], "100-continue")) {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      phase_ = Phase::kWriting;
      return Send(client_, {asio::buffer(kContinue.data(), kContinue.size())}, false,
                  [this](error_code wec) {
                    if (wec) return Close();
                    StartBody();
                  });
    }
    StartBody();
  }

  void StartBody() {
    phase_ = Phase::kBody;
    ArmClient(router_.options_.body_timeout);
    ParseBody();
  }

  // Parses the body bytes buffered; reads on until the body is whole.
  void ParseBody() {
    while (!parser_->is_done()) {
      if (client_buffer_.size() == 0) return ReadClient();
      error_code ec;
      const size_t used = parser_->put(client_buffer_.data(), ec);
      client_buffer_.consume(used);
      if (ec == http::error::need_more || (!ec && used == 0)) return ReadClient();
      if (ec == http::error::body_limit) {
        router_.errors_.Add({route_.service, "body_too_large"});
        return ReplyError(
            413,
            "request body exceeds " + std::to_string(router_.options_.max_body_bytes) + " bytes",
            true);
      }
      if (ec) return Close();
    }
    OnRequest();
  }

  // The whole request is here: build what the replica gets, then find it a replica.
  void OnRequest() {
    auto& msg = parser_->get();
    // Written as text once (retries resend it): the request line, the end-to-end headers,
    // X-Forwarded-For, the framing.
    std::string& out = upstream_head_;
    out.clear();
    out.append(msg.method_string().data(), msg.method_string().size());
    out += ' ';
    out += route_.target;
    out += " HTTP/1.1\r\n";
    // Headers named in Connection are hop-by-hop too.
    const beast::string_view connection = msg[http::field::connection];
    std::string_view forwarded;
    bool had_length = false;
    for (const auto& field : msg) {
      const beast::string_view name = field.name_string();
      if (IsHopByHop(name) || NamedIn(connection, name)) continue;
      if (field.name() == http::field::content_length) {
        had_length = true;  // rewritten below from the body read
        continue;
      }
      // The router names the prefill replica of a disaggregated Service; a client does not.
      if (beast::iequals(name, beast::string_view(kPrefillHeader.data(), kPrefillHeader.size())))
        continue;
      if (!peer_address_.empty() && beast::iequals(name, "x-forwarded-for")) {
        if (forwarded.empty()) forwarded = {field.value().data(), field.value().size()};
        continue;  // one X-Forwarded-For, the client's list and its address, below
      }
      AppendField(out, name, field.value());
    }
    if (!peer_address_.empty()) {
      out += "X-Forwarded-For: ";
      if (!forwarded.empty()) {
        out += forwarded;
        out += ", ";
      }
      out += peer_address_;
      out += "\r\n";
    }
    request_body_ = std::move(msg.body());
    // As Beast's prepare_payload: a length when there is a body or the method expects one
    // (and when the client sent one).
    const http::verb method = msg.method();
    if (!request_body_.empty() || had_length || method == http::verb::post ||
        method == http::verb::put || method == http::verb::options) {
      out += "Content-Length: ";
      out += std::to_string(request_body_.size());
      out += "\r\n";
    }
    out += "\r\n";
    head_base_size_ = out.size();
    retried_ = false;
    fresh_reconnect_used_ = false;
    Admit({});
  }

  // Asks the dispatcher for a replica, avoiding `avoid_key` (a retry).
  void Admit(const std::string& avoid_key) {
    ServiceState* state = router_.Find(route_.service);
    if (!state) {
      router_.errors_.Add({route_.service, "service_gone"});
      return ReplyError(503, "service '" + route_.service + "' is gone");
    }
    request_id_ = ++router_.next_request_;
    Dispatcher::Admission admission = state->dispatcher.Admit(request_id_, router_.rng_, avoid_key);
    switch (admission.outcome) {
      case Dispatcher::Outcome::kGranted:
        has_slot_ = true;
        endpoint_ = std::move(admission.endpoint);
        return Forward();
      case Dispatcher::Outcome::kQueued:
        return Wait();
      case Dispatcher::Outcome::kRejected:
        return ReplyBusy("every replica of service '" + route_.service +
                             "' is busy and its queue is full (" +
                             std::to_string(state->dispatcher.max_queued()) + " waiting)",
                         "queue_full");
    }
  }

  void Wait() {
    phase_ = Phase::kQueued;
    deadline_ = SteadyClock::time_point::max();  // the queue timer bounds the wait
    router_.waiting_[request_id_] = {shared_from_this(), route_.service};
    if (router_.options_.queue_timeout.count() <= 0) return;
    queue_timer_.expires_after(router_.options_.queue_timeout);
    queue_timer_.async_wait([self = shared_from_this(), id = request_id_](error_code ec) {
      if (ec || self->phase_ != Phase::kQueued || self->request_id_ != id) return;
      ServiceState* state = self->router_.Find(self->route_.service);
      // Not in the queue any more: a grant is on its way.
      if (state && !state->dispatcher.Cancel(id)) return;
      self->router_.waiting_.erase(id);
      self->ReplyBusy("no replica of service '" + self->route_.service + "' was free within " +
                          std::to_string(self->router_.options_.queue_timeout.count()) + " ms",
                      "queue_timeout");
    });
  }

  // ---- the replica ----

  void Forward() {
    phase_ = Phase::kUpstream;
    endpoint_key_ = endpoint_.Key();
    NamePrefill();
    upstream_ = router_.TakeIdle(endpoint_key_);
    if (upstream_) return WriteUpstream();
    Connect();
  }

  void Connect() {
    upstream_ = std::make_unique<Upstream>(router_.ioc_, endpoint_key_);
    error_code ec;
    asio::ip::address address = asio::ip::make_address(endpoint_.address, ec);
    if (ec) {
      // A host name: resolve it (rare; the head reports addresses).
      auto resolver = std::make_shared<tcp::resolver>(router_.ioc_);
      resolver->async_resolve(
          endpoint_.address, std::to_string(endpoint_.port),
          [self = shared_from_this(), resolver](error_code rec, tcp::resolver::results_type r) {
            if (rec || r.empty()) return self->UpstreamFailed(rec, "resolve");
            self->ConnectTo(r.begin()->endpoint());
          });
      return;
    }
    ConnectTo(tcp::endpoint(address, endpoint_.port));
  }

  void ConnectTo(const tcp::endpoint& where) {
    ArmUpstream(router_.options_.connect_timeout);
    upstream_->socket.async_connect(where, [self = shared_from_this()](error_code ec) {
      if (ec) return self->UpstreamFailed(self->Timed(ec), "connect");
      error_code ignored;
      self->upstream_->socket.set_option(tcp::no_delay(true), ignored);
      self->upstream_->socket.non_blocking(true, ignored);
      self->WriteUpstream();
    });
  }

  void WriteUpstream() {
    Send(upstream_->socket, {asio::buffer(upstream_head_), asio::buffer(request_body_)}, true,
         [this](error_code ec) {
           if (ec) return UpstreamFailed(ec, "write");
           ReadUpstreamHeader();
         });
  }

  // One read from the replica; what it means depends on the phase.
  void ReadUpstream() {
    upstream_->socket.async_read_some(upstream_->buffer.prepare(kReadBytes),
                                      [self = shared_from_this()](error_code ec, size_t n) {
                                        self->upstream_->buffer.commit(n);
                                        self->OnUpstreamBytes(self->Timed(ec));
                                      });
  }

  void OnUpstreamBytes(error_code ec) {
    if (phase_ == Phase::kUpstream) {
      if (!ec) return ParseUpstreamHeader();
      if (ec == beast::error::timeout) return OnUpstreamHeader(ec);
      // Nothing received at all: the replica failed (a retry is safe).
      if (!upstream_parser_->got_some() && upstream_->buffer.size() == 0) {
        return UpstreamFailed(ec, "response");
      }
      if (ec == asio::error::eof) {
        ec = {};
        upstream_parser_->put_eof(ec);  // a header cut short: partial message
      }
      return OnUpstreamHeader(ec ? ec : error_code(http::error::partial_message));
    }
    if (ec == asio::error::eof) {
      // The end of a body delimited by the connection's end is the end of the message.
      ec = {};
      upstream_parser_->put_eof(ec);
    }
    if (ec) return UpstreamCut(ec);
    PumpBody();
  }

  void ReadUpstreamHeader() {
    upstream_parser_.emplace();
    upstream_parser_->header_limit(router_.options_.max_header_bytes);
    upstream_parser_->body_limit(std::numeric_limits<std::uint64_t>::max());  // relayed, not kept
    if (head_request_) upstream_parser_->skip(true);
    ArmUpstream(router_.options_.response_timeout);
    ParseUpstreamHeader();
  }

  void ParseUpstreamHeader() {
    error_code ec = http::error::need_more;
    beast::flat_buffer& in = upstream_->buffer;
    if (in.size() > 0) in.consume(upstream_parser_->put(in.data(), ec));
    if (ec == http::error::need_more) return ReadUpstream();
    OnUpstreamHeader(ec);
  }

  // The replica failed before sending any byte of its response: retry where that is safe.
  void UpstreamFailed(error_code ec, const char* stage) {
    const bool was_reused = upstream_ && upstream_->reused;
    upstream_.reset();
    // A pooled connection the replica closed while idle: that is not the replica failing.
    if (was_reused && !fresh_reconnect_used_) {
      fresh_reconnect_used_ = true;
      return Connect();
    }
    const std::string failed = "replica " + std::to_string(endpoint_.replica) + " (" +
                               endpoint_key_ + ") failed before responding (" + stage + ": " +
                               ec.message() + ")";
    if (!retried_) {
      retried_ = true;
      router_.retries_.Add(router_.ServiceLabels(route_.service));
      const std::string avoid = endpoint_key_;
      ReleaseSlot();
      fresh_reconnect_used_ = false;
      return Admit(avoid);
    }
    router_.errors_.Add({route_.service, "upstream_failed"});
    ReplyError(502, failed + ", after one retry");
  }

  void OnUpstreamHeader(error_code ec) {
    if (ec == beast::error::timeout) {
      // The replica may still be working on it: not safe to send it elsewhere.
      router_.errors_.Add({route_.service, "response_timeout"});
      return ReplyError(504, "replica " + std::to_string(endpoint_.replica) + " (" + endpoint_key_ +
                                 ") did not start its response within " +
                                 std::to_string(router_.options_.response_timeout.count()) + " ms");
    }
    if (ec) {
      router_.errors_.Add({route_.service, "bad_response"});
      return ReplyError(502, "replica " + std::to_string(endpoint_.replica) + " (" + endpoint_key_ +
                                 ") sent a bad response: " + ec.message());
    }
    // The first byte is in: from here on the request is never retried.
    auto& up = upstream_parser_->get();
    status_code_ = up.result_int();
    if (ServiceState* state = router_.Find(route_.service);
        state != nullptr && !state->view.prefill_role.empty()) {
      const beast::string_view prefilled =
          up[beast::string_view(kPrefilledHeader.data(), kPrefilledHeader.size())];
      state->pairing.Outcome({prefilled.data(), prefilled.size()});
      PrefillDone();  // decode's first byte comes after its prefill, wherever it ran
      if (prefilled == "remote") prefill_role_ = state->view.prefill_role;
    }
    event_stream_ =
        beast::iequals(up[http::field::content_type].substr(0, 17), "text/event-stream");
    streaming_ = up.chunked() || event_stream_;
    chunked_out_ = false;
    const bool has_length = up.has_content_length();
    if (!has_length && !upstream_parser_->is_done() && !head_request_) {
      if (client_version_ == 10) {
        client_keep_alive_ = false;  // the end of the body is the end of the connection
      } else {
        chunked_out_ = true;
      }
    }
    // The header as the client gets it, written as text: the status line, the end-to-end
    // headers, the framing, the client's keep-alive.
    std::string& out = header_text_;
    out.clear();
    out += client_version_ == 10 ? "HTTP/1.0 " : "HTTP/1.1 ";
    out += std::to_string(status_code_);
    out += ' ';
    beast::string_view reason = up.reason();
    if (reason.empty()) reason = http::obsolete_reason(static_cast<http::status>(status_code_));
    out.append(reason.data(), reason.size());
    out += "\r\n";
    const beast::string_view connection = up[http::field::connection];
    for (const auto& field : up) {
      const beast::string_view name = field.name_string();
      if (IsHopByHop(name) || field.name() == http::field::content_length ||
          NamedIn(connection, name)) {
        continue;
      }
      AppendField(out, name, field.value());
    }
    if (has_length) {
      out += "Content-Length: ";
      out += std::to_string(upstream_parser_->content_length().value_or(0));
      out += "\r\n";
    } else if (chunked_out_) {
      out += "Transfer-Encoding: chunked\r\n";
    }
    const bool keep_alive = client_keep_alive_ && !router_.stopped_;
    if (client_version_ == 10 && keep_alive) out += "Connection: keep-alive\r\n";
    if (client_version_ != 10 && !keep_alive) out += "Connection: close\r\n";
    out += "\r\n";
    phase_ = Phase::kRelaying;
    header_pending_ = true;
    // Body bytes that came with the header go out with it, in one write.
    if (upstream_->buffer.size() > 0 || upstream_parser_->is_done()) return PumpBody();
    // Nothing of the body yet (a stream that prefills first): the header goes now.
    Send(client_, {PendingHeader()}, false, [this](error_code wec) {
      if (wec) return ClientGone();
      PumpBody();
    });
  }

  // The header while it waits to go out with the first body bytes; empty once sent.
  asio::const_buffer PendingHeader() {
    if (!header_pending_) return {};
    header_pending_ = false;
    return asio::buffer(header_text_);
  }

  // Relays the body piece by piece: what the replica sent so far is written to the client
  // before the next read.
  void PumpBody() {
    if (upstream_parser_->is_done()) return FinishBody();
    auto& body = upstream_parser_->get().body();
    body.data = body_buffer_.data();
    body.size = body_buffer_.size();
    beast::flat_buffer& in = upstream_->buffer;
    if (in.size() > 0) {
      upstream_parser_->eager(true);  // as many body bytes as fit in body_buffer_
      error_code ec;
      in.consume(upstream_parser_->put(in.data(), ec));
      if (ec == http::error::need_buffer || ec == http::error::need_more) ec = {};
      if (ec) return UpstreamCut(ec);
    }
    const size_t got = body_buffer_.size() - body.size;
    if (got > 0) return WriteBody(got);
    if (upstream_parser_->is_done()) return FinishBody();
    ArmUpstream(router_.options_.stream_idle_timeout);
    ReadUpstream();
  }

  // Bytes already went to the client: all that is left is to cut the connection.
  void UpstreamCut(error_code ec) {
    router_.errors_.Add(
        {route_.service, ec == beast::error::timeout ? "stream_timeout" : "upstream_cut"});
    upstream_.reset();
    Abort();
  }

  // Writes `n` body bytes (with the header when it is still pending, and the last chunk when
  // the replica is done), then reads on.
  void WriteBody(size_t n) {
    const bool last = upstream_parser_->is_done();
    Pieces pieces{PendingHeader(), {}, asio::buffer(body_buffer_.data(), n), {}};
    if (event_stream_) tokens_.Feed({body_buffer_.data(), n});
    if (chunked_out_) {
      const int len = std::snprintf(chunk_size_, sizeof chunk_size_, "%zx\r\n", n);
      pieces[1] = asio::buffer(chunk_size_, static_cast<size_t>(len));
      pieces[3] = last ? asio::buffer(kChunkEndLast.data(), kChunkEndLast.size())
                       : asio::buffer(kChunkEnd.data(), kChunkEnd.size());
    }
    Send(client_, pieces, false, [this, last](error_code ec) {
      if (ec) return ClientGone();
      NoteFirstByte();
      if (last) return Complete();
      PumpBody();
    });
  }

  // The replica is done with nothing left to relay: send what is still owed, then complete.
  void FinishBody() {
    if (!header_pending_ && !chunked_out_) return Complete();
    Pieces pieces{PendingHeader(), {}, {}, {}};
    if (chunked_out_) pieces[1] = asio::buffer(kLastChunk.data(), kLastChunk.size());
    Send(client_, pieces, false, [this](error_code ec) {
      if (ec) return ClientGone();
      Complete();
    });
  }

  void NoteFirstByte() {
    if (first_body_byte_noted_) return;
    first_body_byte_noted_ = true;
    first_byte_s_ = SecondsSince(start_);
    router_.first_byte_.Observe(router_.FirstByteLabels(route_.service, streaming_), first_byte_s_);
    if (!streaming_) return;
    if (ServiceState* state = router_.Find(route_.service)) {
      router_.role_ttft_.Observe(
          {route_.service, prefill_role_.empty() ? state->view.role : prefill_role_},
          first_byte_s_);
    }
  }

  // A stream's output tokens and time per output token, by the role that decoded it.
  void NoteTokens() {
    if (!event_stream_ || tokens_.tokens() == 0) return;
    ServiceState* state = router_.Find(route_.service);
    if (state == nullptr) return;
    const std::vector<std::string> labels{route_.service, state->view.role};
    router_.output_tokens_.Add(labels, static_cast<double>(tokens_.tokens()));
    const double tpot = TimePerOutputToken(first_byte_s_, SecondsSince(start_), tokens_.tokens());
    if (tpot >= 0) router_.role_tpot_.Observe(labels, tpot);
  }

  // The response is through: account, give the slot and the connection back, next request.
  void Complete() {
    NoteFirstByte();
    NoteTokens();
    router_.requests_.Add(router_.CodeLabels(route_.service, status_code_));
    router_.latency_.Observe(router_.ServiceLabels(route_.service), SecondsSince(start_));
    const bool reusable = upstream_parser_->keep_alive() && upstream_parser_->is_done() &&
                          upstream_->buffer.size() == 0;
    if (reusable) {
      router_.PutIdle(std::move(upstream_));
    } else {
      upstream_.reset();
    }
    ReleaseSlot();
    ResetRequest();
    if (client_keep_alive_ && !router_.stopped_) return DoIdleWait();
    CloseGracefully();
  }

  // Timeouts: one deadline per session (its operations are sequential), checked by the
  // router's sweep, instead of a timer per socket operation (each re-arm cost a syscall).
  void ArmClient(std::chrono::milliseconds timeout) {
    deadline_ = SteadyClock::now() + timeout;
    timed_out_ = false;
    upstream_op_ = false;
  }
  void ArmUpstream(std::chrono::milliseconds timeout) {
    deadline_ = SteadyClock::now() + timeout;
    timed_out_ = false;
    upstream_op_ = true;
  }
  // `ec` as the handler should see it: a timeout when the sweep cut the operation.
  error_code Timed(error_code ec) {
    if (!timed_out_) return ec;
    timed_out_ = false;
    return ec ? error_code(beast::error::timeout) : ec;
  }

  // ---- endings ----

  // A disaggregated Service: names the prefill replica paired with the chosen decode replica
  // in the request's header (disagg_pairing.h). Again on a retry, for the new decode replica.
  void NamePrefill() {
    PrefillDone();
    upstream_head_.resize(head_base_size_);
    ServiceState* state = router_.Find(route_.service);
    if (state == nullptr || state->view.prefill_role.empty()) return;
    std::optional<PrefillPairing::Pick> pick =
        state->pairing.Choose(endpoint_, static_cast<int64_t>(request_body_.size()));
    if (!pick) return;
    prefill_ticket_ = pick->ticket;
    upstream_head_.resize(head_base_size_ - 2);  // before the blank line
    upstream_head_ += kPrefillHeader;
    upstream_head_ += ": ";
    const bool v6 = pick->endpoint.address.find(':') != std::string::npos;
    upstream_head_ += v6 ? "[" + pick->endpoint.address + "]" : pick->endpoint.address;
    upstream_head_ += ":" + std::to_string(pick->endpoint.port) + "\r\n\r\n";
  }

  // The paired prefill is over (decode answered, failed, or the request ended).
  void PrefillDone() {
    if (prefill_ticket_ == 0) return;
    if (ServiceState* state = router_.Find(route_.service)) state->pairing.Done(prefill_ticket_);
    prefill_ticket_ = 0;
  }

  void ReleaseSlot() {
    PrefillDone();
    if (!has_slot_) return;
    has_slot_ = false;
    router_.Release(route_.service, endpoint_key_);
  }

  void ResetRequest() {
    upstream_parser_.reset();
    header_pending_ = false;
    first_body_byte_noted_ = false;
    event_stream_ = false;
    tokens_.Reset();
    prefill_role_.clear();
    head_request_ = false;
    parser_.reset();
  }

  // The client went away mid-response.
  void ClientGone() {
    router_.errors_.Add({route_.service, "client_gone"});
    upstream_.reset();  // the rest of its response is unwanted: the connection cannot be reused
    Abort();
  }

  void Abort() {
    ReleaseSlot();
    Close();
  }

  // 503 with Retry-After: the client should come back.
  void ReplyBusy(const std::string& message, const char* reason) {
    router_.errors_.Add({route_.service, reason});
    router_.requests_.Add({route_.service, "503"});
    Json body = {{"error", message}, {"service", route_.service}};
    WriteLocal(503, body.dump() + "\n", "application/json",
               {{"Retry-After", std::to_string(router_.options_.retry_after_s)}}, false);
  }

  // An error the router answers itself for a routed request (the caller counts the reason in
  // errors_).
  void ReplyError(int status, const std::string& message, bool close = false) {
    router_.requests_.Add({route_.service, std::to_string(status)});
    ReleaseSlot();
    upstream_.reset();
    Json body = {{"error", message}, {"service", route_.service}};
    WriteLocal(status, body.dump() + "\n", "application/json", {}, close);
  }

  void ReplyLocal(int status, const std::string& message, const char* field, bool close) {
    Json body = {{"error", message}, {"field", field}};
    WriteLocal(status, body.dump() + "\n", "application/json", {}, close);
  }

  void ReplyLocalText(int status, std::string body, const char* content_type) {
    WriteLocal(status, std::move(body), content_type, {}, !parser_->is_done());
  }

  void WriteLocal(int status, std::string body, const char* content_type,
                  std::vector<std::pair<std::string, std::string>> headers, bool close) {
    phase_ = Phase::kWriting;
    const bool keep_alive = client_keep_alive_ && !close && !router_.stopped_;
    auto res = std::make_shared<http::response<http::string_body>>();
    res->version(client_version_ == 10 ? 10 : 11);
    res->result(static_cast<unsigned>(status));
    res->set(http::field::server, "tessera-router");
    res->set(http::field::content_type, content_type);
    for (auto& [name, value] : headers) res->set(name, value);
    res->keep_alive(keep_alive);
    if (!head_request_) res->body() = std::move(body);
    res->prepare_payload();
    ArmClient(router_.options_.write_timeout);
    http::async_write(client_, *res,
                      [self = shared_from_this(), res, keep_alive](error_code ec, size_t) {
                        if (ec) return self->Close();
                        self->ResetRequest();
                        if (keep_alive) return self->DoIdleWait();
                        self->CloseGracefully();
                      });
  }

  void CloseGracefully() {
    error_code ec;
    client_.shutdown(tcp::socket::shutdown_send, ec);
    Close();
  }

  void Close() {
    if (phase_ == Phase::kDone) return;
    phase_ = Phase::kDone;
    queue_timer_.cancel();
    error_code ignored;
    client_.close(ignored);
  }

  static constexpr std::string_view kChunkEnd = "\r\n";
  static constexpr std::string_view kChunkEndLast = "\r\n0\r\n\r\n";
  static constexpr std::string_view kLastChunk = "0\r\n\r\n";

  RouterImpl& router_;
  tcp::socket client_;
  beast::flat_buffer client_buffer_;
  asio::steady_timer queue_timer_;
  SteadyClock::time_point deadline_ = SteadyClock::time_point::max();
  bool upstream_op_ = false;
  bool timed_out_ = false;
  std::string peer_address_;
  Phase phase_ = Phase::kIdle;

  std::optional<http::request_parser<http::string_body>> parser_;
  unsigned client_version_ = 11;
  bool client_keep_alive_ = false;
  bool head_request_ = false;
  SteadyClock::time_point start_;
  Route route_;
  RequestId request_id_ = 0;
  bool has_slot_ = false;
  Endpoint endpoint_;
  std::string endpoint_key_;  // endpoint_.Key()
  bool retried_ = false;
  bool fresh_reconnect_used_ = false;
  bool first_body_byte_noted_ = false;
  double first_byte_s_ = 0;    // since start_, when the first body byte went out
  bool event_stream_ = false;  // the response is text/event-stream: its tokens are counted
  SseTokenCounter tokens_;     // ... here
  std::string prefill_role_;   // the prefill role when decode handed the prompt off, else ""

  std::string upstream_head_;    // the request line and headers the replica gets
  size_t head_base_size_ = 0;    // its size without the X-Tessera-Prefill header
  uint64_t prefill_ticket_ = 0;  // the paired prefill replica's charge (PrefillPairing)
  std::string request_body_;
  std::unique_ptr<Upstream> upstream_;
  std::optional<http::response_parser<http::buffer_body>> upstream_parser_;
  std::string header_text_;  // the response header the client gets
  bool header_pending_ = false;
  unsigned status_code_ = 0;
  bool streaming_ = false;
  bool chunked_out_ = false;
  char chunk_size_[24] = {};
  std::vector<char> body_buffer_;
};

// ---- RouterImpl ----

std::optional<Route> RouterImpl::Resolve(std::string_view target, std::string* error) const {
  constexpr std::string_view kPrefix = "/services/";
  Route route;
  if (target.starts_with(kPrefix)) {
    std::string_view rest = target.substr(kPrefix.size());
    const size_t end = rest.find_first_of("/?");
    route.service = std::string(rest.substr(0, end));
    std::string_view tail = end == std::string_view::npos ? "" : rest.substr(end);
    route.target = tail.empty() || tail[0] == '?' ? "/" + std::string(tail) : std::string(tail);
    route.explicit_service = true;
  } else if (!options_.default_service.empty()) {
    route.service = options_.default_service;
    route.target = std::string(target);
  } else if (services_.size() == 1) {
    route.service = services_.begin()->first;
    route.target = std::string(target);
  } else {
    std::string known;
    for (const auto& [name, state] : services_) known += (known.empty() ? "" : ", ") + name;
    *error = "no service for path " + std::string(target.substr(0, target.find('?'))) +
             ": use /services/<name>/... or start the router with --default-service (" +
             (known.empty() ? "no services are known yet" : "services: " + known) + ")";
    return std::nullopt;
  }
  if (!services_.count(route.service)) {
    std::string known;
    for (const auto& [name, state] : services_) known += (known.empty() ? "" : ", ") + name;
    *error = "no service named '" + route.service + "' (" +
             (known.empty() ? "no services are known yet" : "services: " + known) + ")";
    return std::nullopt;
  }
  return route;
}

void RouterImpl::Upsert(ServiceView view) {
  auto it = services_.find(view.name);
  if (it == services_.end()) {
    it = services_.emplace(view.name, std::make_unique<ServiceState>(view, options_.max_queued))
             .first;
  }
  ServiceState& state = *it->second;
  state.pairing.SetEndpoints(view.prefill_endpoints);
  const int limit = view.max_ongoing_requests;
  std::vector<Endpoint> endpoints = view.endpoints;
  state.view = std::move(view);
  Dispatch(state, state.dispatcher.SetEndpoints(std::move(endpoints), limit, rng_));
}

void RouterImpl::Remove(const std::string& name) {
  auto it = services_.find(name);
  if (it == services_.end()) return;
  std::vector<std::shared_ptr<Session>> queued;
  for (auto w = waiting_.begin(); w != waiting_.end();) {
    if (w->second.service == name) {
      queued.push_back(std::move(w->second.session));
      w = waiting_.erase(w);
    } else {
      ++w;
    }
  }
  services_.erase(it);
  for (auto& s : queued) s->OnServiceRemoved();
}

void RouterImpl::Release(const std::string& service, const std::string& key) {
  ServiceState* state = Find(service);
  if (!state) return;  // the Service left; its dispatcher went with it
  Dispatch(*state, state->dispatcher.Release(key, rng_));
}

void RouterImpl::Dispatch(ServiceState& state, std::vector<Grant> grants) {
  if (grants.empty()) return;  // the usual case: nobody was waiting
  std::deque<Grant> work(grants.begin(), grants.end());
  while (!work.empty()) {
    Grant g = std::move(work.front());
    work.pop_front();
    auto it = waiting_.find(g.request);
    if (it == waiting_.end()) {
      // Nobody waits for it any more: hand the slot on.
      for (Grant& more : state.dispatcher.Release(g.endpoint.Key(), rng_)) {
        work.push_back(std::move(more));
      }
      continue;
    }
    std::shared_ptr<Session> session = std::move(it->second.session);
    waiting_.erase(it);
    // Posted: the session continues on its own turn, not inside the releaser's.
    asio::post(ioc_, [session, endpoint = g.endpoint] { session->OnGranted(endpoint); });
  }
}

std::unique_ptr<Upstream> RouterImpl::TakeIdle(const std::string& key) {
  auto it = pool_.find(key);
  if (it == pool_.end()) return nullptr;
  auto& idle = it->second;
  while (!idle.empty()) {
    std::unique_ptr<Upstream> up = std::move(idle.back());
    idle.pop_back();
    const auto idle_for = SteadyClock::now() - up->idle_since;
    if (idle_for > options_.pool_idle_timeout) continue;
    up->reused = true;
    // Just back in the pool: trust it (if the replica closed it meanwhile, the request is
    // redialled on a fresh connection, see UpstreamFailed) and save the syscall.
    if (idle_for < std::chrono::seconds(1)) return up;
    // Closed by the replica while idle? A non-blocking peek says so without consuming.
    char byte;
    const ssize_t n = ::recv(up->socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return up;
  }
  return nullptr;
}

void RouterImpl::PutIdle(std::unique_ptr<Upstream> up) {
  auto& idle = pool_[up->key];
  if (idle.size() >= options_.max_idle_per_endpoint) idle.pop_front();  // the oldest
  up->idle_since = SteadyClock::now();
  idle.push_back(std::move(up));
}

void RouterImpl::DisaggMetrics(metrics::ExpositionWriter& w) const {
  w.Family("tessera_router_prefill_pairings_total",
           "Requests of disaggregated Services by where their prefill replica was: same_slice "
           "as the decode replica, other_slice, or none (no ready prefill replica)",
           metrics::MetricType::kCounter);
  for (const auto& [name, state] : services_) {
    if (state->view.prefill_role.empty()) continue;
    const PairingCounts& c = state->pairing.counts();
    w.Sample("tessera_router_prefill_pairings_total",
             {{"service", name}, {"placement", "same_slice"}}, static_cast<double>(c.same_slice));
    w.Sample("tessera_router_prefill_pairings_total",
             {{"service", name}, {"placement", "other_slice"}}, static_cast<double>(c.other_slice));
    w.Sample("tessera_router_prefill_pairings_total", {{"service", name}, {"placement", "none"}},
             static_cast<double>(c.no_prefill));
  }
  w.Family("tessera_router_prefills_total",
           "Where decode replicas prefilled (their X-Tessera-Prefilled answer): remote (the "
           "paired prefill replica, KV handed off), local (a short prompt), fallback (the "
           "handoff failed; by reason)",
           metrics::MetricType::kCounter);
  for (const auto& [name, state] : services_) {
    if (state->view.prefill_role.empty()) continue;
    const PairingCounts& c = state->pairing.counts();
    w.Sample("tessera_router_prefills_total",
             {{"service", name}, {"where", "remote"}, {"reason", ""}},
             static_cast<double>(c.remote));
    w.Sample("tessera_router_prefills_total",
             {{"service", name}, {"where", "local"}, {"reason", ""}}, static_cast<double>(c.local));
    for (const auto& [reason, n] : c.fallback_reasons)
      w.Sample("tessera_router_prefills_total",
               {{"service", name}, {"where", "fallback"}, {"reason", reason}},
               static_cast<double>(n));
  }
  w.Family("tessera_router_prefill_queued_prompt_tokens",
           "Prompt tokens (request body bytes) sent to prefill replicas and not yet prefilled",
           metrics::MetricType::kGauge);
  for (const auto& [name, state] : services_) {
    if (state->view.prefill_role.empty()) continue;
    w.Sample("tessera_router_prefill_queued_prompt_tokens", {{"service", name}},
             static_cast<double>(state->pairing.QueuedPromptTokens()));
  }
}

std::string RouterImpl::MetricsText() {
  metrics::ExpositionWriter w;
  requests_.Write(w);
  errors_.Write(w);
  retries_.Write(w);
  latency_.Write(w);
  first_byte_.Write(w);
  queue_wait_.Write(w);
  output_tokens_.Write(w);
  role_ttft_.Write(w);
  role_tpot_.Write(w);
  w.Family("tessera_router_in_flight", "Requests in flight per replica",
           metrics::MetricType::kGauge);
  for (const auto& [name, state] : services_) {
    for (const auto& [replica, n] : state->dispatcher.Load().per_replica) {
      w.Sample("tessera_router_in_flight",
               {{"service", name}, {"replica", std::to_string(replica)}}, n);
    }
  }
  w.Family("tessera_router_queued",
           "Requests waiting for a free replica (one FIFO queue per service, shared by its "
           "replicas)",
           metrics::MetricType::kGauge);
  for (const auto& [name, state] : services_) {
    w.Sample("tessera_router_queued", {{"service", name}}, state->dispatcher.Load().queued);
  }
  w.Family("tessera_router_ready_replicas", "Ready replicas the router routes to",
           metrics::MetricType::kGauge);
  for (const auto& [name, state] : services_) {
    w.Sample("tessera_router_ready_replicas", {{"service", name}},
             static_cast<double>(state->dispatcher.endpoints().size()));
  }
  w.Family("tessera_router_max_ongoing_requests", "Per-replica limit (maxOngoingRequests)",
           metrics::MetricType::kGauge);
  for (const auto& [name, state] : services_) {
    w.Sample("tessera_router_max_ongoing_requests", {{"service", name}},
             state->dispatcher.max_ongoing());
  }
  DisaggMetrics(w);
  w.Family("tessera_router_client_connections", "Client connections open",
           metrics::MetricType::kGauge);
  w.Sample("tessera_router_client_connections", {}, static_cast<double>(sessions_));
  size_t idle = 0;
  for (const auto& [key, conns] : pool_) idle += conns.size();
  w.Family("tessera_router_idle_upstream_connections",
           "Kept-alive connections to replicas waiting in the pool", metrics::MetricType::kGauge);
  w.Sample("tessera_router_idle_upstream_connections", {}, static_cast<double>(idle));
  if (head_connected_ >= 0) {
    w.Family("tessera_router_head_connected",
             "1 while the watch on the head is connected; 0 while routing on the last view",
             metrics::MetricType::kGauge);
    w.Sample("tessera_router_head_connected", {}, head_connected_.load());
  }
  auto text = w.Finish();
  return text.ok() ? *text : "# metrics error: " + text.status().message() + "\n";
}

Status RouterImpl::Start() {
  if (started_.exchange(true)) return FailedPrecondition("ServingRouter already started");
  const std::string where = options_.bind_address + ":" + std::to_string(options_.port);
  error_code ec;
  asio::ip::address address = asio::ip::make_address(options_.bind_address, ec);
  if (ec) return InvalidArgument("bind address '" + options_.bind_address + "': " + ec.message());
  tcp::endpoint endpoint(address, options_.port);
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    error_code ignored;
    acceptor_.close(ignored);
    started_ = false;
    return Unavailable("cannot listen on " + where + ": " + ec.message());
  }
  port_ = acceptor_.local_endpoint(ec).port();
  DoAccept();
  Sweep();
  thread_ = std::thread([this] { ioc_.run(); });
  return Status::Ok();
}

void RouterImpl::DoAccept() {
  acceptor_.async_accept([this](error_code ec, tcp::socket socket) {
    if (stopped_ || !acceptor_.is_open()) return;
    if (!ec) {
      if (sessions_ >= options_.max_connections) {
        error_code ignored;
        socket.close(ignored);  // over the limit: refuse by closing
      } else {
        std::make_shared<Session>(*this, std::move(socket))->Start();
      }
    }
    DoAccept();
  });
}

// Every 100 ms: sessions whose operation outlived its deadline are cut.
void RouterImpl::Sweep() {
  sweep_.expires_after(std::chrono::milliseconds(100));
  sweep_.async_wait([this](error_code ec) {
    if (ec || stopped_) return;
    const SteadyClock::time_point now = SteadyClock::now();
    std::vector<std::shared_ptr<Session>> late;
    for (Session* s : live_) {
      if (s->deadline() > now) continue;
      if (auto alive = s->weak_from_this().lock()) late.push_back(std::move(alive));
    }
    for (auto& s : late) s->OnDeadline();
    Sweep();
  });
}

void RouterImpl::Stop() {
  if (!started_ || stopped_.exchange(true)) return;
  asio::post(ioc_, [this] {
    error_code ec;
    acceptor_.close(ec);
  });
  ioc_.stop();
  if (thread_.joinable()) thread_.join();
  // Sockets must go before the io_context: the queued sessions and the pool.
  waiting_.clear();
  pool_.clear();
}

// ---- ServingRouter ----

ServingRouter::ServingRouter(RouterOptions options)
    : impl_(std::make_unique<RouterImpl>(std::move(options))) {}

ServingRouter::~ServingRouter() { impl_->Stop(); }

Status ServingRouter::Start() { return impl_->Start(); }

uint16_t ServingRouter::port() const { return impl_->port_; }

void ServingRouter::Stop() { impl_->Stop(); }

void ServingRouter::ReplaceServices(std::vector<ServiceView> services) {
  asio::post(impl_->ioc_, [impl = impl_.get(), services = std::move(services)]() mutable {
    std::set<std::string> keep;
    for (const ServiceView& s : services) keep.insert(s.name);
    std::vector<std::string> gone;
    for (const auto& [name, state] : impl->services_) {
      if (!keep.count(name)) gone.push_back(name);
    }
    for (const std::string& name : gone) impl->Remove(name);
    for (ServiceView& s : services) impl->Upsert(std::move(s));
  });
}

void ServingRouter::UpsertService(ServiceView service) {
  asio::post(impl_->ioc_, [impl = impl_.get(), service = std::move(service)]() mutable {
    impl->Upsert(std::move(service));
  });
}

void ServingRouter::RemoveService(std::string name) {
  asio::post(impl_->ioc_, [impl = impl_.get(), name = std::move(name)] { impl->Remove(name); });
}

namespace {

// A role's streams since the router started: TTFT of those it prefilled, output tokens and
// TPOT of those it decoded.
void ReadStreams(const RouterImpl& impl, const std::string& service, ServiceLoad& load) {
  const metrics::HistogramFamily::Snapshot ttft = impl.role_ttft_.Read({service, load.role});
  load.ttft_count = ttft.count;
  load.ttft_sum_s = ttft.sum;
  load.output_tokens = static_cast<uint64_t>(impl.output_tokens_.Value({service, load.role}));
  const metrics::HistogramFamily::Snapshot tpot = impl.role_tpot_.Read({service, load.role});
  load.tpot_count = tpot.count;
  load.tpot_sum_s = tpot.sum;
}

}  // namespace

std::vector<ServiceLoad> ServingRouter::Loads() {
  if (!impl_->started_ || impl_->stopped_) return {};
  auto promise = std::make_shared<std::promise<std::vector<ServiceLoad>>>();
  std::future<std::vector<ServiceLoad>> future = promise->get_future();
  asio::post(impl_->ioc_, [impl = impl_.get(), promise] {
    std::vector<ServiceLoad> out;
    for (const auto& [name, state] : impl->services_) {
      ServiceLoad load;
      load.service = name;
      load.role = state->view.role;
      load.load = state->dispatcher.Load();
      const metrics::HistogramFamily::Snapshot latency = impl->latency_.Read({name});
      load.requests = latency.count;
      load.latency_sum_s = latency.sum;
      load.latency_bounds = impl->latency_.upper_bounds();
      load.latency_cumulative = latency.cumulative;
      ReadStreams(*impl, name, load);
      if (!state->view.prefill_role.empty()) {
        load.pairing = state->pairing.counts();
        // The prefill role's own report: the picks waiting for their prefill and their tokens
        // (the prefill role's autoscaling signal).
        ServiceLoad prefill;
        prefill.service = name;
        prefill.role = state->view.prefill_role;
        prefill.load.per_replica = state->pairing.PendingByReplica();
        prefill.load.in_flight = state->pairing.PendingPicks();
        prefill.queued_prompt_tokens = static_cast<double>(state->pairing.QueuedPromptTokens());
        ReadStreams(*impl, name, prefill);
        out.push_back(std::move(load));
        out.push_back(std::move(prefill));
        continue;
      }
      out.push_back(std::move(load));
    }
    promise->set_value(std::move(out));
  });
  if (future.wait_for(std::chrono::seconds(1)) != std::future_status::ready) return {};
  return future.get();
}

void ServingRouter::SetHeadConnected(bool connected) { impl_->head_connected_ = connected ? 1 : 0; }

}  // namespace tessera::proxy
