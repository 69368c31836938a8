// ParseBindEndpoint and Listen (tcp_listen.h).
#include "net/tcp_listen.h"

#include "net/asio_names.h"

namespace tessera::net {

Result<tcp::endpoint> ParseBindEndpoint(const std::string& bind_address, uint16_t port,
                                        std::string_view field) {
  error_code ec;
  asio::ip::address address = asio::ip::make_address(bind_address, ec);
  if (ec) return InvalidArgument(std::string(field) + " '" + bind_address + "': " + ec.message());
  return tcp::endpoint(address, port);
}

Result<uint16_t> Listen(tcp::acceptor& acceptor, const tcp::endpoint& endpoint,
                        const std::string& where) {
  error_code ec;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    error_code ignored;
    acceptor.close(ignored);
    return Unavailable("cannot listen on " + where + ": " + ec.message());
  }
  return acceptor.local_endpoint(ec).port();
}

}  // namespace tessera::net
