#include "net/http_client.h"

#include <sys/socket.h>

#include <array>
#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <limits>
#include <optional>
#include <utility>

#include "net/asio_names.h"
#include "net/tls_stream.h"

namespace tessera::net {
namespace {

http::verb ToVerb(Method method) {
  switch (method) {
    case Method::kGet:
      return http::verb::get;
    case Method::kHead:
      return http::verb::head;
    case Method::kPost:
      return http::verb::post;
    case Method::kPut:
      return http::verb::put;
    case Method::kPatch:
      return http::verb::patch;
    case Method::kDelete:
      return http::verb::delete_;
    case Method::kOptions:
      return http::verb::options;
  }
  return http::verb::get;
}

bool IsIdempotent(Method method) { return method != Method::kPost && method != Method::kPatch; }

Status StatusFromHttp(int status, std::string message) {
  if (status == 401 || status == 403) return FailedPrecondition(std::move(message));
  if (status == 404) return NotFound(std::move(message));
  if (status == 409) return Conflict(std::move(message));
  if (status >= 400 && status < 500) return InvalidArgument(std::move(message));
  return Unavailable(std::move(message));
}

}  // namespace

class ClientImpl {
 public:
  explicit ClientImpl(ClientOptions options)
      : options_(std::move(options)), where_(options_.host + ":" + std::to_string(options_.port)) {
    if (options_.tls) {
      Result<std::shared_ptr<ssl::context>> context = MakeClientTlsContext(*options_.tls);
      if (context.ok()) {
        tls_context_ = std::move(*context);
      } else {
        tls_error_ = context.status();
      }
    }
  }

  Result<Response> Request(Method method, std::string_view target, std::string body,
                           const Headers& headers);
  Status Stream(Method method, std::string_view target,
                const std::function<bool(std::string_view)>& on_line, std::string body,
                const Headers& headers);

  void Cancel() {
    cancelled_ = true;
    // Runs on the calling thread's next (or current) ioc_.run(), where the socket lives.
    asio::post(ioc_, [this] {
      if (stream_) stream_->close();
    });
  }

  void Disconnect() {
    if (stream_) stream_->close();
    stream_.reset();
    buffer_.clear();
  }

 private:
  // Starts `start(handler)` and runs the io_context until it completes or `timeout`
  // (0 = none) expires. Returns the operation's error.
  template <class Start>
  error_code Run(std::chrono::milliseconds timeout, Start&& start) {
    if (timeout.count() > 0) {
      stream_->expires_after(timeout);
    } else {
      stream_->expires_never();
    }
    error_code result = asio::error::would_block;
    start([&result](error_code ec, size_t) { result = ec; });
    ioc_.restart();
    ioc_.run();
    if (cancelled_ && !result) result = asio::error::operation_aborted;
    return result;
  }

  Status Fail(std::string_view what, std::string_view op, const error_code& ec) {
    Disconnect();
    std::string reason = cancelled_                    ? std::string("cancelled")
                         : ec == beast::error::timeout ? std::string("timed out")
                                                       : ec.message();
    return Unavailable(where_ + ": " + std::string(what) + ": " + std::string(op) + ": " + reason);
  }

  // True if the kept connection was closed by the server (or has unexpected data waiting).
  bool KeptConnectionIsStale() {
    if (buffer_.size() > 0) return true;
    char c;
    ssize_t n = ::recv(stream_->socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || n > 0) return true;
    return errno != EAGAIN && errno != EWOULDBLOCK;
  }

