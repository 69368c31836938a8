#include "controller/controller.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "workload/worker_env.h"

namespace tessera::controller {
namespace {

constexpr const char* kJobKind = "TrainJob";
constexpr const char* kHostKind = "Host";
constexpr const char* kEventKind = "Event";
constexpr const char* kClusterQueueKind = "ClusterQueue";
constexpr const char* kLocalQueueKind = "LocalQueue";
constexpr const char* kPriorityClassKind = "PriorityClass";
// A job that names no LocalQueue goes to this one once ClusterQueues exist.
constexpr const char* kDefaultLocalQueue = "default";

AdmissionOptions MakeAdmissionOptions(const ControllerOptions& o) {
  AdmissionOptions a;
  a.planner = o.planner;
  a.start_guard = o.start_guard;
  a.fair_sharing = o.fair_sharing;
  a.preemption_grace_ms = o.preemption_grace_ms;
  return a;
}

ApiError BadRequest(const Status& s) {
  // Messages start with the field path: "spec.topology: ...".
  const std::string& m = s.message();
  const size_t colon = m.find(':');
  std::string field = colon == std::string::npos ? "" : m.substr(0, colon);
  if (field.find(' ') != std::string::npos) field.clear();
  return {422, m, field};
}

HostLossAction ToAction(api::HostLossPolicy p) {
  switch (p) {
    case api::HostLossPolicy::kPause:
      return HostLossAction::kPause;
    case api::HostLossPolicy::kResize:
      return HostLossAction::kResize;
    case api::HostLossPolicy::kFail:
      break;
  }
  return HostLossAction::kFail;
}

std::string Seconds(int64_t ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f s", static_cast<double>(ms) / 1000.0);
  return buf;
}

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
  a.attempt = j.value("attempt", 0);
  a.slices = j.value("slices", 0);
  a.world_size = j.value("worldSize", 0);
  a.placed_ms = j.value("placedMs", int64_t{0});
  a.running_ms = j.value("runningMs", int64_t{0});
  a.first_step_ms = j.value("firstStepMs", int64_t{0});
  a.first_step = j.value("firstStep", int64_t{-1});
  a.last_step = j.value("lastStep", int64_t{-1});
  a.last_step_ms = j.value("lastStepMs", int64_t{0});
  a.restored = j.value("restored", false);
  a.resumed_from_step = j.value("resumedFromStep", int64_t{-1});
  a.restore_seconds = j.value("restoreSeconds", 0.0);
  a.ended_ms = j.value("endedMs", int64_t{0});
  a.end_reason = j.value("endReason", "");
  a.failed_ranks = j.value("failedRanks", std::vector<int>{});
  a.failure_ms = j.value("failureMs", int64_t{0});
  a.detected_ms = j.value("detectedMs", int64_t{0});
  a.message = j.value("message", "");
  return a;
}

Json FiguresJson(const RecoveryFigures& f) {
  return {
      {"timeToDetectMs", f.time_to_detect_ms},        {"timeToScheduleMs", f.time_to_schedule_ms},
      {"timeToFirstStepMs", f.time_to_first_step_ms}, {"timeToRestoreMs", f.time_to_restore_ms},
      {"timeToRecoverMs", f.time_to_recover_ms},      {"stepsLost", f.steps_lost}};
}

std::string Pad(uint64_t v, int width) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%0*llu", width, static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

Controller::Controller(store::Store& store, const Clock& clock, ControllerOptions options)
    : store_(store),
      clock_(clock),
      options_(std::move(options)),
      planner_(options_.planner),
      admitter_(MakeAdmissionOptions(options_)),
      rng_(options_.seed) {}

void Controller::SetChangeListener(ChangeListener listener) {
  std::lock_guard lock(mu_);
  on_change_ = std::move(listener);
}

void Controller::SetAssignmentListener(AssignmentListener listener) {
  std::lock_guard lock(mu_);
  on_assignments_ = std::move(listener);
}

Inventory Controller::InventorySnapshot() const {
  std::lock_guard lock(mu_);
  return inventory_;
}

// ---------------------------------------------------------------------------------------------
// Documents

Json Controller::JobJson(const Job& job) const {
  Json meta = {{"name", job.spec.name},
               {"uid", job.seq},
               {"resourceVersion", job.version},
               {"creationTimestampMs", job.created_ms}};
  if (!job.spec.queue.empty()) meta["queue"] = job.spec.queue;
  if (!job.spec.labels.empty()) meta["labels"] = job.spec.labels;
  Json placement = Json::array();
  for (size_t s = 0; s < job.placement.size(); ++s)
    placement.push_back({{"slice", job.slice_names[s]}, {"hosts", job.placement[s]}});
  Json workers = Json::array();
  for (const auto& [rank, w] : job.workers)
    workers.push_back({{"rank", rank},
                       {"slice", w.slice},
                       {"worker", w.worker},
                       {"host", w.host},
                       {"state", w.state},
                       {"exitCode", w.exit_code},
                       {"signal", w.signal},
                       {"pid", w.pid}});
  Json status = {
      {"phase", job.phase},
      {"reason", job.reason},
      {"message", job.message},
      {"attempt", job.attempt},
      {"placement", placement},
      {"masterPort", job.master_port},
      {"jaxPort", job.jax_port},
      {"workers", workers},
      {"startTimeMs", job.start_ms},
      {"completionTimeMs", job.finish_ms},
      {"stopping", job.stopping},
      {"deleting", job.deleting},
      {"lastStep", job.last_step},
      {"lastCheckpointTimeMs", job.last_checkpoint_ms},
      {"pendingReason", job.pending_reason},
      {"queuePosition", job.queue_position},
      {"wouldHelp", job.would_help},
      {"preemptions", job.preemptions},
      {"deactivated", job.deactivated},
      {"slices", job.slices()},
      {"failures", job.failures},
      {"attempts", AttemptsJson(job)},
      {"recovery", RecoveryJson(job)},
      {"pendingSinceMs", job.pending_since_ms},
      {"admittedTimeMs", job.admitted_ms},
      {"progress", job.progress},
      {"checkpoints", job.checkpoints},
      {"lastCheckpointStep", job.last_checkpoint_step},
      {"restart",
       {{"minSlices", job.restart_min},
        {"maxSlices", job.restart_max},
        {"fastStop", job.fast_stop},
        {"stopGraceMs", job.stop_grace_ms}}},
      {"growBack",
       {{"targetSlices", job.grow_target}, {"afterCheckpointStep", job.grow_after_step}}},
      {"startGuard",
       {{"retries", job.start_guard.retries},
        {"backoffUntilMs", job.start_guard.backoff_until_ms},
        {"lastEviction", job.start_guard.last_eviction}}}};
  return {{"apiVersion", api::kApiVersion},
          {"kind", kJobKind},
          {"metadata", meta},
          {"spec", job.spec_json},
          {"status", status}};
}

Json Controller::AttemptsJson(const Job& job) const {
  Json out = Json::array();
  for (size_t i = 0; i < job.attempts.size(); ++i) {
    Json a = AttemptJson(job.attempts[i]);
    if (i > 0)
      if (auto f = ComputeRecoveryFigures(job.attempts[i - 1], job.attempts[i]))
        a["recovery"] = FiguresJson(*f);
    out.push_back(std::move(a));
  }
  return out;
}

Json Controller::RecoveryJson(const Job& job) const {
  const bool finished = job.phase == "Succeeded" || job.phase == "Failed";
  const int64_t end = finished && job.finish_ms > 0 ? job.finish_ms : clock_.NowMs();
  const JobRecovery r = SummarizeRecovery(job.attempts, end);
  const int64_t wall = job.attempts.empty() ? 0 : end - job.attempts.front().placed_ms;
  const CheckpointAdvice c =
      AdviseCheckpointInterval(job.checkpoints, job.failures, wall, job.spec.mtbf_ms);
  return {{"failures", job.failures},
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

Json Controller::HostJson(const HostRec& h) const {
  Json spec = {{"generation", GenerationName(h.generation)},
               {"chips", h.chips},
               {"address", h.address},
               {"agentPort", h.agent_port}};
  if (!h.slice.empty())
    spec["slice"] = {{"name", h.slice}, {"topology", h.topology}, {"worker", h.worker}};
  if (!h.cube.empty())
    spec["cube"] = {
        {"name", h.cube}, {"block", h.block}, {"coord", {h.coord.x, h.coord.y, h.coord.z}}};
  std::string owner;
  if (auto it = host_ids_.find(h.name); it != host_ids_.end() && inventory_ready_) {
    const OwnerId o = inventory_.host(it->second).owner;
    for (const auto& [name, job] : jobs_)
      if (o.valid() && job.seq == o.value()) owner = name;
  }
  return {{"apiVersion", api::kApiVersion},
          {"kind", kHostKind},
          {"metadata", {{"name", h.name}, {"labels", h.labels}, {"resourceVersion", h.version}}},
          {"spec", spec},
          {"status",
           {{"state", h.lost ? "Lost" : "Ready"},
            {"lastHeartbeatMs", h.last_heartbeat_ms},
            {"registeredMs", h.registered_ms},
            {"job", owner},
            {"usage", h.usage}}}};
}

Status Controller::PersistJob(Job& job, bool create) {
  const std::string body = JobJson(job).dump();
  auto r = create ? store_.Create(kJobKind, job.spec.name, body)
                  : store_.Update(kJobKind, job.spec.name, body, job.version);
  if (!r.ok()) return r.status();
  job.version = r->resource_version;
  job.progress_dirty = false;
  job.persisted_ms = clock_.NowMs();
  Emit(kJobKind, create ? "ADDED" : "MODIFIED", JobJson(job));
  return Status::Ok();
}

Status Controller::PersistHost(HostRec& h) {
  store::WriteBatch batch;
  batch.Put(kHostKind, h.name, HostJson(h).dump());
  auto r = store_.Commit(batch);
  if (!r.ok()) return r.status();
  h.version = *r;
  Emit(kHostKind, "MODIFIED", HostJson(h));
  return Status::Ok();
}

void Controller::Emit(const std::string& kind, const std::string& type, const Json& object) {
  if (on_change_) on_change_(kind, type, object);
}

void Controller::Event(const std::string& type, const std::string& reason,
                       const std::string& object, const std::string& message) {
  const std::string name = "evt-" + Pad(next_event_++, 10);
  Json e = {{"apiVersion", api::kApiVersion},
            {"kind", kEventKind},
            {"metadata", {{"name", name}}},
            {"type", type},
            {"reason", reason},
            {"object", object},
            {"message", message},
            {"timeMs", clock_.NowMs()}};
  store::WriteBatch batch;
  batch.Create(kEventKind, name, e.dump());
  if (events_.size() >= options_.max_events) {
    batch.Delete(kEventKind, events_.front()["metadata"]["name"].get<std::string>());
    events_.erase(events_.begin());
  }
  (void)store_.Commit(batch);  // events are best effort: losing one never blocks a decision
  events_.push_back(e);
  Emit(kEventKind, "ADDED", e);
}

// ---------------------------------------------------------------------------------------------
// Loading

Status Controller::Load() {
  std::lock_guard lock(mu_);
  const int64_t now = clock_.NowMs();
  auto hosts = store_.List(kHostKind);
  if (!hosts.ok()) return hosts.status();
  for (const auto& obj : *hosts) {
    Json j = Json::parse(obj.body, nullptr, false);
    if (j.is_discarded()) return Internal("stored host " + obj.name + " is not JSON");
    HostRec h;
    h.name = obj.name;
    h.version = obj.resource_version;
    const Json& spec = j["spec"];
    auto g = ParseGeneration(spec.value("generation", ""));
    if (!g.ok()) return Internal("stored host " + obj.name + ": " + g.status().message());
    h.generation = *g;
    h.chips = spec.value("chips", 4);
    h.address = spec.value("address", "127.0.0.1");
    h.agent_port = spec.value("agentPort", 0);
    if (spec.contains("slice")) {
      h.slice = spec["slice"].value("name", "");
      h.topology = spec["slice"].value("topology", "");
      h.worker = spec["slice"].value("worker", 0);
    }
    if (spec.contains("cube")) {
      h.cube = spec["cube"].value("name", "");
      h.block = spec["cube"].value("block", "");
      const Json& c = spec["cube"]["coord"];
      h.coord = Coord{c[0].get<int>(), c[1].get<int>(), c[2].get<int>()};
    }
    h.labels = j["metadata"].value("labels", Json::object());
    h.registered_ms = j["status"].value("registeredMs", now);
    h.last_heartbeat_ms = now;  // a fresh lease: agents reconnect, workers are adopted
    hosts_[h.name] = std::move(h);
  }
  auto jobs = store_.List(kJobKind);
  if (!jobs.ok()) return jobs.status();
  for (const auto& obj : *jobs) {
    Json j = Json::parse(obj.body, nullptr, false);
    if (j.is_discarded()) return Internal("stored job " + obj.name + " is not JSON");
    Json manifest = {{"apiVersion", j["apiVersion"]},
                     {"kind", j["kind"]},
                     {"metadata", {{"name", obj.name}}},
                     {"spec", j["spec"]}};
    if (j["metadata"].contains("queue")) manifest["metadata"]["queue"] = j["metadata"]["queue"];
    if (j["metadata"].contains("labels")) manifest["metadata"]["labels"] = j["metadata"]["labels"];
    auto spec = api::ParseTrainJob(manifest);
    if (!spec.ok()) return Internal("stored job " + obj.name + ": " + spec.status().message());
    Job job;
    job.spec = *spec;
    job.spec_json = j["spec"];
    job.version = obj.resource_version;
    job.seq = j["metadata"].value("uid", uint64_t{0});
    job.created_ms = j["metadata"].value("creationTimestampMs", int64_t{0});
    const Json& st = j["status"];
    job.phase = st.value("phase", "Pending");
    job.reason = st.value("reason", "");
    job.message = st.value("message", "");
    job.attempt = st.value("attempt", -1);
    job.master_port = st.value("masterPort", 0);
    job.jax_port = st.value("jaxPort", 0);
    job.start_ms = st.value("startTimeMs", int64_t{0});
    job.finish_ms = st.value("completionTimeMs", int64_t{0});
    job.stopping = st.value("stopping", false);
    job.deleting = st.value("deleting", false);
    job.last_step = st.value("lastStep", int64_t{-1});
    job.last_checkpoint_ms = st.value("lastCheckpointTimeMs", int64_t{0});
    job.pending_reason = st.value("pendingReason", "");
    job.queue_position = st.value("queuePosition", 0);
    job.would_help = st.value("wouldHelp", Json::array());
    job.preemptions = st.value("preemptions", 0);
    job.deactivated = st.value("deactivated", false);
    for (const Json& a : st.value("attempts", Json::array()))
      job.attempts.push_back(AttemptFromJson(a));
    job.failures = st.value("failures", 0);
    job.pending_since_ms = st.value("pendingSinceMs", int64_t{0});
    job.admitted_ms = st.value("admittedTimeMs", int64_t{0});
    job.progress = st.value("progress", job.progress);
    job.checkpoints = st.value("checkpoints", job.checkpoints);
    job.last_checkpoint_step = st.value("lastCheckpointStep", int64_t{-1});
    if (st.contains("restart") && st["restart"].is_object()) {
      job.restart_min = st["restart"].value("minSlices", 0);
      job.restart_max = st["restart"].value("maxSlices", 0);
      job.fast_stop = st["restart"].value("fastStop", false);
      job.stop_grace_ms = st["restart"].value("stopGraceMs", int64_t{-1});
    }
    if (st.contains("growBack") && st["growBack"].is_object()) {
      job.grow_target = st["growBack"].value("targetSlices", 0);
      job.grow_after_step = st["growBack"].value("afterCheckpointStep", int64_t{-1});
    }
    job.progress_epoch_ms = now;  // progress reports were not persisted: hang timers restart
    if (st.contains("startGuard") && st["startGuard"].is_object()) {
      job.start_guard.retries = st["startGuard"].value("retries", 0);
      job.start_guard.backoff_until_ms = st["startGuard"].value("backoffUntilMs", int64_t{0});
      job.start_guard.last_eviction = st["startGuard"].value("lastEviction", "");
    }
    for (const Json& p : st.value("placement", Json::array())) {
      job.slice_names.push_back(p.value("slice", ""));
      job.placement.push_back(p.value("hosts", std::vector<std::string>{}));
    }
    for (const Json& w : st.value("workers", Json::array())) {
      WorkerStatus ws;
      ws.host = w.value("host", "");
      ws.slice = w.value("slice", 0);
      ws.worker = w.value("worker", 0);
      ws.state = w.value("state", "Pending");
      ws.exit_code = w.value("exitCode", 0);
      ws.signal = w.value("signal", 0);
      ws.pid = w.value("pid", 0);
      job.workers[w.value("rank", 0)] = ws;
    }
    if (job.stopping)
      for (const auto& [rank, w] : job.workers)
        if (w.state == "Pending" || w.state == "Running") job.unconfirmed.insert(w.host);
    next_seq_ = std::max(next_seq_, job.seq + 1);
    jobs_[obj.name] = std::move(job);
  }
  for (const char* kind : {kClusterQueueKind, kLocalQueueKind, kPriorityClassKind})
    TESSERA_RETURN_IF_ERROR(LoadQueueObjects(kind));
  auto events = store_.List(kEventKind);
  if (!events.ok()) return events.status();
  for (const auto& obj : *events) {
    Json e = Json::parse(obj.body, nullptr, false);
    if (e.is_discarded()) continue;
    events_.push_back(std::move(e));
    next_event_ = std::max<uint64_t>(next_event_, std::stoull(obj.name.substr(4)) + 1);
  }
  RebuildInventory();
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// Inventory

void Controller::RebuildInventory() {
  inventory_ready_ = false;
  host_ids_.clear();
  host_names_.clear();
  slice_names_.clear();
  if (hosts_.empty()) return;
  const Generation gen = hosts_.begin()->second.generation;
  Result<Inventory> inv = InvalidArgument("no hosts");
  std::set<HostId> registered;
  if (Info(gen).rank == 2) {
    std::map<std::string, std::string> topology;  // slice -> shape
    for (const auto& [name, h] : hosts_) topology[h.slice] = h.topology;
    FleetSpec spec{gen, {}};
    for (const auto& [slice, shape] : topology) {
      spec.slices.push_back(*ParseShape(shape));
      slice_names_.push_back(slice);
    }
    inv = Inventory::MakeFleet(spec);
    if (!inv.ok()) return;
    for (const auto& [name, h] : hosts_) {
      const size_t s =
          std::find(slice_names_.begin(), slice_names_.end(), h.slice) - slice_names_.begin();
      const auto& slice_hosts = inv->slice(SliceId(static_cast<uint32_t>(s))).hosts;
      if (h.worker < 0 || h.worker >= static_cast<int>(slice_hosts.size())) continue;
      host_ids_[name] = slice_hosts[h.worker];
    }
  } else {
    std::map<std::string, std::set<std::string>> blocks;
    for (const auto& [name, h] : hosts_) blocks[h.block].insert(h.cube);
    std::vector<int> sizes;
    std::map<std::string, uint32_t> cube_index;
    for (const auto& [block, cubes] : blocks) {
      sizes.push_back(static_cast<int>(cubes.size()));
      for (const auto& c : cubes) cube_index[c] = static_cast<uint32_t>(cube_index.size());
    }
    // Cube ids follow block order then name order, as MakePod numbers them.
    uint32_t next = 0;
    for (const auto& [block, cubes] : blocks)
      for (const auto& c : cubes) cube_index[c] = next++;
    inv = Inventory::MakePod(gen, sizes);
    if (!inv.ok()) return;
    for (const auto& [name, h] : hosts_) {
      const Cube& cube = inv->cube(CubeId(cube_index[h.cube]));
      if (h.coord.x < 0 || h.coord.x > 1 || h.coord.y < 0 || h.coord.y > 1 || h.coord.z < 0 ||
          h.coord.z > 3)
        continue;
      host_ids_[name] = cube.hosts[CubeLocalIndex(h.coord.x, h.coord.y, h.coord.z)];
    }
  }
  inventory_ = std::move(*inv);
  for (const auto& [name, id] : host_ids_) {
    host_names_[id.value()] = name;
    registered.insert(id);
    if (hosts_[name].lost) (void)inventory_.SetHealth(id, Health::kDown);
  }
  // Hosts of a slice or cube whose agent has not registered yet cannot be placed on.
  for (const Host& h : inventory_.hosts())
    if (!registered.count(h.id)) (void)inventory_.SetHealth(h.id, Health::kDown);
  inventory_ready_ = true;
  for (const auto& [name, job] : jobs_)
    if (job.holds_chips()) ReserveJob(job);
}

void Controller::ReserveJob(const Job& job) {
  std::vector<HostId> ids;
  for (const auto& slice : job.placement)
    for (const auto& host : slice)
      if (auto it = host_ids_.find(host); it != host_ids_.end()) ids.push_back(it->second);
  if (!ids.empty()) (void)inventory_.Reserve(OwnerId(job.seq), ids);
}

// ---------------------------------------------------------------------------------------------
// Users

ApiResult<Json> Controller::CreateJob(const Json& doc) {
  auto spec = api::ParseTrainJob(doc);
  if (!spec.ok()) return BadRequest(spec.status());
  std::lock_guard lock(mu_);
  RefreshInventory();
  if (jobs_.count(spec->name))
    return ApiError{409,
                    "metadata.name: a TrainJob named '" + spec->name +
                        "' already exists; delete it first or choose another name",
                    "metadata.name"};
  if (inventory_ready_) {
    if (spec->accelerator != inventory_.generation())
      return ApiError{422,
                      "spec.accelerator: this cluster has " +
                          std::string(GenerationName(inventory_.generation())) + " hosts; a " +
                          std::string(GenerationName(spec->accelerator)) +
                          " job can never run here",
                      "spec.accelerator"};
    // A request the cluster could never hold, even empty, is refused up front.
    Inventory empty = inventory_;
    for (const auto& [owner, hosts] : inventory_.owners()) empty.Release(owner);
    for (const Host& h : empty.hosts()) (void)empty.SetHealth(h.id, Health::kHealthy);
    PlanResult p = planner_.Plan(empty, {spec->accelerator, spec->topology, spec->min_slices});
    if (p.reason == NoFit::kNeverFits || p.reason == NoFit::kNotEnoughChips)
      return ApiError{422,
                      "spec.topology: " + std::to_string(spec->min_slices) + " x " +
                          spec->topology.ToString() + " can never fit this cluster: " + p.message,
                      "spec.topology"};
  }
  if (!spec->priority.empty() && !priority_classes_.count(spec->priority)) {
    std::string known;
    for (const auto& [name, pc] : priority_classes_) known += (known.empty() ? "" : ", ") + name;
    return ApiError{422,
                    "spec.priority: PriorityClass '" + spec->priority +
                        "' does not exist; known: " + (known.empty() ? "none" : known),
                    "spec.priority"};
  }
  Job job;
  job.spec = *spec;
  job.spec_json = doc["spec"];
  job.seq = next_seq_++;
  job.created_ms = clock_.NowMs();
  job.pending_since_ms = job.created_ms;
  job.reason = "Pending";
  job.message = "waiting for the scheduler";
  Status s = PersistJob(job, /*create=*/true);
  if (!s.ok()) {
    if (s.code() == StatusCode::kAlreadyExists)
      return ApiError{409, "metadata.name: '" + spec->name + "' already exists", "metadata.name"};
    return ApiError{503, "store: " + s.message(), ""};
  }
  Json out = JobJson(job);
  jobs_[spec->name] = std::move(job);
  Event("Normal", "Created", "trainjob/" + spec->name, "accepted");
  Schedule();
  return out;
}

ApiResult<Json> Controller::GetJob(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = jobs_.find(name);
  if (it == jobs_.end()) return ApiError{404, "trainjob '" + name + "' not found", ""};
  return JobJson(it->second);
}

Json Controller::ListJobs() const {
  std::lock_guard lock(mu_);
  std::vector<const Job*> jobs;
  for (const auto& [name, job] : jobs_) jobs.push_back(&job);
  std::sort(jobs.begin(), jobs.end(), [](const Job* a, const Job* b) { return a->seq < b->seq; });
  Json items = Json::array();
  for (const Job* j : jobs) items.push_back(JobJson(*j));
  return {{"kind", "TrainJobList"}, {"items", items}};
}

Json Controller::ListHosts() const {
  std::lock_guard lock(mu_);
  Json items = Json::array();
  for (const auto& [name, h] : hosts_) items.push_back(HostJson(h));
  return {{"kind", "HostList"}, {"items", items}};
}

Json Controller::ListEvents() const {
  std::lock_guard lock(mu_);
  return {{"kind", "EventList"}, {"items", events_}};
}

// ---------------------------------------------------------------------------------------------
// Admission resources

ApiResult<Json> Controller::Apply(const Json& doc) {
  auto kind = api::DocumentKind(doc);
  if (!kind.ok()) return BadRequest(kind.status());
  if (*kind == kJobKind) return CreateJob(doc);
  return ApplyQueueObject(*kind, doc);
}

ApiResult<Json> Controller::ApplyQueueObject(const std::string& kind, const Json& doc) {
  Status valid = Status::Ok();
  std::string name;
  if (kind == kClusterQueueKind) {
    auto r = api::ParseClusterQueue(doc);
    valid = r.status();
    if (r.ok()) name = r->name;
  } else if (kind == kLocalQueueKind) {
    auto r = api::ParseLocalQueue(doc);
    valid = r.status();
    if (r.ok()) name = r->name;
  } else {
    auto r = api::ParsePriorityClass(doc);
    valid = r.status();
    if (r.ok()) name = r->name;
  }
  if (!valid.ok()) return BadRequest(valid);
  Json stored = doc;
  stored.erase("status");
  std::lock_guard lock(mu_);
  auto& objects = kind == kClusterQueueKind ? cluster_queues_
                  : kind == kLocalQueueKind ? local_queues_
                                            : priority_classes_;
  const bool created = !objects.count(name);
  store::WriteBatch batch;
  batch.Put(kind, name, stored.dump());
  auto r = store_.Commit(batch);
  if (!r.ok()) return ApiError{503, "store: " + r.status().message(), ""};
  QueueObject& o = objects[name];
  o.doc = stored;
  o.version = *r;
  std::string lower = kind;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  Event("Normal", created ? "Created" : "Configured", lower + "/" + name,
        created ? "created" : "replaced");
  Json out = QueueObjectJson(kind, o);
  Emit(kind, created ? "ADDED" : "MODIFIED", out);
  Schedule();
  out["status"] = QueueObjectJson(kind, o)["status"];  // after the pass it triggered
  out["created"] = created;
  return out;
}

Status Controller::LoadQueueObjects(const std::string& kind) {
  auto objects = store_.List(kind);
  if (!objects.ok()) return objects.status();
  auto& into = kind == kClusterQueueKind ? cluster_queues_
               : kind == kLocalQueueKind ? local_queues_
                                         : priority_classes_;
  for (const auto& obj : *objects) {
    Json j = Json::parse(obj.body, nullptr, false);
    if (j.is_discarded()) return Internal("stored " + kind + " " + obj.name + " is not JSON");
    Status valid = kind == kClusterQueueKind ? api::ParseClusterQueue(j).status()
                   : kind == kLocalQueueKind ? api::ParseLocalQueue(j).status()
                                             : api::ParsePriorityClass(j).status();
    if (!valid.ok()) return Internal("stored " + kind + " " + obj.name + ": " + valid.message());
    into[obj.name] = QueueObject{j, obj.resource_version};
  }
  return Status::Ok();
}

Json Controller::QueueObjectJson(const std::string& kind, const QueueObject& o) const {
  Json out = o.doc;
  out["metadata"]["resourceVersion"] = o.version;
  if (kind == kClusterQueueKind) {
    const std::string name = o.doc["metadata"].value("name", "");
    ClusterQueueUsage u;
    if (auto it = usage_.find(name); it != usage_.end()) u = it->second;
    int64_t nominal = u.nominal_chips;
    if (!usage_.count(name)) {
      // No cycle yet (no hosts): the nominal quota of the first listed generation.
      const Json& quotas = o.doc["spec"].value("quotas", Json::array());
      if (!quotas.empty()) nominal = quotas[0].value("nominalQuota", int64_t{0});
    }
    out["status"] = {{"nominalChips", nominal},
                     {"usedChips", u.used_chips},
                     {"borrowedChips", u.borrowed_chips},
                     {"lendableChips", u.lendable_chips},
                     {"pendingWorkloads", u.pending_workloads},
                     {"admittedWorkloads", u.admitted_workloads},
                     {"share", u.share}};
  }
  return out;
}

Json Controller::ListClusterQueues() const {
  std::lock_guard lock(mu_);
  Json items = Json::array();
  for (const auto& [name, o] : cluster_queues_)
    items.push_back(QueueObjectJson(kClusterQueueKind, o));
  return {{"kind", "ClusterQueueList"}, {"items", items}};
}

Json Controller::ListLocalQueues() const {
  std::lock_guard lock(mu_);
  Json items = Json::array();
  for (const auto& [name, o] : local_queues_) items.push_back(QueueObjectJson(kLocalQueueKind, o));
  return {{"kind", "LocalQueueList"}, {"items", items}};
}

Json Controller::ListPriorityClasses() const {
  std::lock_guard lock(mu_);
  Json items = Json::array();
  for (const auto& [name, o] : priority_classes_)
    items.push_back(QueueObjectJson(kPriorityClassKind, o));
  return {{"kind", "PriorityClassList"}, {"items", items}};
}

ApiResult<Json> Controller::DeleteJob(const std::string& name) {
  std::lock_guard lock(mu_);
  auto it = jobs_.find(name);
  if (it == jobs_.end()) return ApiError{404, "trainjob '" + name + "' not found", ""};
  Job& job = it->second;
  if (job.deleting) return Json{{"name", name}, {"status", "Terminating"}};
  job.deleting = true;
  Event("Normal", "Deleting", "trainjob/" + name, "stopping every worker, then releasing chips");
  if (job.stopping) {
    (void)PersistJob(job);
    return Json{{"name", name}, {"status", "Terminating"}};
  }
  if (job.holds_chips()) {
    EndAttempt(job, "Deleted");
    StopJob(job, "Terminating", "Deleted", "deleted by a user; stopping every worker");
    if (jobs_.count(name)) return Json{{"name", name}, {"status", "Terminating"}};
    return Json{{"name", name}, {"status", "Deleted"}};
  }
  (void)store_.Delete(kJobKind, name);
  Emit(kJobKind, "DELETED", JobJson(job));
  jobs_.erase(it);
  Schedule();
  return Json{{"name", name}, {"status", "Deleted"}};
}

ApiResult<Controller::LogLocation> Controller::LocateLog(const std::string& name, int rank) const {
  std::lock_guard lock(mu_);
  auto it = jobs_.find(name);
  if (it == jobs_.end()) return ApiError{404, "trainjob '" + name + "' not found", ""};
  const Job& job = it->second;
  if (job.attempt < 0)
    return ApiError{404, "trainjob '" + name + "' has not started yet (" + job.reason + ")", ""};
  auto w = job.workers.find(rank);
  if (w == job.workers.end())
    return ApiError{
        400,
        "worker: trainjob '" + name + "' has workers 0.." + std::to_string(job.workers.size() - 1),
        "worker"};
  auto h = hosts_.find(w->second.host);
  if (h == hosts_.end()) return ApiError{404, "host " + w->second.host + " is gone", ""};
  LogLocation loc;
  loc.address = h->second.address;
  loc.port = h->second.agent_port;
  loc.path = "/logs/" + name + "/" + std::to_string(job.attempt) + "/" + std::to_string(rank);
  loc.running = w->second.state == "Running" || w->second.state == "Pending";
  return loc;
}

// ---------------------------------------------------------------------------------------------
// Agents

ApiResult<Json> Controller::RegisterHost(const Json& body) {
  if (!body.is_object()) return ApiError{400, "body: must be a JSON object", ""};
  HostRec h;
  h.name = body.value("name", "");
  Status valid = api::ValidateName("name", h.name);
  if (!valid.ok()) return BadRequest(valid);
  auto g = ParseGeneration(body.value("generation", ""));
  if (!g.ok()) return ApiError{422, "generation: " + g.status().message(), "generation"};
  h.generation = *g;
  h.chips = body.value("chips", 4);
  h.address = body.value("address", "127.0.0.1");
  h.agent_port = body.value("agentPort", 0);
  h.labels = body.value("labels", Json::object());
  if (Info(h.generation).rank == 2) {
    if (!body.contains("slice") || !body["slice"].is_object())
      return ApiError{422,
                      "slice: a " + std::string(GenerationName(h.generation)) +
                          " host must say which slice it belongs to",
                      "slice"};
    const Json& s = body["slice"];
    h.slice = s.value("name", "");
    h.topology = s.value("topology", "");
    h.worker = s.value("worker", -1);
    auto topo = SliceTopology::Parse(GenerationName(h.generation), h.topology);
    if (!topo.ok()) return ApiError{422, "slice.topology: " + topo.status().message(), "slice"};
    if (h.slice.empty()) return ApiError{422, "slice.name: required", "slice.name"};
    if (h.worker < 0 || h.worker >= topo->hosts())
      return ApiError{
          422,
          "slice.worker: must be 0.." + std::to_string(topo->hosts() - 1) + " for " + h.topology,
          "slice.worker"};
  } else {
    if (!body.contains("cube") || !body["cube"].is_object())
      return ApiError{422, "cube: a 3D host must say which cube it belongs to", "cube"};
    const Json& c = body["cube"];
    h.cube = c.value("name", "");
    h.block = c.value("block", "block-00");
    const Json coord = c.value("coord", Json::array());
    if (h.cube.empty()) return ApiError{422, "cube.name: required", "cube.name"};
    if (!coord.is_array() || coord.size() != 3)
      return ApiError{422, "cube.coord: [x, y, z] with x, y in 0..1 and z in 0..3", "cube.coord"};
    h.coord = Coord{coord[0].get<int>(), coord[1].get<int>(), coord[2].get<int>()};
    if (h.coord.x < 0 || h.coord.x > 1 || h.coord.y < 0 || h.coord.y > 1 || h.coord.z < 0 ||
        h.coord.z > 3)
      return ApiError{422, "cube.coord: [x, y, z] with x, y in 0..1 and z in 0..3", "cube.coord"};
  }
  std::lock_guard lock(mu_);
  const int64_t now = clock_.NowMs();
  for (const auto& [name, other] : hosts_) {
    if (name == h.name) continue;
    if (other.generation != h.generation)
      return ApiError{409,
                      "generation: this cluster has " +
                          std::string(GenerationName(other.generation)) + " hosts",
                      "generation"};
    if (!h.slice.empty() && other.slice == h.slice && other.topology != h.topology)
      return ApiError{409, "slice.topology: slice " + h.slice + " is " + other.topology,
                      "slice.topology"};
    if (!h.slice.empty() && other.slice == h.slice && other.worker == h.worker)
      return ApiError{409,
                      "slice.worker: worker " + std::to_string(h.worker) + " of " + h.slice +
                          " is already host " + name,
                      "slice.worker"};
    if (!h.cube.empty() && other.cube == h.cube && other.coord == h.coord)
      return ApiError{409, "cube.coord: that position of " + h.cube + " is already host " + name,
                      "cube.coord"};
    if (!h.cube.empty() && other.cube == h.cube && other.block != h.block)
      return ApiError{409, "cube.block: cube " + h.cube + " is in " + other.block, "cube.block"};
  }
  auto existing = hosts_.find(h.name);
  const bool membership_changed = existing == hosts_.end() || existing->second.slice != h.slice ||
                                  existing->second.worker != h.worker ||
                                  existing->second.cube != h.cube ||
                                  existing->second.coord != h.coord || existing->second.lost;
  h.registered_ms = now;
  h.last_heartbeat_ms = now;
  if (existing != hosts_.end()) h.version = existing->second.version;
  const bool recovered = existing != hosts_.end() && existing->second.lost;
  hosts_[h.name] = h;
  Status s = PersistHost(hosts_[h.name]);
  if (!s.ok()) return ApiError{503, "store: " + s.message(), ""};
  // Rebuilding the inventory costs O(hosts); a fleet of N agents joining at once would pay it N
  // times. Mark it stale instead: the next scheduling pass (the head's loop runs one within a
  // tick) rebuilds it once.
  if (membership_changed) inventory_dirty_ = true;
  Event("Normal", recovered ? "HostRecovered" : "Registered", "host/" + h.name,
        h.slice.empty() ? h.cube + " " + std::to_string(h.coord.x) + "," +
                              std::to_string(h.coord.y) + "," + std::to_string(h.coord.z)
                        : h.slice + " worker " + std::to_string(h.worker));
  return Json{{"host", h.name},
              {"heartbeatIntervalMs", options_.heartbeat_interval_ms},
              {"leaseMs", options_.lease_ms}};
}

ApiResult<Json> Controller::Heartbeat(const std::string& name, const Json& body) {
  if (!body.is_object()) return ApiError{400, "body: must be a JSON object", ""};
  std::lock_guard lock(mu_);
  auto it = hosts_.find(name);
  if (it == hosts_.end())
    return ApiError{404, "host '" + name + "' is not registered; register first", ""};
  HostRec& h = it->second;
  h.last_heartbeat_ms = clock_.NowMs();
  if (body.contains("usage") && body["usage"].is_object()) h.usage = body["usage"];
  if (h.lost) {
    h.lost = false;
    if (auto id = host_ids_.find(name); id != host_ids_.end())
      (void)inventory_.SetHealth(id->second, Health::kHealthy);
    (void)PersistHost(h);
    Event("Normal", "HostRecovered", "host/" + name, "heartbeats resumed");
  }
  const Json workers = body.value("workers", Json::array());
  const int64_t applied = body.value("revision", int64_t{-1});
  for (const Json& w : workers) {
    if (!w.is_object()) continue;
    auto j = jobs_.find(w.value("job", ""));
    if (j == jobs_.end()) continue;
    Job& job = j->second;
    if (job.stopping || w.value("attempt", -1) != job.attempt) continue;
    auto ws = job.workers.find(w.value("rank", -1));
    if (ws == job.workers.end() || ws->second.host != name) continue;
    const std::string state = w.value("state", "");
    if (state == "Running" && ws->second.state == "Pending") {
      ws->second.state = "Running";
      ws->second.pid = w.value("pid", 0);
      const bool all_running =
          std::all_of(job.workers.begin(), job.workers.end(),
                      [](const auto& kv) { return kv.second.state != "Pending"; });
      if (all_running && job.phase == "Starting") {
        if (!job.attempts.empty()) job.attempts.back().running_ms = clock_.NowMs();
        job.phase = "Running";
        job.reason = "Running";
        job.message = "all " + std::to_string(job.workers.size()) + " workers running";
        Event("Normal", "Started", "trainjob/" + job.spec.name, job.message);
      }
      (void)PersistJob(job);
    } else if (state == "Exited" &&
               (ws->second.state == "Running" || ws->second.state == "Pending")) {
      ws->second.exit_code = w.value("exitCode", 0);
      ws->second.signal = w.value("signal", 0);
      ws->second.pid = w.value("pid", ws->second.pid);
      const int rank = ws->first;
      if (ws->second.exit_code == 0 && ws->second.signal == 0) {
        ws->second.state = "Succeeded";
        const bool all_done =
            std::all_of(job.workers.begin(), job.workers.end(),
                        [](const auto& kv) { return kv.second.state == "Succeeded"; });
        if (all_done) {
          EndAttempt(job, "Succeeded");
          StopJob(job, "Succeeded", "Completed",
                  "all " + std::to_string(job.workers.size()) + " workers exited 0");
        } else
          (void)PersistJob(job);
      } else {
        ws->second.state = "Failed";
        const std::string how = ws->second.signal != 0
                                    ? "was killed by signal " + std::to_string(ws->second.signal)
                                    : "exited with code " + std::to_string(ws->second.exit_code);
        FailAttempt(job, FailureKind::kWorkerFailed, {rank}, w.value("finishedAtMs", int64_t{0}),
                    "worker rank " + std::to_string(rank) + " on host " + name + " " + how);
      }
    }
  }
  for (const Json& p : body.value("progress", Json::array())) {
    if (!p.is_object()) continue;
    auto j = jobs_.find(p.value("job", ""));
    if (j == jobs_.end() || j->second.stopping || p.value("attempt", -1) != j->second.attempt)
      continue;
    RecordProgress(j->second, p);
  }
  // Jobs being stopped: this heartbeat may confirm that their workers here are gone.
  std::vector<std::string> stopping;
  for (auto& [jn, job] : jobs_)
    if (job.stopping && job.unconfirmed.count(name) && applied >= job.stop_revision)
      stopping.push_back(jn);
  for (const auto& jn : stopping) ConfirmStopped(jobs_[jn], name, workers);
  return AssignmentsLocked(name);
}

void Controller::ConfirmStopped(Job& job, const std::string& host, const Json& workers) {
  for (const Json& w : workers)
    if (w.value("job", "") == job.spec.name && w.value("state", "") == "Running") return;
  job.unconfirmed.erase(host);
  if (job.unconfirmed.empty()) FinishStopping(job);
}

void Controller::FinishStopping(Job& job) {
  job.stopping = false;
  if (inventory_ready_) inventory_.Release(OwnerId(job.seq));
  const std::string name = job.spec.name;
  if (job.deleting) {
    (void)store_.Delete(kJobKind, name);
    Emit(kJobKind, "DELETED", JobJson(job));
    Event("Normal", "Deleted", "trainjob/" + name, "every worker stopped; chips released");
    jobs_.erase(name);
  } else {
    if (job.phase == "Restarting") {
      job.phase = "Pending";
      job.pending_since_ms = clock_.NowMs();
    }
    (void)PersistJob(job);
    Event("Normal", "Released", "trainjob/" + name, "every worker stopped; chips released");
  }
  Schedule();
}

void Controller::BeginStopping(Job& job) {
  job.stopping = true;
  job.unconfirmed.clear();
  // Workers that reported their exit are known to be gone; every other one must be confirmed
  // stopped by its host (lost hosts cannot confirm and are marked down instead).
  for (const auto& [rank, w] : job.workers) {
    auto h = hosts_.find(w.host);
    const bool may_run = w.state == "Pending" || w.state == "Running";
    if (may_run && h != hosts_.end() && !h->second.lost) job.unconfirmed.insert(w.host);
  }
  job.stop_revision = ++assignment_revision_;
}

void Controller::StopJob(Job& job, const std::string& phase, const std::string& reason,
                         const std::string& message) {
  job.phase = phase;
  job.reason = reason;
  job.message = message;
  job.finish_ms = clock_.NowMs();
  BeginStopping(job);
  Event(phase == "Failed" ? "Warning" : "Normal", reason, "trainjob/" + job.spec.name, message);
  NotifyHosts(job);
  if (job.unconfirmed.empty()) {
    FinishStopping(job);  // may erase the job
    return;
  }
  (void)PersistJob(job);
}

// ---------------------------------------------------------------------------------------------
// Scheduling

void Controller::Tick() {
  std::lock_guard lock(mu_);
  const int64_t now = clock_.NowMs();
  for (auto& [name, h] : hosts_) {
    if (h.lost || now - h.last_heartbeat_ms <= options_.lease_ms) continue;
    h.lost = true;
    if (auto id = host_ids_.find(name); id != host_ids_.end())
      (void)inventory_.SetHealth(id->second, Health::kDown);
    (void)PersistHost(h);
    const std::string why = "no heartbeat for " +
                            std::to_string((now - h.last_heartbeat_ms) / 1000.0).substr(0, 4) +
                            " s (lease " + std::to_string(options_.lease_ms) + " ms)";
    Event("Warning", "HostLost", "host/" + name, why);
    std::vector<std::string> affected;
    for (auto& [jn, job] : jobs_) {
      bool on_host = false;
      for (const auto& [rank, w] : job.workers) on_host = on_host || w.host == name;
      const bool restarting = job.restart_min > 0 && (job.phase == "Pending" || job.stopping);
      if (on_host && (job.holds_chips() || restarting)) affected.push_back(jn);
    }
    for (const auto& jn : affected) {
      Job& job = jobs_[jn];
      // A restart decided before this loss (its workers failed first, e.g. their peer died
      // with the host) follows the host-loss policy from now on: resize may take fewer slices.
      if (job.restart_min > 0 && job.spec.on_host_loss == api::HostLossPolicy::kResize &&
          job.restart_min > job.spec.min_slices) {
        job.restart_min = job.spec.min_slices;
        job.restart_max = job.spec.max_slices;
        Event("Normal", "Restarting", "trainjob/" + jn,
              "host " + name +
                  " of the failed attempt is lost too: restart at the largest size "
                  "between " +
                  std::to_string(job.spec.min_slices) + " and " +
                  std::to_string(job.spec.max_slices) + " slices that fits (onHostLoss: resize)");
        if (!job.stopping) (void)PersistJob(job);
      }
      if (!job.holds_chips()) continue;
      if (job.stopping) {
        job.unconfirmed.erase(name);
        if (job.unconfirmed.empty()) FinishStopping(job);
      } else {
        std::vector<int> ranks;
        for (const auto& [rank, w] : job.workers)
          if (w.host == name) ranks.push_back(rank);
        FailAttempt(job, FailureKind::kHostLost, ranks, h.last_heartbeat_ms,
                    "host " + name + " lost: " + why);
      }
    }
  }
  CheckHangs(now);
  std::vector<std::string> names;
  for (const auto& [name, job] : jobs_) names.push_back(name);
  for (const auto& name : names) {
    auto it = jobs_.find(name);
    if (it == jobs_.end()) continue;
    Job& job = it->second;
    CheckGrowBack(job, now);
    // Progress is persisted (and pushed to watchers) at most once a second per job.
    if (job.progress_dirty && now - job.persisted_ms >= 1000) (void)PersistJob(job);
  }
  Schedule();
}

void Controller::RefreshInventory() {
  if (!inventory_dirty_) return;
  inventory_dirty_ = false;
  RebuildInventory();
}

void Controller::Schedule() {
  RefreshInventory();
  if (!inventory_ready_) return;
  // Applying a decision may finish a stop at once (FinishStopping schedules again): run the
  // nested request as another pass instead of re-entering.
  if (scheduling_) {
    schedule_again_ = true;
    return;
  }
  scheduling_ = true;
  for (int pass = 0; pass < 4; ++pass) {
    schedule_again_ = false;
    if (cluster_queues_.empty())
      ScheduleFirstComeFirstServed();
    else
      ScheduleThroughQueues();
    if (!schedule_again_) break;
  }
  scheduling_ = false;
}

void Controller::SetPending(Job& job, const std::string& reason, const std::string& message,
                            int position, Json would_help) {
  if (reason == job.reason && message == job.message && reason == job.pending_reason &&
      position == job.queue_position && would_help == job.would_help)
    return;  // unchanged: no store write (this runs every tick)
  job.reason = reason;
  job.message = message;
  job.pending_reason = reason;
  job.queue_position = position;
  job.would_help = std::move(would_help);
  (void)PersistJob(job);
}

void Controller::ScheduleFirstComeFirstServed() {
  std::vector<Job*> pending;
  for (auto& [name, job] : jobs_)
    if (job.phase == "Pending" && !job.deleting && !job.stopping) pending.push_back(&job);
  std::sort(pending.begin(), pending.end(), [](Job* a, Job* b) { return a->seq < b->seq; });
  std::string blocked_by;
  int position = 0;
  for (Job* job : pending) {
    ++position;
    std::string reason, message;
    if (!blocked_by.empty()) {
      reason = "Queued";
      message = "waiting behind trainjob " + blocked_by + " (first come, first served)";
    } else {
      const auto [lo, hi] = SizeRange(*job);
      PlanResult plan = PlanLargest(inventory_, *job, lo, hi);
      if (plan.placed() && Admit(*job, plan)) {
        --position;
        continue;
      }
      reason = NoFitName(plan.reason);
      message = plan.message;
      // A job that can never fit waits with its reason but does not hold up the line.
      if (plan.reason != NoFit::kNeverFits && plan.reason != NoFit::kInvalidRequest)
        blocked_by = job->spec.name;
    }
    SetPending(*job, reason, message, position, Json::array());
  }
}

void Controller::ScheduleThroughQueues() {
  const int64_t now = clock_.NowMs();
  Snapshot snap;
  snap.inventory = inventory_;
  for (const auto& [name, o] : cluster_queues_)
    snap.cluster_queues.push_back(*api::ParseClusterQueue(o.doc));
  for (const auto& [name, o] : local_queues_)
    snap.local_queues.push_back(*api::ParseLocalQueue(o.doc));
  std::vector<PriorityClass> classes;
  for (const auto& [name, o] : priority_classes_)
    classes.push_back(*api::ParsePriorityClass(o.doc));
  std::map<uint64_t, Job*> by_seq;
  for (auto& [name, job] : jobs_) {
    if (job.deleting) continue;
    // Workers being stopped still hold their chips until the agents confirm; for planning the
    // chips count as free, and an admission placed on them waits (below).
    // A restarting job keeps its chips for its next attempt.
    if (job.stopping && job.phase != "Restarting") snap.inventory.Release(OwnerId(job.seq));
    WorkloadState state;
    if (job.phase == "Pending")
      state = job.deactivated ? WorkloadState::kDeactivated : WorkloadState::kPending;
    else if (job.phase == "Starting" && !job.stopping)
      state = WorkloadState::kAdmitted;
    else if (job.phase == "Running" && !job.stopping)
      state = WorkloadState::kRunning;
    else
      continue;  // finished, or stopping after it finished
    Workload w;
    w.id = WorkloadId(job.seq);
    w.name = job.spec.name;
    w.local_queue = job.spec.queue.empty() ? kDefaultLocalQueue : job.spec.queue;
    if (!job.spec.priority.empty()) {
      auto priority = ResolvePriority(classes, job.spec.priority);
      if (priority.ok()) w.priority = *priority;
    }
    // An elastic job asks for the largest size in its range that physically fits now, so it
    // starts as soon as its minimum fits; it grows back later (CheckGrowBack).
    const auto [lo, hi] = SizeRange(job);
    int slices = state == WorkloadState::kPending ? lo : job.slices();
    if (state == WorkloadState::kPending && lo < hi) {
      PlanResult fit = PlanLargest(snap.inventory, job, lo, hi);
      if (fit.placed()) slices = static_cast<int>(fit.slices.size());
    }
    w.request = {job.spec.accelerator, job.spec.topology, slices};
    w.creation_order = static_cast<int64_t>(job.seq);
    w.state = state;
    w.admitted_at_ms = job.start_ms;
    if (job.last_checkpoint_ms > 0 && job.last_checkpoint_ms >= job.start_ms)
      w.last_checkpoint_ms = job.last_checkpoint_ms;
    w.start_guard = job.start_guard;
    snap.workloads.push_back(std::move(w));
    by_seq[job.seq] = &job;
  }
  auto cycle = admitter_.Run(snap, now);
  if (!cycle.ok()) {
    // Bad queue configuration (e.g. a LocalQueue naming a missing ClusterQueue): nothing is
    // admitted; every waiting job says why.
    for (auto& [seq, job] : by_seq)
      if (job->phase == "Pending")
        SetPending(*job, "AdmissionError", cycle.status().message(), 0, Json::array());
    return;
  }
  usage_.clear();
  for (const ClusterQueueUsage& u : cycle->usage) usage_[u.name] = u;
  for (const Eviction& e : cycle->evictions)
    if (auto it = by_seq.find(e.workload.value()); it != by_seq.end()) Requeue(*it->second, e);
  std::set<uint64_t> admitted;
  for (const Admission& a : cycle->admissions) {
    auto it = by_seq.find(a.workload.value());
    if (it == by_seq.end()) continue;
    Job& job = *it->second;
    admitted.insert(job.seq);
    // Hosts still held (by workers being stopped): start once they are released.
    std::set<std::string> holders;
    for (const SlicePlacement& p : a.placement.slices)
      for (HostId h : p.hosts) {
        const OwnerId o = inventory_.host(h).owner;
        if (!o.valid()) continue;
        for (const auto& [name, other] : jobs_)
          if (other.seq == o.value()) holders.insert(name);
      }
    if (holders.empty() && Admit(job, a.placement)) continue;
    std::string names;
    for (const auto& n : holders) names += (names.empty() ? "" : ", ") + n;
    SetPending(job, "WaitingForPreemption",
               "admitted to " + a.cluster_queue + "; starts once the workers of " +
                   (names.empty() ? std::string("the preempted jobs") : names) + " have stopped",
               0, Json::array());
  }
  for (const PendingStatus& p : cycle->pending) {
    auto it = by_seq.find(p.workload.value());
    if (it == by_seq.end() || admitted.count(p.workload.value())) continue;
    Json help = Json::array();
    for (const Blocker& b : p.would_help)
      help.push_back({{"name", b.name},
                      {"clusterQueue", b.cluster_queue},
                      {"priority", b.priority},
                      {"chips", b.chips},
                      {"preemptible", b.preemptible}});
    SetPending(*it->second, PendingReasonName(p.reason), p.message, p.position, std::move(help));
  }
}

void Controller::Requeue(Job& job, const Eviction& e) {
  const bool preempted = e.cause == EvictionCause::kPreempted;
  job.phase = "Pending";
  job.reason = preempted ? "Preempted" : "StartTimeout";
  job.pending_reason = job.reason;
  job.message = e.message;
  job.start_guard = e.start_guard;
  job.deactivated = e.deactivated;
  if (preempted) ++job.preemptions;
  EndAttempt(job, preempted ? "Preempted" : "StartTimeout");
  job.pending_since_ms = clock_.NowMs();
  job.would_help = Json::array();
  job.queue_position = 0;
  job.stop_grace_ms = preempted ? e.grace_ms : -1;
  BeginStopping(job);
  Event("Warning", job.reason, "trainjob/" + job.spec.name,
        e.message + (preempted ? "; workers get SIGTERM and " + std::to_string(e.grace_ms / 1000) +
                                     " s to checkpoint, then the job is requeued"
                               : ""));
  NotifyHosts(job);
  if (job.unconfirmed.empty()) {
    FinishStopping(job);
    return;
  }
  (void)PersistJob(job);
}

bool Controller::Admit(Job& job, const PlanResult& plan) {
  if (!ApplyPlan(inventory_, OwnerId(job.seq), plan).ok()) return false;
  const int64_t now = clock_.NowMs();
  const int previous_slices = job.attempts.empty() ? 0 : job.attempts.back().slices;
  const int previous_port = job.master_port;
  job.attempt += 1;
  job.placement.clear();
  job.slice_names.clear();
  job.workers.clear();
  for (size_t s = 0; s < plan.slices.size(); ++s) {
    const SlicePlacement& p = plan.slices[s];
    std::vector<std::string> names;
    for (HostId id : p.hosts) names.push_back(host_names_[id.value()]);
    job.placement.push_back(names);
    job.slice_names.push_back(p.fixed_slice.valid() ? slice_names_[p.fixed_slice.value()]
                                                    : job.spec.name + "-s" + std::to_string(s));
    for (size_t w = 0; w < names.size(); ++w) {
      const int rank = static_cast<int>(s * names.size() + w);
      job.workers[rank] = WorkerStatus{names[w], static_cast<int>(s), static_cast<int>(w)};
    }
  }
  // Fresh ports every attempt: a stale rendezvous port is a known cause of hangs after restarts.
  do {
    job.master_port =
        options_.port_range_start + static_cast<int>(rng_.Uniform(options_.port_range_size - 1));
  } while (job.master_port == previous_port || job.master_port + 1 == previous_port);
  job.jax_port = job.master_port + 1;
  AttemptRecord record;
  record.attempt = job.attempt;
  record.slices = static_cast<int>(plan.slices.size());
  record.world_size = static_cast<int>(job.workers.size());
  record.placed_ms = now;
  job.attempts.push_back(record);
  job.ranks.clear();
  job.first_progress_ms = 0;
  job.restart_min = job.restart_max = 0;
  job.fast_stop = false;
  job.stop_grace_ms = -1;
  job.grow_target = 0;
  job.grow_after_step = -1;
  job.next_grow_check_ms = now + job.spec.grow_back_interval_ms;
  job.admitted_ms = now;
  job.phase = "Starting";
  job.reason = "Placed";
  job.pending_reason.clear();
  job.queue_position = 0;
  job.would_help = Json::array();
  std::string where;
  for (const auto& n : job.slice_names) where += (where.empty() ? "" : ", ") + n;
  job.message = "attempt " + std::to_string(job.attempt) + " placed on " + where;
  job.start_ms = now;
  job.finish_ms = 0;
  ++assignment_revision_;
  (void)PersistJob(job);
  Event("Normal", "Placed", "trainjob/" + job.spec.name, job.message);
  if (previous_slices > 0 && previous_slices != job.slices())
    Event("Normal", "Resized", "trainjob/" + job.spec.name,
          "attempt " + std::to_string(job.attempt) + " runs on " + std::to_string(job.slices()) +
              " slices (was " + std::to_string(previous_slices) + ")");
  NotifyHosts(job);
  return true;
}

void Controller::NotifyHosts(const Job& job) {
  if (!on_assignments_) return;
  std::set<std::string> hosts;
  for (const auto& [rank, w] : job.workers) hosts.insert(w.host);
  on_assignments_(hosts);
}

ApiResult<Json> Controller::Assignments(const std::string& host) const {
  std::lock_guard lock(mu_);
  if (!hosts_.count(host))
    return ApiError{404, "host '" + host + "' is not registered; register first", ""};
  return AssignmentsLocked(host);
}

Json Controller::AssignmentsLocked(const std::string& host) const {
  Json out = Json::array();
  std::vector<const Job*> jobs;
  for (const auto& [name, job] : jobs_)
    if ((job.phase == "Starting" || job.phase == "Running") && !job.stopping) jobs.push_back(&job);
  std::sort(jobs.begin(), jobs.end(), [](const Job* a, const Job* b) { return a->seq < b->seq; });
  for (const Job* job : jobs) {
    bool here = false;
    for (const auto& [rank, w] : job->workers) here = here || w.host == host;
    if (!here) continue;
    AttemptLayout layout;
    layout.job = job->spec.name;
    layout.attempt = job->attempt;
    layout.topology = *SliceTopology::Make(job->spec.accelerator, job->spec.topology);
    for (const auto& slice : job->placement) {
      layout.slices.emplace_back();
      for (const auto& hn : slice) {
        auto h = hosts_.find(hn);
        layout.slices.back().push_back({hn, h == hosts_.end() ? "127.0.0.1" : h->second.address});
      }
    }
    layout.slice_names = job->slice_names;
    layout.master_port = job->master_port;
    layout.jax_port = job->jax_port;
    layout.checkpoint_dir = job->spec.checkpoint_dir;
    for (const WorkerEnv& e : ComputeWorkerEnv(layout)) {
      if (e.host != host) continue;
      std::map<std::string, std::string> env = job->spec.env;
      for (const auto& [k, v] : e.env) env[k] = v;
      out.push_back({{"job", job->spec.name},
                     {"attempt", job->attempt},
                     {"rank", e.rank},
                     {"worker", e.worker},
                     {"command", job->spec.command},
                     {"env", env},
                     {"workingDir", job->spec.working_dir},
                     {"graceMs", job->spec.grace_ms}});
    }
  }
  Json reply = {{"revision", assignment_revision_}, {"assignments", out}};
  // Workers of a broken attempt are killed at once, preemption victims get the preemption's
  // grace instead of their own (docs/agent-protocol.md "stop").
  Json stop = Json::array();
  for (const auto& [name, job] : jobs_) {
    const int64_t grace = job.fast_stop ? 0 : job.stop_grace_ms;
    if (!job.stopping || job.attempt < 0 || grace < 0) continue;
    bool here = false;
    for (const auto& [rank, w] : job.workers) here = here || w.host == host;
    if (here) stop.push_back({{"job", name}, {"attempt", job.attempt}, {"graceMs", grace}});
  }
  if (!stop.empty()) reply["stop"] = std::move(stop);
  return reply;
}

// ---------------------------------------------------------------------------------------------
// Recovery (docs/elastic.md)

std::pair<int, int> Controller::SizeRange(const Job& job) const {
  if (job.restart_min > 0) return {job.restart_min, std::max(job.restart_min, job.restart_max)};
  return {job.spec.min_slices, job.spec.max_slices};
}

PlanResult Controller::PlanLargest(const Inventory& inventory, const Job& job, int lo,
                                   int hi) const {
  PlanResult plan;
  for (int n = hi; n >= lo; --n) {
    plan = planner_.Plan(inventory, {job.spec.accelerator, job.spec.topology, n});
    if (plan.placed()) return plan;
  }
  return plan;
}

void Controller::EndAttempt(Job& job, const std::string& end_reason) {
  if (job.attempts.empty() || job.attempts.back().ended_ms != 0) return;
  job.attempts.back().ended_ms = clock_.NowMs();
  job.attempts.back().end_reason = end_reason;
}

void Controller::FailAttempt(Job& job, FailureKind kind, std::vector<int> ranks, int64_t failure_ms,
                             const std::string& message) {
  const int64_t now = clock_.NowMs();
  if (!job.attempts.empty() && job.attempts.back().ended_ms == 0) {
    AttemptRecord& a = job.attempts.back();
    a.failed_ranks = std::move(ranks);
    a.failure_ms = failure_ms > 0 ? std::min(failure_ms, now) : now;
    a.detected_ms = now;
    a.message = message;
  }
  EndAttempt(job, FailureKindName(kind));
  ++job.failures;
  const std::string reason = kind == FailureKind::kHang ? "HangDetected" : FailureKindName(kind);
  const RecoveryDecision d =
      DecideRecovery(kind, ToAction(job.spec.on_host_loss), job.failures, job.spec.max_failures,
                     job.slices(), job.spec.min_slices, job.spec.max_slices);
  job.fast_stop = true;  // the attempt is broken: its state is in the last checkpoint
  job.grow_target = 0;
  if (d.fail) {
    std::string history;
    for (const AttemptRecord& a : job.attempts)
      history += (history.empty() ? "" : "; ") + std::string("attempt ") +
                 std::to_string(a.attempt) + " " + a.end_reason +
                 (a.last_step >= 0 ? " at step " + std::to_string(a.last_step) : "");
    StopJob(job, "Failed", reason, message + "; " + d.why + " (" + history + ")");
    return;
  }
  Event("Warning", reason, "trainjob/" + job.spec.name, message);
  job.restart_min = d.min_slices;
  job.restart_max = d.max_slices;
  job.phase = "Restarting";
  job.reason = "Restarting";
  const std::string budget =
      job.spec.max_failures < 0 ? "unlimited" : std::to_string(job.spec.max_failures);
  job.message = message + "; failure " + std::to_string(job.failures) + " of " + budget +
                ": stopping every worker, then " + d.why;
  BeginStopping(job);
  Event("Normal", "Restarting", "trainjob/" + job.spec.name, job.message);
  NotifyHosts(job);
  if (job.unconfirmed.empty()) {
    FinishStopping(job);
    return;
  }
  (void)PersistJob(job);
}

void Controller::RecordProgress(Job& job, const Json& p) {
  const std::string type = p.value("type", "");
  const int rank = p.value("rank", -1);
  const int64_t step = p.value("step", int64_t{-1});
  const int64_t now = clock_.NowMs();
  // Step times come from the worker (they measure the training, not the heartbeat batching);
  // staleness for hang detection is judged on the head's clock.
  int64_t at = p.value("timeMs", int64_t{0});
  if (at <= 0) at = now;
  if (!job.workers.count(rank) || job.attempts.empty()) return;
  AttemptRecord& a = job.attempts.back();
  RankProgress& rp = job.ranks[rank];
  if (type == "alive") {
    rp.last_alive_ms = now;
    return;
  }
  if (step < 0) return;
  if (type == "progress") {
    if (job.first_progress_ms == 0) job.first_progress_ms = now;
    rp.last_step = std::max(rp.last_step, step);
    rp.last_step_ms = now;
    if (rp.last_alive_ms > 0) rp.last_alive_ms = now;  // a step is a sign of life too
    job.last_step = std::max(job.last_step, step);
    if (a.first_step < 0) {
      a.first_step = step;
      a.first_step_ms = at;
      if (job.attempts.size() >= 2)
        if (auto f = ComputeRecoveryFigures(job.attempts[job.attempts.size() - 2], a))
          Event("Normal", "Recovered", "trainjob/" + job.spec.name,
                "attempt " + std::to_string(a.attempt) + " completed step " + std::to_string(step) +
                    " " + Seconds(f->time_to_recover_ms) + " after the failure (detect " +
                    Seconds(f->time_to_detect_ms) + ", schedule " +
                    Seconds(f->time_to_schedule_ms) + ", first step " +
                    Seconds(f->time_to_first_step_ms) + "); " + std::to_string(f->steps_lost) +
                    " steps lost");
    }
    if (step > a.last_step) {
      a.last_step = step;
      a.last_step_ms = at;
    }
    if (!job.progress.empty() && at - job.progress.back().first < 1000) {
      job.progress.back().second = std::max(job.progress.back().second, job.last_step);
    } else {
      job.progress.emplace_back(at, job.last_step);
      if (job.progress.size() > 240) job.progress.erase(job.progress.begin());
    }
    job.progress_dirty = true;
  } else if (type == "checkpoint") {
    rp.last_step_ms = now;  // saving is progress too (for hang detection)
    // The head's clock: preemption compares it with the head's now.
    job.last_checkpoint_ms = now;
    if (step > job.last_checkpoint_step) {  // every rank may report the same checkpoint
      job.last_checkpoint_step = step;
      job.checkpoints.emplace_back(at, p.value("seconds", 0.0));
      if (job.checkpoints.size() > 64) job.checkpoints.erase(job.checkpoints.begin());
    }
    job.progress_dirty = true;
    if (job.grow_target > 0 && step > job.grow_after_step) BeginGrowBack(job);
  } else if (type == "restore") {
    a.restored = true;
    a.resumed_from_step = step;
    a.restore_seconds = std::max(a.restore_seconds, p.value("seconds", 0.0));
    job.progress_dirty = true;
  }
}

void Controller::CheckHangs(int64_t now) {
  std::vector<std::pair<std::string, HangVerdict>> hung;
  for (auto& [name, job] : jobs_) {
    // Hang timers start at the attempt's first completed step: start-up (imports, rendezvous,
    // checkpoint restore) has no steps to report, and a group that never gets going fails in
    // its own rendezvous or collective timeout instead.
    if (job.phase != "Running" || job.stopping || job.spec.hang_timeout_ms <= 0 ||
        job.attempts.empty() || job.first_progress_ms == 0)
      continue;
    // Once a worker has finished, the job is past its last step: the others are finishing too
    // (final evaluation, checkpoint, teardown) and report no more steps.
    const bool finishing = std::any_of(job.workers.begin(), job.workers.end(), [](const auto& kv) {
      return kv.second.state == "Succeeded";
    });
    if (finishing) continue;
    std::map<int, RankProgress> ranks;
    for (const auto& [rank, w] : job.workers) {
      auto it = job.ranks.find(rank);
      ranks[rank] = it == job.ranks.end() ? RankProgress{} : it->second;
    }
    const int64_t since = std::max(job.first_progress_ms, job.progress_epoch_ms);
    HangVerdict v = FindHungRanks(ranks, since, now, job.spec.hang_timeout_ms, options_.lease_ms);
    if (v.hung) hung.emplace_back(name, std::move(v));
  }
  for (auto& [name, v] : hung) {
    auto it = jobs_.find(name);
    if (it == jobs_.end() || it->second.stopping) continue;
    FailAttempt(it->second, FailureKind::kHang, v.stuck_ranks, v.since_ms, "hang: " + v.message);
  }
}

void Controller::CheckGrowBack(Job& job, int64_t now) {
  if (job.phase != "Running" || job.stopping || job.deleting ||
      job.spec.on_host_loss != api::HostLossPolicy::kResize ||
      job.slices() >= job.spec.max_slices || now < job.next_grow_check_ms || !inventory_ready_)
    return;
  job.next_grow_check_ms = now + job.spec.grow_back_interval_ms;
  Inventory free_of_job = inventory_;
  free_of_job.Release(OwnerId(job.seq));
  PlanResult plan = PlanLargest(free_of_job, job, job.slices() + 1, job.spec.max_slices);
  if (!plan.placed()) {
    job.grow_target = 0;
    return;
  }
  const int target = static_cast<int>(plan.slices.size());
  if (job.grow_target == target) return;
  job.grow_target = target;
  job.grow_after_step = job.last_checkpoint_step;
  Event("Normal", "GrowingBack", "trainjob/" + job.spec.name,
        "capacity for " + std::to_string(target) + " slices is free; the job restarts at " +
            std::to_string(target) + " slices after its next checkpoint");
  (void)PersistJob(job);
}

void Controller::BeginGrowBack(Job& job) {
  Inventory free_of_job = inventory_;
  free_of_job.Release(OwnerId(job.seq));
  PlanResult plan = PlanLargest(free_of_job, job, job.slices() + 1, job.spec.max_slices);
  job.grow_target = 0;
  if (!plan.placed()) return;  // the capacity went to someone else: look again later
  EndAttempt(job, "GrowBack");
  job.restart_min = job.slices();
  job.restart_max = job.spec.max_slices;
  job.fast_stop = false;  // SIGTERM and the grace period: the workers may save their state
  job.stop_grace_ms = -1;
  job.phase = "Restarting";
  job.reason = "GrowingBack";
  job.message = "checkpoint at step " + std::to_string(job.last_checkpoint_step) +
                " saved; restarting at " + std::to_string(plan.slices.size()) + " slices";
  BeginStopping(job);
  Event("Normal", "GrowingBack", "trainjob/" + job.spec.name, job.message);
  NotifyHosts(job);
  if (job.unconfirmed.empty()) {
    FinishStopping(job);
    return;
  }
  (void)PersistJob(job);
}

}  // namespace tessera::controller
