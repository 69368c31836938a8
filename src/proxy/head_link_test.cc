// HeadLink with several heads (docs/ha.md "Following the leader"): the router's link to the
// control plane goes past a head that is down and a standby whose 503 names the leader, learns
// the Services from the leader and reports load to it, and moves on again when that leader
// goes away. Fake heads (net::HttpServer) on ports from 0.
#include "proxy/head_link.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "net/http_server.h"
#include "proxy/serving_router.h"

namespace tessera::proxy {
namespace {

using namespace std::chrono_literals;

bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout = 30s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return done();
}

std::string ServiceList(const std::string& name) {
  return R"({"items": [{"apiVersion": "tessera/v1", "kind": "Service", "metadata": {"name": ")" +
         name + R"("}, "spec": {"port": 8000}}]})";
}

// A head that is either a standby (503 naming `leader` for everything) or the leader (a list of
// one Service, a watch held open, load reports counted).
class FakeControlHead {
 public:
  FakeControlHead() {
    net::ServerOptions options;
    options.port = 0;
    server_ = std::make_unique<net::HttpServer>(options);
    EXPECT_TRUE(
        server_
            ->Handle(net::Method::kGet, "/api/v1/services",
                     [this](const net::Request& r) -> net::Response {
                       std::lock_guard lock(mu_);
                       ++lists_;
                       if (!leader_.empty())
                         return net::Response::Error(
                             503,
                             "this head is a standby; the leader is at " + leader_ + " (term 7)");
                       if (r.query.count("watch") == 0)
                         return net::Response::Json(200, ServiceList(service_));
                       return net::Response::Stream([this](std::shared_ptr<net::StreamWriter> w) {
                         std::lock_guard held(mu_);
                         writers_.push_back(std::move(w));  // open, no events
                       });
                     })
            .ok());
    EXPECT_TRUE(server_
                    ->Handle(net::Method::kPost, "/api/v1/services/{name}/load",
                             [this](const net::Request&) -> net::Response {
                               std::lock_guard lock(mu_);
                               if (!leader_.empty())
                                 return net::Response::Error(
                                     503, "standby; the leader is at " + leader_ + " (term 7)");
                               ++reports_;
                               return net::Response::Json(200, "{}");
                             })
                    .ok());
    EXPECT_TRUE(server_->Start().ok());
  }
  // The server first: a request still in flight must not run its handler on members already
  // destroyed (writers_ is destroyed before server_).
  ~FakeControlHead() { server_->Stop(); }
  uint16_t port() const { return server_->port(); }
  void Stop() { server_->Stop(); }
  void StandBy(const std::string& leader) {
    std::lock_guard lock(mu_);
    leader_ = leader;
  }
  void Lead(const std::string& service) {
    std::lock_guard lock(mu_);
    leader_.clear();
    service_ = service;
  }
  int reports() {
    std::lock_guard lock(mu_);
    return reports_;
  }
  int lists() {
    std::lock_guard lock(mu_);
    return lists_;
  }

 private:
  std::unique_ptr<net::HttpServer> server_;
  std::mutex mu_;
  std::string leader_;  // "" while leading
  std::string service_;
  int reports_ = 0;
  int lists_ = 0;  // GET /api/v1/services, answered or refused
  std::vector<std::shared_ptr<net::StreamWriter>> writers_;
};

bool Knows(ServingRouter& router, const std::string& service) {
  for (const ServiceLoad& load : router.Loads())
    if (load.service == service) return true;
  return false;
}

TEST(HeadLinkTest, FollowsTheLeaderPastADeadHeadAndAStandbyAndMovesOnWhenItGoes) {
  RouterOptions router_options;
  router_options.port = 0;
  ServingRouter router(router_options);
  ASSERT_TRUE(router.Start().ok());

  uint16_t dead_port = 0;
  {
    FakeControlHead gone;
    dead_port = gone.port();
  }  // nothing listens there now
  FakeControlHead standby, leader;
  standby.StandBy("127.0.0.1:" + std::to_string(leader.port()));
  leader.Lead("first");

  HeadLinkOptions options;
  options.port = dead_port;
  options.more_heads = {{"127.0.0.1", standby.port()}, {"127.0.0.1", leader.port()}};
  options.token = "admin";
  options.report_interval = 50ms;
  options.initial_backoff = 10ms;
  options.max_backoff = 50ms;
  HeadLink link(options, router);
  link.Start();

  // Past the dead head (connection refused) to the standby, whose 503 names the leader.
  ASSERT_TRUE(WaitUntil([&] { return Knows(router, "first"); }));
  ASSERT_TRUE(WaitUntil([&] { return leader.reports() > 0; }));  // load goes to the leader too
  EXPECT_EQ(standby.reports(), 0);

  // The leader dies and the standby takes over: the link finds it (round the list).
  leader.Stop();
  standby.Lead("second");
  ASSERT_TRUE(WaitUntil([&] { return Knows(router, "second"); }));
  EXPECT_FALSE(Knows(router, "first"));  // the new leader's list replaced the view
  ASSERT_TRUE(WaitUntil([&] { return standby.reports() > 0; }));
  link.Stop();
  router.Stop();
}

TEST(HeadLinkTest, OneHeadIsRetriedInPlace) {
  RouterOptions router_options;
  router_options.port = 0;
  ServingRouter router(router_options);
  ASSERT_TRUE(router.Start().ok());
  FakeControlHead head;
  head.StandBy("127.0.0.1:1");  // no leader among its heads: it stays on the one it has
  HeadLinkOptions options;
  options.port = head.port();
  options.initial_backoff = 10ms;
  options.max_backoff = 20ms;
  HeadLink link(options, router);
  link.Start();
  ASSERT_TRUE(WaitUntil([&] { return head.lists() >= 3; }));  // refused, and tried again
  head.Lead("only");
  ASSERT_TRUE(WaitUntil([&] { return Knows(router, "only"); }));
  link.Stop();
  router.Stop();
}

}  // namespace
}  // namespace tessera::proxy
