#include "api/metrics.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "codec/resource_json.h"
#include "workload/train_job.h"

namespace tessera::api {
namespace {

using Json = nlohmann::json;

Json Job(int uid, const std::string& phase, Json status = Json::object()) {
  status["phase"] = phase;
  return {{"metadata",
           {{"name", "job-" + std::to_string(uid)}, {"uid", uid}, {"creationTimestampMs", 1000}}},
          {"status", status}};
}

Json Host(const std::string& name, const std::string& gen, int chips, const std::string& state,
          const std::string& job, Json usage = Json::object()) {
  return {
      {"metadata", {{"name", name}}},
      {"spec", {{"generation", gen}, {"chips", chips}}},
      {"status", {{"state", state}, {"job", job}, {"lastHeartbeatMs", 9000}, {"usage", usage}}}};
}

bool Has(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

TEST(HeadMetricsTest, AdmissionLatencyIsObservedOncePerAdmission) {
  FakeClock clock(10'000);
  HeadMetrics m(clock);
  m.OnChange("TrainJob", "ADDED", Job(1, "Pending", {{"pendingSinceMs", 1000}}));
  EXPECT_EQ(m.admission_latency().Read({}).count, 0u);
  Json admitted = Job(1, "Starting", {{"pendingSinceMs", 1000}, {"admittedTimeMs", 3500}});
  m.OnChange("TrainJob", "MODIFIED", admitted);
  m.OnChange("TrainJob", "MODIFIED", admitted);  // same admission: not counted again
  auto s = m.admission_latency().Read({});
  EXPECT_EQ(s.count, 1u);
  EXPECT_DOUBLE_EQ(s.sum, 2.5);
  // Requeued and admitted again: a second admission.
  m.OnChange("TrainJob", "MODIFIED",
             Job(1, "Starting", {{"pendingSinceMs", 8000}, {"admittedTimeMs", 8100}}));
  s = m.admission_latency().Read({});
  EXPECT_EQ(s.count, 2u);
  EXPECT_DOUBLE_EQ(s.sum, 2.6);
}

TEST(HeadMetricsTest, AdmissionFallsBackToStartTime) {
  FakeClock clock;
  HeadMetrics m(clock);
  m.OnChange("TrainJob", "MODIFIED", Job(2, "Starting", {{"startTimeMs", 1250}}));
  m.OnChange("TrainJob", "MODIFIED", Job(2, "Running", {{"startTimeMs", 1250}}));
  auto s = m.admission_latency().Read({});
  EXPECT_EQ(s.count, 1u);
  EXPECT_DOUBLE_EQ(s.sum, 0.25);
}

TEST(HeadMetricsTest, SeededJobsAreNotCountedAgain) {
  FakeClock clock;
  HeadMetrics m(clock);
  Json running = Job(3, "Running",
                     {{"startTimeMs", 5000},
                      {"attempts", {{{"attempt", 0}, {"recovery", {{"timeToRecoverMs", 4000}}}}}}});
  m.Seed(Json{{"items", {running}}});
  m.OnChange("TrainJob", "MODIFIED", running);  // e.g. a step report after a head restart
  EXPECT_EQ(m.admission_latency().Read({}).count, 0u);
  EXPECT_EQ(m.recovery_time().Read({}).count, 0u);
}

// The typed seed (what an elected head uses) marks what the JSON seed marks: the job's own
// JSON, fed after it, is observed by an unseeded HeadMetrics and not by a seeded one.
TEST(HeadMetricsTest, TheTypedSeedMarksWhatTheJsonOfTheSameJobsShows) {
  TrainJob job;
  job.uid = 7;
  job.spec.name = "recovered";
  job.created_ms = 1000;
  job.status.pending_since_ms = 1000;
  job.status.admitted_ms = 3000;
  AttemptRecord failed;
  failed.attempt = 0;
  failed.placed_ms = 3000;
  failed.end_reason = "WorkerFailed";
  failed.failure_ms = 5000;
  failed.detected_ms = 5200;
  AttemptRecord recovered;
  recovered.attempt = 1;
  recovered.placed_ms = 5500;
  recovered.first_step_ms = 9000;
  job.status.attempts = {failed, recovered};
  const Json doc = codec::TrainJobJson(job, 10'000);

  FakeClock clock;
  HeadMetrics unseeded(clock);
  unseeded.OnChange("TrainJob", "MODIFIED", doc);
  ASSERT_EQ(unseeded.admission_latency().Read({}).count, 1u);
  ASSERT_EQ(unseeded.recovery_time().Read({}).count, 1u);

  HeadMetrics seeded(clock);
  seeded.Seed(std::vector<TrainJob>{job});
  seeded.OnChange("TrainJob", "MODIFIED", doc);
  EXPECT_EQ(seeded.admission_latency().Read({}).count, 0u);
  EXPECT_EQ(seeded.recovery_time().Read({}).count, 0u);
  // A later recovery of the same job is new, and counted.
  AttemptRecord again = recovered;
  job.status.attempts[1].end_reason = "HostLost";
  job.status.attempts[1].failure_ms = 12'000;
  again.attempt = 2;
  again.placed_ms = 13'000;
  again.first_step_ms = 15'000;
  job.status.attempts.push_back(again);
  seeded.OnChange("TrainJob", "MODIFIED", codec::TrainJobJson(job, 16'000));
  EXPECT_EQ(seeded.recovery_time().Read({}).count, 1u);
}

// The seed one job at a time (SeedJob, what a new leader's walk over the controller's jobs
// calls) marks what the vector seed marks; a job with nothing counted yet (pending, never
// admitted) is not remembered, and its later admission is counted once.
TEST(HeadMetricsTest, SeedingJobByJobMarksWhatTheWholeSeedMarks) {
  TrainJob admitted;
  admitted.uid = 8;
  admitted.spec.name = "admitted";
  admitted.created_ms = 1000;
  admitted.status.pending_since_ms = 1000;
  admitted.status.admitted_ms = 3000;
  TrainJob pending;
  pending.uid = 9;
  pending.spec.name = "pending";
  pending.created_ms = 1000;
  pending.status.pending_since_ms = 1000;

  FakeClock clock;
  HeadMetrics whole(clock), by_job(clock);
  whole.Seed(std::vector<TrainJob>{admitted, pending});
  by_job.SeedJob(admitted);
  by_job.SeedJob(pending);
  for (HeadMetrics* m : {&whole, &by_job}) {
    m->OnChange("TrainJob", "MODIFIED", codec::TrainJobJson(admitted, 4000));
    m->OnChange("TrainJob", "MODIFIED", codec::TrainJobJson(pending, 4000));
    EXPECT_EQ(m->admission_latency().Read({}).count, 0u) << "seeded: nothing counted again";
  }
  pending.status.admitted_ms = 6000;  // admitted after the head started: counted, once
  for (HeadMetrics* m : {&whole, &by_job}) {
    m->OnChange("TrainJob", "MODIFIED", codec::TrainJobJson(pending, 7000));
    m->OnChange("TrainJob", "MODIFIED", codec::TrainJobJson(pending, 7100));
    const auto s = m->admission_latency().Read({});
    EXPECT_EQ(s.count, 1u);
    EXPECT_DOUBLE_EQ(s.sum, 5.0);
  }
}

TEST(HeadMetricsTest, RecoveryTimeIsObservedOncePerAttempt) {
  FakeClock clock;
  HeadMetrics m(clock);
  Json attempts = Json::array();
  attempts.push_back({{"attempt", 0}, {"endReason", "WorkerFailed"}});
  attempts.push_back({{"attempt", 1}, {"recovery", {{"timeToDetectMs", 500}}}});
  m.OnChange("TrainJob", "MODIFIED", Job(4, "Running", {{"attempts", attempts}}));
  EXPECT_EQ(m.recovery_time().Read({}).count, 0u);  // not recovered yet
  attempts[1]["recovery"]["timeToRecoverMs"] = 42'000;
  m.OnChange("TrainJob", "MODIFIED", Job(4, "Running", {{"attempts", attempts}}));
  m.OnChange("TrainJob", "MODIFIED", Job(4, "Running", {{"attempts", attempts}}));
  auto s = m.recovery_time().Read({});
  EXPECT_EQ(s.count, 1u);
  EXPECT_DOUBLE_EQ(s.sum, 42);
  // Deleted and recreated under the same uid would be a new job: nothing is remembered.
  m.OnChange("TrainJob", "DELETED", Job(4, "Running"));
  m.OnChange("TrainJob", "MODIFIED", Job(4, "Running", {{"attempts", attempts}}));
  EXPECT_EQ(m.recovery_time().Read({}).count, 2u);
}

TEST(HeadMetricsTest, ChipUtilizationPrefersTheDeviceFigure) {
  EXPECT_DOUBLE_EQ(ChipUtilization({{"cpuPercent", 50}}), 0.5);
  EXPECT_DOUBLE_EQ(ChipUtilization({{"cpuPercent", 230}}), 1.0);
  EXPECT_DOUBLE_EQ(ChipUtilization({{"cpuPercent", 230}, {"chipUtilizationPercent", 75}}), 0.75);
  EXPECT_DOUBLE_EQ(ChipUtilization(Json::object()), 0);
  EXPECT_DOUBLE_EQ(ChipUtilization(nullptr), 0);
}

TEST(HeadMetricsTest, RendersClusterStateFromTheLists) {
  FakeClock clock(10'000);
  HeadMetrics m(clock);
  m.OnChange("Event", "ADDED",
             {{"type", "Normal"}, {"reason", "Placed"}, {"object", "trainjob/a"}});
  m.OnChange("Event", "ADDED", {{"type", "Warning"}, {"reason", "HostLost"}, {"object", "host/h"}});
  HeadMetrics::Inputs in;
  in.hosts = {{"items",
               {Host("s0-w0", "v6e", 4, "Ready", "a", {{"cpuPercent", 80}, {"memoryBytes", 1024}}),
                Host("s0-w1", "v6e", 4, "Ready", "a"), Host("s1-w0", "v6e", 4, "Lost", ""),
                Host("c0-h00", "7x", 4, "Ready", "")}}};
  in.jobs = {
      {"items", {Job(1, "Running", {{"lastStep", 17}}), Job(2, "Pending"), Job(3, "Pending")}}};
  in.jobs["items"][2]["metadata"]["queue"] = "team-\"a\"";
  in.cluster_queues = {
      {"items",
       {{{"metadata", {{"name", "research"}}},
         {"status", {{"pendingWorkloads", 2}, {"admittedWorkloads", 1}, {"usedChips", 8}}}}}}};
  in.open_connections = 3;
  auto text = m.Render(in);
  ASSERT_TRUE(text.ok()) << text.status().message();
  const std::string& t = *text;
  EXPECT_TRUE(Has(t, "tessera_chips{generation=\"v6e\"} 12")) << t;
  EXPECT_TRUE(Has(t, "tessera_chips{generation=\"7x\"} 4"));
  EXPECT_TRUE(Has(t, "tessera_chips_allocated{generation=\"v6e\"} 8"));
  EXPECT_TRUE(Has(t, "tessera_chips_unhealthy{generation=\"v6e\"} 4"));
  EXPECT_TRUE(Has(t, "tessera_chips_unhealthy{generation=\"7x\"} 0"));
  EXPECT_TRUE(Has(t, "tessera_jobs{phase=\"Pending\"} 2"));
  EXPECT_TRUE(Has(t, "tessera_jobs{phase=\"Failed\"} 0"));
  EXPECT_TRUE(Has(t, "tessera_queue_pending_jobs{queue=\"default\"} 1"));
  EXPECT_TRUE(Has(t, "tessera_queue_pending_jobs{queue=\"team-\\\"a\\\"\"} 1"));
  EXPECT_TRUE(Has(t, "tessera_job_last_step{job=\"job-1\"} 17"));
  EXPECT_TRUE(Has(t, "tessera_clusterqueue_pending_workloads{clusterqueue=\"research\"} 2"));
  EXPECT_TRUE(Has(t, "tessera_clusterqueue_used_chips{clusterqueue=\"research\"} 8"));
  EXPECT_TRUE(Has(t, "tessera_host_heartbeat_age_seconds{host=\"s0-w0\"} 1"));
  EXPECT_TRUE(Has(t, "tessera_host_ready{host=\"s1-w0\",generation=\"v6e\"} 0"));
  EXPECT_TRUE(Has(t, "tessera_host_chip_utilization_ratio{host=\"s0-w0\",generation=\"v6e\"} 0.8"));
  EXPECT_TRUE(Has(t, "tessera_host_memory_bytes{host=\"s0-w0\",generation=\"v6e\"} 1024"));
  EXPECT_TRUE(Has(t, "tessera_admission_latency_seconds_bucket{le=\"+Inf\"} 0"));
  EXPECT_TRUE(
      Has(t, "tessera_events_total{object_kind=\"host\",reason=\"HostLost\",type=\"Warning\"} 1"));
  EXPECT_TRUE(Has(t, "tessera_http_open_connections 3"));
}

TEST(HeadMetricsTest, RendersEmptyListsAndMissingFields) {
  FakeClock clock;
  HeadMetrics m(clock);
  HeadMetrics::Inputs in;  // all null
  auto text = m.Render(in);
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_TRUE(Has(*text, "tessera_jobs{phase=\"Running\"} 0"));
  in.hosts = {{"items", {Json{{"metadata", {{"name", "odd"}}}}}}};
  EXPECT_TRUE(m.Render(in).ok());
}

// docs/observability.md promises every phase, 0 included. The list comes from the enum, so a
// phase added later is exported without touching metrics.cc.
TEST(HeadMetricsTest, EveryJobPhaseIsExportedIncludingRestarting) {
  FakeClock clock;
  HeadMetrics m(clock);
  HeadMetrics::Inputs in;
  in.jobs = {{"items", {Job(1, "Running")}}};  // no job restarting: its series is still there
  auto text = m.Render(in);
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_TRUE(Has(*text, "tessera_jobs{phase=\"Restarting\"} 0")) << *text;

  std::set<JobPhase> seen;
  for (JobPhase p : AllJobPhases()) {
    ASSERT_TRUE(ParseJobPhase(JobPhaseName(p)).ok());
    EXPECT_EQ(*ParseJobPhase(JobPhaseName(p)), p);
    seen.insert(p);
    const std::string want = p == JobPhase::kRunning ? "1" : "0";
    EXPECT_TRUE(Has(*text, "tessera_jobs{phase=\"" + std::string(JobPhaseName(p)) + "\"} " + want))
        << JobPhaseName(p);
  }
  for (JobPhase p :
       {JobPhase::kPending, JobPhase::kStarting, JobPhase::kRunning, JobPhase::kRestarting,
        JobPhase::kTerminating, JobPhase::kSucceeded, JobPhase::kFailed}) {
    EXPECT_TRUE(seen.count(p)) << JobPhaseName(p);
  }
  // One series per phase, and no other.
  size_t series = 0;
  for (size_t at = text->find("\ntessera_jobs{"); at != std::string::npos;
       at = text->find("\ntessera_jobs{", at + 1)) {
    ++series;
  }
  EXPECT_EQ(series, AllJobPhases().size());

  in.jobs = {{"items", {Job(1, "Restarting"), Job(2, "Restarting")}}};
  text = m.Render(in);
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_TRUE(Has(*text, "tessera_jobs{phase=\"Restarting\"} 2")) << *text;
}

}  // namespace
}  // namespace tessera::api
