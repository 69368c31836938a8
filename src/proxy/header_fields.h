// HTTP header fields as the serving router forwards them: which fields are hop-by-hop (they
// describe one connection, not the message, and are never forwarded), and writing a field as
// header text. Pure functions on string views; thread-safe.
#pragma once

#include <boost/beast/core/string.hpp>
#include <string>

namespace tessera::proxy {

// Whether `name` describes one connection, not the message (RFC 9110 section 7.6.1); the
// router sets its own framing, so Transfer-Encoding, Expect and the like are in this list.
bool IsHopByHop(boost::beast::string_view name);

// Whether `name` is one of the comma-separated tokens of a Connection header value (the
// fields it names are hop-by-hop too). Tokens are compared without case and surrounding blanks.
bool NamedIn(boost::beast::string_view connection, boost::beast::string_view name);

// Appends "name: value\r\n" to `out`.
void AppendField(std::string& out, boost::beast::string_view name, boost::beast::string_view value);

}  // namespace tessera::proxy
