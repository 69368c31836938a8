#include "api/metrics.h"

#include <algorithm>
#include <vector>

#include "workload/recovery.h"
#include "workload/train_job.h"

namespace tessera::api {
namespace {

using Json = nlohmann::json;
using metrics::ExpositionWriter;
using metrics::Labels;
using metrics::MetricType;

// Seconds: admissions take from well under a second (an idle cluster) to hours (a full queue).
const std::vector<double> kAdmissionBuckets = {0.05, 0.1, 0.25, 0.5, 1,   2.5,  5,    10,
                                               30,   60,  120,  300, 600, 1800, 3600, 14400};
// Seconds from a failure to the next completed step.
const std::vector<double> kRecoveryBuckets = {1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600};

int64_t Int(const Json& j, const char* key) {
  if (!j.is_object()) return 0;
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return 0;
  return it->get<int64_t>();
}

std::string Str(const Json& j, const char* key, const std::string& fallback = "") {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return fallback;
  return it->get<std::string>();
}

const Json& Field(const Json& j, const char* key) {
  static const Json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

const Json& Items(const Json& list) {
  static const Json kEmpty = Json::array();
  const Json& items = Field(list, "items");
  return items.is_array() ? items : kEmpty;
}

std::string JobKey(const Json& job) {
  const Json& meta = Field(job, "metadata");
  const Json& uid = Field(meta, "uid");
  if (uid.is_number()) return "uid:" + uid.dump();
  return "name:" + Str(meta, "name");
}

}  // namespace

double ChipUtilization(const Json& usage) {
  const Json& chip = Field(usage, "chipUtilizationPercent");
  double percent = 0;
  if (chip.is_number()) {
    percent = chip.get<double>();
  } else if (const Json& cpu = Field(usage, "cpuPercent"); cpu.is_number()) {
    percent = cpu.get<double>();
  }
  return std::clamp(percent, 0.0, 100.0) / 100.0;
}

HeadMetrics::HeadMetrics(const Clock& clock)
    : clock_(clock),
      admission_latency_("tessera_admission_latency_seconds",
                         "Time from a job becoming pending to its admission (placement).", {},
                         kAdmissionBuckets),
      recovery_time_("tessera_recovery_time_seconds",
                     "Time from a worker or host failure to the next completed training step.", {},
                     kRecoveryBuckets),
      events_("tessera_events_total", "Events recorded since the head started, by reason.",
              {"object_kind", "reason", "type"}) {}

void HeadMetrics::Seed(const Json& jobs) {
  for (const Json& job : Items(jobs)) Track(job, /*observe=*/false);
}

void HeadMetrics::Seed(const std::vector<TrainJob>& jobs) {
  for (const TrainJob& job : jobs) SeedJob(job);
}

void HeadMetrics::SeedJob(const TrainJob& job) {
  // As Track reads them from TrainJobJson: the key, admittedTimeMs, and each attempt after the
  // first that has recovery figures.
  std::vector<int64_t> recovered;
  const auto& attempts = job.status.attempts;
  for (size_t i = 1; i < attempts.size(); ++i) {
    auto f = ComputeRecoveryFigures(attempts[i - 1], attempts[i]);
    if (f && f->time_to_recover_ms >= 0) recovered.push_back(attempts[i].attempt);
  }
  if (job.status.admitted_ms <= 0 && recovered.empty()) return;  // nothing counted yet
  std::lock_guard lock(mu_);
  Seen& seen = seen_["uid:" + std::to_string(job.uid)];
  if (job.status.admitted_ms > 0) seen.admitted_ms = job.status.admitted_ms;
  seen.recovered.insert(recovered.begin(), recovered.end());
}

void HeadMetrics::Track(const Json& job, bool observe) {
  const Json& meta = Field(job, "metadata");
  const Json& st = Field(job, "status");
  const std::string key = JobKey(job);
  std::lock_guard lock(mu_);
  Seen& seen = seen_[key];

  // Admission latency: status.admittedTimeMs - status.pendingSinceMs when the controller gives
  // them; before it did, startTimeMs - creationTimestampMs.
  int64_t admitted = 0, since = 0;
  if (Field(st, "admittedTimeMs").is_number()) {
    admitted = Int(st, "admittedTimeMs");
    since = Int(st, "pendingSinceMs");
    if (since <= 0) since = Int(meta, "creationTimestampMs");
  } else {
    admitted = Int(st, "startTimeMs");
    since = Int(meta, "creationTimestampMs");
  }
  if (admitted > 0 && admitted != seen.admitted_ms) {
    seen.admitted_ms = admitted;
    if (observe && since > 0 && admitted >= since)
      admission_latency_.Observe({}, static_cast<double>(admitted - since) / 1000.0);
  }

  // Recovery: once per attempt that carries recovery.timeToRecoverMs.
  const Json& attempts = Field(st, "attempts");
  if (!attempts.is_array()) return;
  for (const Json& a : attempts) {
    const Json& ttr = Field(Field(a, "recovery"), "timeToRecoverMs");
    if (!ttr.is_number() || ttr.get<double>() < 0) continue;
    if (!seen.recovered.insert(Int(a, "attempt")).second) continue;
    if (observe) recovery_time_.Observe({}, ttr.get<double>() / 1000.0);
  }
}

void HeadMetrics::OnChange(const std::string& kind, const std::string& type, const Json& object) {
  if (kind == "TrainJob") {
    if (type == "DELETED") {
      std::lock_guard lock(mu_);
      seen_.erase(JobKey(object));
      return;
    }
    Track(object, /*observe=*/true);
    return;
  }
  if (kind == "Event" && type == "ADDED") {
    const std::string on = Str(object, "object");
    events_.Add({on.substr(0, on.find('/')), Str(object, "reason"), Str(object, "type")});
  }
}

Result<std::string> HeadMetrics::Render(const Inputs& in) const {
  const int64_t now_ms = clock_.NowMs();
  ExpositionWriter w;

  // Chips and hosts per generation.
  struct Gen {
    int64_t chips = 0, allocated = 0, unhealthy = 0, hosts = 0, lost = 0;
  };
  std::map<std::string, Gen> gens;
  for (const Json& h : Items(in.hosts)) {
    const Json& spec = Field(h, "spec");
    const Json& st = Field(h, "status");
    Gen& g = gens[Str(spec, "generation", "unknown")];
    const int64_t chips = Int(spec, "chips");
    const bool ready = Str(st, "state") == "Ready";
    g.chips += chips;
    g.hosts += 1;
    if (!Str(st, "job").empty()) g.allocated += chips;
    if (!ready) {
      g.unhealthy += chips;
      g.lost += 1;
    }
  }
  auto per_gen = [&](const char* name, const char* help, int64_t Gen::*field) {
    w.Family(name, help, MetricType::kGauge);
    for (const auto& [gen, g] : gens)
      w.Sample(name, {{"generation", gen}}, static_cast<double>(g.*field));
  };
  per_gen("tessera_chips", "Chips registered, by generation.", &Gen::chips);
  per_gen("tessera_chips_allocated", "Chips on hosts that a job holds, by generation.",
          &Gen::allocated);
  per_gen("tessera_chips_unhealthy", "Chips on hosts that are not Ready (lost), by generation.",
          &Gen::unhealthy);
  per_gen("tessera_hosts", "Hosts registered, by generation.", &Gen::hosts);
  per_gen("tessera_hosts_lost", "Hosts whose heartbeats stopped for longer than the lease.",
          &Gen::lost);

  // Jobs by phase, pending jobs per queue, per-job progress.
  // Every phase of the enum is listed, so a dashboard sees a 0 rather than a missing series.
  std::map<std::string, int64_t> phases;
  for (JobPhase p : AllJobPhases()) phases[JobPhaseName(p)] = 0;
  std::map<std::string, int64_t> pending_by_queue;
  std::vector<std::pair<std::string, int64_t>> steps;
  for (const Json& j : Items(in.jobs)) {
    const std::string phase = Str(Field(j, "status"), "phase", "Unknown");
    ++phases[phase];
    if (phase == "Pending") ++pending_by_queue[Str(Field(j, "metadata"), "queue", "default")];
    const int64_t step = Int(Field(j, "status"), "lastStep");
    if ((phase == "Running" || phase == "Starting") && step >= 0)
      steps.emplace_back(Str(Field(j, "metadata"), "name"), step);
  }
  w.Family("tessera_jobs", "TrainJobs by phase.", MetricType::kGauge);
  for (const auto& [phase, n] : phases)
    w.Sample("tessera_jobs", {{"phase", phase}}, static_cast<double>(n));
  w.Family("tessera_queue_pending_jobs",
           "Pending TrainJobs by the queue named in metadata.queue (\"default\" when none).",
           MetricType::kGauge);
  for (const auto& [queue, n] : pending_by_queue)
    w.Sample("tessera_queue_pending_jobs", {{"queue", queue}}, static_cast<double>(n));
  w.Family("tessera_job_last_step", "The newest training step a running job reported.",
           MetricType::kGauge);
  for (const auto& [job, step] : steps)
    w.Sample("tessera_job_last_step", {{"job", job}}, static_cast<double>(step));

  // ClusterQueues, from the latest admission cycle.
  const std::pair<const char*, const char*> cq_fields[] = {
      {"pendingWorkloads", "tessera_clusterqueue_pending_workloads"},
      {"admittedWorkloads", "tessera_clusterqueue_admitted_workloads"},
      {"nominalChips", "tessera_clusterqueue_nominal_chips"},
      {"usedChips", "tessera_clusterqueue_used_chips"},
      {"borrowedChips", "tessera_clusterqueue_borrowed_chips"}};
  const char* const cq_help[] = {
      "Workloads waiting in the ClusterQueue.", "Workloads admitted by the ClusterQueue.",
      "The ClusterQueue's nominal quota in chips.", "Chips in use by the ClusterQueue's workloads.",
      "Chips the ClusterQueue borrows from its cohort."};
  for (size_t i = 0; i < std::size(cq_fields); ++i) {
    w.Family(cq_fields[i].second, cq_help[i], MetricType::kGauge);
    for (const Json& q : Items(in.cluster_queues))
      w.Sample(cq_fields[i].second, {{"clusterqueue", Str(Field(q, "metadata"), "name")}},
               static_cast<double>(Int(Field(q, "status"), cq_fields[i].first)));
  }

  // Per host: heartbeat age, readiness, chip utilization and memory.
  w.Family("tessera_host_heartbeat_age_seconds",
           "Seconds since the host's last heartbeat (since registration before the first).",
           MetricType::kGauge);
  for (const Json& h : Items(in.hosts)) {
    const Json& st = Field(h, "status");
    int64_t at = Int(st, "lastHeartbeatMs");
    if (at <= 0) at = Int(st, "registeredMs");
    if (at <= 0) continue;
    w.Sample("tessera_host_heartbeat_age_seconds", {{"host", Str(Field(h, "metadata"), "name")}},
             static_cast<double>(std::max<int64_t>(0, now_ms - at)) / 1000.0);
  }
  auto per_host = [&](const char* name, const char* help, auto value) {
    w.Family(name, help, MetricType::kGauge);
    for (const Json& h : Items(in.hosts))
      w.Sample(name,
               {{"host", Str(Field(h, "metadata"), "name")},
                {"generation", Str(Field(h, "spec"), "generation", "unknown")}},
               value(h));
  };
  per_host("tessera_host_ready", "1 when the host heartbeats within its lease, 0 when lost.",
           [](const Json& h) { return Str(Field(h, "status"), "state") == "Ready" ? 1.0 : 0.0; });
  per_host("tessera_host_chip_utilization_ratio",
           "Chip utilization its workers report, 0 to 1 (emulated hosts: from worker CPU).",
           [](const Json& h) { return ChipUtilization(Field(Field(h, "status"), "usage")); });
  per_host("tessera_host_memory_bytes", "Resident memory of the host's worker processes.",
           [](const Json& h) {
             return static_cast<double>(Int(Field(Field(h, "status"), "usage"), "memoryBytes"));
           });

  // Kept between scrapes.
  admission_latency_.Write(w);
  recovery_time_.Write(w);
  events_.Write(w);

  w.Family("tessera_http_open_connections", "HTTP connections open to the head.",
           MetricType::kGauge);
  w.Sample("tessera_http_open_connections", {}, in.open_connections);
  w.Family("tessera_store_writes_total",
           "Objects the head wrote to its store (puts and deletes of successful commits), by kind.",
           MetricType::kCounter);
  for (const auto& [kind, n] : in.store_writes_by_kind)
    w.Sample("tessera_store_writes_total", {{"kind", kind}}, static_cast<double>(n));
  w.Family("tessera_store_commits_total",
           "Successful commits (atomic batches) to the head's store.", MetricType::kCounter);
  w.Sample("tessera_store_commits_total", {}, static_cast<double>(in.store_commits));
  return w.Finish();
}

}  // namespace tessera::api
