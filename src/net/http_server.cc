#include "net/http_server.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <condition_variable>
#include <deque>
#include <exception>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>

#include "net/router.h"

namespace tessera::net {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;

// How long a connection that was answered with 413 keeps draining the client's unread body,
// so the client can finish sending and read the response instead of getting a reset.
constexpr auto kLingerTimeout = std::chrono::seconds(5);
constexpr size_t kLingerMaxBytes = size_t{64} << 20;

std::string_view ToStd(beast::string_view s) { return {s.data(), s.size()}; }

std::string EndpointString(const tcp::endpoint& ep) {
  error_code ec;
  std::string address = ep.address().to_string(ec);
  if (ep.address().is_v6()) address = "[" + address + "]";
  return address + ":" + std::to_string(ep.port());
}

bool IsExempt(const std::vector<std::string>& exempt, const std::string& path) {
  for (const std::string& e : exempt) {
    if (!e.empty() && e.back() == '*') {
      if (path.compare(0, e.size() - 1, e, 0, e.size() - 1) == 0) return true;
    } else if (path == e) {
      return true;
    }
  }
  return false;
}

bool Authorized(const AuthOptions& auth, const Request& request) {
  if (!auth.enabled() || IsExempt(auth.exempt_paths, request.path)) return true;
  // Every token is compared, so the time taken does not say which one nearly matched.
  bool match = false;
  for (const std::string& t : auth.tokens) match |= HasBearerToken(request, t);
  return match || (auth.check && auth.check(request));
}

// True if a decoded path has a "." or ".." segment; such paths are refused so that exempt
// prefixes and static file handlers cannot be escaped.
bool HasDotSegment(std::string_view path) {
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string_view::npos) slash = path.size();
    std::string_view seg = path.substr(start, slash - start);
    if (seg == "." || seg == "..") return true;
    start = slash + 1;
  }
  return false;
}

// True if a raw (still encoded) path holds "%2F" or "%2f".
bool HasEncodedSlash(std::string_view raw_path) {
  for (size_t i = 0; i + 2 < raw_path.size(); ++i) {
    if (raw_path[i] == '%' && raw_path[i + 1] == '2' && (raw_path[i + 2] | 0x20) == 'f') {
      return true;
    }
  }
  return false;
}

}  // namespace

class Session;

// The state shared between the application (through StreamWriter) and the session that owns
// the connection. Guarded by mu_; the socket itself is only touched on the session's strand.
class StreamState final : public StreamWriter {
 public:
  StreamState(std::weak_ptr<Session> session, std::string peer, size_t max_queue_bytes)
      : session_(std::move(session)), peer_(std::move(peer)), max_queue_bytes_(max_queue_bytes) {}

  bool Write(std::string chunk) override;
  void Close() override;
  bool IsOpen() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return open_ && !close_requested_;
  }
  void OnClose(std::function<void()> fn) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (open_) {
      on_close_.push_back(std::move(fn));
      return;
    }
    lock.unlock();
    fn();
  }
  const std::string& peer() const override { return peer_; }

  // Marks the stream ended and runs the OnClose callbacks (once).
  void MarkEnded();

  // What the session should write next.
  enum class Next { kNothing, kData, kLastChunk };
  Next TakeNext(std::string& out);

 private:
  void SchedulePump();

  std::weak_ptr<Session> session_;
  const std::string peer_;
  const size_t max_queue_bytes_;

  mutable std::mutex mu_;
  std::deque<std::string> queue_;
  size_t queued_bytes_ = 0;
  bool open_ = true;
  bool close_requested_ = false;
  bool last_chunk_taken_ = false;
  bool pump_scheduled_ = false;  // a pump is posted or a write is in flight
  std::vector<std::function<void()>> on_close_;

  friend class Session;
};

class ServerImpl {
 public:
  explicit ServerImpl(ServerOptions options) : options_(std::move(options)) {}
  ~ServerImpl() { Stop(); }

