// TlsStream: the connection type of HttpServer's sessions and of HttpClient, a TCP stream that
// either speaks plain HTTP or carries TLS, so the session and client code is written once.
// Reads and writes go through TLS once Activate() was called after a handshake, and straight to
// TCP before (the server peeks at the first bytes in plain to refuse plain HTTP on a TLS port).
// Timeouts, the socket and close() are those of the TCP layer under both.
//
// Also the TLS contexts: MakeServerTlsContext and MakeClientTlsContext load the files named by
// ServerTlsOptions / ClientTlsOptions (TLS 1.2 and 1.3 only, modern ciphers only) and
// PeerIdentity reads the verified client certificate's subject CN.
//
// Internal to src/net: it names Boost.Asio/Beast types. Thread-safety: as beast::tcp_stream,
// one strand per stream.
#pragma once

#include <boost/asio/ssl/context.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "common/status.h"
#include "net/asio_names.h"
#include "net/http_client.h"
#include "net/http_server.h"

namespace tessera::net {

namespace ssl = boost::asio::ssl;

class TlsStream {
 public:
  using executor_type = beast::tcp_stream::executor_type;

  // Plain: reads and writes go to TCP.
  explicit TlsStream(tcp::socket socket) : plain_(std::in_place, std::move(socket)) {}
  template <class Executor>
  explicit TlsStream(Executor executor) : plain_(std::in_place, executor) {}
  // TLS with `context` (which must outlive the stream); plain until Activate().
  TlsStream(tcp::socket socket, ssl::context& context)
      : tls_(std::in_place, std::move(socket), context) {}
  template <class Executor>
  TlsStream(Executor executor, ssl::context& context) : tls_(std::in_place, executor, context) {}

  bool has_tls() const { return tls_.has_value(); }
  bool tls_active() const { return active_; }
  beast::ssl_stream<beast::tcp_stream>& tls() { return *tls_; }
  // After a successful handshake: from now on reads and writes are encrypted.
  void Activate() { active_ = tls_.has_value(); }

  beast::tcp_stream& tcp_layer() { return tls_ ? tls_->next_layer() : *plain_; }
  executor_type get_executor() { return tcp_layer().get_executor(); }
  tcp::socket& socket() { return tcp_layer().socket(); }
  template <class Duration>
  void expires_after(Duration d) {
    tcp_layer().expires_after(d);
  }
  void expires_never() { tcp_layer().expires_never(); }
  void close() { tcp_layer().close(); }

  template <class Buffers, class Handler>
  void async_read_some(const Buffers& buffers, Handler&& handler) {
    if (active_) {
      tls_->async_read_some(buffers, std::forward<Handler>(handler));
    } else {
      tcp_layer().async_read_some(buffers, std::forward<Handler>(handler));
    }
  }
  template <class Buffers, class Handler>
  void async_write_some(const Buffers& buffers, Handler&& handler) {
    if (active_) {
      tls_->async_write_some(buffers, std::forward<Handler>(handler));
    } else {
      tcp_layer().async_write_some(buffers, std::forward<Handler>(handler));
    }
  }

 private:
  std::optional<beast::tcp_stream> plain_;
  std::optional<beast::ssl_stream<beast::tcp_stream>> tls_;
  bool active_ = false;
};

// A server context with the certificate chain and key of `options` and, when it names one,
// the client CA and the client-certificate mode. InvalidArgument naming the option and the
// file ("tls.key_file '/x/head.key': ...") when one does not load.
Result<std::shared_ptr<ssl::context>> MakeServerTlsContext(const ServerTlsOptions& options);

// A client context that verifies servers against options.ca_file and, when set, presents
// options.cert_file / key_file. InvalidArgument naming the option and the file.
Result<std::shared_ptr<ssl::context>> MakeClientTlsContext(const ClientTlsOptions& options);

// Makes `stream`'s next handshake check that the server's certificate names `name` (an IP
// literal is matched against the IP SANs, anything else against the DNS SANs) and sends `name`
// as SNI when it is a DNS name.
Status ExpectServerName(beast::ssl_stream<beast::tcp_stream>& stream, const std::string& name);
// The same for any OpenSSL connection (the router's asio::ssl::stream to a replica).
Status ExpectServerName(SSL* native, const std::string& name);

// The subject CN of the peer's certificate when it presented one that verified; "" otherwise.
std::string PeerIdentity(beast::ssl_stream<beast::tcp_stream>& stream);

}  // namespace tessera::net
