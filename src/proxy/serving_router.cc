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
#include <deque>
#include <future>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "common/metrics.h"
#include "common/rng.h"

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

std::string ToStd(beast::string_view s) { return {s.data(), s.size()}; }

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
  ServiceState(ServiceView v, size_t max_queued) : view(std::move(v)), dispatcher(max_queued) {}
  ServiceView view;  // name, role, limit; the endpoints live in the dispatcher
  Dispatcher dispatcher;
};

// A connection to one replica, idle in the pool or held by one exchange.
struct Upstream {
  Upstream(asio::io_context& ioc, std::string k) : stream(ioc), key(std::move(k)) {}
  beast::tcp_stream stream;
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
                    LatencyBounds()) {}
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

  // Last: destroyed first, so handlers it destroys still find the state above.
  asio::io_context ioc_;
  tcp::acceptor acceptor_{ioc_};
  asio::steady_timer sweep_{ioc_};
  std::thread thread_;
};

// One client connection; at most one request in progress (HTTP/1.1 without pipelining). Every
// member is touched on the io thread only.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(RouterImpl& router, tcp::socket socket)
      : router_(router), client_(std::move(socket)), queue_timer_(router.ioc_) {
    ++router_.sessions_;
    router_.live_.insert(this);
    error_code ec;
    tcp::endpoint peer = client_.socket().remote_endpoint(ec);
    if (!ec) peer_address_ = peer.address().to_string(ec);
    client_.socket().set_option(tcp::no_delay(true), ec);
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
      upstream_->stream.close();
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
    router_.queue_wait_.Observe({route_.service}, SecondsSince(start_));
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

  // ---- the client's request ----

  void DoIdleWait() {
    phase_ = Phase::kIdle;
    if (router_.stopped_) return Close();
    if (client_buffer_.size() > 0) return DoReadHeader();
    ArmClient(router_.options_.idle_timeout);
    client_.async_read_some(client_buffer_.prepare(4096),
                            [self = shared_from_this()](error_code ec, size_t n) {
                              self->client_buffer_.commit(n);
                              if (ec) return self->Close();
                              self->DoReadHeader();
                            });
  }

  void DoReadHeader() {
    phase_ = Phase::kHeader;
    parser_.emplace();
    parser_->header_limit(router_.options_.max_header_bytes);
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());  // checked in OnHeader
    ArmClient(router_.options_.header_timeout);
    http::async_read_header(
        client_, client_buffer_, *parser_,
        [self = shared_from_this()](error_code ec, size_t) { self->OnHeader(ec); });
  }

  void OnHeader(error_code ec) {
    if (ec == http::error::header_limit) {
      return ReplyLocal(
          431,
          "request header exceeds " + std::to_string(router_.options_.max_header_bytes) + " bytes",
          "headers", /*close=*/true);
    }
    if (ec) {
      const bool malformed =
          ec.category() == http::make_error_code(http::error::bad_target).category() &&
          ec != http::error::end_of_stream && ec != http::error::partial_message;
      if (malformed) return ReplyLocal(400, "malformed request: " + ec.message(), "request", true);
      return Close();  // timeout, disconnect, reset
    }
    start_ = SteadyClock::now();
    auto& msg = parser_->get();
    client_version_ = msg.version();
    client_keep_alive_ = msg.keep_alive();
    head_request_ = msg.method() == http::verb::head;
    const std::string target = ToStd(msg.target());
    const std::string path = target.substr(0, target.find('?'));

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
    if (beast::iequals(msg[http::field::expect], "100-continue")) {
      auto cont = std::make_shared<http::response<http::empty_body>>(http::status::continue_,
                                                                     msg.version());
      ArmClient(router_.options_.write_timeout);
      http::async_write(client_, *cont, [self = shared_from_this(), cont](error_code wec, size_t) {
        if (wec) return self->Close();
        self->DoReadBody();
      });
      return;
    }
    DoReadBody();
  }

  void DoReadBody() {
    phase_ = Phase::kBody;
    ArmClient(router_.options_.body_timeout);
    http::async_read(
        client_, client_buffer_, *parser_, [self = shared_from_this()](error_code ec, size_t) {
          if (ec == http::error::body_limit) {
            self->router_.errors_.Add({self->route_.service, "body_too_large"});
            return self->ReplyError(413,
                                    "request body exceeds " +
                                        std::to_string(self->router_.options_.max_body_bytes) +
                                        " bytes",
                                    true);
          }
          if (ec) return self->Close();
          self->OnRequest();
        });
  }

  // The whole request is here: build what the replica gets, then find it a replica.
  void OnRequest() {
    auto& msg = parser_->get();
    upstream_request_ = {};
    upstream_request_.version(11);
    if (msg.method() == http::verb::unknown) {
      upstream_request_.method_string(msg.method_string());
    } else {
      upstream_request_.method(msg.method());
    }
    upstream_request_.target(route_.target);
    // Headers named in Connection are hop-by-hop too.
    const std::string connection_tokens = ToStd(msg[http::field::connection]);
    for (const auto& field : msg) {
      const beast::string_view name = field.name_string();
      if (IsHopByHop(name)) continue;
      if (!connection_tokens.empty() && connection_tokens.find(ToStd(name)) != std::string::npos) {
        continue;
      }
      upstream_request_.insert(name, field.value());
    }
    if (!peer_address_.empty()) {
      std::string forwarded = ToStd(msg["X-Forwarded-For"]);
      forwarded = forwarded.empty() ? peer_address_ : forwarded + ", " + peer_address_;
      upstream_request_.set("X-Forwarded-For", forwarded);
    }
    upstream_request_.body() = std::move(msg.body());
    upstream_request_.keep_alive(true);
    upstream_request_.prepare_payload();
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
        endpoint_ = admission.endpoint;
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
    upstream_ = router_.TakeIdle(endpoint_.Key());
    if (upstream_) return WriteUpstream();
    Connect();
  }

  void Connect() {
    upstream_ = std::make_unique<Upstream>(router_.ioc_, endpoint_.Key());
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
    upstream_->stream.async_connect(where, [self = shared_from_this()](error_code ec) {
      if (ec) return self->UpstreamFailed(self->Timed(ec), "connect");
      error_code ignored;
      self->upstream_->stream.socket().set_option(tcp::no_delay(true), ignored);
      self->WriteUpstream();
    });
  }

  void WriteUpstream() {
    ArmUpstream(router_.options_.write_timeout);
    http::async_write(upstream_->stream, upstream_request_,
                      [self = shared_from_this()](error_code ec, size_t) {
                        if (ec) return self->UpstreamFailed(ec, "write");
                        self->ReadUpstreamHeader();
                      });
  }

  void ReadUpstreamHeader() {
    upstream_parser_.emplace();
    upstream_parser_->header_limit(router_.options_.max_header_bytes);
    upstream_parser_->body_limit(std::numeric_limits<std::uint64_t>::max());  // relayed, not kept
    if (head_request_) upstream_parser_->skip(true);
    ArmUpstream(router_.options_.response_timeout);
    http::async_read_header(upstream_->stream, upstream_->buffer, *upstream_parser_,
                            [self = shared_from_this()](error_code ec, size_t n) {
                              self->OnUpstreamHeader(self->Timed(ec), n);
                            });
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
                               endpoint_.Key() + ") failed before responding (" + stage + ": " +
                               ec.message() + ")";
    if (!retried_) {
      retried_ = true;
      router_.retries_.Add({route_.service});
      const std::string avoid = endpoint_.Key();
      ReleaseSlot();
      fresh_reconnect_used_ = false;
      return Admit(avoid);
    }
    router_.errors_.Add({route_.service, "upstream_failed"});
    ReplyError(502, failed + ", after one retry");
  }

  void OnUpstreamHeader(error_code ec, size_t parsed) {
    if (ec == beast::error::timeout) {
      // The replica may still be working on it: not safe to send it elsewhere.
      router_.errors_.Add({route_.service, "response_timeout"});
      return ReplyError(504, "replica " + std::to_string(endpoint_.replica) + " (" +
                                 endpoint_.Key() + ") did not start its response within " +
                                 std::to_string(router_.options_.response_timeout.count()) + " ms");
    }
    if (ec) {
      if (parsed == 0 && upstream_->buffer.size() == 0) return UpstreamFailed(ec, "response");
      router_.errors_.Add({route_.service, "bad_response"});
      return ReplyError(502, "replica " + std::to_string(endpoint_.replica) + " (" +
                                 endpoint_.Key() + ") sent a bad response: " + ec.message());
    }
    // The first byte is in: from here on the request is never retried.
    auto& up = upstream_parser_->get();
    status_code_ = up.result_int();
    response_ = {};
    response_.version(client_version_ == 10 ? 10 : 11);
    response_.result(up.result_int());
    response_.reason(up.reason());
    const std::string connection_tokens = ToStd(up[http::field::connection]);
    for (const auto& field : up) {
      const beast::string_view name = field.name_string();
      if (IsHopByHop(name) || beast::iequals(name, "content-length")) continue;
      if (!connection_tokens.empty() && connection_tokens.find(ToStd(name)) != std::string::npos) {
        continue;
      }
      response_.insert(name, field.value());
    }
    streaming_ = up.chunked() ||
                 beast::iequals(up[http::field::content_type].substr(0, 17), "text/event-stream");
    chunked_out_ = false;
    if (up.has_content_length()) {
      response_.content_length(upstream_parser_->content_length().value_or(0));
    } else if (!upstream_parser_->is_done() && !head_request_) {
      if (client_version_ == 10) {
        client_keep_alive_ = false;  // the end of the body is the end of the connection
      } else {
        chunked_out_ = true;
        response_.chunked(true);
      }
    }
    response_.keep_alive(client_keep_alive_ && !router_.stopped_);
    phase_ = Phase::kRelaying;
    std::ostringstream header;
    header << response_.base();
    header_text_ = std::move(header).str();
    header_pending_ = true;
    // Body bytes that came with the header go out with it, in one write.
    if (upstream_->buffer.size() > 0 || upstream_parser_->is_done()) return PumpBody();
    // Nothing of the body yet (a stream that prefills first): the header goes now.
    ArmClient(router_.options_.write_timeout);
    asio::async_write(client_, asio::buffer(header_text_),
                      [self = shared_from_this()](error_code wec, size_t) {
                        if (wec) return self->ClientGone();
                        self->header_pending_ = false;
                        self->PumpBody();
                      });
  }

  // The header while it waits to go out with the first body bytes; empty once sent.
  asio::const_buffer PendingHeader() {
    if (!header_pending_) return {};
    header_pending_ = false;
    return asio::buffer(header_text_);
  }

  // Relays the body piece by piece: each read from the replica is written before the next.
  void PumpBody() {
    if (upstream_parser_->is_done()) return FinishBody();
    auto& body = upstream_parser_->get().body();
    body.data = body_buffer_.data();
    body.size = body_buffer_.size();
    ArmUpstream(router_.options_.stream_idle_timeout);
    http::async_read_some(
        upstream_->stream, upstream_->buffer, *upstream_parser_,
        [self = shared_from_this()](error_code ec, size_t) {
          if (ec == http::error::need_buffer) ec = {};
          ec = self->Timed(ec);
          const size_t got = self->body_buffer_.size() - self->upstream_parser_->get().body().size;
          if (ec) {
            // Bytes already went to the client: all we can do is cut the connection.
            self->router_.errors_.Add({self->route_.service, ec == beast::error::timeout
                                                                 ? "stream_timeout"
                                                                 : "upstream_cut"});
            self->upstream_.reset();
            return self->Abort();
          }
          if (got == 0) return self->PumpBody();
          self->WriteBody(got);
        });
  }

  // Writes `n` body bytes (with the header when it is still pending, and the last chunk when
  // the replica is done), then reads on.
  void WriteBody(size_t n) {
    const bool last = upstream_parser_->is_done();
    ArmClient(router_.options_.write_timeout);
    auto on_written = [self = shared_from_this(), last](error_code ec, size_t) {
      if (ec) return self->ClientGone();
      self->NoteFirstByte();
      if (last) return self->Complete();
      self->PumpBody();
    };
    const asio::const_buffer header = PendingHeader();
    const asio::const_buffer piece = asio::buffer(body_buffer_.data(), n);
    if (!chunked_out_) {
      asio::async_write(client_, beast::buffers_cat(header, piece), std::move(on_written));
    } else if (last) {
      asio::async_write(
          client_, beast::buffers_cat(header, http::make_chunk(piece), http::make_chunk_last()),
          std::move(on_written));
    } else {
      asio::async_write(client_, beast::buffers_cat(header, http::make_chunk(piece)),
                        std::move(on_written));
    }
  }

  // The replica is done with nothing left to relay: send what is still owed, then complete.
  void FinishBody() {
    if (!header_pending_ && !chunked_out_) return Complete();
    ArmClient(router_.options_.write_timeout);
    auto on_written = [self = shared_from_this()](error_code ec, size_t) {
      if (ec) return self->ClientGone();
      self->Complete();
    };
    const asio::const_buffer header = PendingHeader();
    if (chunked_out_) {
      asio::async_write(client_, beast::buffers_cat(header, http::make_chunk_last()),
                        std::move(on_written));
    } else {
      asio::async_write(client_, header, std::move(on_written));
    }
  }

  void NoteFirstByte() {
    if (first_body_byte_noted_) return;
    first_body_byte_noted_ = true;
    router_.first_byte_.Observe({route_.service, streaming_ ? "true" : "false"},
                                SecondsSince(start_));
  }

  // The response is through: account, give the slot and the connection back, next request.
  void Complete() {
    NoteFirstByte();
    router_.requests_.Add({route_.service, std::to_string(status_code_)});
    router_.latency_.Observe({route_.service}, SecondsSince(start_));
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

  void ReleaseSlot() {
    if (!has_slot_) return;
    has_slot_ = false;
    router_.Release(route_.service, endpoint_.Key());
  }

  void ResetRequest() {
    upstream_parser_.reset();
    header_text_.clear();
    header_pending_ = false;
    first_body_byte_noted_ = false;
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
    client_.socket().shutdown(tcp::socket::shutdown_send, ec);
    Close();
  }

  void Close() {
    if (phase_ == Phase::kDone) return;
    phase_ = Phase::kDone;
    queue_timer_.cancel();
    client_.close();
  }

  RouterImpl& router_;
  beast::tcp_stream client_;
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
  bool retried_ = false;
  bool fresh_reconnect_used_ = false;
  bool first_body_byte_noted_ = false;

  http::request<http::string_body> upstream_request_;
  std::unique_ptr<Upstream> upstream_;
  std::optional<http::response_parser<http::buffer_body>> upstream_parser_;
  http::response<http::empty_body> response_;
  std::string header_text_;
  bool header_pending_ = false;
  unsigned status_code_ = 0;
  bool streaming_ = false;
  bool chunked_out_ = false;
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
    const ssize_t n =
        ::recv(up->stream.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return up;
  }
  return nullptr;
}

