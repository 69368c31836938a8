// PortTakenHere (port_probe.h), with POSIX sockets: no Boost needed for one bind.
#include "net/port_probe.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tessera::net {

bool PortTakenHere(const std::string& address, int port) {
  if (port <= 0 || port > 65535) return false;
  sockaddr_storage storage{};
  socklen_t length = 0;
  int family = AF_INET;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&storage);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&storage);
  if (inet_pton(AF_INET, address.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    length = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr) == 1) {
    family = AF_INET6;
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    length = sizeof(sockaddr_in6);
  } else {
    return false;  // a host name: not resolved here (the probe must answer at once)
  }
  const int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  // No SO_REUSEADDR: a port another socket holds in any way is taken for this purpose.
  const bool taken =
      bind(fd, reinterpret_cast<const sockaddr*>(&storage), length) != 0 && errno == EADDRINUSE;
  close(fd);
  return taken;
}

}  // namespace tessera::net
