// HeadMetrics: what the head's GET /metrics says, in the Prometheus text format.
//
// Two kinds of figures (docs/observability.md lists every metric):
//   - Kept: histograms of admission latency and time to recover, and a counter of events by
//     reason. They are fed by OnChange, which the head calls from the controller's change
//     listener next to the watch hub. Each admission and each recovery is observed once: a job
//     is remembered by uid with the admission time and the attempts already counted, and Seed()
//     marks what a restarted head finds in the store as already counted.
//   - Computed per scrape from the controller's lists (jobs, hosts, ClusterQueues): chips total,
//     allocated and unhealthy per generation, jobs by phase, pending workloads per queue,
//     heartbeat age per host, and the chip utilization and memory workers report.
//
// Chip utilization: a host's status.usage may carry "chipUtilizationPercent" (a device that
// knows its duty cycle); otherwise it is derived from the CPU its workers use, as emulated
// hosts have no device: min(100, cpuPercent) percent, i.e. one busy core drives the host's
// chips at 100%. The dashboard uses the same rule (web/model.js).
//
// Ownership: the head owns one HeadMetrics. Thread-safety: every method is safe from any
// thread; OnChange is cheap and never calls the controller (it runs under the controller's
// lock).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>

#include "common/clock.h"
#include "common/metrics.h"
#include "common/status.h"
#include "workload/train_job.h"

namespace tessera::api {

class HeadMetrics {
 public:
  explicit HeadMetrics(const Clock& clock);

  // Marks the admissions and recoveries of `jobs` (a ListJobs() answer) as already observed.
  void Seed(const nlohmann::json& jobs);
  // The same from the typed jobs (Controller::CopyJobs): what a newly elected head does, as
  // building the JSON of every job would delay its start (a third of it with 1,000 jobs).
  void Seed(const std::vector<TrainJob>& jobs);
  // The same for one job, as a walk over the controller's jobs calls it (Controller::VisitJobs:
  // a new leader seeds from 100,000 jobs without copying them). A job with no admission and no
  // recovery to mark leaves nothing behind.
  void SeedJob(const TrainJob& job);

  // The controller's change listener: kind "TrainJob", "Host", "Event", ...; type ADDED,
  // MODIFIED or DELETED.
  void OnChange(const std::string& kind, const std::string& type, const nlohmann::json& object);

  struct Inputs {
    nlohmann::json jobs;            // ListJobs()
    nlohmann::json hosts;           // ListHosts()
    nlohmann::json cluster_queues;  // ListClusterQueues()
    double open_connections = 0;    // the HTTP server's
    // The head store's object writes per kind and its commits (store/counting_store.h).
    std::map<std::string, uint64_t> store_writes_by_kind;
    uint64_t store_commits = 0;
  };
  // The whole exposition. Internal only if a metric is malformed (a bug, never input).
  Result<std::string> Render(const Inputs& inputs) const;

  // For tests.
  const metrics::HistogramFamily& admission_latency() const { return admission_latency_; }
  const metrics::HistogramFamily& recovery_time() const { return recovery_time_; }

 private:
  struct Seen {
    int64_t admitted_ms = 0;      // status.admittedTimeMs (or startTimeMs) last counted
    std::set<int64_t> recovered;  // attempts whose recovery was counted
  };
  // Records what the job's status shows; observes figures not seen before when `observe`.
  void Track(const nlohmann::json& job, bool observe);

  const Clock& clock_;
  metrics::HistogramFamily admission_latency_;
  metrics::HistogramFamily recovery_time_;
  metrics::CounterFamily events_;
  mutable std::mutex mu_;
  std::map<std::string, Seen> seen_;  // by job uid
};

// Chip utilization of one host, 0..1, from its status.usage (see the header comment).
double ChipUtilization(const nlohmann::json& usage);

}  // namespace tessera::api
