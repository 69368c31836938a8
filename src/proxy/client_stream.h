// ClientStream: the router's end of one client connection, a TCP socket or TLS over it when
// the router serves HTTPS (RouterOptions::tls); and likewise its end of a connection to a
// replica (Upstream), TLS when the replica serves HTTPS. Session reads and writes through it;
// the socket beneath stays reachable for what TLS does not change (the peer's address,
// options, shutdown and close, which also cut a TLS operation in progress).
//
// Internal to the router. Thread-safety: the io thread only, as Session.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <optional>
#include <utility>

namespace tessera::proxy {

class ClientStream {
 public:
  using Socket = boost::asio::ip::tcp::socket;
  using executor_type = Socket::executor_type;

  // Plain HTTP when `context` is null; else TLS with it (owned by the router, which outlives
  // its sessions and connections), the handshake being the caller's first operation
  // (tls().async_handshake; its plain first bytes may be read from socket() before).
  ClientStream(Socket socket, boost::asio::ssl::context* context) {
    if (context == nullptr) {
      plain_.emplace(std::move(socket));
    } else {
      tls_.emplace(std::move(socket), *context);
    }
  }

  bool has_tls() const { return tls_.has_value(); }
  boost::asio::ssl::stream<Socket>& tls() { return *tls_; }
  Socket& socket() { return tls_ ? tls_->next_layer() : *plain_; }
  executor_type get_executor() { return socket().get_executor(); }

  template <class Buffers, class Handler>
  void async_read_some(const Buffers& buffers, Handler&& handler) {
    if (tls_) {
      tls_->async_read_some(buffers, std::forward<Handler>(handler));
    } else {
      plain_->async_read_some(buffers, std::forward<Handler>(handler));
    }
  }
  template <class Buffers, class Handler>
  void async_write_some(const Buffers& buffers, Handler&& handler) {
    if (tls_) {
      tls_->async_write_some(buffers, std::forward<Handler>(handler));
    } else {
      plain_->async_write_some(buffers, std::forward<Handler>(handler));
    }
  }

 private:
  std::optional<Socket> plain_;
  std::optional<boost::asio::ssl::stream<Socket>> tls_;
};

}  // namespace tessera::proxy
