#include "codec/service_json.h"

#include <optional>

#include "codec/manifest.h"
#include "codec/manifest_fields.h"
#include "codec/secret_manifest.h"
#include "codec/service_disagg_manifest.h"
#include "codec/service_manifest.h"
#include "codec/stored_json.h"

namespace tessera::codec {
namespace {

using Json = nlohmann::json;

const char* AfterStopName(AfterStop a) {
  switch (a) {
    case AfterStop::kRestart:
      return "Restart";
    case AfterStop::kRequeue:
      return "Requeue";
    case AfterStop::kRemove:
      return "Remove";
  }
  return "Restart";
}

AfterStop ParseAfterStop(const std::string& s) {
  if (s == "Requeue") return AfterStop::kRequeue;
  if (s == "Remove") return AfterStop::kRemove;
  return AfterStop::kRestart;
}

Json RoleSpecJson(const ServiceRoleSpec& r) {
  Json j = {{"name", r.name},
            {"accelerator", std::string(GenerationName(r.accelerator))},
            {"topology", r.topology.ToString()},
            {"command", r.command},
            {"port", r.port},
            {"maxOngoingRequests", r.max_ongoing_requests},
            {"startupNice", r.startup_nice},
            {"terminationGracePeriod", Ms(r.grace_ms)},
            {"readiness",
             {{"path", r.readiness.path},
              {"startupGrace", Ms(r.readiness.startup_grace_ms)},
              {"period", Ms(r.readiness.period_ms)},
              {"timeout", Ms(r.readiness.timeout_ms)}}},
            {"rollout",
             {{"maxSurge", r.rollout.max_surge}, {"maxUnavailable", r.rollout.max_unavailable}}}};
  if (!r.env.empty() || !r.secret_env.empty()) j["env"] = EnvJson(r.env, r.secret_env);
  if (!r.working_dir.empty()) j["workingDir"] = r.working_dir;
  if (!r.warm_preload.empty()) j["warmStart"] = {{"preload", r.warm_preload}};
  if (r.autoscaling) {
    const AutoscalerConfig& a = *r.autoscaling;
    j["autoscaling"] = {{"minReplicas", a.min_replicas},
                        {"maxReplicas", a.max_replicas},
                        {"upscaleDelay", Ms(a.upscale_delay_ms)},
                        {"downscaleDelay", Ms(a.downscale_delay_ms)},
                        {"lookback", Ms(a.lookback_ms)}};
    // 0: the default (half of maxOngoingRequests), written as absent.
    if (a.target_ongoing_requests > 0)
      j["autoscaling"]["targetOngoingRequests"] = a.target_ongoing_requests;
    if (a.initial_replicas >= 0) j["autoscaling"]["initialReplicas"] = a.initial_replicas;
    if (a.target_ttft_ms > 0) j["autoscaling"]["targetTTFTMs"] = a.target_ttft_ms;
    if (a.target_tpot_ms > 0) j["autoscaling"]["targetTPOTMs"] = a.target_tpot_ms;
  } else {
    j["replicas"] = r.replicas;
  }
  return j;
}

Json ReplicaJson(const ReplicaStatus& r) {
  Json hosts = Json::array(), processes = Json::array();
  for (const ServiceProcess& p : r.processes) {
    hosts.push_back(p.host);
    processes.push_back({{"host", p.host},
                         {"address", p.address},
                         {"port", p.port},
                         {"phase", ProcessPhaseName(p.phase)},
                         {"pid", p.pid},
                         {"exitCode", p.exit_code},
                         {"signal", p.signal}});
  }
  Json j = {{"replica", r.replica},
            {"generation", r.generation},
            {"phase", ReplicaPhaseName(r.phase)},
            {"reason", r.reason},
            {"message", r.message},
            {"restarts", r.restarts},
            {"hosts", hosts},
            {"slice", r.slice},
            {"processes", processes},
            {"owner", r.owner},
            {"incarnation", r.incarnation},
            {"masterPort", r.master_port},
            {"startedMs", r.started_ms},
            {"readySinceMs", r.ready_since_ms},
            {"readyOnce", r.ready_once},
            {"lastProbeMs", r.last_probe_ms},
            {"backoffMs", r.backoff_ms},
            {"restartAtMs", r.restart_at_ms},
            {"stopping", r.stopping},
            {"afterStop", AfterStopName(r.after_stop)},
            {"unconfirmed", r.unconfirmed}};
  if (const ServiceProcess* leader = r.leader())
    j["leader"] = {{"address", leader->address}, {"port", leader->port}};
  return j;
}

Result<ReplicaStatus> ReplicaFromJson(const Json& j, const std::string& where) {
  ReplicaStatus r;
  r.replica = GetOr(j, "replica", 0);
  r.generation = GetOr(j, "generation", 1);
  auto phase = ParseReplicaPhase(GetOr(j, "phase", std::string("Pending")));
  if (!phase.ok()) return Internal(where + ": " + phase.status().message());
  r.phase = *phase;
  r.reason = GetOr(j, "reason", std::string());
  r.message = GetOr(j, "message", std::string());
  r.restarts = GetOr(j, "restarts", 0);
  r.slice = GetOr(j, "slice", std::string());
  for (const Json& p : Child(j, "processes")) {
    ServiceProcess sp;
    sp.host = GetOr(p, "host", std::string());
    sp.address = GetOr(p, "address", std::string());
    sp.port = GetOr(p, "port", 0);
    auto pp = ParseProcessPhase(GetOr(p, "phase", std::string("Pending")));
    if (!pp.ok()) return Internal(where + ": " + pp.status().message());
    sp.phase = *pp;
    sp.pid = GetOr(p, "pid", int64_t{0});
    sp.exit_code = GetOr(p, "exitCode", 0);
    sp.signal = GetOr(p, "signal", 0);
    r.processes.push_back(std::move(sp));
  }
  r.owner = GetOr(j, "owner", uint64_t{0});
  r.incarnation = GetOr(j, "incarnation", 0);
  r.master_port = GetOr(j, "masterPort", 0);
  r.started_ms = GetOr(j, "startedMs", int64_t{0});
  r.ready_since_ms = GetOr(j, "readySinceMs", int64_t{0});
  r.ready_once = GetOr(j, "readyOnce", false);
  r.last_probe_ms = GetOr(j, "lastProbeMs", int64_t{0});
  r.backoff_ms = GetOr(j, "backoffMs", int64_t{0});
  r.restart_at_ms = GetOr(j, "restartAtMs", int64_t{0});
  r.stopping = GetOr(j, "stopping", false);
  r.after_stop = ParseAfterStop(GetOr(j, "afterStop", std::string()));
  r.unconfirmed = GetOr(j, "unconfirmed", std::set<std::string>{});
  return r;
}

}  // namespace

Json ServiceSpecJson(const ServiceSpec& spec) {
  Json roles = Json::array();
  for (const ServiceRoleSpec& r : spec.roles) roles.push_back(RoleSpecJson(r));
  Json j = {{"roles", roles}};
  if (!spec.priority.empty()) j["priority"] = spec.priority;
  if (!spec.reservation.empty()) j["reservation"] = SplitObjectKey(spec.reservation).name;
  AddDisaggregationJson(spec, j);
  return j;
}

Json ServiceJson(const Service& service, std::string_view endpoint_scheme) {
  const ServiceStatus& st = service.status;
  Json meta = {{"uid", service.uid},
               {"resourceVersion", service.runtime.version},
               {"creationTimestampMs", service.created_ms}};
  PutObjectKey(meta, service.spec.name);
  if (!service.spec.queue.empty()) meta["queue"] = service.spec.queue;
  if (!service.spec.labels.empty()) meta["labels"] = service.spec.labels;
  Json roles = Json::array();
  for (const RoleStatus& role : st.roles) {
    Json replicas = Json::array();
    for (const ReplicaStatus& r : role.replicas) replicas.push_back(ReplicaJson(r));
    Json rj = {{"name", role.name},
               {"generation", role.generation},
               {"desiredReplicas", role.desired_replicas},
               {"readyReplicas", role.ReadyReplicas()},
               {"nextReplica", role.next_replica},
               {"replicas", replicas}};
    if (role.autoscaler_at_ms > 0)
      rj["autoscaler"] = {{"desiredReplicas", role.autoscaler.desired_replicas},
                          {"reason", role.autoscaler.reason},
                          {"atMs", role.autoscaler_at_ms}};
    if (auto t = service.runtime.traffic.find(role.name); t != service.runtime.traffic.end())
      rj["traffic"] = RouterTrafficJson(t->second);
    roles.push_back(std::move(rj));
  }
  Json endpoints = Json::array();
  for (const Endpoint& e : service.Endpoints())
    endpoints.push_back({{"role", e.role},
                         {"replica", e.replica},
                         {"generation", e.generation},
                         {"scheme", std::string(endpoint_scheme)},
                         {"address", e.address},
                         {"port", e.port},
                         {"ready", e.ready}});
  Json status = {{"phase", ServicePhaseName(st.phase)},
                 {"reason", st.reason},
                 {"message", st.message},
                 {"deleting", st.deleting},
                 {"roles", roles},
                 {"endpoints", endpoints}};
  return {{"apiVersion", kApiVersion},
          {"kind", kServiceKind},
          {"metadata", meta},
          {"spec", ServiceSpecJson(service.spec)},
          {"status", status}};
}

Result<Service> ServiceFromJson(const Json& j) {
  const Json& meta = Child(j, "metadata");
  const std::string name = GetOr(meta, "name", std::string());
  auto fail = [&name](const std::string& why) {
    return Internal("stored service " + name + ": " + why);
  };
  Json manifest = {{"apiVersion", kApiVersion},
                   {"kind", kServiceKind},
                   {"metadata", {{"name", name}}},
                   {"spec", Child(j, "spec")}};
  CopyNamespace(meta, manifest["metadata"]);
  if (meta.contains("queue")) manifest["metadata"]["queue"] = meta["queue"];
  if (meta.contains("labels")) manifest["metadata"]["labels"] = meta["labels"];
  auto spec = ParseService(manifest);
  if (!spec.ok()) return fail(spec.status().message());
  Service s;
  s.spec = std::move(*spec);
  s.uid = GetOr(meta, "uid", uint64_t{0});
  s.created_ms = GetOr(meta, "creationTimestampMs", int64_t{0});
  const Json& st = Child(j, "status");
  auto phase = ParseServicePhase(GetOr(st, "phase", std::string("Pending")));
  if (!phase.ok()) return fail(phase.status().message());
  s.status.phase = *phase;
  s.status.reason = GetOr(st, "reason", std::string());
  s.status.message = GetOr(st, "message", std::string());
  s.status.deleting = GetOr(st, "deleting", false);
  for (const Json& rj : Child(st, "roles")) {
    RoleStatus role;
    role.name = GetOr(rj, "name", std::string());
    role.generation = GetOr(rj, "generation", 1);
    role.desired_replicas = GetOr(rj, "desiredReplicas", 0);
    role.next_replica = GetOr(rj, "nextReplica", 0);
    const Json& as = Child(rj, "autoscaler");
    if (as.is_object()) {
      role.autoscaler.desired_replicas = GetOr(as, "desiredReplicas", 0);
      role.autoscaler.reason = GetOr(as, "reason", std::string());
      role.autoscaler_at_ms = GetOr(as, "atMs", int64_t{0});
    }
    for (const Json& r : Child(rj, "replicas")) {
      auto replica = ReplicaFromJson(r, "status.roles." + role.name);
      if (!replica.ok()) return fail(replica.status().message());
      role.replicas.push_back(std::move(*replica));
    }
    s.status.roles.push_back(std::move(role));
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// The router's load reports (the dashboard's request rate and latency)

namespace {

constexpr size_t kMaxLatencyBuckets = 64;
constexpr size_t kMaxReplicasInReport = 4096;

bool NonNegativeInteger(const Json& v) {
  return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
}

}  // namespace

Result<RouterTraffic> RouterTrafficFromJson(const Json& report) {
  if (!report.is_object()) return InvalidArgument("body: a load report is a JSON object");
  RouterTraffic t;
  auto ongoing = report.find("ongoingRequests");
  if (ongoing == report.end() || !ongoing->is_number() || ongoing->get<double>() < 0)
    return InvalidArgument("ongoingRequests: required, a number >= 0");
  t.ongoing_requests = ongoing->get<double>();
  if (auto q = report.find("queued"); q != report.end()) {
    if (!NonNegativeInteger(*q) || q->get<uint64_t>() > 1'000'000'000)
      return InvalidArgument("queued: a whole number >= 0");
    t.queued = static_cast<int>(q->get<uint64_t>());
  }
  if (auto per = report.find("perReplica"); per != report.end()) {
    if (!per->is_object() || per->size() > kMaxReplicasInReport)
      return InvalidArgument(
          "perReplica: an object of replica index -> requests in flight (at "
          "most " +
          std::to_string(kMaxReplicasInReport) + " replicas)");
    for (const auto& [key, n] : per->items()) {
      const std::optional<uint64_t> replica =
          key.empty() || key.size() > 9 || key.find_first_not_of("0123456789") != key.npos
              ? std::nullopt
              : std::optional<uint64_t>(std::stoull(key));
      if (!replica || !NonNegativeInteger(n) || n.get<uint64_t>() > 1'000'000'000)
        return InvalidArgument("perReplica." + key +
                               ": keys are replica indexes, values whole numbers >= 0");
      t.in_flight[static_cast<int>(*replica)] = static_cast<int>(n.get<uint64_t>());
    }
  }
  if (auto n = report.find("requests"); n != report.end()) {
    if (!NonNegativeInteger(*n))
      return InvalidArgument(
          "requests: a whole number >= 0 (requests relayed since the router "
          "started)");
    t.requests = n->get<uint64_t>();
  }
  if (auto sum = report.find("latencySecondsSum"); sum != report.end()) {
    if (!sum->is_number() || sum->get<double>() < 0)
      return InvalidArgument("latencySecondsSum: a number of seconds >= 0");
    t.latency_sum_s = sum->get<double>();
  }
  if (auto q = report.find("queuedPromptTokens"); q != report.end()) {
    if (!q->is_number() || q->get<double>() < 0)
      return InvalidArgument(
          "queuedPromptTokens: a number >= 0 (a prefill role's prompt tokens waiting)");
    t.queued_prompt_tokens = q->get<double>();
  }
  if (auto n = report.find("ttftCount"); n != report.end()) {
    if (!NonNegativeInteger(*n)) return InvalidArgument("ttftCount: a whole number >= 0");
    t.ttft_count = n->get<uint64_t>();
  }
  if (auto sum = report.find("ttftSecondsSum"); sum != report.end()) {
    if (!sum->is_number() || sum->get<double>() < 0)
      return InvalidArgument("ttftSecondsSum: a number of seconds >= 0");
    t.ttft_sum_s = sum->get<double>();
  }
  if (auto n = report.find("refused"); n != report.end()) {
    if (!NonNegativeInteger(*n))
      return InvalidArgument(
          "refused: a whole number >= 0 (requests refused or cancelled while queued since the "
          "router started)");
    t.refused = static_cast<int64_t>(n->get<uint64_t>());
  }
  if (auto n = report.find("outputTokens"); n != report.end()) {
    if (!NonNegativeInteger(*n))
      return InvalidArgument(
          "outputTokens: a whole number >= 0 (streamed tokens this role decoded)");
    t.output_tokens = n->get<uint64_t>();
  }
  if (auto n = report.find("tpotCount"); n != report.end()) {
    if (!NonNegativeInteger(*n)) return InvalidArgument("tpotCount: a whole number >= 0");
    t.tpot_count = n->get<uint64_t>();
  }
  if (auto sum = report.find("tpotSecondsSum"); sum != report.end()) {
    if (!sum->is_number() || sum->get<double>() < 0)
      return InvalidArgument("tpotSecondsSum: a number of seconds >= 0");
    t.tpot_sum_s = sum->get<double>();
  }
  if (auto d = report.find("disagg"); d != report.end()) {
    if (!d->is_object() || d->size() > 64)
      return InvalidArgument(
          "disagg: an object of at most 64 counters (pairedSameSlice, prefilledRemote, "
          "fallbacks, ...)");
    for (const auto& [key, n] : d->items()) {
      if (key.empty() || key.size() > 64 || !NonNegativeInteger(n))
        return InvalidArgument("disagg." + key.substr(0, 64) +
                               ": counter names of 1-64 characters, values whole numbers >= 0");
      t.disagg[key] = n.get<uint64_t>();
    }
  }
  if (auto b = report.find("latencyBuckets"); b != report.end()) {
    const Json bounds = b->is_object() ? b->value("upperBounds", Json()) : Json();
    const Json counts = b->is_object() ? b->value("cumulative", Json()) : Json();
    if (!bounds.is_array() || !counts.is_array() || bounds.size() > kMaxLatencyBuckets)
      return InvalidArgument(
          "latencyBuckets: {\"upperBounds\": [seconds, increasing], \"cumulative\": [a count "
          "per bound, then the total]} with at most " +
          std::to_string(kMaxLatencyBuckets) + " bounds");
    for (const Json& v : bounds) {
      if (!v.is_number() || v.get<double>() <= 0 ||
          (!t.latency_bounds.empty() && v.get<double>() <= t.latency_bounds.back()))
        return InvalidArgument("latencyBuckets.upperBounds: increasing numbers of seconds > 0");
      t.latency_bounds.push_back(v.get<double>());
    }
    if (counts.size() != bounds.size() + 1)
      return InvalidArgument(
          "latencyBuckets.cumulative: one count per upper bound, then the "
          "total (" +
          std::to_string(bounds.size() + 1) + " numbers), got " + std::to_string(counts.size()));
    for (const Json& v : counts) {
      if (!NonNegativeInteger(v) ||
          (!t.latency_cumulative.empty() && v.get<uint64_t>() < t.latency_cumulative.back()))
        return InvalidArgument("latencyBuckets.cumulative: whole numbers >= 0, never decreasing");
      t.latency_cumulative.push_back(v.get<uint64_t>());
    }
  }
  return t;
}

Json RouterTrafficJson(const RouterTraffic& t) {
  Json per = Json::object();
  for (const auto& [replica, n] : t.in_flight) per[std::to_string(replica)] = n;
  Json j = {{"atMs", t.at_ms},        {"ongoingRequests", t.ongoing_requests},
            {"queued", t.queued},     {"perReplica", per},
            {"requests", t.requests}, {"latencySecondsSum", t.latency_sum_s}};
  if (t.queued_prompt_tokens > 0) j["queuedPromptTokens"] = t.queued_prompt_tokens;
  if (t.ttft_count > 0) {
    j["ttftCount"] = t.ttft_count;
    j["ttftSecondsSum"] = t.ttft_sum_s;
  }
  if (t.output_tokens > 0) j["outputTokens"] = t.output_tokens;
  if (t.refused >= 0) j["refused"] = t.refused;
  if (t.tpot_count > 0) {
    j["tpotCount"] = t.tpot_count;
    j["tpotSecondsSum"] = t.tpot_sum_s;
  }
  if (!t.disagg.empty()) j["disagg"] = t.disagg;
  if (!t.latency_bounds.empty())
    j["latencyBuckets"] = {{"upperBounds", t.latency_bounds}, {"cumulative", t.latency_cumulative}};
  return j;
}

}  // namespace tessera::codec
