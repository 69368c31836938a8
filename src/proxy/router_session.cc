// Session, the client side (router_session.h): the connection's life, reading and checking a
// request (header and body limits, 100-continue, routing), building what the replica gets,
// admission and the queue, the router's own replies and closing.
#include "proxy/router_session.h"

#include <boost/asio/post.hpp>
#include <limits>
#include <nlohmann/json.hpp>

#include "proxy/header_fields.h"

namespace tessera::proxy {

using Json = nlohmann::json;

Session::Session(RouterImpl& router, tcp::socket socket)
    : router_(router),
      client_(std::move(socket), router.tls_context_.get()),
      queue_timer_(router.ioc_) {
  ++router_.sessions_;
  router_.live_.insert(this);
  error_code ec;
  tcp::endpoint peer = client_.socket().remote_endpoint(ec);
  if (!ec) peer_address_ = peer.address().to_string(ec);
  client_.socket().set_option(tcp::no_delay(true), ec);
  client_.socket().non_blocking(true, ec);
  body_buffer_.resize(kBodyPieceBytes);
}

Session::~Session() {
  --router_.sessions_;
  router_.live_.erase(this);
  if (!router_.stopped_) ReleaseSlot();
}

void Session::OnDeadline() {
  deadline_ = SteadyClock::time_point::max();
  timed_out_ = true;
  if (upstream_op_ && upstream_) {
    error_code ignored;
    upstream_->stream.socket().close(ignored);
  } else {
    Close();
  }
}

void Session::OnGranted(const Endpoint& endpoint) {
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

void Session::OnServiceRemoved() {
  if (phase_ != Phase::kQueued) return;
  queue_timer_.cancel();
  router_.errors_.Add({route_.service, "service_gone"});
  ReplyError(503, "service '" + route_.service + "' was removed while the request waited");
}

void Session::Handshake() {
  ArmClient(router_.options_.header_timeout);
  client_.socket().async_read_some(client_buffer_.prepare(kReadBytes),
                                   [self = shared_from_this()](error_code ec, size_t n) {
                                     self->client_buffer_.commit(n);
                                     if (self->Timed(ec)) return self->Close();
                                     self->OnFirstBytes();
                                   });
}

void Session::OnFirstBytes() {
  // Every TLS connection opens with a handshake record (content type 22).
  constexpr unsigned char kTlsHandshakeRecord = 0x16;
  if (static_cast<const unsigned char*>(client_buffer_.data().data())[0] != kTlsHandshakeRecord)
    return RefusePlainHttp();
  client_.tls().async_handshake(asio::ssl::stream_base::server, client_buffer_.data(),
                                [self = shared_from_this()](error_code ec, size_t used) {
                                  if (self->Timed(ec)) return self->Close();
                                  self->client_buffer_.consume(used);
                                  self->DoIdleWait();
                                });
}

void Session::RefusePlainHttp() {
  // Written to the socket in plain, as the head's port does (src/net): the client speaks no TLS.
  phase_ = Phase::kWriting;
  client_buffer_.consume(client_buffer_.size());
  const std::string body =
      Json{{"error",
            "this port speaks HTTPS only: use https://... and verify the router with the "
            "cluster CA (ca.crt in the head's state directory)"},
           {"field", "scheme"}}
          .dump() +
      "\n";
  auto text = std::make_shared<std::string>(
      "HTTP/1.1 400 Bad Request\r\nServer: tessera-router\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
  ArmClient(router_.options_.write_timeout);
  asio::async_write(
      client_.socket(), asio::buffer(*text),
      [self = shared_from_this(), text](error_code, size_t) { self->CloseGracefully(); });
}

void Session::DoIdleWait() {
  phase_ = Phase::kIdle;
  if (router_.stopped_) return Close();
  parser_.emplace();
  parser_->header_limit(router_.options_.max_header_bytes);
  parser_->body_limit(std::numeric_limits<std::uint64_t>::max());  // checked in OnHeader
  if (client_buffer_.size() > 0) return StartHeader();
  ArmClient(router_.options_.idle_timeout);
  ReadClient();
}

void Session::ReadClient() {
  client_.async_read_some(client_buffer_.prepare(kReadBytes),
                          [self = shared_from_this()](error_code ec, size_t n) {
                            self->client_buffer_.commit(n);
                            self->OnClientBytes(ec);
                          });
}

void Session::OnClientBytes(error_code ec) {
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

void Session::StartHeader() {
  phase_ = Phase::kHeader;
  ArmClient(router_.options_.header_timeout);
  ParseHeader();
}

void Session::ParseHeader() {
  error_code ec = http::error::need_more;
  if (client_buffer_.size() > 0) client_buffer_.consume(parser_->put(client_buffer_.data(), ec));
  if (ec == http::error::need_more) return ReadClient();
  OnHeader(ec);
}

void Session::OnHeader(error_code ec) {
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
    return SendClient({asio::buffer(kContinue.data(), kContinue.size())}, [this](error_code wec) {
      if (wec) return Close();
      StartBody();
    });
  }
  StartBody();
}

void Session::StartBody() {
  phase_ = Phase::kBody;
  ArmClient(router_.options_.body_timeout);
  ParseBody();
}

void Session::ParseBody() {
  while (!parser_->is_done()) {
    if (client_buffer_.size() == 0) return ReadClient();
    error_code ec;
    const size_t used = parser_->put(client_buffer_.data(), ec);
    client_buffer_.consume(used);
    if (ec == http::error::need_more || (!ec && used == 0)) return ReadClient();
    if (ec == http::error::body_limit) {
      router_.errors_.Add({route_.service, "body_too_large"});
      return ReplyError(
          413, "request body exceeds " + std::to_string(router_.options_.max_body_bytes) + " bytes",
          true);
    }
    if (ec) return Close();
  }
  OnRequest();
}

void Session::OnRequest() {
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

void Session::Admit(const std::string& avoid_key) {
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
                           std::to_string(state->dispatcher.QueueBound()) + " waiting)",
                       "queue_full");
  }
}

void Session::Wait() {
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
    // No replica at all is another cause than every replica busy.
    const bool none_ready = state == nullptr || state->dispatcher.endpoints().empty();
    const std::string within = std::to_string(self->router_.options_.queue_timeout.count()) + " ms";
    self->ReplyBusy("no replica of service '" + self->route_.service + "' was " +
                        (none_ready ? "ready" : "free") + " within " + within,
                    none_ready ? "no_ready_replica" : "queue_timeout");
  });
}