  Status EnsureConnected(std::string_view what, bool& reused) {
    if (cancelled_) return Unavailable(where_ + ": " + std::string(what) + ": cancelled");
    if (stream_ && KeptConnectionIsStale()) Disconnect();
    reused = stream_.has_value();
    if (reused) return Status::Ok();
    TESSERA_RETURN_IF_ERROR(tls_error_);

    if (tls_context_) {
      stream_.emplace(ioc_.get_executor(), *tls_context_);
    } else {
      stream_.emplace(ioc_.get_executor());
    }
    tcp::resolver resolver(ioc_);
    asio::steady_timer timer(ioc_);
    error_code resolve_ec = asio::error::would_block;
    tcp::resolver::results_type endpoints;
    resolver.async_resolve(options_.host, std::to_string(options_.port),
                           [&](error_code ec, tcp::resolver::results_type results) {
                             resolve_ec = ec;
                             endpoints = std::move(results);
                             timer.cancel();
                           });
    timer.expires_after(options_.connect_timeout);
    timer.async_wait([&](error_code ec) {
      if (!ec) resolver.cancel();
    });
    ioc_.restart();
    ioc_.run();
    if (resolve_ec) {
      if (resolve_ec == asio::error::operation_aborted && !cancelled_) {
        resolve_ec = beast::error::timeout;
      }
      return Fail(what, "resolve", resolve_ec);
    }
    error_code ec = Run(options_.connect_timeout, [&](auto handler) {
      stream_->tcp_layer().async_connect(
          endpoints, [handler](error_code e, const tcp::endpoint&) mutable { handler(e, 0); });
    });
    if (ec) return Fail(what, "connect", ec);
    error_code ignored;
    stream_->socket().set_option(tcp::no_delay(true), ignored);
    if (tls_context_) return Handshake(what);
    return Status::Ok();
  }

  Status Handshake(std::string_view what) {
    const std::string& name =
        options_.tls->server_name.empty() ? options_.host : options_.tls->server_name;
    Status named = ExpectServerName(stream_->tls(), name);
    if (!named.ok()) {
      Disconnect();
      return named;
    }
    error_code ec = Run(options_.connect_timeout, [&](auto handler) {
      stream_->tls().async_handshake(ssl::stream_base::client,
                                     [handler](error_code e) mutable { handler(e, 0); });
    });
    if (ec) {
      Status failed = Fail(what, "TLS handshake", ec);
      return Unavailable(failed.message() +
                         " (the server must present a certificate signed by the CA in '" +
                         options_.tls->ca_file + "' naming '" + name +
                         "'; a server that speaks plain HTTP fails here too)");
    }
    stream_->Activate();
    return Status::Ok();
  }

  http::request<http::string_body> BuildRequest(Method method, std::string_view target,
                                                std::string body, const Headers& headers) {
    http::request<http::string_body> req{ToVerb(method), std::string(target), 11};
    req.set(http::field::host, where_);
    req.set(http::field::user_agent, "tessera");
    if (!options_.bearer_token.empty()) {
      req.set(http::field::authorization, "Bearer " + options_.bearer_token);
    }
    if (!body.empty()) req.set(http::field::content_type, "application/json");
    for (const auto& [name, value] : headers) req.set(name, value);
    req.body() = std::move(body);
    req.keep_alive(true);
    req.prepare_payload();
    return req;
  }

