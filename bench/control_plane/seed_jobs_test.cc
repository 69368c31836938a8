// The seeded store is one a head loads: every job with its own name and uid, in the phase it was
// seeded in, the events with it, and the next job created gets a uid past the seeded ones.
#include "control_plane/seed_jobs.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "codec/resource_json.h"
#include "common/clock.h"
#include "controller/controller.h"
#include "store/memory_store.h"

namespace tessera::bench {
namespace {

using Json = nlohmann::json;

TEST(SeedJobsTest, SeededStoreLoadsIntoAController) {
  auto store = store::MemoryStore::Open();
  ASSERT_TRUE(store.ok());
  SeedOptions o;
  o.jobs = 40;
  o.pending = 10;
  o.batch_bytes = 8 * 1024;  // several batches
  o.max_events = 25;
  auto report = SeedJobs(**store, o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->jobs, 40);
  EXPECT_EQ(report->pending, 10);
  EXPECT_EQ(report->succeeded, 30);
  EXPECT_EQ(report->events, 25);
  EXPECT_GT(report->commits, 2);
  EXPECT_EQ(report->next_uid, 41u);

  FakeClock clock;
  controller::Controller c(**store, clock, controller::ControllerOptions{});
  ASSERT_TRUE(c.Load().ok());
  ASSERT_TRUE(c.Tick().ok());
  std::set<uint64_t> uids;
  int pending = 0, succeeded = 0;
  for (int i = 1; i <= 40; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "seed-%08d", i);
    auto job = c.GetJob(name);
    ASSERT_TRUE(job.ok()) << name << ": " << job.status().ToString();
    EXPECT_EQ((*job)["metadata"]["name"], name);
    uids.insert((*job)["metadata"]["uid"].get<uint64_t>());
    const std::string phase = (*job)["status"].value("phase", "");
    pending += phase == "Pending";
    succeeded += phase == "Succeeded";
    EXPECT_EQ(job->dump().find("zzseed"), std::string::npos) << job->dump();
  }
  EXPECT_EQ(uids.size(), 40u);
  EXPECT_EQ(*uids.rbegin(), 40u);
  EXPECT_EQ(pending, 10);
  EXPECT_EQ(succeeded, 30);

  auto events = (*store)->List(codec::kEventKind);
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(events->size(), 25u);
  for (const auto& e : *events) EXPECT_EQ(e.body.find("zzseed"), std::string::npos) << e.body;

  Json job = {{"apiVersion", "tessera/v1"},
              {"kind", "TrainJob"},
              {"metadata", {{"name", "after-seed"}}},
              {"spec",
               {{"accelerator", "v6e"},
                {"topology", "4x4"},
                {"slices", 1},
                {"template", {{"command", {"true"}}}}}}};
  auto created = c.CreateJob(job);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ((*created)["metadata"]["uid"].get<uint64_t>(), 41u);
}

TEST(SeedJobsTest, RefusesMorePendingThanJobs) {
  auto store = store::MemoryStore::Open();
  ASSERT_TRUE(store.ok());
  SeedOptions o;
  o.jobs = 5;
  o.pending = 6;
  auto report = SeedJobs(**store, o);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find("--pending"), std::string::npos);
}

}  // namespace
}  // namespace tessera::bench