void Session::ReleaseSlot() {
  PrefillDone();
  if (!has_slot_) return;
  has_slot_ = false;
  router_.Release(route_.service, endpoint_key_);
}

void Session::ResetRequest() {
  upstream_parser_.reset();
  header_pending_ = false;
  first_body_byte_noted_ = false;
  event_stream_ = false;
  tokens_.Reset();
  prefill_role_.clear();
  head_request_ = false;
  parser_.reset();
}

void Session::ClientGone() {
  router_.errors_.Add({route_.service, "client_gone"});
  upstream_.reset();  // the rest of its response is unwanted: the connection cannot be reused
  Abort();
}

void Session::Abort() {
  ReleaseSlot();
  Close();
}

void Session::ReplyBusy(const std::string& message, const char* reason) {
  router_.errors_.Add({route_.service, reason});
  router_.requests_.Add({route_.service, "503"});
  Json body = {{"error", message}, {"service", route_.service}};
  WriteLocal(503, body.dump() + "\n", "application/json",
             {{"Retry-After", std::to_string(router_.options_.retry_after_s)}}, false);
}

void Session::ReplyError(int status, const std::string& message, bool close) {
  router_.requests_.Add({route_.service, std::to_string(status)});
  ReleaseSlot();
  upstream_.reset();
  Json body = {{"error", message}, {"service", route_.service}};
  WriteLocal(status, body.dump() + "\n", "application/json", {}, close);
}

void Session::ReplyLocal(int status, const std::string& message, const char* field, bool close) {
  Json body = {{"error", message}, {"field", field}};
  WriteLocal(status, body.dump() + "\n", "application/json", {}, close);
}

void Session::ReplyLocalText(int status, std::string body, const char* content_type) {
  WriteLocal(status, std::move(body), content_type, {}, !parser_->is_done());
}

void Session::WriteLocal(int status, std::string body, const char* content_type,
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

void Session::CloseGracefully() {
  error_code ec;
  client_.socket().shutdown(tcp::socket::shutdown_send, ec);
  Close();
}

void Session::Close() {
  if (phase_ == Phase::kDone) return;
  phase_ = Phase::kDone;
  queue_timer_.cancel();
  error_code ignored;
  client_.socket().close(ignored);
}

}  // namespace tessera::proxy