  Status Start();
  void Stop();
  void DoAccept();

  ServerOptions options_;
  Router router_;
  std::atomic<bool> started_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> stopped_{false};
  std::atomic<uint16_t> port_{0};

  std::mutex sessions_mu_;
  std::condition_variable sessions_cv_;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions_;

  // Declared after the registry: destroying the io_context destroys queued handlers, whose
  // sessions unregister themselves.
  asio::io_context ioc_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  asio::strand<asio::io_context::executor_type> accept_strand_ = asio::make_strand(ioc_);
  tcp::acceptor acceptor_{accept_strand_};
  asio::steady_timer accept_retry_{accept_strand_};
  std::vector<std::thread> threads_;
};

// One connection. All members are touched only on the connection's strand (the executor of
// stream_), except through StreamState, which has its own lock.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(ServerImpl& server, tcp::socket socket)
      : server_(server), executor_(socket.get_executor()), stream_(std::move(socket)) {
    error_code ec;
    tcp::endpoint ep = stream_.socket().remote_endpoint(ec);
    peer_ = ec ? std::string("unknown") : EndpointString(ep);
    stream_.socket().set_option(tcp::no_delay(true), ec);
  }

  ~Session() {
    if (writer_) writer_->MarkEnded();
    std::lock_guard<std::mutex> lock(server_.sessions_mu_);
    server_.sessions_.erase(this);
    server_.sessions_cv_.notify_all();
  }

  void Start() {
    {
      std::lock_guard<std::mutex> lock(server_.sessions_mu_);
      server_.sessions_[this] = weak_from_this();
    }
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] {
      if (self->server_.stopping_) return self->Finish();
      self->DoIdleWait();
    });
  }

  // The connection's strand; safe to call from any thread (it never changes).
  const asio::any_io_executor& executor() const { return executor_; }

  // Server Stop(): end the connection as soon as it is not in the middle of a request.
  void BeginShutdown() {
    shutting_down_ = true;
    switch (phase_) {
      case Phase::kIdle:
      case Phase::kHeader:
      case Phase::kLinger:
        Finish();
        break;
      case Phase::kStreaming:
        if (writer_) writer_->Close();
        break;
      default:
        break;  // the response in progress is sent with "Connection: close"
    }
  }

  void ForceClose() { Finish(); }
  // After the io threads have stopped: make the application's writer report closed.
  void EndStreamAfterStop() {
    if (writer_) writer_->MarkEnded();
  }

  void PumpStream();
  void AbortStream() { Finish(); }

 private:
  enum class Phase { kIdle, kHeader, kBody, kHandling, kWriting, kStreaming, kLinger, kDone };

  void DoIdleWait() {
    phase_ = Phase::kIdle;
    if (shutting_down_) return Finish();
    if (buffer_.size() > 0) return DoReadHeader();
    stream_.expires_after(server_.options_.idle_timeout);
    stream_.async_read_some(buffer_.prepare(4096),
                            [self = shared_from_this()](error_code ec, size_t n) {
                              self->buffer_.commit(n);
                              if (ec) return self->Finish();
                              self->DoReadHeader();
                            });
  }

  void DoReadHeader() {
    phase_ = Phase::kHeader;
    parser_.emplace();
    parser_->header_limit(server_.options_.max_header_bytes);
    // Checked by OnHeader, then set for the body read. (Not boost::none: 1.74 compares the
    // content length against the optional, and none counts as smaller than any length.)
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    stream_.expires_after(server_.options_.header_timeout);
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](error_code ec, size_t) { self->OnHeader(ec); });
  }

  void OnHeader(error_code ec) {
    if (ec == http::error::header_limit) {
      return Reject(
          Response::Error(431,
                          "request header exceeds max_header_bytes (" +
                              std::to_string(server_.options_.max_header_bytes) + " bytes)",
                          "headers"),
          /*close=*/true);
    }
    if (ec && ec.category() == http::make_error_code(http::error::bad_target).category() &&
        ec != http::error::end_of_stream && ec != http::error::partial_message) {
      return Reject(Response::Error(400, "malformed request: " + ec.message()), true);
    }
    if (ec) return Finish();  // timeout, disconnect, reset

    auto& msg = parser_->get();
    keep_alive_ = msg.keep_alive();
    request_ = Request();
    request_.peer = peer_;
    request_.target = std::string(msg.target());
    for (const auto& field : msg) {
      std::string name(field.name_string());
      auto [it, inserted] = request_.headers.emplace(name, std::string(field.value()));
      if (!inserted) it->second += ", " + std::string(field.value());
    }
    bool has_body = !parser_->is_done();
    bool oversized = parser_->content_length().has_value() &&
                     *parser_->content_length() > server_.options_.max_body_bytes;

    Result<Method> method = ParseMethod(ToStd(msg.method_string()));
    if (!method.ok()) {
      return Reject(Response::Error(501, method.status().message(), "method"), true);
    }
    request_.method = *method;
    std::string_view target = request_.target;
    if (target.empty() || target.front() != '/') {
      return Reject(Response::Error(400, "request target must start with '/'", "target"), true);
    }
    size_t q = target.find('?');
    std::string_view raw_path = target.substr(0, q);
    raw_path_ = std::string(raw_path);
    // Auth exemptions see the decoded path and routing splits the raw one before decoding its
    // segments: with an encoded '/', "/ui%2Fx" would be exempt as "/ui/x" yet route as the
    // one segment "ui/x". Refusing it keeps both seeing the same segments.
    if (HasEncodedSlash(raw_path)) {
      return Reject(Response::Error(400,
                                    "path: an encoded '/' (%2F) is not allowed in a request path; "
                                    "send '/' unencoded",
                                    "path"),
                    has_body);
    }
    Result<std::string> path = PercentDecode(raw_path, false);
    if (!path.ok() || HasDotSegment(*path)) {
      return Reject(Response::Error(400, "bad request path", "path"), has_body);
    }
    request_.path = std::move(*path);
    if (q != std::string_view::npos) {
      auto query = ParseQuery(target.substr(q + 1));
      if (!query.ok())
        return Reject(Response::Error(400, query.status().message(), "query"), has_body);
      request_.query = std::move(*query);
    }

    if (!Authorized(server_.options_.auth, request_)) {
      Response r = Response::Error(401, "missing or invalid bearer token", "Authorization");
      r.headers["WWW-Authenticate"] = "Bearer realm=\"tessera\"";
      return Reject(std::move(r), has_body);
    }
    if (oversized) return RejectTooLarge();

    Router::Match match = server_.router_.Find(request_.method, raw_path_);
    if (match.outcome == Router::Outcome::kNoRoute) {
      return Reject(Response::Error(404, "no route for " + request_.path, "path"), has_body);
    }
    if (match.outcome == Router::Outcome::kWrongMethod) {
      Response r = Response::Error(
          405, std::string(MethodName(request_.method)) + " is not allowed on " + request_.path,
          "method");
      r.headers["Allow"] = match.allow;
      return Reject(std::move(r), has_body);
    }
    handler_ = match.handler;
    request_.params = std::move(match.params);

    if (!has_body) return OnRequest();
    parser_->body_limit(server_.options_.max_body_bytes);
    if (beast::iequals(msg[http::field::expect], "100-continue")) {
      continue_response_.emplace(http::status::continue_, msg.version());
      stream_.expires_after(server_.options_.write_timeout);
      http::async_write(stream_, *continue_response_,
                        [self = shared_from_this()](error_code wec, size_t) {
                          if (wec) return self->Finish();
                          self->DoReadBody();
                        });
      return;
    }
    DoReadBody();
  }

  void DoReadBody() {
    phase_ = Phase::kBody;
    stream_.expires_after(server_.options_.body_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](error_code ec, size_t) {
                       if (ec == http::error::body_limit) return self->RejectTooLarge();
                       if (ec) return self->Finish();
                       self->OnRequest();
                     });
  }

  void OnRequest() {
    phase_ = Phase::kHandling;
    request_.body = std::move(parser_->get().body());
    Response response;
    try {
      response = (*handler_)(request_);
    } catch (const std::exception& e) {
      response = Response::Error(500, std::string("handler failed: ") + e.what());
    } catch (...) {
      response = Response::Error(500, "handler failed");
    }
    handler_ = nullptr;
    if (response.on_stream) return StartStream(std::move(response));
    WriteResponse(std::move(response), /*close=*/false, /*linger=*/false);
  }

  // An error response before the handler runs. With the body unread, the connection cannot be
  // reused: answer, then drain what the client still sends, then close.
  void Reject(Response response, bool close) { WriteResponse(std::move(response), close, close); }

  void RejectTooLarge() {
    WriteResponse(Response::Error(413,
                                  "request body exceeds max_body_bytes (" +
                                      std::to_string(server_.options_.max_body_bytes) + " bytes)",
                                  "body"),
                  true, true);
  }

  template <class Message>
  void SetCommonFields(Message& res, const Response& response, bool keep_alive) {
    res.result(static_cast<unsigned>(response.status));
    std::string_view reason = StatusReason(response.status);
    if (!reason.empty()) res.reason(beast::string_view(reason.data(), reason.size()));
    res.set(http::field::server, "tessera");
    for (const auto& [name, value] : response.headers) res.set(name, value);
    res.set(http::field::content_type, response.content_type);
    res.keep_alive(keep_alive);
  }

  void WriteResponse(Response response, bool close, bool linger) {
    phase_ = Phase::kWriting;
    bool keep_alive = keep_alive_ && !close && !shutting_down_;
    auto res = std::make_shared<http::response<http::string_body>>();
    res->version(11);
    SetCommonFields(*res, response, keep_alive);
    res->body() = std::move(response.body);
    res->prepare_payload();
    stream_.expires_after(server_.options_.write_timeout);
    http::async_write(stream_, *res,
                      [self = shared_from_this(), res, keep_alive, linger](error_code ec, size_t) {
                        if (ec) return self->Finish();
                        if (keep_alive) return self->DoIdleWait();
                        if (linger) return self->DoLinger();
                        self->CloseGracefully();
                      });
  }

  void DoLinger() {
    phase_ = Phase::kLinger;
    if (shutting_down_) return Finish();
    error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.expires_after(kLingerTimeout);
    DrainSome();
  }

  void DrainSome() {
    stream_.async_read_some(
        asio::buffer(drain_), [self = shared_from_this()](error_code ec, size_t n) {
          self->drained_ += n;
          if (ec || self->drained_ > kLingerMaxBytes || self->phase_ != Phase::kLinger) {
            return self->Finish();
          }
          self->DrainSome();
        });
  }

  void CloseGracefully() {
    error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    Finish();
  }

  void StartStream(Response response) {
    phase_ = Phase::kStreaming;
    writer_ = std::make_shared<StreamState>(weak_from_this(), peer_,
                                            server_.options_.max_stream_queue_bytes);
    stream_header_.emplace();
    stream_header_->version(11);
    SetCommonFields(*stream_header_, response, /*keep_alive=*/false);
    stream_header_->set(http::field::cache_control, "no-cache");
    stream_header_->chunked(true);
    stream_serializer_.emplace(*stream_header_);

    // Watch for the client going away: nothing more is expected from it, so any read
    // completion is either ignored data or the end. Reads never time out while streaming.
    stream_.expires_never();
    WatchForDisconnect();

    stream_.expires_after(server_.options_.write_timeout);
    {
      std::lock_guard<std::mutex> lock(writer_->mu_);
      writer_->pump_scheduled_ = true;  // the header write is in flight
    }
    writing_ = true;
    http::async_write_header(stream_, *stream_serializer_,
                             [self = shared_from_this()](error_code ec, size_t) {
                               self->writing_ = false;
                               if (ec) return self->Finish();
                               self->header_sent_ = true;
                               self->PumpStream();
                             });
    try {
      response.on_stream(writer_);
    } catch (...) {
      writer_->Close();
    }
  }

  void WatchForDisconnect() {
    stream_.async_read_some(asio::buffer(drain_),
                            [self = shared_from_this()](error_code ec, size_t) {
                              if (ec) return self->Finish();
                              self->WatchForDisconnect();
                            });
  }

  void Finish() {
    if (phase_ == Phase::kDone) return;
    phase_ = Phase::kDone;
    stream_.close();
    if (writer_) writer_->MarkEnded();
  }

  ServerImpl& server_;
  const asio::any_io_executor executor_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::string peer_;
  Phase phase_ = Phase::kIdle;
  bool shutting_down_ = false;
  bool keep_alive_ = false;

  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<http::response<http::empty_body>> continue_response_;
  Request request_;
  std::string raw_path_;
  const Handler* handler_ = nullptr;

  std::array<char, 4096> drain_{};
  size_t drained_ = 0;

  std::shared_ptr<StreamState> writer_;
  std::optional<http::response<http::empty_body>> stream_header_;
  std::optional<http::response_serializer<http::empty_body>> stream_serializer_;
  bool header_sent_ = false;
  bool writing_ = false;
  std::string chunk_;
};

