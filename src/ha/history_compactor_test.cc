// The leader's compactor of etcd's history against a real etcd: it compacts one interval
// behind, and a store that cannot compact is logged.
#include "ha/history_compactor.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "store/etcd_store.h"
#include "store/etcd_test_util.h"

namespace tessera::ha {
namespace {

using std::chrono::milliseconds;
using store::EtcdProcess;
using store::SharedEtcd;

// Polls `done` every 10 ms until it holds or `limit` passes (generous: the machine is busy).
bool CompactorWaitFor(const std::function<bool()>& done,
                      milliseconds limit = milliseconds(30'000)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return done();
}

std::unique_ptr<store::EtcdStore> OpenStore(EtcdProcess& etcd, const std::string& prefix) {
  store::EtcdStoreOptions o;
  o.etcd.endpoints = {etcd.endpoint()};
  o.prefix = prefix;
  auto opened = store::EtcdStore::Open(o);
  EXPECT_TRUE(opened.ok()) << opened.status().ToString();
  return opened.ok() ? std::move(opened).value() : nullptr;
}

TEST(HistoryCompactor, CompactsEtcdsHistoryEveryIntervalWhileTheStoreReadsTheSame) {
  EtcdProcess* etcd = SharedEtcd::Get();
  if (etcd == nullptr) GTEST_SKIP() << "etcd is not installed here (see stderr)";
  auto s = OpenStore(*etcd, SharedEtcd::UniquePrefix("compact"));
  ASSERT_NE(s, nullptr);
  auto written = s->Create("TrainJob", "j", "step 0");
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  const std::string key = s->prefix() + "o/TrainJob/j";
  const int64_t first = s->client().Range(key)->kvs.at(0).mod_revision;  // "step 0"
  std::vector<std::string> logged;
  std::mutex logged_mu;
  HistoryCompactor compactor(*s, milliseconds(50), [&](const std::string& line) {
    std::lock_guard lock(logged_mu);
    logged.push_back(line);
  });
  compactor.Start();
  // The job keeps stepping, as running jobs do, until etcd is compacted past its first step.
  int64_t version = written->resource_version;
  int steps = 0;
  ASSERT_TRUE(CompactorWaitFor([&] {
    auto updated = s->Update("TrainJob", "j", "step " + std::to_string(++steps), version);
    EXPECT_TRUE(updated.ok()) << updated.status().ToString();
    if (updated.ok()) version = updated->resource_version;
    return compactor.compacted() > first;
  })) << "compacted up to "
      << compactor.compacted() << ", not past " << first;
  auto gone = s->client().Range(key, {}, 0, first);
  ASSERT_FALSE(gone.ok()) << "etcd still holds revision " << first << " (step 0)";
  EXPECT_NE(gone.status().message().find("compacted"), std::string::npos)
      << gone.status().ToString();
  auto got = s->Get("TrainJob", "j");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->resource_version, version);
  std::lock_guard lock(logged_mu);
  EXPECT_TRUE(logged.empty()) << logged.front();
}

TEST(HistoryCompactor, AStoreThatCannotCompactIsLoggedAndStoppingDoesNotWaitOutTheInterval) {
  EtcdProcess* etcd = SharedEtcd::Get();
  if (etcd == nullptr) GTEST_SKIP() << "etcd is not installed here (see stderr)";
  auto s = OpenStore(*etcd, SharedEtcd::UniquePrefix("compact"));
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->Close().ok());
  std::vector<std::string> logged;
  std::mutex logged_mu;
  {
    // An hour between calls: the destructor must wake the thread, not wait for the next one.
    HistoryCompactor compactor(*s, std::chrono::hours(1), [&](const std::string& line) {
      std::lock_guard lock(logged_mu);
      logged.push_back(line);
    });
    compactor.Start();
    ASSERT_TRUE(CompactorWaitFor([&] {
      std::lock_guard lock(logged_mu);
      return !logged.empty();
    }));
  }
  ASSERT_EQ(logged.size(), 1u);
  EXPECT_NE(logged[0].find("closed"), std::string::npos) << logged[0];
  EXPECT_NE(logged[0].find("retrying every 3600000 ms"), std::string::npos) << logged[0];
}

}  // namespace
}  // namespace tessera::ha
