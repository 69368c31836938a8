// Controller: the host registry. Agents register their host (its place in a slice or cube),
// heartbeat with their workers' states and progress, and read their assignments. The
// inventory the scheduler plans on is derived from the registered hosts.
#include <algorithm>

#include "api/manifest.h"
#include "controller/controller.h"

namespace tessera::controller {
namespace {

// The registration body as the head reads it today; the wire protocol's decoder replaces this.
Result<HostSpec> DecodeRegistration(const Json& body) {
  if (!body.is_object()) return InvalidArgument("body: must be a JSON object");
  HostSpec h;
  h.name = body.value("name", "");
  TESSERA_RETURN_IF_ERROR(api::ValidateName("name", h.name));
  auto g = ParseGeneration(body.value("generation", ""));
  if (!g.ok()) return InvalidArgument("generation: " + g.status().message());
  h.generation = *g;
  h.chips = body.value("chips", 4);
  h.address = body.value("address", "127.0.0.1");
  h.agent_port = body.value("agentPort", 0);
  const Json labels = body.value("labels", Json::object());
  for (const auto& [k, v] : labels.items())
    if (v.is_string()) h.labels[k] = v.get<std::string>();
  if (Info(h.generation).rank == 2) {
    if (!body.contains("slice") || !body["slice"].is_object())
      return InvalidArgument("slice: a " + std::string(GenerationName(h.generation)) +
                             " host must say which slice it belongs to");
    const Json& s = body["slice"];
    h.slice = SliceMembership{s.value("name", ""), s.value("topology", ""), s.value("worker", -1)};
  } else {
    if (!body.contains("cube") || !body["cube"].is_object())
      return InvalidArgument("cube: a 3D host must say which cube it belongs to");
    const Json& c = body["cube"];
    const Json coord = c.value("coord", Json::array());
    if (!coord.is_array() || coord.size() != 3 || !coord[0].is_number_integer() ||
        !coord[1].is_number_integer() || !coord[2].is_number_integer())
      return InvalidArgument("cube.coord: [x, y, z] with x, y in 0..1 and z in 0..3");
    h.cube = CubeMembership{c.value("name", ""), c.value("block", "block-00"),
                            Coord{coord[0].get<int>(), coord[1].get<int>(), coord[2].get<int>()}};
  }
  return h;
}

bool ValidCubeCoord(const Coord& c) {
  return c.x >= 0 && c.x <= 1 && c.y >= 0 && c.y <= 1 && c.z >= 0 && c.z <= 3;
}

// Checks a host's membership on its own: a valid slice topology and worker, or cube position.
Status ValidateMembership(const HostSpec& h) {
  if (h.slice) {
    auto topo = SliceTopology::Parse(GenerationName(h.generation), h.slice->topology);
    if (!topo.ok()) return InvalidArgument("slice.topology: " + topo.status().message());
    if (h.slice->name.empty()) return InvalidArgument("slice.name: required");
    if (h.slice->worker < 0 || h.slice->worker >= topo->hosts())
      return InvalidArgument("slice.worker: must be 0.." + std::to_string(topo->hosts() - 1) +
                             " for " + h.slice->topology);
  }
  if (h.cube) {
    if (h.cube->name.empty()) return InvalidArgument("cube.name: required");
    if (!ValidCubeCoord(h.cube->coord))
      return InvalidArgument("cube.coord: [x, y, z] with x, y in 0..1 and z in 0..3");
  }
  return Status::Ok();
}

// A host that conflicts with another registered host: 409 naming the field.
std::optional<ApiError> Conflicts(const HostSpec& h, const HostSpec& other) {
  if (other.generation != h.generation)
    return ApiError{
        409,
        "generation: this cluster has " + std::string(GenerationName(other.generation)) + " hosts",
        "generation"};
  if (h.slice && other.slice && other.slice->name == h.slice->name) {
    if (other.slice->topology != h.slice->topology)
      return ApiError{409,
                      "slice.topology: slice " + h.slice->name + " is " + other.slice->topology,
                      "slice.topology"};
    if (other.slice->worker == h.slice->worker)
      return ApiError{409,
                      "slice.worker: worker " + std::to_string(h.slice->worker) + " of " +
                          h.slice->name + " is already host " + other.name,
                      "slice.worker"};
  }
  if (h.cube && other.cube && other.cube->name == h.cube->name) {
    if (other.cube->coord == h.cube->coord)
      return ApiError{
          409, "cube.coord: that position of " + h.cube->name + " is already host " + other.name,
          "cube.coord"};
    if (other.cube->block != h.cube->block)
      return ApiError{409, "cube.block: cube " + h.cube->name + " is in " + other.cube->block,
                      "cube.block"};
  }
  return std::nullopt;
}

std::string Where(const HostSpec& h) {
  if (h.slice) return h.slice->name + " worker " + std::to_string(h.slice->worker);
  const Coord& c = h.cube->coord;
  return h.cube->name + " " + std::to_string(c.x) + "," + std::to_string(c.y) + "," +
         std::to_string(c.z);
}

}  // namespace

std::string Controller::OwnerOf(const std::string& host) const {
  auto it = host_ids_.find(host);
  if (it == host_ids_.end() || !inventory_ready_) return "";
  const OwnerId o = inventory_.host(it->second).owner;
  if (!o.valid()) return "";
  for (const auto& [name, job] : jobs_)
    if (job.uid == o.value()) return name;
  return "";
}

Json Controller::HostJsonLocked(const RegisteredHost& h) const {
  return api::HostJson(h.spec, h.status, h.version, OwnerOf(h.spec.name));
}

Status Controller::PersistHost(RegisteredHost& h, const std::vector<JobEvent>& events) {
  store::WriteBatch batch;
  batch.Put(api::kHostKind, h.spec.name, HostJsonLocked(h).dump());
  auto r = CommitWithEvents(batch, "host/" + h.spec.name, events);
  if (!r.ok()) return Unavailable(r.status().message());
  h.version = *r;
  Emit(api::kHostKind, "MODIFIED", HostJsonLocked(h));
  AnnounceEvents();
  return Status::Ok();
}

Json Controller::ListHosts() const {
  std::lock_guard lock(mu_);
  Json items = Json::array();
  for (const auto& [name, h] : hosts_) items.push_back(HostJsonLocked(h));
  return {{"kind", "HostList"}, {"items", items}};
}

ApiResult<Json> Controller::RegisterHost(const Json& body) {
  auto decoded = DecodeRegistration(body);
  if (!decoded.ok()) return ToApiError(decoded.status());
  HostSpec& spec = *decoded;
  if (Status valid = ValidateMembership(spec); !valid.ok()) return ToApiError(valid);
  std::lock_guard lock(mu_);
  const int64_t now = NowMs();
  for (const auto& [name, other] : hosts_)
    if (name != spec.name)
      if (auto conflict = Conflicts(spec, other.spec)) return *conflict;
  auto existing = hosts_.find(spec.name);
  const bool known = existing != hosts_.end();
  const bool recovered = known && existing->second.status.lost;
  const bool membership_changed =
      !known || !existing->second.spec.SameMembership(spec) || recovered;
  RegisteredHost h;
  h.spec = spec;
  h.status.registered_ms = now;
  h.status.last_heartbeat_ms = now;
  if (known) {
    h.version = existing->second.version;
    h.status.usage = existing->second.status.usage;
  }
  Status persisted =
      PersistHost(h, {JobEvent{false, recovered ? "HostRecovered" : "Registered", Where(spec)}});
  if (!persisted.ok()) return ToApiError(persisted);
  hosts_[spec.name] = std::move(h);
  // Rebuilding the inventory costs O(hosts); a fleet of N agents joining at once would pay it N
  // times. Mark it stale instead: the next scheduling pass (the head's loop runs one within a
  // tick) rebuilds it once.
  if (membership_changed) inventory_dirty_ = true;
  return Json{{"host", spec.name},
              {"heartbeatIntervalMs", options_.heartbeat_interval_ms},
              {"leaseMs", options_.lease_ms}};
}

Status Controller::HostRecovered(RegisteredHost& h) {
  RegisteredHost updated = h;
  updated.status.lost = false;
  TESSERA_RETURN_IF_ERROR(
      PersistHost(updated, {JobEvent{false, "HostRecovered", "heartbeats resumed"}}));
  h = std::move(updated);
  if (auto id = host_ids_.find(h.spec.name); id != host_ids_.end())
    TESSERA_RETURN_IF_ERROR(inventory_.SetHealth(id->second, Health::kHealthy));
  return Status::Ok();
}

ApiResult<Json> Controller::Heartbeat(const std::string& name, const Json& body) {
  if (!body.is_object()) return ApiError{400, "body: must be a JSON object", ""};
  std::lock_guard lock(mu_);
  auto it = hosts_.find(name);
  if (it == hosts_.end())
    return ApiError{404, "host '" + name + "' is not registered; register first", ""};
  RegisteredHost& h = it->second;
  const int64_t now = NowMs();
  if (h.status.lost)
    if (Status s = HostRecovered(h); !s.ok()) return ToApiError(s);
  h.status.last_heartbeat_ms = now;
  if (body.contains("usage") && body["usage"].is_object()) {
    h.status.usage.clear();
    for (const auto& [k, v] : body["usage"].items())
      if (v.is_number()) h.status.usage[k] = v.get<double>();
  }
  const View view(*this);
  const Json workers = body.value("workers", Json::array());
  const int64_t applied = body.value("revision", int64_t{-1});
  Status failed = Status::Ok();
  auto run = [&](const std::string& job, const Step& step) {
    Status s = RunStep(job, step);
    if (failed.ok() && !s.ok()) failed = s;
  };
  for (const Json& w : workers) {
    if (!w.is_object()) continue;
    TrainJob* job = FindJob(w.value("job", ""));
    if (job == nullptr || job->status.stopping || w.value("attempt", -1) != job->status.attempt)
      continue;
    const int rank = w.value("rank", -1);
    auto ws = job->status.workers.find(rank);
    if (ws == job->status.workers.end() || ws->second.host != name) continue;
    const std::string state = w.value("state", "");
    const int64_t pid = w.value("pid", int64_t{0});
    if (state == "Running") {
      run(job->name(), [&](TrainJob& j) { return train_.WorkerRunning(j, rank, pid, now); });
    } else if (state == "Exited") {
      const int code = w.value("exitCode", 0), signal = w.value("signal", 0);
      const int64_t at = w.value("finishedAtMs", int64_t{0});
      run(job->name(), [&](TrainJob& j) {
        return train_.WorkerExited(j, rank, code, signal, pid, at, view, now);
      });
    }
  }
  for (const Json& p : body.value("progress", Json::array())) {
    if (!p.is_object()) continue;
    TrainJob* job = FindJob(p.value("job", ""));
    if (job == nullptr || job->status.stopping || p.value("attempt", -1) != job->status.attempt)
      continue;
    ProgressInput in;
    const std::string type = p.value("type", "");
    if (type == "progress")
      in.type = ProgressInput::Type::kProgress;
    else if (type == "checkpoint")
      in.type = ProgressInput::Type::kCheckpoint;
    else if (type == "restore")
      in.type = ProgressInput::Type::kRestore;
    else if (type == "alive")
      in.type = ProgressInput::Type::kAlive;
    else
      continue;
    in.rank = p.value("rank", -1);
    in.step = p.value("step", int64_t{-1});
    in.time_ms = p.value("timeMs", int64_t{0});
    in.seconds = p.value("seconds", 0.0);
    run(job->name(), [&](TrainJob& j) { return train_.Progress(j, in, view, now); });
  }
  // Jobs being stopped: this heartbeat may confirm that their workers here are gone.
  std::set<std::string> running_here;
  for (const Json& w : workers)
    if (w.is_object() && w.value("state", "") == "Running") running_here.insert(w.value("job", ""));
  std::vector<std::string> confirmed;
  for (const auto& [jn, job] : jobs_)
    if (job.status.stopping && job.runtime.unconfirmed.count(name) &&
        applied >= job.runtime.stop_revision && !running_here.count(jn))
      confirmed.push_back(jn);
  for (const auto& jn : confirmed)
    run(jn, [&](TrainJob& j) { return train_.ConfirmStopped(j, name, now); });
  ScheduleAfterRequest();
  if (!failed.ok()) return ToApiError(failed);
  return AssignmentsLocked(name);
}

// ---------------------------------------------------------------------------------------------
// Inventory

Status Controller::RefreshInventory() {
  if (!inventory_dirty_) return Status::Ok();
  inventory_dirty_ = false;
  RebuildInventory();
  return ReportInventoryConflicts();
}

Status Controller::ReportInventoryConflicts() {
  while (!inventory_conflicts_.empty()) {
    TESSERA_RETURN_IF_ERROR(RecordEvent("inventory", /*warning=*/true, "DoubleReservation",
                                        inventory_conflicts_.back()));
    inventory_conflicts_.pop_back();
  }
  return Status::Ok();
}

void Controller::RebuildInventory() {
  inventory_ready_ = false;
  host_ids_.clear();
  host_names_.clear();
  slice_names_.clear();
  if (hosts_.empty()) return;
  const Generation gen = hosts_.begin()->second.spec.generation;
  Result<Inventory> inv = InvalidArgument("no hosts");
  if (Info(gen).rank == 2) {
    std::map<std::string, std::string> topology;  // slice -> shape
    for (const auto& [name, h] : hosts_)
      if (h.spec.slice) topology[h.spec.slice->name] = h.spec.slice->topology;
    FleetSpec spec{gen, {}};
    for (const auto& [slice, shape] : topology) {
      auto parsed = ParseShape(shape);
      if (!parsed.ok()) return;
      spec.slices.push_back(*parsed);
      slice_names_.push_back(slice);
    }
    inv = Inventory::MakeFleet(spec);
    if (!inv.ok()) return;
    for (const auto& [name, h] : hosts_) {
      if (!h.spec.slice) continue;
      const size_t s = std::find(slice_names_.begin(), slice_names_.end(), h.spec.slice->name) -
                       slice_names_.begin();
      const auto& slice_hosts = inv->slice(SliceId(static_cast<uint32_t>(s))).hosts;
      const int w = h.spec.slice->worker;
      if (w < 0 || w >= static_cast<int>(slice_hosts.size())) continue;
      host_ids_[name] = slice_hosts[w];
    }
  } else {
    std::map<std::string, std::set<std::string>> blocks;
    for (const auto& [name, h] : hosts_)
      if (h.spec.cube) blocks[h.spec.cube->block].insert(h.spec.cube->name);
    std::vector<int> sizes;
    std::map<std::string, uint32_t> cube_index;
    // Cube ids follow block order then name order, as MakePod numbers them.
    uint32_t next = 0;
    for (const auto& [block, cubes] : blocks) {
      sizes.push_back(static_cast<int>(cubes.size()));
      for (const auto& c : cubes) cube_index[c] = next++;
    }
    inv = Inventory::MakePod(gen, sizes);
    if (!inv.ok()) return;
    for (const auto& [name, h] : hosts_) {
      if (!h.spec.cube || !ValidCubeCoord(h.spec.cube->coord)) continue;
      const Cube& cube = inv->cube(CubeId(cube_index[h.spec.cube->name]));
      const Coord& c = h.spec.cube->coord;
      host_ids_[name] = cube.hosts[CubeLocalIndex(c.x, c.y, c.z)];
    }
  }
  inventory_ = std::move(*inv);
  std::set<HostId> registered;
  for (const auto& [name, id] : host_ids_) {
    host_names_[id.value()] = name;
    registered.insert(id);
  }
  // Lost hosts, and hosts of a slice or cube whose agent has not registered yet, cannot be
  // placed on. The ids come from the inventory just built, so SetHealth cannot fail.
  for (const Host& h : inventory_.hosts()) {
    auto name = host_names_.find(h.id.value());
    const bool down = !registered.count(h.id) ||
                      (name != host_names_.end() && hosts_.at(name->second).status.lost);
    if (down && !inventory_.SetHealth(h.id, Health::kDown).ok()) return;
  }
  inventory_ready_ = true;
  for (const auto& [name, job] : jobs_)
    if (job.HoldsChips()) ReserveJob(job);
}

void Controller::ReserveJob(const TrainJob& job) {
  std::vector<HostId> ids;
  for (const auto& slice : job.status.placement)
    for (const auto& host : slice)
      if (auto it = host_ids_.find(host); it != host_ids_.end()) ids.push_back(it->second);
  if (ids.empty()) return;
  // A stored placement that overlaps another job's (a corrupted or hand-edited store) cannot
  // be reserved twice: the first job keeps the hosts and this one is failed on its next tick
  // by its own hosts' reports. Say so instead of hiding it.
  if (Status s = inventory_.Reserve(OwnerId(job.uid), ids); !s.ok())
    inventory_conflicts_.push_back("trainjob " + job.name() + ": " + s.message());
}

}  // namespace tessera::controller
