// ClientOptionsForUrl (http_client.h): a server URL to the client's host, port and TLS.
#include <charconv>
#include <string>

#include "net/http_client.h"

namespace tessera::net {

Result<ClientOptions> ClientOptionsForUrl(std::string_view url, const std::string& ca_file,
                                          std::string_view field) {
  const std::string form =
      " (expected https://HOST:PORT, or http://HOST:PORT for a head started "
      "with --plain-http)";
  auto bad = [&](const std::string& why) {
    return InvalidArgument(std::string(field) + ": '" + std::string(url) + "' " + why + form);
  };
  std::string_view rest = url;
  bool https = true;
  if (rest.starts_with("https://")) {
    rest.remove_prefix(8);
  } else if (rest.starts_with("http://")) {
    rest.remove_prefix(7);
    https = false;
  } else if (rest.find("://") != std::string_view::npos) {
    return bad("has a scheme other than https or http");
  }
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (rest.find('/') != std::string_view::npos) return bad("has a path");
  const size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return bad("has no HOST:PORT");
  std::string host(rest.substr(0, colon));
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string::npos) {
    return bad("has an IPv6 address without brackets");
  }
  std::string_view port_text = rest.substr(colon + 1);
  unsigned port = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port == 0 ||
      port > 65535) {
    return bad("has no valid port");
  }
  ClientOptions options;
  options.host = host == "0.0.0.0" ? "127.0.0.1" : host;
  options.port = static_cast<uint16_t>(port);
  if (https) {
    if (ca_file.empty()) {
      return InvalidArgument(std::string(field) + ": '" + std::string(url) +
                             "' is https: give --ca-file, the cluster CA (ca.crt in the head's "
                             "state directory)");
    }
    options.tls = ClientTlsOptions{ca_file, "", "", ""};
  }
  return options;
}

}  // namespace tessera::net
