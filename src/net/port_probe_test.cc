// PortTakenHere against real sockets on this machine: a port a listener holds (on the address or
// on the wildcard) is taken; once closed it is not; another machine's address and a host name
// tell nothing, so they are not taken.
#include "net/port_probe.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace tessera::net {
namespace {

// A listening socket on `address` (IPv4), port chosen by the kernel; closed when it goes.
class Listener {
 public:
  explicit Listener(const char* address) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = 0;
    EXPECT_EQ(inet_pton(AF_INET, address, &a.sin_addr), 1);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(listen(fd_, 1), 0);
    socklen_t length = sizeof a;
    EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &length), 0);
    port_ = ntohs(a.sin_port);
  }
  ~Listener() { Close(); }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST(PortTakenHere, APortAListenerHoldsIsTakenUntilItCloses) {
  Listener on_loopback("127.0.0.1");
  ASSERT_GT(on_loopback.port(), 0);
  EXPECT_TRUE(PortTakenHere("127.0.0.1", on_loopback.port()));
  on_loopback.Close();
  EXPECT_FALSE(PortTakenHere("127.0.0.1", on_loopback.port()));
}

TEST(PortTakenHere, AWildcardListenerTakesThePortOnEveryAddress) {
  // PyTorch's TCPStore listens on the wildcard address; workers are told 127.0.0.1.
  Listener on_all("0.0.0.0");
  ASSERT_GT(on_all.port(), 0);
  EXPECT_TRUE(PortTakenHere("127.0.0.1", on_all.port()));
}

TEST(PortTakenHere, NothingCanBeToldAboutOtherMachinesOrNames) {
  Listener on_loopback("127.0.0.1");
  EXPECT_FALSE(PortTakenHere("192.0.2.1", on_loopback.port()));  // TEST-NET-1: not this machine
  EXPECT_FALSE(PortTakenHere("localhost", on_loopback.port()));  // names are not resolved
  EXPECT_FALSE(PortTakenHere("", on_loopback.port()));
  EXPECT_FALSE(PortTakenHere("127.0.0.1", 0));
  EXPECT_FALSE(PortTakenHere("127.0.0.1", 70000));
}

}  // namespace
}  // namespace tessera::net
