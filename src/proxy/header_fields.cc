// Hop-by-hop header names and header text for the serving router (header_fields.h).
#include "proxy/header_fields.h"

#include <array>
#include <string_view>

namespace tessera::proxy {

namespace beast = boost::beast;

bool IsHopByHop(beast::string_view name) {
  static constexpr std::array<std::string_view, 10> kNames = {
      "connection",        "keep-alive", "proxy-connection", "proxy-authenticate", "te", "trailer",
      "transfer-encoding", "upgrade",    "expect",           "proxy-authorization"};
  for (std::string_view n : kNames) {
    if (beast::iequals(name, beast::string_view(n.data(), n.size()))) return true;
  }
  return false;
}

bool NamedIn(beast::string_view connection, beast::string_view name) {
  while (!connection.empty()) {
    const size_t comma = connection.find(',');
    beast::string_view token = connection.substr(0, comma);
    connection =
        comma == beast::string_view::npos ? beast::string_view() : connection.substr(comma + 1);
    while (!token.empty() && (token.front() == ' ' || token.front() == '\t'))
      token.remove_prefix(1);
    while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) token.remove_suffix(1);
    if (!token.empty() && beast::iequals(token, name)) return true;
  }
  return false;
}

void AppendField(std::string& out, beast::string_view name, beast::string_view value) {
  out.append(name.data(), name.size());
  out += ": ";
  out.append(value.data(), value.size());
  out += "\r\n";
}

}  // namespace tessera::proxy