  ClientOptions options_;
  const std::string where_;
  std::atomic<bool> cancelled_{false};
  asio::io_context ioc_;
  std::shared_ptr<ssl::context> tls_context_;  // when options_.tls is set and its files loaded
  Status tls_error_;                           // why they did not load
  std::optional<TlsStream> stream_;
  beast::flat_buffer buffer_;
};

Result<Response> ClientImpl::Request(Method method, std::string_view target, std::string body,
                                     const Headers& headers) {
  std::string what = std::string(MethodName(method)) + " " + std::string(target);
  if (target.empty() || target.front() != '/') {
    return InvalidArgument("request target '" + std::string(target) + "' must start with '/'");
  }
  http::request<http::string_body> req = BuildRequest(method, target, std::move(body), headers);
  for (int attempt = 0;; ++attempt) {
    bool reused = false;
    TESSERA_RETURN_IF_ERROR(EnsureConnected(what, reused));
    bool may_retry = reused && attempt == 0 && IsIdempotent(method);

    error_code ec = Run(options_.read_timeout,
                        [&](auto handler) { http::async_write(*stream_, req, handler); });
    if (ec) {
      if (may_retry && !cancelled_) {
        Disconnect();
        continue;
      }
      return Fail(what, "write", ec);
    }
    http::response_parser<http::string_body> parser;
    parser.body_limit(options_.max_response_bytes);
    if (method == Method::kHead) parser.skip(true);
    ec = Run(options_.read_timeout,
             [&](auto handler) { http::async_read(*stream_, buffer_, parser, handler); });
    if (ec) {
      if (may_retry && !cancelled_ && ec != beast::error::timeout) {
        Disconnect();
        continue;
      }
      return Fail(what, "read", ec);
    }
    http::response<http::string_body> res = parser.release();
    Response out;
    out.status = static_cast<int>(res.result_int());
    out.content_type = std::string(res[http::field::content_type]);
    for (const auto& field : res) {
      auto [it, inserted] =
          out.headers.emplace(std::string(field.name_string()), std::string(field.value()));
      if (!inserted) it->second += ", " + std::string(field.value());
    }
    out.body = std::move(res.body());
    if (!res.keep_alive()) Disconnect();
    return out;
  }
}

Status ClientImpl::Stream(Method method, std::string_view target,
                          const std::function<bool(std::string_view)>& on_line, std::string body,
                          const Headers& headers) {
  std::string what = std::string(MethodName(method)) + " " + std::string(target);
  if (target.empty() || target.front() != '/') {
    return InvalidArgument("request target '" + std::string(target) + "' must start with '/'");
  }
  http::request<http::string_body> req = BuildRequest(method, target, std::move(body), headers);
  std::optional<http::response_parser<http::buffer_body>> parser;
  for (int attempt = 0;; ++attempt) {
    parser.emplace();
    parser->body_limit(std::numeric_limits<std::uint64_t>::max());
    bool reused = false;
    TESSERA_RETURN_IF_ERROR(EnsureConnected(what, reused));
    bool may_retry = reused && attempt == 0 && IsIdempotent(method);
    error_code ec = Run(options_.read_timeout,
                        [&](auto handler) { http::async_write(*stream_, req, handler); });
    if (!ec) {
      ec = Run(options_.read_timeout,
               [&](auto handler) { http::async_read_header(*stream_, buffer_, *parser, handler); });
    }
    if (!ec) break;
    if (may_retry && !cancelled_ && ec != beast::error::timeout) {
      Disconnect();
      continue;
    }
    return Fail(what, "read header", ec);
  }
  int status = static_cast<int>(parser->get().result_int());
  bool ok_status = status >= 200 && status < 300;

  std::array<char, 8192> buf;
  std::string pending;
  std::string error_body;
  while (!parser->is_done()) {
    parser->get().body().data = buf.data();
    parser->get().body().size = buf.size();
    error_code ec =
        Run(ok_status ? options_.stream_idle_timeout : options_.read_timeout,
            [&](auto handler) { http::async_read_some(*stream_, buffer_, *parser, handler); });
    if (ec == http::error::need_buffer) ec = {};
    if (ec) return Fail(what, "stream", ec);
    size_t n = buf.size() - parser->get().body().size;
    if (!ok_status) {
      if (error_body.size() < 64 * 1024) error_body.append(buf.data(), n);
      continue;
    }
    pending.append(buf.data(), n);
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      std::string_view line(pending.data() + start, nl - start);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (!on_line(line)) {
        Disconnect();  // the rest of the response is unread: the connection cannot be reused
        return Status::Ok();
      }
    }
    pending.erase(0, start);
  }
  if (!parser->keep_alive()) Disconnect();
  if (!ok_status) {
    return StatusFromHttp(
        status, where_ + ": " + what + ": HTTP " + std::to_string(status) + ": " + error_body);
  }
  if (!pending.empty()) on_line(pending);
  return Status::Ok();
}

HttpClient::HttpClient(ClientOptions options)
    : impl_(std::make_unique<ClientImpl>(std::move(options))) {}

HttpClient::~HttpClient() = default;

Result<Response> HttpClient::Request(Method method, std::string_view target, std::string body,
                                     const Headers& headers) {
  return impl_->Request(method, target, std::move(body), headers);
}

Status HttpClient::Stream(Method method, std::string_view target,
                          std::function<bool(std::string_view line)> on_line, std::string body,
                          const Headers& headers) {
  return impl_->Stream(method, target, on_line, std::move(body), headers);
}

void HttpClient::Cancel() { impl_->Cancel(); }

void HttpClient::Disconnect() { impl_->Disconnect(); }

}  // namespace tessera::net
