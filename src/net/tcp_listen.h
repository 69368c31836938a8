// Opening a listening TCP socket, the one way HttpServer (http_server.cc) and the serving router
// (src/proxy/serving_router.cc) both do it: parse the bind address, then open, bind with
// SO_REUSEADDR and listen. Internal: it names Boost.Asio types, so only .cc files include it.
//
// Stateless; safe to call from any thread on an acceptor no other thread is using.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tessera::net {

// The endpoint `bind_address`:`port` stands for. InvalidArgument "<field> '<address>': <why>"
// when the address is not an IPv4 or IPv6 literal; `field` is the option's name as its owner
// documents it ("bind_address").
Result<boost::asio::ip::tcp::endpoint> ParseBindEndpoint(const std::string& bind_address,
                                                         uint16_t port, std::string_view field);

// Opens, binds and listens `acceptor` on `endpoint` and returns the port it is bound to (the
// one the kernel chose when the endpoint's port is 0). On failure the acceptor is left closed
// and the result is Unavailable "cannot listen on <where>: <why>"; `where` is the address as
// the caller was given it ("127.0.0.1:8080").
Result<uint16_t> Listen(boost::asio::ip::tcp::acceptor& acceptor,
                        const boost::asio::ip::tcp::endpoint& endpoint, const std::string& where);

}  // namespace tessera::net
