// JobCache against a real etcd (store/etcd_test_util.h; skips loudly when none is installed): a
// standby decodes only the jobs written since it last looked, and hands a job out only for the
// exact document it was decoded from.
#include "ha/job_cache.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "store/etcd_test_util.h"

namespace tessera::ha {
namespace {

std::string JobBody(const std::string& name, uint64_t uid, const std::string& reason) {
  return nlohmann::json{{"apiVersion", "tessera/v1"},
                        {"kind", "TrainJob"},
                        {"metadata", {{"name", name}, {"uid", uid}}},
                        {"spec",
                         {{"accelerator", "v6e"},
                          {"topology", "4x4"},
                          {"slices", 1},
                          {"template", {{"command", {"python3", "train.py"}}}}}},
                        {"status", {{"phase", "Pending"}, {"reason", reason}}}}
      .dump();
}

TEST(JobCacheTest, DecodesOnlyWhatChangedAndHandsOutOnlyTheExactVersion) {
  store::EtcdProcess* etcd = store::SharedEtcd::Get();
  if (etcd == nullptr) GTEST_SKIP() << "etcd is not installed here (see stderr)";
  store::EtcdStoreOptions options;
  options.etcd.endpoints = {etcd->endpoint()};
  options.prefix = store::SharedEtcd::UniquePrefix("jobcache");
  auto writer = store::EtcdStore::Open(options);
  auto standby = store::EtcdStore::Open(options);
  ASSERT_TRUE(writer.ok() && standby.ok());
  ASSERT_TRUE((*writer)->Create("TrainJob", "a", JobBody("a", 1, "Queued")).ok());
  ASSERT_TRUE((*writer)->Create("TrainJob", "b", JobBody("b", 2, "Queued")).ok());
  ASSERT_TRUE((*writer)->Create("TrainJob", "broken", "{not json").ok());
  ASSERT_TRUE((*writer)->Create("Host", "h", "{}").ok());

  JobCache cache;
  EXPECT_EQ(cache.Refresh(**standby), 0u) << "no copy yet: nothing to decode";
  ASSERT_TRUE((*standby)->Follow().ok());
  EXPECT_EQ(cache.Refresh(**standby), 2u) << "a and b; broken is left to the controller";
  EXPECT_EQ(cache.Refresh(**standby), 0u) << "nothing changed since";

  store::WriteBatch batch;
  batch.Update("TrainJob", "b", JobBody("b", 2, "NoFreeSlice"),
               (*writer)->Get("TrainJob", "b")->resource_version);
  ASSERT_TRUE((*writer)->Commit(batch).ok());
  ASSERT_TRUE((*standby)->Follow().ok());
  EXPECT_EQ(cache.Refresh(**standby), 1u) << "only b changed";

  auto a = (*standby)->Get("TrainJob", "a");
  auto b = (*standby)->Get("TrainJob", "b");
  ASSERT_TRUE(a.ok() && b.ok());
  store::Object older_a = *a;
  older_a.resource_version -= 1;
  EXPECT_FALSE(cache.Take(older_a).has_value()) << "another version of a is not this job";
  auto took_b = cache.Take(*b);
  ASSERT_TRUE(took_b.has_value());
  EXPECT_EQ(took_b->status.reason, "NoFreeSlice");
  EXPECT_EQ(took_b->uid, 2u);
  EXPECT_FALSE(cache.Take(*b).has_value()) << "handed out once";
  auto took_a = cache.Take(*a);
  ASSERT_TRUE(took_a.has_value());
  EXPECT_EQ(took_a->spec.name, "a");
  EXPECT_EQ(cache.size(), 0u);
}

}  // namespace
}  // namespace tessera::ha