void Session::PumpStream() {
  if (phase_ != Phase::kStreaming || writing_ || !header_sent_) return;
  StreamState::Next next = writer_->TakeNext(chunk_);
  if (next == StreamState::Next::kNothing) return;
  writing_ = true;
  stream_.expires_after(server_.options_.write_timeout);
  auto on_written = [self = shared_from_this(), next](error_code ec, size_t) {
    self->writing_ = false;
    if (ec) return self->Finish();
    if (next == StreamState::Next::kLastChunk) return self->CloseGracefully();
    self->PumpStream();
  };
  if (next == StreamState::Next::kData) {
    asio::async_write(stream_, http::make_chunk(asio::buffer(chunk_)), std::move(on_written));
  } else {
    asio::async_write(stream_, http::make_chunk_last(), std::move(on_written));
  }
}

bool StreamState::Write(std::string chunk) {
  bool overflow = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!open_ || close_requested_) return false;
    if (chunk.empty()) return true;
    if (queued_bytes_ + chunk.size() > max_queue_bytes_) {
      overflow = true;
    } else {
      queued_bytes_ += chunk.size();
      queue_.push_back(std::move(chunk));
    }
  }
  if (overflow) {
    // The client cannot keep up: drop it rather than buffer without bound.
    if (auto s = session_.lock()) {
      asio::post(s->executor(), [s] { s->AbortStream(); });
    }
    MarkEnded();
    return false;
  }
  SchedulePump();
  return true;
}

