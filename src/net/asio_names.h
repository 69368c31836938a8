// Short names for Boost.Asio and Boost.Beast, shared by src/net's .cc files and its internal
// headers. Never included by a public header (http.h, http_server.h, http_client.h stay free of
// Boost, see README.md).
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http.hpp>

namespace tessera::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;

}  // namespace tessera::net
