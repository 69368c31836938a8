// StandbyProxy against a leader that froze: it accepts connections (the kernel does, for a
// stopped process) and never answers.
#include "ha/standby_proxy.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>

namespace tessera::ha {
namespace {

// A listening socket nobody accepts on: connections complete in the backlog, reads hang.
class FrozenLeader {
 public:
  FrozenLeader() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(::listen(fd_, 16), 0);
    EXPECT_EQ(::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    address_ = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  }
  ~FrozenLeader() { ::close(fd_); }
  const std::string& address() const { return address_; }

 private:
  int fd_ = -1;
  std::string address_;
};

net::Request PostJob() {
  net::Request r;
  r.method = net::Method::kPost;
  r.target = r.path = "/api/v1/jobs";
  r.body = "{}";
  return r;
}

// Waits (generous deadline, no fixed sleep) until `proxy` has `n` requests in flight.
bool WaitInFlight(const StandbyProxy& proxy, size_t n) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (proxy.in_flight() != n) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

TEST(StandbyProxyTest, ANewLeaderCancelsTheRequestsWaitingOnTheOldOne) {
  FrozenLeader old_leader;
  StandbyProxy proxy("127.0.0.1:1");
  auto answer = std::async(std::launch::async,
                           [&] { return proxy.Forward(PostJob(), old_leader.address()); });
  ASSERT_TRUE(WaitInFlight(proxy, 1));
  // The same leader again: nothing is cancelled.
  proxy.LeaderChanged(old_leader.address());
  EXPECT_EQ(answer.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  EXPECT_EQ(proxy.in_flight(), 1u);
  // Another leader: the request is answered 503 naming the old one, long before the 30 s
  // read timeout (the deadline here is 20 s).
  proxy.LeaderChanged("127.0.0.1:2");
  ASSERT_EQ(answer.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  const net::Response r = answer.get();
  EXPECT_EQ(r.status, 503);
  EXPECT_NE(r.body.find(old_leader.address()), std::string::npos) << r.body;
  EXPECT_EQ(proxy.in_flight(), 0u);
}

TEST(StandbyProxyTest, NoKnownLeaderCancelsToo) {
  FrozenLeader old_leader;
  StandbyProxy proxy("127.0.0.1:1");
  auto answer = std::async(std::launch::async,
                           [&] { return proxy.Forward(PostJob(), old_leader.address()); });
  ASSERT_TRUE(WaitInFlight(proxy, 1));
  proxy.LeaderChanged("");
  ASSERT_EQ(answer.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_EQ(answer.get().status, 503);
}

}  // namespace
}  // namespace tessera::ha
