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
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "net/http.h"

namespace tessera::net {

class ClientImpl;  // defined in http_client.cc

// TLS for a client: the server must present a certificate signed by the CA in `ca_file` that
// names the host the client connects to (or `server_name`). TLS 1.2 and 1.3 only.
struct ClientTlsOptions {
  std::string ca_file;  // PEM: the cluster CA (ca.crt in the head's state directory)
  // Optional client certificate and key (PEM), for servers that ask for one.
  std::string cert_file;
  std::string key_file;
  // The name the server's certificate must carry: a DNS name or an IP literal, matched
  // against its subjectAltNames. Empty = ClientOptions::host.
  std::string server_name;
};

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
  // nullopt = plain HTTP. With TLS, the handshake must finish within connect_timeout; a
  // certificate that does not verify fails the call with Unavailable saying so; files that do
  // not load fail every call with InvalidArgument naming the option and the file.
  std::optional<ClientTlsOptions> tls;
};

// The client options for a server URL: "https://HOST:PORT" (TLS, verified against `ca_file`),
// "http://HOST:PORT" (plain), or "HOST:PORT" (https). A trailing "/" is allowed, a path is not;
// HOST may be a name, an IPv4 literal or a bracketed IPv6 literal ("[::1]"); 0.0.0.0 becomes
// 127.0.0.1 (a head bound to every address is reached on loopback). InvalidArgument naming
// `field` and the form expected; for https with an empty `ca_file`, naming --ca-file.
Result<ClientOptions> ClientOptionsForUrl(std::string_view url, const std::string& ca_file,
                                          std::string_view field);

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
