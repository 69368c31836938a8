#include "cli/queue_describe.h"

#include <gtest/gtest.h>

namespace tessera::cli {
namespace {

using Json = nlohmann::json;

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// What GET /api/v1/clusterqueues lists for a queue alone in its cohort with a
// borrowWithinCohort under fair sharing (the controller's QueueObjectJson).
TEST(DescribeClusterQueue, ShowsUsageCountsAndEveryIneffectiveSettingWithItsReason) {
  const Json q = Json::parse(R"({
    "kind": "ClusterQueue",
    "metadata": {"name": "team-a", "resourceVersion": 7},
    "spec": {"cohort": "lab", "queueingStrategy": "StrictFIFO",
             "quotas": [{"generation": "v6e", "nominalQuota": 64, "borrowingLimit": 32}],
             "preemption": {"withinClusterQueue": "LowerPriority",
                            "borrowWithinCohort": {"policy": "LowerPriority",
                                                   "maxPriorityThreshold": 2}}},
    "status": {"nominalChips": 64, "usedChips": 80, "borrowedChips": 16, "lendableChips": 64,
               "pendingWorkloads": 3, "admittedWorkloads": 5, "share": 0.25,
               "warnings": [
                 {"field": "spec.cohort", "message": "no other ClusterQueue is in cohort lab"},
                 {"field": "spec.preemption.borrowWithinCohort",
                  "message": "ignored: the head runs with fair sharing"}]}})");
  const std::string d = DescribeClusterQueue(q);
  EXPECT_TRUE(Has(d, "Name:        team-a\n")) << d;
  EXPECT_TRUE(Has(d, "Cohort:      lab\n")) << d;
  EXPECT_TRUE(Has(d, "Strategy:    StrictFIFO\n")) << d;
  EXPECT_TRUE(Has(d, "  v6e         64        32               -\n")) << d;
  EXPECT_TRUE(Has(d,
                  "withinClusterQueue LowerPriority, reclaimWithinCohort Never, "
                  "borrowWithinCohort LowerPriority (maxPriorityThreshold 2)"))
      << d;
  EXPECT_TRUE(Has(d,
                  "80 of 64 nominal chips used, 16 borrowed, 64 lendable to the cohort, "
                  "share 0.250"))
      << d;
  EXPECT_TRUE(Has(d, "Workloads:   3 pending, 5 admitted\n")) << d;
  EXPECT_TRUE(Has(d,
                  "Warnings (settings that cannot take effect):\n"
                  "  spec.cohort: no other ClusterQueue is in cohort lab\n"
                  "  spec.preemption.borrowWithinCohort: ignored: the head runs with fair "
                  "sharing\n"))
      << d;
}

TEST(DescribeClusterQueue, DefaultsForLeftOutFieldsAndNoWarnings) {
  const Json q = Json::parse(R"({
    "metadata": {"name": "solo"},
    "spec": {"quotas": [{"generation": "v5p", "nominalQuota": 8}]},
    "status": {"nominalChips": 8, "usedChips": 0, "warnings": []}})");
  const std::string d = DescribeClusterQueue(q);
  EXPECT_TRUE(Has(d, "Cohort:      (none)\n")) << d;
  EXPECT_TRUE(Has(d, "Strategy:    BestEffortFIFO\n")) << d;
  EXPECT_TRUE(Has(d,
                  "withinClusterQueue Never, reclaimWithinCohort Never, "
                  "borrowWithinCohort Never\n"))
      << d;
  EXPECT_TRUE(Has(d, "Workloads:   0 pending, 0 admitted\n")) << d;
  EXPECT_TRUE(Has(d, "Warnings:    none (every setting takes effect)\n")) << d;
  EXPECT_FALSE(Has(d, "Fair share")) << d;
}

TEST(DescribeClusterQueue, AQueueWithoutQuotasOrStatusStillRenders) {
  const std::string d = DescribeClusterQueue(Json::parse(R"({"metadata": {"name": "x"}})"));
  EXPECT_TRUE(Has(d, "(none: the queue admits nothing)")) << d;
  EXPECT_TRUE(Has(d, "0 of 0 nominal chips used")) << d;
}

}  // namespace
}  // namespace tessera::cli