void StreamState::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!open_ || close_requested_) return;
    close_requested_ = true;
  }
  SchedulePump();
}

void StreamState::SchedulePump() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (pump_scheduled_) return;
    pump_scheduled_ = true;
  }
  if (auto s = session_.lock()) {
    asio::post(s->executor(), [s] { s->PumpStream(); });
  } else {
    MarkEnded();
  }
}

StreamState::Next StreamState::TakeNext(std::string& out) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!open_) {
    pump_scheduled_ = false;
    return Next::kNothing;
  }
  if (!queue_.empty()) {
    out.clear();
    out.reserve(queued_bytes_);
    for (std::string& s : queue_) out += s;
    queue_.clear();
    queued_bytes_ = 0;
    return Next::kData;
  }
  if (close_requested_ && !last_chunk_taken_) {
    last_chunk_taken_ = true;
    return Next::kLastChunk;
  }
  pump_scheduled_ = false;
  return Next::kNothing;
}

void StreamState::MarkEnded() {
  std::vector<std::function<void()>> callbacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!open_) return;
    open_ = false;
    queue_.clear();
    queued_bytes_ = 0;
    callbacks.swap(on_close_);
  }
  for (auto& fn : callbacks) fn();
}

Status ServerImpl::Start() {
  if (started_.exchange(true)) return FailedPrecondition("HttpServer already started");
  std::string where = options_.bind_address + ":" + std::to_string(options_.port);
  error_code ec;
  asio::ip::address address = asio::ip::make_address(options_.bind_address, ec);
  if (ec) return InvalidArgument("bind_address '" + options_.bind_address + "': " + ec.message());
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
  work_.emplace(ioc_.get_executor());
  asio::post(accept_strand_, [this] { DoAccept(); });
  int n = std::max(1, options_.io_threads);
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { ioc_.run(); });
  return Status::Ok();
}