void RouterImpl::PutIdle(std::unique_ptr<Upstream> up) {
  auto& idle = pool_[up->key];
  if (idle.size() >= options_.max_idle_per_endpoint) idle.pop_front();  // the oldest
  up->idle_since = SteadyClock::now();
  up->stream.expires_never();
  idle.push_back(std::move(up));
}

std::string RouterImpl::MetricsText() {
  metrics::ExpositionWriter w;
  requests_.Write(w);
  errors_.Write(w);
  retries_.Write(w);
  latency_.Write(w);
  first_byte_.Write(w);
  queue_wait_.Write(w);
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

std::vector<ServiceLoad> ServingRouter::Loads() {
  if (!impl_->started_ || impl_->stopped_) return {};
  auto promise = std::make_shared<std::promise<std::vector<ServiceLoad>>>();
  std::future<std::vector<ServiceLoad>> future = promise->get_future();
  asio::post(impl_->ioc_, [impl = impl_.get(), promise] {
    std::vector<ServiceLoad> out;
    for (const auto& [name, state] : impl->services_) {
      out.push_back({name, state->view.role, state->dispatcher.Load()});
    }
    promise->set_value(std::move(out));
  });
  if (future.wait_for(std::chrono::seconds(1)) != std::future_status::ready) return {};
  return future.get();
}

void ServingRouter::SetHeadConnected(bool connected) { impl_->head_connected_ = connected ? 1 : 0; }

}  // namespace tessera::proxy
