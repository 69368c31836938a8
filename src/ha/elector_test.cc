// The elector against a real etcd: one leader at a time, a standby that names it, hand-over
// on Stop, stepping down when etcd stops answering, and the store fence on a deposed leader.
#include "ha/elector.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include "store/etcd_store.h"
#include "store/etcd_test_util.h"

namespace tessera::ha {
namespace {

using std::chrono::milliseconds;
using store::EtcdProcess;
using store::SharedEtcd;

// Polls `done` every 10 ms until it holds or `limit` passes (generous: the machine is busy).
bool WaitFor(const std::function<bool()>& done, milliseconds limit = milliseconds(20'000)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return done();
}

ElectorOptions Options(const store::EtcdEndpoint& endpoint, const std::string& prefix,
                       const std::string& identity) {
  ElectorOptions o;
  o.etcd.endpoints = {endpoint};
  o.etcd.request_timeout = milliseconds(400);
  o.etcd.connect_timeout = milliseconds(400);
  o.prefix = prefix;
  o.identity = identity;
  o.config = ElectionConfig{milliseconds(2'000), milliseconds(1'200), milliseconds(300)};
  return o;
}

TEST(Elector, OneLeaderAStandbyThatNamesItAndHandOverOnStop) {
  EtcdProcess* etcd = SharedEtcd::Get();
  if (etcd == nullptr) GTEST_SKIP() << "etcd is not installed here (see stderr)";
  const std::string prefix = SharedEtcd::UniquePrefix("elect");
  std::atomic<int64_t> a_term{0}, b_term{0};
  ElectorOptions ao = Options(etcd->endpoint(), prefix, "head-a:1");
  ao.on_elected = [&](int64_t t) { a_term = t; };
  Elector a(ao);
  ASSERT_TRUE(a.Start().ok());
  ASSERT_TRUE(WaitFor([&] { return a_term.load() != 0; }));

  ElectorOptions bo = Options(etcd->endpoint(), prefix, "head-b:2");
  bo.on_elected = [&](int64_t t) { b_term = t; };
  Elector b(bo);
  ASSERT_TRUE(b.Start().ok());
  ASSERT_TRUE(WaitFor([&] { return b.Snapshot().leader == "head-a:1"; }));
  EXPECT_EQ(b.Snapshot().role, Role::kCandidate);
  EXPECT_EQ(b.Snapshot().term, a_term.load());
  EXPECT_EQ(a.Snapshot().role, Role::kLeader);

  const auto stopped = std::chrono::steady_clock::now();
  a.Stop();  // revokes the lease
  ASSERT_TRUE(WaitFor([&] { return b_term.load() != 0; }));
  const auto took =
      std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - stopped);
  std::cout << "hand-over after Stop: " << took.count() << " ms (retry 300 ms)\n";
  EXPECT_GT(b_term.load(), a_term.load());
  EXPECT_EQ(b.Snapshot().leader, "head-b:2");
  EXPECT_EQ(b.Snapshot().role, Role::kLeader);
}

TEST(Elector, ALeaderStepsDownWhenEtcdStopsAnsweringBeforeItsLeaseEnds) {
  EtcdProcess etcd;  // its own: this test freezes it
  if (!etcd.Start()) GTEST_SKIP() << "*** etcd unavailable: " << etcd.error() << " ***";
  std::atomic<int64_t> term{0};
  std::atomic<bool> stepped{false};
  std::atomic<int64_t> stepped_at_ms{0};
  ElectorOptions o = Options(etcd.endpoint(), "/t/", "head-a:1");
  o.on_elected = [&](int64_t t) { term = t; };
  o.on_stepped_down = [&](const std::string&) {
    stepped_at_ms = std::chrono::duration_cast<milliseconds>(
                        std::chrono::steady_clock::now().time_since_epoch())
                        .count();
    stepped = true;
  };
  Elector a(o);
  ASSERT_TRUE(a.Start().ok());
  ASSERT_TRUE(WaitFor([&] { return term.load() != 0; }));
  const int64_t frozen_at =
      std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count();
  ASSERT_EQ(::kill(etcd.pid(), SIGSTOP), 0);
  const bool ok = WaitFor([&] { return stepped.load(); });
  ::kill(etcd.pid(), SIGCONT);
  ASSERT_TRUE(ok) << "the leader never stepped down";
  // It stepped down within the renew deadline of its last renewal (sent before the freeze),
  // so before the 2 s lease could have run out.
  const int64_t after = stepped_at_ms.load() - frozen_at;
  std::cout << "stepped down " << after << " ms after etcd froze (renew deadline 1200 ms)\n";
  EXPECT_LE(after, 1'200 + 400);  // + one request timeout in flight
  EXPECT_EQ(a.Snapshot().role, Role::kSteppedDown);
}

TEST(Elector, ADeposedLeaderIsFencedOutOfTheStore) {
  EtcdProcess* etcd = SharedEtcd::Get();
  if (etcd == nullptr) GTEST_SKIP() << "etcd is not installed here (see stderr)";
  const std::string prefix = SharedEtcd::UniquePrefix("fence");
  store::EtcdStoreOptions so;
  so.etcd.endpoints = {etcd->endpoint()};
  so.prefix = prefix;
  auto a_store = store::EtcdStore::Open(so);
  auto b_store = store::EtcdStore::Open(so);
  ASSERT_TRUE(a_store.ok() && b_store.ok());

  std::atomic<int64_t> a_term{0}, b_term{0};
  std::atomic<bool> a_stepped{false};
  ElectorOptions ao = Options(etcd->endpoint(), prefix, "a");
  ao.on_elected = [&](int64_t t) {
    (*a_store)->SetFence(prefix + "leader", t);
    a_term = t;
  };
  ao.on_stepped_down = [&](const std::string&) { a_stepped = true; };
  Elector a(ao);
  ASSERT_TRUE(a.Start().ok());
  ASSERT_TRUE(WaitFor([&] { return a_term.load() != 0; }));
  ASSERT_TRUE((*a_store)->Create("TrainJob", "j1", "by a").ok());

  ElectorOptions bo = Options(etcd->endpoint(), prefix, "b");
  bo.on_elected = [&](int64_t t) {
    (*b_store)->SetFence(prefix + "leader", t);
    b_term = t;
  };
  Elector b(bo);
  ASSERT_TRUE(b.Start().ok());
  // A's lease is revoked behind its back (as when etcd expires it during a pause of A).
  store::EtcdClient client(so.etcd);
  auto key = client.Range(prefix + "leader");
  ASSERT_TRUE(key.ok() && !key->kvs.empty());
  ASSERT_TRUE(client.LeaseRevoke(key->kvs[0].lease).ok());
  ASSERT_TRUE(WaitFor([&] { return b_term.load() != 0; }));
  // Whatever A believes, its write is refused; B's goes through.
  auto zombie = (*a_store)->Create("TrainJob", "j2", "by a, deposed");
  EXPECT_EQ(zombie.status().code(), StatusCode::kUnavailable) << zombie.status().ToString();
  ASSERT_TRUE((*b_store)->Create("TrainJob", "j2", "by b").ok());
  EXPECT_EQ((*b_store)->Get("TrainJob", "j2")->body, "by b");
  ASSERT_TRUE(WaitFor([&] { return a_stepped.load(); }));
}

}  // namespace
}  // namespace tessera::ha