void ServerImpl::DoAccept() {
  acceptor_.async_accept(asio::make_strand(ioc_), [this](error_code ec, tcp::socket socket) {
    if (stopping_ || !acceptor_.is_open()) return;
    if (ec) {
      // Out of descriptors or a transient error: back off briefly instead of spinning.
      accept_retry_.expires_after(std::chrono::milliseconds(50));
      accept_retry_.async_wait([this](error_code wec) {
        if (!wec && !stopping_) DoAccept();
      });
      return;
    }
    std::make_shared<Session>(*this, std::move(socket))->Start();
    DoAccept();
  });
}

void ServerImpl::Stop() {
  if (!started_ || stopped_.exchange(true)) return;
  stopping_ = true;
  asio::post(accept_strand_, [this] {
    error_code ec;
    acceptor_.close(ec);
    accept_retry_.cancel();
  });

  auto for_each_session = [this](auto fn) {
    std::vector<std::shared_ptr<Session>> live;
    {
      std::lock_guard<std::mutex> lock(sessions_mu_);
      for (auto& [ptr, weak] : sessions_) {
        if (auto s = weak.lock()) live.push_back(std::move(s));
      }
    }
    for (auto& s : live) fn(s);
  };
  auto wait_until_empty = [this](std::chrono::milliseconds limit) {
    std::unique_lock<std::mutex> lock(sessions_mu_);
    sessions_cv_.wait_for(lock, limit, [this] { return sessions_.empty(); });
  };

  for_each_session([](const std::shared_ptr<Session>& s) {
    asio::post(s->executor(), [s] { s->BeginShutdown(); });
  });
  wait_until_empty(options_.stop_grace);
  for_each_session([](const std::shared_ptr<Session>& s) {
    asio::post(s->executor(), [s] { s->ForceClose(); });
  });
  wait_until_empty(std::chrono::milliseconds(1000));

  work_.reset();
  ioc_.stop();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  for_each_session([](const std::shared_ptr<Session>& s) { s->EndStreamAfterStop(); });
}

HttpServer::HttpServer(ServerOptions options)
    : impl_(std::make_unique<ServerImpl>(std::move(options))) {}

HttpServer::~HttpServer() { impl_->Stop(); }

Status HttpServer::Handle(Method method, std::string_view pattern, Handler handler) {
  if (impl_->started_) return FailedPrecondition("HttpServer::Handle after Start()");
  return impl_->router_.Add(method, pattern, std::move(handler));
}

Status HttpServer::Start() { return impl_->Start(); }

uint16_t HttpServer::port() const { return impl_->port_; }

void HttpServer::Stop() { impl_->Stop(); }

size_t HttpServer::connection_count() const {
  std::lock_guard<std::mutex> lock(impl_->sessions_mu_);
  return impl_->sessions_.size();
}

}  // namespace tessera::net
