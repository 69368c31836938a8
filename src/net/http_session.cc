// Session (http_server_internal.h): one connection from its first byte to its close, for
// ordinary (not streaming) requests: the idle wait, the header read and the checks made
// before any handler runs (auth, path, size, route), the body read, the handler call, the
// response write, and the linger that drains a refused body. Streaming responses continue
// in http_stream.cc.
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <exception>
#include <limits>
#include <string_view>
#include <utility>

#include "net/http_server_internal.h"

namespace tessera::net {
namespace {

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

Session::Session(ServerImpl& server, tcp::socket socket)
    : server_(server),
      executor_(socket.get_executor()),
      stream_(server.CurrentTlsContext() != nullptr
                  ? TlsStream(std::move(socket), *server.CurrentTlsContext())
                  : TlsStream(std::move(socket))) {
  error_code ec;
  tcp::endpoint ep = stream_.socket().remote_endpoint(ec);
  peer_ = ec ? std::string("unknown") : EndpointString(ep);
  stream_.socket().set_option(tcp::no_delay(true), ec);
}

Session::~Session() {
  if (writer_) writer_->MarkEnded();
  std::lock_guard<std::mutex> lock(server_.sessions_mu_);
  server_.sessions_.erase(this);
  server_.sessions_cv_.notify_all();
}

void Session::Start() {
  {
    std::lock_guard<std::mutex> lock(server_.sessions_mu_);
    server_.sessions_[this] = weak_from_this();
  }
  asio::dispatch(stream_.get_executor(), [self = shared_from_this()] {
    if (self->server_.stopping_) return self->Finish();
    if (self->stream_.has_tls()) return self->DoTlsHandshake();
    self->DoIdleWait();
  });
}

void Session::DoTlsHandshake() {
  phase_ = Phase::kHandshake;
  stream_.expires_after(server_.options_.tls->handshake_timeout);
  // Still plain: the first bytes say whether the client speaks TLS at all.
  stream_.async_read_some(buffer_.prepare(4096),
                          [self = shared_from_this()](error_code ec, size_t n) {
                            self->buffer_.commit(n);
                            if (ec) return self->Finish();
                            self->OnFirstBytes();
                          });
}

void Session::OnFirstBytes() {
  // Every TLS connection opens with a handshake record (content type 22).
  constexpr unsigned char kTlsHandshakeRecord = 0x16;
  if (static_cast<const unsigned char*>(buffer_.data().data())[0] != kTlsHandshakeRecord) {
    keep_alive_ = false;
    return Reject(Response::Error(400,
                                  "this port speaks HTTPS only: use https://... and verify the "
                                  "server with the cluster CA (--ca-file, ca.crt in the head's "
                                  "state directory)",
                                  "scheme"),
                  /*close=*/true);
  }
  stream_.tls().async_handshake(ssl::stream_base::server, buffer_.data(),
                                [self = shared_from_this()](error_code ec, size_t used) {
                                  if (ec) return self->Finish();
                                  self->buffer_.consume(used);
                                  self->stream_.Activate();
                                  self->peer_identity_ = PeerIdentity(self->stream_.tls());
                                  self->DoIdleWait();
                                });
}

void Session::BeginShutdown() {
  shutting_down_ = true;
  switch (phase_) {
    case Phase::kHandshake:
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

void Session::DoIdleWait() {
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

void Session::DoReadHeader() {
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

void Session::OnHeader(error_code ec) {
  if (ec == http::error::header_limit) {
    return Reject(Response::Error(431,
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
  request_.peer_identity = peer_identity_;
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

void Session::DoReadBody() {
  phase_ = Phase::kBody;
  stream_.expires_after(server_.options_.body_timeout);
  http::async_read(stream_, buffer_, *parser_, [self = shared_from_this()](error_code ec, size_t) {
    if (ec == http::error::body_limit) return self->RejectTooLarge();
    if (ec) return self->Finish();
    self->OnRequest();
  });
}

void Session::OnRequest() {
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
  if (response.on_deferred) {
    // The answer comes from another thread, back on this connection's strand; a connection
    // that ended meanwhile (Finish) has left kHandling and drops it.
    auto answer = [self = shared_from_this()](Response later) {
      asio::post(self->executor(), [self, later = std::move(later)]() mutable {
        if (self->phase_ != Phase::kHandling) return;
        later.on_stream = nullptr;
        later.on_deferred = nullptr;
        self->WriteResponse(std::move(later), /*close=*/false, /*linger=*/false);
      });
    };
    try {
      response.on_deferred(std::move(answer));
    } catch (const std::exception& e) {
      WriteResponse(Response::Error(500, std::string("handler failed: ") + e.what()), false, false);
    }
    return;
  }
  WriteResponse(std::move(response), /*close=*/false, /*linger=*/false);
}

// An error response before the handler runs. With the body unread, the connection cannot be

void Session::RejectTooLarge() {
  WriteResponse(Response::Error(413,
                                "request body exceeds max_body_bytes (" +
                                    std::to_string(server_.options_.max_body_bytes) + " bytes)",
                                "body"),
                true, true);
}

void Session::WriteResponse(Response response, bool close, bool linger) {
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

void Session::DoLinger() {
  phase_ = Phase::kLinger;
  if (shutting_down_) return Finish();
  error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  stream_.expires_after(kLingerTimeout);
  DrainSome();
}

void Session::DrainSome() {
  stream_.async_read_some(
      asio::buffer(drain_), [self = shared_from_this()](error_code ec, size_t n) {
        self->drained_ += n;
        if (ec || self->drained_ > kLingerMaxBytes || self->phase_ != Phase::kLinger) {
          return self->Finish();
        }
        self->DrainSome();
      });
}

void Session::CloseGracefully() {
  error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  Finish();
}

void Session::Finish() {
  if (phase_ == Phase::kDone) return;
  phase_ = Phase::kDone;
  stream_.close();
  if (writer_) writer_->MarkEnded();
}

}  // namespace tessera::net
