// The controller over a real etcd (store/etcd_test_util.h: one member with etcd's default
// --max-request-bytes of 1.5 MiB; skips loudly when etcd is not installed):
//   - a registration batch of 1,000 hosts (the head's RegistrationBatcher's largest) is one
//     commit that etcd accepts;
//   - a new leader loads from its warm copy of the store (EtcdStore::Follow) through
//     Store::Visit, taking the jobs a standby decoded, and ends with what the old leader had.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "codec/resource_json.h"
#include "controller/controller_test_util.h"
#include "store/etcd_store.h"
#include "store/etcd_test_util.h"

namespace tessera::controller {
namespace {

std::unique_ptr<store::EtcdStore> OpenEtcdStore(const std::string& prefix) {
  store::EtcdProcess* etcd = store::SharedEtcd::Get();
  if (etcd == nullptr) return nullptr;
  store::EtcdStoreOptions options;
  options.etcd.endpoints = {etcd->endpoint()};
  options.prefix = prefix;
  auto opened = store::EtcdStore::Open(options);
  EXPECT_TRUE(opened.ok()) << opened.status().ToString();
  return opened.ok() ? std::move(opened).value() : nullptr;
}

// The registration of worker w of the v6e 4x4 slice s with a long address and host name, as a
// fleet's FQDNs are: the batch's bytes, not only its count, are what etcd caps.
protocol::Registration FleetRegistration(int s, int w) {
  Json doc = SliceHostDoc(s, w);
  doc["name"] = "tpu-node-" + std::to_string(s) + "-" + std::to_string(w) +
                ".pool-a.europe-west4-a.c.example-project.internal";
  doc["address"] = "10.128." + std::to_string(s % 250) + "." + std::to_string(10 + w);
  doc["credential"] = CredentialOf(doc["name"].get<std::string>());
  auto r = protocol::ParseRegistration(doc.dump());
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : protocol::Registration{};
}

TEST(ControllerEtcdTest, ABatchOfAThousandRegistrationsIsAcceptedByEtcdsDefaultRequestLimit) {
  auto store = OpenEtcdStore(store::SharedEtcd::UniquePrefix("register1000"));
  if (store == nullptr) GTEST_SKIP() << "etcd is not installed here (see stderr)";
  FakeClock clock;
  Controller c(*store, clock, ControllerOptions{});
  ASSERT_TRUE(c.Load().ok());
  std::vector<protocol::Registration> batch;
  for (int s = 0; s < 250; ++s)
    for (int w = 0; w < 4; ++w) batch.push_back(FleetRegistration(s, w));
  const auto answers = c.RegisterHosts(batch);
  ASSERT_EQ(answers.size(), 1000u);
  size_t refused = 0;
  std::string first_error;
  for (const auto& a : answers)
    if (!a.ok() && refused++ == 0) first_error = a.status().ToString();
  EXPECT_EQ(refused, 0u) << "first refusal: " << first_error;
  auto stored = store->List(codec::kHostKind);
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_EQ(stored->size(), 1000u);
  EXPECT_EQ(c.ListHosts()["items"].size(), 1000u);
}

TEST(ControllerEtcdTest, ANewLeaderLoadsTheStandbysCopyInPlaceAndTakesItsDecodedJobs) {
  const std::string prefix = store::SharedEtcd::UniquePrefix("takeover");
  auto leader_store = OpenEtcdStore(prefix);
  if (leader_store == nullptr) GTEST_SKIP() << "etcd is not installed here (see stderr)";
  auto standby_store = OpenEtcdStore(prefix);
  ASSERT_NE(standby_store, nullptr);
  FakeClock clock;
  Json before;
  {
    Controller leader(*leader_store, clock, ControllerOptions{});
    ASSERT_TRUE(leader.Load().ok());
    Ok(leader.CreateJob(JobDoc("never", 1, "8x8")));  // before the hosts, which would refuse it
    for (int w = 0; w < 4; ++w) Ok(Register(leader, SliceHostDoc(0, w)));
    Ok(leader.CreateJob(JobDoc("runs", 1)));
    Ok(leader.CreateJob(JobDoc("waits", 1)));
    ASSERT_TRUE(leader.RunPass().ok());
    before = leader.ListJobs();
  }
  // The standby's copy, and its decoded jobs (what ha/job_cache.h keeps), but one: "waits" is
  // left to be parsed, as a document written after the cache last looked would be.
  ASSERT_TRUE(standby_store->Follow().ok());
  std::map<std::string, std::pair<int64_t, TrainJob>> decoded;
  ASSERT_TRUE(standby_store
                  ->Visit(codec::kTrainJobKind,
                          [&](const store::Object& obj) {
                            if (obj.name == "waits") return;
                            auto job = codec::TrainJobFromJson(Json::parse(obj.body));
                            ASSERT_TRUE(job.ok()) << job.status().ToString();
                            decoded.emplace(obj.name, std::pair{obj.resource_version, *job});
                          })
                  .ok());
  ASSERT_EQ(decoded.size(), 2u);
  std::vector<std::string> taken, asked;
  ControllerOptions options;
  options.decoded_job = [&](const store::Object& obj) -> std::optional<TrainJob> {
    asked.push_back(obj.name);
    auto it = decoded.find(obj.name);
    if (it == decoded.end() || it->second.first != obj.resource_version) return std::nullopt;
    taken.push_back(obj.name);
    return it->second.second;
  };
  options.term = 2;
  Controller elected(*standby_store, clock, options);
  ASSERT_TRUE(elected.Load().ok());
  EXPECT_EQ(asked, (std::vector<std::string>{"never", "runs", "waits"})) << "by name";
  EXPECT_EQ(taken, (std::vector<std::string>{"never", "runs"}));
  EXPECT_TRUE(elected.CheckJobIndex(/*exact=*/true).ok());
  const Json after = elected.ListJobs();
  ASSERT_EQ(after["items"].size(), before["items"].size());
  for (size_t i = 0; i < after["items"].size(); ++i) {
    Json a = after["items"][i], b = before["items"][i];
    EXPECT_EQ(a["metadata"], b["metadata"]);
    EXPECT_EQ(a["spec"], b["spec"]);
    EXPECT_EQ(a["status"]["phase"], b["status"]["phase"]) << a["metadata"]["name"];
    EXPECT_EQ(a["status"]["reason"], b["status"]["reason"]) << a["metadata"]["name"];
  }
}

}  // namespace
}  // namespace tessera::controller
