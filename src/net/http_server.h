// HttpServer: tessera's asynchronous HTTP/1.1 server (Boost.Asio/Beast behind a pimpl).
//
// `io_threads` event loops, each an io_context run by one thread; the listener hands each new
// connection to the next loop in turn, and the connection stays on it. A loop wakes no other
// thread to run its handlers: with 2,000 agents heartbeating over one io_context shared by 6
// threads, a heartbeat cost 22 system calls, 11 of them futex (8 with one loop a thread;
// bench/README.md "One event loop a thread"). Each connection is a small state machine on its own
// strand, so thousands of idle keep-alive connections or open streams cost memory, not threads. A
// handler that blocks delays the other connections of its loop, not every connection. Per request
// the server:
//   0. with TLS: refuses plain HTTP (400), then does the handshake (handshake timeout),
//   1. reads the header (idle and header timeouts apply; oversized headers get 431),
//   2. checks auth (401 + WWW-Authenticate: Bearer, before anything else runs),
//   3. checks the declared body size (413, then the connection is closed),
//   4. routes (404 / 405 with Allow), reads the body (body timeout), calls the handler,
//   5. writes the response, or for a streaming response the header and then the chunks the
//      application pushes through its StreamWriter.
// Error responses are JSON: {"error": "...", "field": ... }.
//
// Ownership: the application owns the HttpServer. Handlers and StreamWriters must not outlive
// it in use: after Stop() every StreamWriter reports closed.
//
// Thread-safety: Handle() must be called before Start(). Start(), Stop() and port() may be
// called from any thread, but not concurrently with each other. Handlers run concurrently on
// the io threads (one connection's handlers one at a time, on its loop).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "net/http.h"

namespace tessera::net {

class ServerImpl;  // defined in http_server.cc

struct AuthOptions {
  // Accepted bearer tokens ("Authorization: Bearer <token>", the scheme in any case), checked
  // with HasBearerToken (http.h), which the application's role checks use too.
  std::set<std::string> tokens;
  // Optional extra check, consulted when the bearer token is not in `tokens`. It sees method,
  // target, path, query, headers and peer; params and body are still empty (auth runs before
  // routing and before the body is read). Runs on an io thread; must not block.
  std::function<bool(const Request&)> check;
  // Paths that skip auth: an exact path ("/healthz") or a prefix ending in '*' ("/ui/*"),
  // matched against the decoded path. Requests whose path has an encoded '/' (%2F) or a "." or
  // ".." segment are refused with 400 before this, so an exempt prefix names exactly the
  // routes whose leading segments it spells.
  std::vector<std::string> exempt_paths;

  // Auth is enforced when there is at least one token or a check.
  bool enabled() const { return !tokens.empty() || static_cast<bool>(check); }
};

// Whether a TLS server asks clients for a certificate.
enum class ClientCertMode {
  kNone,     // never asks
  kRequest,  // asks; a client without one is served (Request::peer_identity empty), a client
             // whose certificate does not verify against client_ca_file is refused
  kRequire,  // the handshake fails without a certificate that verifies
};

// TLS for a server (TLS 1.2 and 1.3 only, forward-secret AEAD ciphers only). With TLS on, the
// server speaks nothing but TLS: a plain-HTTP request gets "400 this port speaks HTTPS only"
// in plain text and the connection is closed.
struct ServerTlsOptions {
  std::string cert_chain_file;  // PEM: the server certificate, then any intermediates
  std::string key_file;         // PEM: its private key
  // PEM: the CA that client certificates must be signed by; needed unless client_certs is kNone.
  std::string client_ca_file;
  ClientCertMode client_certs = ClientCertMode::kNone;
  // From the connection's first byte, the handshake must finish within this.
  std::chrono::milliseconds handshake_timeout{10'000};
};

struct ServerOptions {
  std::string bind_address = "127.0.0.1";  // "0.0.0.0" or "::" to listen on every interface
  uint16_t port = 0;                       // 0 = an ephemeral port; see HttpServer::port()
  int io_threads = 2;
  // Larger request bodies get 413 and the connection is closed after the response.
  uint64_t max_body_bytes = 1 << 20;
  // Larger request headers get 431 and the connection is closed.
  uint32_t max_header_bytes = 16 * 1024;
  // A keep-alive connection with no request started for this long is closed.
  std::chrono::milliseconds idle_timeout{60'000};
  // Once the first byte of a request arrives, the whole header must arrive within this
  // (defeats slowloris clients that trickle header bytes).
  std::chrono::milliseconds header_timeout{10'000};
  // The body must arrive within this after the header.
  std::chrono::milliseconds body_timeout{30'000};
  // Each response write (and each stream chunk write) must finish within this, or the
  // connection is dropped.
  std::chrono::milliseconds write_timeout{30'000};
  // A stream whose unsent chunks exceed this is closed (its client cannot keep up).
  size_t max_stream_queue_bytes = 8 << 20;
  // Stop() lets requests in progress finish for up to this long, then drops them.
  std::chrono::milliseconds stop_grace{5'000};
  AuthOptions auth;
  // nullopt = plain HTTP. Start() fails with InvalidArgument naming the option and the file
  // when a file does not load.
  std::optional<ServerTlsOptions> tls;
};

class HttpServer {
 public:
  explicit HttpServer(ServerOptions options);
  // Stops the server if it is running.
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Registers `handler` for `method` on `pattern` ("/api/v1/jobs/{name}", "/ui/{path...}";
  // see router.h for matching rules). InvalidArgument for a malformed or duplicate pattern;
  // FailedPrecondition after Start().
  Status Handle(Method method, std::string_view pattern, Handler handler);

  // Binds, listens and starts the io threads. Unavailable if the address cannot be bound
  // (the message names address:port); FailedPrecondition if already started.
  Status Start();

  // Loads options.tls's files again (a renewed certificate) for the connections accepted from
  // now on; connections already open keep the context they started with. FailedPrecondition
  // before Start() or without TLS; the file's error when it does not load (the old context
  // stays in use then).
  Status ReloadTls();

  // The bound port (the ephemeral one when options.port was 0); 0 before Start().
  uint16_t port() const;

  // Stops accepting, closes idle connections and open streams (their writers report closed
  // and their OnClose callbacks run), lets requests in progress finish for up to
  // options.stop_grace, then joins the io threads. Idempotent. Must not be called from a
  // handler or an OnClose callback.
  void Stop();

  // Connections currently open (for tests and /metrics).
  size_t connection_count() const;

 private:
  std::unique_ptr<ServerImpl> impl_;
};

}  // namespace tessera::net
