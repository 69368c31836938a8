// HttpClient: a synchronous HTTP/1.1 client for the CLI and the host agents.
//
// One client holds at most one keep-alive connection to one server and reuses it across calls;
// a connection the server has closed is noticed before reuse and replaced. Every call has
// deadlines (connect, then read) and never throws: transport failures come back as an
// Unavailable Status whose message names host:port. An HTTP error status (404, 500, ...) from
// Request() is not a transport failure: it is returned as a Response.
//
// Ownership: the caller owns the client. Thread-safety: one call at a time per client (use
// one client per thread); Cancel() alone may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "net/http.h"

namespace tessera::net {

class ClientImpl;  // defined in http_client.cc

struct ClientOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  std::chrono::milliseconds connect_timeout{5'000};
  // Request(): the whole response must arrive within this after the request is sent.
  // Stream(): the response header must arrive within this.
  std::chrono::milliseconds read_timeout{30'000};
  // Stream(): give up when no data arrives for this long; 0 = wait as long as the server
  // keeps the connection open.
  std::chrono::milliseconds stream_idle_timeout{0};
  // Sent as "Authorization: Bearer <token>" when not empty.
  std::string bearer_token;
  // Responses with larger bodies fail with Unavailable.
  uint64_t max_response_bytes = uint64_t{64} << 20;
};

class HttpClient {
 public:
  explicit HttpClient(ClientOptions options);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Sends one request and reads the whole response. `target` is the path and query
  // ("/api/v1/jobs?queue=a"). A non-empty body is sent as application/json unless `headers`
  // sets Content-Type. Returns the Response for any HTTP status; Unavailable on a transport
  // failure or timeout; InvalidArgument for a target not starting with '/'.
  // A GET/HEAD/PUT/DELETE/OPTIONS that fails on a reused connection is retried once on a new
  // one; POST and PATCH are never retried.
  Result<Response> Request(Method method, std::string_view target, std::string body = {},
                           const Headers& headers = {});

  // Sends a request and reads a (typically chunked) streaming response, calling `on_line`
  // with each line, without its "\n" or "\r\n", in order; a final unterminated line is
  // delivered too. Returns OK when the server ends the response or `on_line` returns false
  // (the connection is then closed). A non-2xx status returns an error built from the status
  // and the body (401/403 -> FailedPrecondition, 404 -> NotFound, 409 -> Conflict,
  // other 4xx -> InvalidArgument, 5xx -> Unavailable). Transport failures -> Unavailable.
  Status Stream(Method method, std::string_view target,
                std::function<bool(std::string_view line)> on_line, std::string body = {},
                const Headers& headers = {});

  // Aborts the call in progress (it returns Unavailable promptly) and makes every later call
  // fail the same way. For shutting down an agent that is blocked in Stream(). Thread-safe.
  void Cancel();

  // Drops the kept-alive connection, if any. The next call reconnects.
  void Disconnect();

 private:
  std::unique_ptr<ClientImpl> impl_;
};

}  // namespace tessera::net
