#include "admission/model.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

ClusterQueueSpec Valid() {
  ClusterQueueSpec q;
  q.name = "research";
  q.cohort = "all";
  q.quotas = {{Generation::k7x, 256, 64, 128, std::nullopt}};
  return q;
}

TEST(AdmissionModel, ValidClusterQueuePasses) { EXPECT_TRUE(Validate(Valid()).ok()); }

TEST(AdmissionModel, ClusterQueueErrorsNameTheField) {
  auto expect = [](ClusterQueueSpec q, const std::string& field) {
    Status st = Validate(q);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find(field), std::string::npos) << st.message();
  };
  ClusterQueueSpec q = Valid();
  q.name = "Research";
  expect(q, "name");
  q = Valid();
  q.quotas[0].nominal_chips = -1;
  expect(q, "quotas[0].nominalQuota");
  q = Valid();
  q.quotas[0].lending_limit_chips = 300;
  expect(q, "quotas[0].lendingLimit");
  q = Valid();
  q.cohort.clear();
  expect(q, "quotas[0].borrowingLimit");
  q = Valid();
  q.quotas.push_back(q.quotas[0]);
  expect(q, "quotas[1].generation");
  q = Valid();
  q.fair_sharing_weight = 0;
  expect(q, "fairSharing.weight");
  q = Valid();
  q.preemption.borrow_within_cohort.max_priority_threshold = 5;
  expect(q, "maxPriorityThreshold");
}

TEST(AdmissionModel, LocalQueuePriorityClassAndWorkload) {
  EXPECT_TRUE(Validate(LocalQueueSpec{"team-a", "research"}).ok());
  EXPECT_NE(Validate(LocalQueueSpec{"team-a", ""}).message().find("clusterQueue"),
            std::string::npos);
  EXPECT_TRUE(Validate(PriorityClass{"high", 1000}).ok());
  EXPECT_NE(Validate(PriorityClass{"high", 2'000'000'000}).message().find("value"),
            std::string::npos);
  Workload w;
  w.id = WorkloadId(1);
  w.name = "llama";
  w.local_queue = "team-a";
  w.request = {Generation::k7x, Shape::Of(4, 4, 4), 1};
  EXPECT_TRUE(Validate(w).ok());
  w.request.shape = Shape::Of(3, 3, 3);
  EXPECT_NE(Validate(w).message().find("topology"), std::string::npos);
  w.request.shape = Shape::Of(4, 4, 4);
  w.request.num_slices = 0;
  EXPECT_NE(Validate(w).message().find("slices"), std::string::npos);
}

// A caller that knows the queue key or the shape passed leaves out only that check.
TEST(AdmissionModel, KnownValidLeavesOutOnlyTheChecksItNames) {
  Workload w;
  w.id = WorkloadId(1);
  w.name = "llama";
  w.local_queue = "Not_A_Name";
  w.request = {Generation::k7x, Shape::Of(3, 3, 3), 1};
  EXPECT_NE(Validate(w).message().find("queue"), std::string::npos);
  EXPECT_NE(Validate(w, {.queue = true}).message().find("topology"), std::string::npos);
  EXPECT_NE(Validate(w, {.shape = true}).message().find("queue"), std::string::npos);
  EXPECT_TRUE(Validate(w, {.queue = true, .shape = true}).ok());
  w.request.num_slices = 0;
  EXPECT_NE(Validate(w, {.queue = true, .shape = true}).message().find("slices"),
            std::string::npos);
  w.request.num_slices = 1;
  w.name.clear();
  EXPECT_NE(Validate(w, {.queue = true, .shape = true}).message().find("name"), std::string::npos);
}

TEST(AdmissionModel, ResolvePriority) {
  std::vector<PriorityClass> classes = {{"low", 10}, {"high", 1000}};
  EXPECT_EQ(*ResolvePriority(classes, "high"), 1000);
  auto missing = ResolvePriority(classes, "urgent");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("low, high"), std::string::npos);
}

}  // namespace
}  // namespace tessera
