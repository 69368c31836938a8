#include "codec/resource_json.h"

#include <cmath>

#include "codec/manifest.h"
#include "codec/manifest_fields.h"
#include "codec/stored_json.h"

namespace tessera::codec {
namespace {

Json FiguresJson(const RecoveryFigures& f) {
  return {
      {"timeToDetectMs", f.time_to_detect_ms},        {"timeToScheduleMs", f.time_to_schedule_ms},
      {"timeToFirstStepMs", f.time_to_first_step_ms}, {"timeToRestoreMs", f.time_to_restore_ms},
      {"timeToRecoverMs", f.time_to_recover_ms},      {"stepsLost", f.steps_lost}};
}

Json AttemptsJson(const TrainJob& job) {
  const auto& attempts = job.status.attempts;
  Json out = Json::array();
  for (size_t i = 0; i < attempts.size(); ++i) {
    Json a = AttemptJson(attempts[i]);
    if (i > 0)
      if (auto f = ComputeRecoveryFigures(attempts[i - 1], attempts[i]))
        a["recovery"] = FiguresJson(*f);
    out.push_back(std::move(a));
  }
  return out;
}

Json RecoveryJson(const TrainJob& job, int64_t now_ms) {
  const TrainJobStatus& st = job.status;
  const int64_t end = Finished(st.phase) && st.finish_ms > 0 ? st.finish_ms : now_ms;
  const JobRecovery r = SummarizeRecovery(st.attempts, end);
  const int64_t wall = st.attempts.empty() ? 0 : end - st.attempts.front().placed_ms;
  const CheckpointAdvice c =
      AdviseCheckpointInterval(st.checkpoints, st.failures, wall, job.spec.mtbf_ms);
  return {{"failures", st.failures},
          {"maxFailures", job.spec.max_failures},
          {"stepsLost", r.steps_lost},
          {"meanTimeToRecoverMs", r.mean_time_to_recover_ms},
          {"goodput", r.goodput},
          {"checkpoint",
           {{"saveSeconds", c.save_seconds},
            {"intervalSeconds", c.interval_seconds},
            {"mtbfSeconds", c.mtbf_seconds},
            {"mtbfSource", c.mtbf_source},
            {"advisedIntervalSeconds", c.advised_interval_seconds}}}};
}

}  // namespace

Json AttemptJson(const AttemptRecord& a) {
  return {{"attempt", a.attempt},
          {"slices", a.slices},
          {"worldSize", a.world_size},
          {"placedMs", a.placed_ms},
          {"runningMs", a.running_ms},
          {"firstStepMs", a.first_step_ms},
          {"firstStep", a.first_step},
          {"lastStep", a.last_step},
          {"lastStepMs", a.last_step_ms},
          {"restored", a.restored},
          {"resumedFromStep", a.resumed_from_step},
          {"restoreSeconds", a.restore_seconds},
          {"endedMs", a.ended_ms},
          {"endReason", a.end_reason},
          {"failedRanks", a.failed_ranks},
          {"failureMs", a.failure_ms},
          {"detectedMs", a.detected_ms},
          {"message", a.message}};
}

AttemptRecord AttemptFromJson(const Json& j) {
  AttemptRecord a;
  a.attempt = GetOr(j, "attempt", 0);
  a.slices = GetOr(j, "slices", 0);
  a.world_size = GetOr(j, "worldSize", 0);
  a.placed_ms = GetOr(j, "placedMs", int64_t{0});
  a.running_ms = GetOr(j, "runningMs", int64_t{0});
  a.first_step_ms = GetOr(j, "firstStepMs", int64_t{0});
  a.first_step = GetOr(j, "firstStep", int64_t{-1});
  a.last_step = GetOr(j, "lastStep", int64_t{-1});
  a.last_step_ms = GetOr(j, "lastStepMs", int64_t{0});
  a.restored = GetOr(j, "restored", false);
  a.resumed_from_step = GetOr(j, "resumedFromStep", int64_t{-1});
  a.restore_seconds = GetOr(j, "restoreSeconds", 0.0);
  a.ended_ms = GetOr(j, "endedMs", int64_t{0});
  a.end_reason = GetOr(j, "endReason", std::string());
  a.failed_ranks = GetOr(j, "failedRanks", std::vector<int>{});
  a.failure_ms = GetOr(j, "failureMs", int64_t{0});
  a.detected_ms = GetOr(j, "detectedMs", int64_t{0});
  a.message = GetOr(j, "message", std::string());
  return a;
}

Json TrainJobJson(const TrainJob& job, int64_t now_ms) {
  const TrainJobStatus& st = job.status;
  Json meta = {{"uid", job.uid},
               {"resourceVersion", job.runtime.version},
               {"creationTimestampMs", job.created_ms}};
  PutObjectKey(meta, job.spec.name);
  if (!job.spec.queue.empty()) meta["queue"] = job.spec.queue;
  if (!job.spec.labels.empty()) meta["labels"] = job.spec.labels;
  Json placement = Json::array();
  for (size_t s = 0; s < st.placement.size(); ++s)
    placement.push_back({{"slice", st.slice_names[s]}, {"hosts", st.placement[s]}});
  Json workers = Json::array();
  for (const auto& [rank, w] : st.workers)
    workers.push_back({{"rank", rank},
                       {"slice", w.slice},
                       {"worker", w.worker},
                       {"host", w.host},
                       {"state", WorkerPhaseName(w.phase)},
                       {"exitCode", w.exit_code},
                       {"signal", w.signal},
                       {"pid", w.pid}});
  Json status = {
      {"phase", JobPhaseName(st.phase)},
      {"reason", st.reason},
      {"message", st.message},
      {"attempt", st.attempt},
      {"placement", placement},
      {"masterPort", st.master_port},
      {"jaxPort", st.jax_port},
      {"workers", workers},
      {"startTimeMs", st.start_ms},
      {"completionTimeMs", st.finish_ms},
      {"stopping", st.stopping},
      {"deleting", st.deleting},
      {"lastStep", st.last_step},
      {"lastCheckpointTimeMs", st.last_checkpoint_ms},
      {"pendingReason", st.pending_reason},
      {"queuePosition", st.queue_position},
      {"wouldHelp", WouldHelpJson(st.would_help)},
      {"preemptions", st.preemptions},
      {"deactivated", st.deactivated},
      {"slices", job.slices()},
      {"failures", st.failures},
      {"attempts", AttemptsJson(job)},
      {"recovery", RecoveryJson(job, now_ms)},
      {"pendingSinceMs", st.pending_since_ms},
      {"admittedTimeMs", st.admitted_ms},
      {"progress", st.progress},
      {"checkpoints", st.checkpoints},
      {"lastCheckpointStep", st.last_checkpoint_step},
      {"restart",
       {{"minSlices", st.restart_min},
        {"maxSlices", st.restart_max},
        {"fastStop", st.fast_stop},
        {"stopGraceMs", st.stop_grace_ms}}},
      {"growBack", {{"targetSlices", st.grow_target}, {"afterCheckpointStep", st.grow_after_step}}},
      {"startGuard",
       {{"retries", st.start_guard.retries},
        {"backoffUntilMs", st.start_guard.backoff_until_ms},
        {"lastEviction", st.start_guard.last_eviction}}}};
  if (job.spec.gpu)
    status["gpu"] = {{"domains", st.gpu.domains}, {"imexChannel", st.gpu.imex_channel}};
  Json spec = Json::parse(job.spec_document, nullptr, /*allow_exceptions=*/false);
  return {{"apiVersion", kApiVersion},
          {"kind", kTrainJobKind},
          {"metadata", meta},
          {"spec", spec.is_discarded() ? Json::object() : spec},
          {"status", status}};
}

Result<TrainJob> TrainJobFromJson(const Json& j) {
  const Json& meta = Child(j, "metadata");
  const std::string name = GetOr(meta, "name", std::string());
  auto fail = [&name](const std::string& why) {
    return Internal("stored trainjob " + name + ": " + why);
  };
  Json manifest = {{"apiVersion", Child(j, "apiVersion")},
                   {"kind", Child(j, "kind")},
                   {"metadata", {{"name", name}}},
                   {"spec", Child(j, "spec")}};
  CopyNamespace(meta, manifest["metadata"]);
  if (meta.contains("queue")) manifest["metadata"]["queue"] = meta["queue"];
  if (meta.contains("labels")) manifest["metadata"]["labels"] = meta["labels"];
  auto spec = ParseTrainJob(manifest);
  if (!spec.ok()) return fail(spec.status().message());
  TrainJob job;
  job.spec = *spec;
  job.spec_document = Child(j, "spec").dump();
  job.uid = GetOr(meta, "uid", uint64_t{0});
  job.created_ms = GetOr(meta, "creationTimestampMs", int64_t{0});
  const Json& s = Child(j, "status");
  TrainJobStatus& st = job.status;
  auto phase = ParseJobPhase(GetOr(s, "phase", std::string("Pending")));
  if (!phase.ok()) return fail(phase.status().message());
  st.phase = *phase;
  st.reason = GetOr(s, "reason", std::string());
  st.message = GetOr(s, "message", std::string());
  st.attempt = GetOr(s, "attempt", -1);
  st.master_port = GetOr(s, "masterPort", 0);
  st.jax_port = GetOr(s, "jaxPort", 0);
  st.start_ms = GetOr(s, "startTimeMs", int64_t{0});
  st.finish_ms = GetOr(s, "completionTimeMs", int64_t{0});
  st.stopping = GetOr(s, "stopping", false);
  st.deleting = GetOr(s, "deleting", false);
  st.last_step = GetOr(s, "lastStep", int64_t{-1});
  st.last_checkpoint_ms = GetOr(s, "lastCheckpointTimeMs", int64_t{0});
  st.last_checkpoint_step = GetOr(s, "lastCheckpointStep", int64_t{-1});
  st.pending_reason = GetOr(s, "pendingReason", std::string());
  st.queue_position = GetOr(s, "queuePosition", 0);
  for (const Json& b : GetOr(s, "wouldHelp", Json::array()))
    st.would_help.push_back({GetOr(b, "name", std::string()),
                             GetOr(b, "clusterQueue", std::string()), GetOr(b, "priority", 0),
                             GetOr(b, "chips", int64_t{0}), GetOr(b, "preemptible", false)});
  st.preemptions = GetOr(s, "preemptions", 0);
  st.deactivated = GetOr(s, "deactivated", false);
  for (const Json& a : GetOr(s, "attempts", Json::array()))
    st.attempts.push_back(AttemptFromJson(a));
  st.failures = GetOr(s, "failures", 0);
  st.pending_since_ms = GetOr(s, "pendingSinceMs", int64_t{0});
  st.admitted_ms = GetOr(s, "admittedTimeMs", int64_t{0});
  st.progress = GetOr(s, "progress", st.progress);
  st.checkpoints = GetOr(s, "checkpoints", st.checkpoints);
  const Json& restart = Child(s, "restart");
  st.restart_min = GetOr(restart, "minSlices", 0);
  st.restart_max = GetOr(restart, "maxSlices", 0);
  st.fast_stop = GetOr(restart, "fastStop", false);
  st.stop_grace_ms = GetOr(restart, "stopGraceMs", int64_t{-1});
  const Json& grow = Child(s, "growBack");
  st.grow_target = GetOr(grow, "targetSlices", 0);
  st.grow_after_step = GetOr(grow, "afterCheckpointStep", int64_t{-1});
  const Json& guard = Child(s, "startGuard");
  st.start_guard.retries = GetOr(guard, "retries", 0);
  st.start_guard.backoff_until_ms = GetOr(guard, "backoffUntilMs", int64_t{0});
  st.start_guard.last_eviction = GetOr(guard, "lastEviction", std::string());
  const Json& gpu = Child(s, "gpu");
  st.gpu.domains = GetOr(gpu, "domains", std::vector<std::string>{});
  st.gpu.imex_channel = GetOr(gpu, "imexChannel", -1);
  for (const Json& p : GetOr(s, "placement", Json::array())) {
    st.slice_names.push_back(GetOr(p, "slice", std::string()));
    st.placement.push_back(GetOr(p, "hosts", std::vector<std::string>{}));
  }
  for (const Json& w : GetOr(s, "workers", Json::array())) {
    WorkerStatus ws;
    ws.host = GetOr(w, "host", std::string());
    ws.slice = GetOr(w, "slice", 0);
    ws.worker = GetOr(w, "worker", 0);
    auto wp = ParseWorkerPhase(GetOr(w, "state", std::string("Pending")));
    if (!wp.ok()) return fail(wp.status().message());
    ws.phase = *wp;
    ws.exit_code = GetOr(w, "exitCode", 0);
    ws.signal = GetOr(w, "signal", 0);
    ws.pid = GetOr(w, "pid", int64_t{0});
    st.workers[GetOr(w, "rank", 0)] = ws;
  }
  return job;
}

Json HostJson(const HostSpec& h, const HostStatus& status, int64_t version,
              const std::string& owner) {
  Json spec = {{"generation", GenerationName(h.generation)},
               {"chips", h.chips},
               {"address", h.address},
               {"agentPort", h.agent_port}};
  if (h.slice)
    spec["slice"] = {
        {"name", h.slice->name}, {"topology", h.slice->topology}, {"worker", h.slice->worker}};
  if (h.cube)
    spec["cube"] = {{"name", h.cube->name},
                    {"block", h.cube->block},
                    {"coord", {h.cube->coord.x, h.cube->coord.y, h.cube->coord.z}}};
  if (!h.discovered.empty()) {
    Json discovered = Json::parse(h.discovered, nullptr, /*allow_exceptions=*/false);
    if (discovered.is_object()) spec["discovered"] = std::move(discovered);
  }
  Json usage = Json::object();
  for (const auto& [key, value] : status.usage) {
    // Counters (bytes) stay integers in the document.
    if (std::trunc(value) == value && std::fabs(value) < 9e15)
      usage[key] = static_cast<int64_t>(value);
    else
      usage[key] = value;
  }
  return {{"apiVersion", kApiVersion},
          {"kind", kHostKind},
          {"metadata", {{"name", h.name}, {"labels", h.labels}, {"resourceVersion", version}}},
          {"spec", spec},
          {"status",
           {{"state", status.lost ? "Lost" : "Ready"},
            {"lastHeartbeatMs", status.last_heartbeat_ms},
            {"registeredMs", status.registered_ms},
            {"job", owner},
            {"usage", usage}}}};
}

Result<StoredHost> HostFromJson(const Json& j) {
  const Json& meta = Child(j, "metadata");
  StoredHost out;
  HostSpec& h = out.spec;
  h.name = GetOr(meta, "name", std::string());
  const Json& spec = Child(j, "spec");
  auto g = ParseGeneration(GetOr(spec, "generation", std::string()));
  if (!g.ok()) return Internal("stored host " + h.name + ": " + g.status().message());
  h.generation = *g;
  h.chips = GetOr(spec, "chips", 4);
  h.address = GetOr(spec, "address", std::string("127.0.0.1"));
  h.agent_port = GetOr(spec, "agentPort", 0);
  if (const Json& s = Child(spec, "slice"); s.is_object())
    h.slice = SliceMembership{GetOr(s, "name", std::string()), GetOr(s, "topology", std::string()),
                              GetOr(s, "worker", 0)};
  if (const Json& c = Child(spec, "cube"); c.is_object()) {
    const auto coord = GetOr(c, "coord", std::vector<int>{});
    if (coord.size() != 3)
      return Internal("stored host " + h.name + ": spec.cube.coord is not [x, y, z]");
    h.cube =
        CubeMembership{GetOr(c, "name", std::string()), GetOr(c, "block", std::string("block-00")),
                       Coord{coord[0], coord[1], coord[2]}};
  }
  if (const Json& d = Child(spec, "discovered"); d.is_object()) h.discovered = d.dump();
  const Json labels = GetOr(meta, "labels", Json::object());
  for (const auto& [k, v] : labels.items())
    if (v.is_string()) h.labels[k] = v.get<std::string>();
  const Json& st = Child(j, "status");
  out.status.registered_ms = GetOr(st, "registeredMs", int64_t{0});
  out.status.last_heartbeat_ms = GetOr(st, "lastHeartbeatMs", int64_t{0});
  out.status.lost = GetOr(st, "state", std::string("Ready")) == "Lost";
  const Json usage = GetOr(st, "usage", Json::object());
  for (const auto& [k, v] : usage.items())
    if (v.is_number()) out.status.usage[k] = v.get<double>();
  return out;
}

namespace {

// The kinds (lower case, as in an event's object) whose objects live in a namespace.
bool NamespacedObjectKind(std::string_view kind) {
  return kind == "trainjob" || kind == "service" || kind == "slicereservation" ||
         kind == "localqueue" || kind == "secret";
}

}  // namespace

EventObject SplitEventObject(const std::string& object) {
  const size_t slash = object.find('/');
  if (slash == std::string::npos || !NamespacedObjectKind(object.substr(0, slash)))
    return {std::string(kDefaultNamespace), object};
  const NamespacedName parts = SplitObjectKey(object.substr(slash + 1));
  return {parts.namespace_name, object.substr(0, slash + 1) + parts.name};
}

Json EventJson(const Event& e) {
  const EventObject shown = SplitEventObject(e.object);
  return {{"apiVersion", kApiVersion},
          {"kind", kEventKind},
          {"metadata", {{"name", e.name}, {"namespace", shown.namespace_name}}},
          {"type", e.warning ? "Warning" : "Normal"},
          {"reason", e.reason},
          {"object", shown.object},
          {"message", e.message},
          {"timeMs", e.time_ms}};
}

Result<Event> EventFromJson(const Json& j) {
  Event e;
  e.name = GetOr(Child(j, "metadata"), "name", std::string());
  if (e.name.size() <= 4 || e.name.rfind("evt-", 0) != 0)
    return Internal("stored event '" + e.name + "': metadata.name is not evt-<number>");
  e.warning = GetOr(j, "type", std::string("Normal")) == "Warning";
  e.reason = GetOr(j, "reason", std::string());
  e.object = GetOr(j, "object", std::string());
  // The object's key again (common/object_key.h): EventJson shows its namespace apart.
  const std::string namespace_name =
      GetOr(Child(j, "metadata"), "namespace", std::string(kDefaultNamespace));
  if (const size_t slash = e.object.find('/'); slash != std::string::npos)
    e.object =
        e.object.substr(0, slash + 1) + ObjectKey(namespace_name, e.object.substr(slash + 1));
  e.message = GetOr(j, "message", std::string());
  e.time_ms = GetOr(j, "timeMs", int64_t{0});
  return e;
}

}  // namespace tessera::codec
