// Controller: the host registry. Agents register their host (its place in a slice or cube),
// heartbeat with their workers' states and progress, and read their assignments. The
// inventory the scheduler plans on is derived from the registered hosts.
#include <algorithm>

#include "controller/controller.h"
#include "protocol/credential.h"

namespace tessera::controller {
namespace {

HostSpec FromRegistration(const protocol::Registration& r) {
  HostSpec h;
  h.name = r.name;
  h.generation = r.generation;
  h.chips = r.chips;
  h.address = r.address;
  h.agent_port = r.agent_port;
  if (r.slice) h.slice = SliceMembership{r.slice->name, r.slice->topology, r.slice->worker};
  if (r.cube) h.cube = CubeMembership{r.cube->name, r.cube->block, r.cube->coord};
  h.labels = r.labels;
  if (r.discovered) h.discovered = protocol::DiscoveredJson(*r.discovered);
  return h;
}

bool ValidCubeCoord(const Coord& c) {
  return c.x >= 0 && c.x <= 1 && c.y >= 0 && c.y <= 1 && c.z >= 0 && c.z <= 3;
}

// Checks a host's membership on its own: a valid slice topology and worker, or cube position
// (ParseRegistration checked the wire message; this holds for any caller).
Status ValidateMembership(const HostSpec& h) {
  if ((Info(h.generation).rank == 2) != h.slice.has_value() || (h.slice && h.cube))
    return InvalidArgument(Info(h.generation).rank == 2
                               ? "slice: a 2D host must say which slice it belongs to"
                               : "cube: a 3D host must say which cube it belongs to");
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

// A host that conflicts with another registered host: kFailedPrecondition or kAlreadyExists
// naming the field.
Status Conflicts(const HostSpec& h, const HostSpec& other) {
  if (other.generation != h.generation)
    return FailedPrecondition("generation: this cluster has " +
                              std::string(GenerationName(other.generation)) + " hosts");
  if (h.slice && other.slice && other.slice->name == h.slice->name) {
    if (other.slice->topology != h.slice->topology)
      return FailedPrecondition("slice.topology: slice " + h.slice->name + " is " +
                                other.slice->topology);
    if (other.slice->worker == h.slice->worker)
      return AlreadyExists("slice.worker: worker " + std::to_string(h.slice->worker) + " of " +
                           h.slice->name + " is already host " + other.name);
  }
  if (h.cube && other.cube && other.cube->name == h.cube->name) {
    if (other.cube->coord == h.cube->coord)
      return AlreadyExists("cube.coord: that position of " + h.cube->name + " is already host " +
                           other.name);
    if (other.cube->block != h.cube->block)
      return FailedPrecondition("cube.block: cube " + h.cube->name + " is in " + other.cube->block);
  }
  return Status::Ok();
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
  for (const auto& kind : kinds_)
    if (std::string owner = kind->OwnerOf(o.value(), host); !owner.empty()) return owner;
  return "";
}

Json Controller::HostJsonLocked(const RegisteredHost& h,
                                const std::map<std::string, SliceRoster>* rosters) const {
  Json doc = codec::HostJson(h.spec, QuietStatusLocked(h), h.version, OwnerOf(h.spec.name));
  // Its NVLink domain, and why it is a domain of its own when it is (gpu_jobs.cc).
  if (Json gpu = HostGpuJsonLocked(h.spec); !gpu.is_null()) doc["status"]["gpu"] = gpu;
  if (!h.claim) return doc;
  // The roster of the host's slice: which workers have no live host yet (the slice is not
  // placeable until none is missing or lost). `h` may not be in hosts_ yet (registering).
  const SliceRoster* known = nullptr;
  if (rosters != nullptr)
    if (auto it = rosters->find(h.claim->slice); it != rosters->end()) known = &it->second;
  SliceRoster roster;
  if (known != nullptr) {
    roster = *known;
  } else {
    std::vector<ClaimHolder> holders;
    for (ClaimHolder& other : ClaimHoldersLocked(h.claim->slice))
      if (other.host != h.spec.name) holders.push_back(std::move(other));
    holders.push_back({h.spec.name, *h.claim, h.status.lost});
    roster = SliceRosters(holders).front();
  }
  doc["status"]["slice"] = {{"name", roster.slice},          {"topology", roster.topology},
                            {"worker", h.claim->worker},     {"workers", roster.workers},
                            {"missing", roster.missing},     {"lost", roster.lost},
                            {"placeable", roster.complete()}};
  return doc;
}

std::optional<SliceClaim> Controller::ClaimOf(const HostSpec& spec) {
  if (!spec.discovered.empty()) {
    const Json d = Json::parse(spec.discovered, nullptr, /*allow_exceptions=*/false);
    const auto text = [&](const char* key) {
      auto it = d.is_object() ? d.find(key) : d.end();
      return it != d.end() && it->is_string() ? it->get<std::string>() : std::string();
    };
    auto worker = d.is_object() ? d.find("workerId") : d.end();
    SliceClaim c{text("sliceName"), text("acceleratorType"), text("topology"), 0};
    if (!c.accelerator_type.empty() && !c.topology.empty() && worker != d.end() &&
        worker->is_number_integer()) {
      c.worker = worker->get<int>();
      if (c.slice.empty())
        c.slice = spec.slice ? spec.slice->name : spec.cube ? spec.cube->name : "";
      return c;
    }
  }
  if (spec.slice)
    return SliceClaim{spec.slice->name, std::string(GenerationName(spec.generation)),
                      spec.slice->topology, spec.slice->worker};
  return std::nullopt;
}

std::vector<ClaimHolder> Controller::ClaimHoldersLocked(const std::string& slice) const {
  std::vector<ClaimHolder> out;
  if (slice.empty()) {
    for (const auto& [name, h] : hosts_)
      if (h.claim) out.push_back({name, *h.claim, h.status.lost});
    return out;
  }
  auto group = host_groups_.find("claim:" + slice);
  if (group == host_groups_.end()) return out;
  for (const std::string& name : group->second) {
    const RegisteredHost& h = hosts_.at(name);
    if (h.claim && h.claim->slice == slice) out.push_back({name, *h.claim, h.status.lost});
  }
  return out;
}

namespace {
// The host_groups_ keys of a host (Controller::host_groups_).
std::vector<std::string> HostGroupKeys(const HostSpec& spec,
                                       const std::optional<SliceClaim>& claim) {
  std::vector<std::string> keys;
  if (claim) keys.push_back("claim:" + claim->slice);
  if (spec.slice) keys.push_back("slice:" + spec.slice->name);
  if (spec.cube) keys.push_back("cube:" + spec.cube->name);
  return keys;
}
}  // namespace

void Controller::PutHostLocked(RegisteredHost host) {
  const std::string name = host.spec.name;
  EraseHostLocked(name);
  for (const std::string& key : HostGroupKeys(host.spec, host.claim))
    host_groups_[key].insert(name);
  hosts_[name] = std::move(host);
}

void Controller::EraseHostLocked(const std::string& name) {
  ForgetQuietLocked(name);  // its credential or membership may change
  auto it = hosts_.find(name);
  if (it == hosts_.end()) return;
  for (const std::string& key : HostGroupKeys(it->second.spec, it->second.claim)) {
    auto group = host_groups_.find(key);
    if (group == host_groups_.end()) continue;
    group->second.erase(name);
    if (group->second.empty()) host_groups_.erase(group);
  }
  hosts_.erase(it);
}

std::map<std::string, SliceRoster> Controller::SliceRostersLocked() const {
  std::map<std::string, SliceRoster> out;
  for (SliceRoster& r : SliceRosters(ClaimHoldersLocked(""))) out[r.slice] = std::move(r);
  return out;
}

std::string Controller::WithPartialSlices(const TrainJob& job, std::string message) const {
  if (!inventory_ready_ || job.spec.accelerator != inventory_.generation()) return message;
  std::set<std::string> named;
  for (const FixedSlice& fs : inventory_.slices())
    if (fs.topology.shape() == job.spec.topology) named.insert(slice_names_[fs.id.value()]);
  for (const std::string& slice : named) {
    const std::vector<SliceRoster> roster = SliceRosters(ClaimHoldersLocked(slice));
    if (roster.empty() || roster.front().complete()) continue;
    const SliceRoster& r = roster.front();
    message += "; slice " + slice + " (" + r.accelerator_type + " " + r.topology +
               ") would fit but is not placeable: " + RosterGaps(r);
  }
  return message;
}

std::string Controller::StoredHostJsonLocked(const RegisteredHost& h) const {
  // The credential's hash is stored with the host (so it survives a restart), never shown.
  Json stored = HostJsonLocked(h);
  if (!h.credential_hash.empty()) stored[kCredentialHashField] = h.credential_hash;
  if (h.fence_ms > 0) stored[kAgentFenceField] = h.fence_ms;
  return stored.dump();
}

Status Controller::PersistHost(RegisteredHost& h, const std::vector<JobEvent>& events,
                               const std::string& replaced) {
  store::WriteBatch batch;
  if (!replaced.empty()) batch.Delete(codec::kHostKind, replaced);
  batch.Put(codec::kHostKind, h.spec.name, StoredHostJsonLocked(h));
  auto r = CommitWithEvents(batch, "host/" + h.spec.name, events);
  if (!r.ok()) return Unavailable(r.status().message());
  h.version = *r;
  Emit(codec::kHostKind, "MODIFIED", HostJsonLocked(h));
  AnnounceEvents();
  return Status::Ok();
}

Json Controller::ListHostsLocked() const {
  Json items = Json::array();
  const std::map<std::string, SliceRoster> rosters = SliceRostersLocked();
  for (const auto& [name, h] : hosts_) items.push_back(HostJsonLocked(h, &rosters));
  return {{"kind", "HostList"}, {"items", items}};
}

Result<Json> Controller::RegisterHost(const protocol::Registration& registration) {
  return std::move(RegisterHosts({registration}).front());
}

std::vector<Result<Json>> Controller::RegisterHosts(
    const std::vector<protocol::Registration>& registrations) {
  // What can be checked without the lock: each registration on its own.
  struct Candidate {
    HostSpec spec;
    std::optional<SliceClaim> claim;
    bool discovered_claim = false;
    std::string credential_hash;
    int64_t fence_ms = 0;
  };
  std::vector<Result<Json>> out;
  std::vector<std::optional<Candidate>> candidates;
  for (const protocol::Registration& registration : registrations) {
    candidates.emplace_back();
    out.push_back(Json());
    auto normalised = protocol::NormalizeHostName(registration.name);
    if (!normalised.ok()) {
      out.back() = normalised.status();
      continue;
    }
    Candidate c;
    c.spec = FromRegistration(registration);
    c.spec.name = *normalised;
    if (Status valid = ValidateMembership(c.spec); !valid.ok()) {
      out.back() = valid;
      continue;
    }
    c.claim = ClaimOf(c.spec);
    // A discovered slice's claim is checked on its own and against the membership it came
    // with; a declared 2D slice's membership was checked above.
    c.discovered_claim = c.claim && !c.spec.discovered.empty();
    if (c.discovered_claim)
      if (Status valid = ValidateClaim(c.spec, *c.claim); !valid.ok()) {
        out.back() = valid;
        continue;
      }
    if (!protocol::IsValidCredential(registration.credential)) {
      out.back() = InvalidArgument("credential: must be 32..128 lower-case hex digits");
      continue;
    }
    c.credential_hash = protocol::CredentialHash(registration.credential);
    c.fence_ms = registration.fence_ms;
    candidates.back() = std::move(c);
  }

  auto lock = Hold();
  const int64_t now = NowMs();
  // Each accepted host goes into hosts_ at once, so the registrations after it in this batch
  // are checked against it, and is taken out again if its commit fails.
  struct Accepted {
    size_t index;
    std::string name;
    std::optional<RegisteredHost> previous;  // the entry it overwrote
    std::string replaces;                    // a Lost host whose worker id it takes
    std::optional<RegisteredHost> replaced;
    bool membership_changed = false;
  };
  std::vector<Accepted> accepted;
  store::WriteBatch batch;
  std::vector<std::pair<std::string, JobEvent>> events;
  size_t bytes = 0;  // of the bodies and event messages in `batch` and `events`
  Status failed = Status::Ok();
  // Commits the hosts accepted since the last commit, with their events. A failure takes them
  // out again, answers each kUnavailable, and ends the batch (failed): the store is not writing.
  auto commit = [&] {
    if (accepted.empty()) return;
    auto committed = CommitWithEvents(batch, events);
    if (!committed.ok()) {
      for (auto a = accepted.rbegin(); a != accepted.rend(); ++a) {
        EraseHostLocked(a->name);
        if (a->previous) PutHostLocked(*std::move(a->previous));
        if (a->replaced) PutHostLocked(*std::move(a->replaced));
        out[a->index] = Unavailable(committed.status().message());
      }
      failed = Unavailable(committed.status().message());
    } else {
      for (const Accepted& a : accepted) {
        RegisteredHost& h = hosts_.at(a.name);
        h.version = *committed;
        Emit(codec::kHostKind, "MODIFIED", HostJsonLocked(h));
        if (a.replaced) {
          Emit(codec::kHostKind, "DELETED", HostJsonLocked(*a.replaced));
          schedule_requested_ = true;
        }
        // Rebuilding the inventory costs O(hosts); a fleet of N agents joining at once would
        // pay it N times. Mark it stale instead: a scheduling pass rebuilds it once, and while
        // hosts only join, paced (RefreshInventoryPaced).
        if (a.membership_changed) {
          inventory_dirty_ = true;
          if (a.previous || a.replaced) inventory_grew_only_ = false;
        }
        out[a.index] = Json::parse(protocol::RegisterReplyJson(
            {a.name, options_.heartbeat_interval_ms, options_.lease_ms}));
        // A fleet that registers at once heartbeats at once: its first beats need no lock either.
        RememberQuietLocked(a.name, h, protocol::Heartbeat{}, AssignmentsLocked(a.name));
      }
      AnnounceEvents();
    }
    accepted.clear();
    batch = store::WriteBatch();
    events.clear();
    bytes = 0;
  };
  std::set<std::string> written;  // hosts this batch writes or deletes: each at most once
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (!candidates[i]) continue;
    // One commit holds at most kRegistrationBytesPerCommit of documents: etcd refuses a request
    // over --max-request-bytes (1.5 MiB by default; each body goes twice, as the object and in
    // the change log), and 1,000 hosts of a fleet were 2.1 MB.
    if (bytes >= kRegistrationBytesPerCommit) commit();
    if (!failed.ok()) {
      out[i] = failed;
      continue;
    }
    Candidate& c = *candidates[i];
    const HostSpec& spec = c.spec;
    auto existing = hosts_.find(spec.name);
    const bool known = existing != hosts_.end();
    // Only the agent that registered this name may register it again (an agent restarting on
    // its machine keeps its credential); another one needs an admin's `tessera delete host`.
    if (known && !existing->second.credential_hash.empty() &&
        !protocol::ConstantTimeEquals(existing->second.credential_hash, c.credential_hash)) {
      out[i] = AlreadyExists("credential: host '" + spec.name +
                             "' is registered by another agent; only that agent (its credential "
                             "is in its state directory) may register it again. If the machine "
                             "was replaced, an admin runs `tessera delete host " +
                             spec.name + "` first");
      continue;
    }
    // An agent that retried while its first request waited: one write of a key per commit
    // (etcd refuses a transaction that names a key twice), so the retry comes again.
    if (written.count(spec.name)) {
      out[i] = Unavailable("host '" + spec.name +
                           "' is being registered by another request of its agent; register "
                           "again");
      continue;
    }
    // The hosts of a discovered slice agree on its type and topology, and no two live ones
    // hold one worker id; a host that claims a Lost host's worker id replaces it.
    std::string replaces;
    if (c.discovered_claim) {
      auto verdict = CheckSliceClaim(spec.name, *c.claim, ClaimHoldersLocked(c.claim->slice));
      if (!verdict.ok()) {
        out[i] = verdict.status();
        continue;
      }
      replaces = verdict->replaces;
    }
    // Only hosts of the same slice or cube can conflict, and every host has the cluster's
    // generation (each was checked against the others): one of them stands for all in that
    // check. Scanning every host here made registering N hosts cost O(N^2).
    std::set<std::string> neighbours;
    for (const std::string& key : HostGroupKeys(spec, std::nullopt))
      if (auto group = host_groups_.find(key); group != host_groups_.end())
        neighbours.insert(group->second.begin(), group->second.end());
    for (const auto& [name, other] : hosts_)
      if (name != spec.name && name != replaces) {
        neighbours.insert(name);
        break;
      }
    Status conflict = Status::Ok();
    for (const std::string& name : neighbours)
      if (name != spec.name && name != replaces)
        if (conflict = Conflicts(spec, hosts_.at(name).spec); !conflict.ok()) break;
    if (!conflict.ok()) {
      out[i] = conflict;
      continue;
    }
    if (!replaces.empty() && written.count(replaces)) {
      out[i] = Unavailable("host '" + replaces +
                           "', whose worker id this host takes, is being registered; register "
                           "again");
      continue;
    }
    written.insert(spec.name);
    if (!replaces.empty()) written.insert(replaces);
    const bool recovered = known && existing->second.status.lost;
    RegisteredHost h;
    h.spec = spec;
    h.claim = c.claim;
    h.credential_hash = c.credential_hash;
    h.fence_ms = c.fence_ms;
    h.status.registered_ms = now;
    RenewLease(h, now);
    if (known) {
      h.version = existing->second.version;
      h.status.usage = existing->second.status.usage;
    }
    const std::string object = "host/" + spec.name;
    events.emplace_back(object,
                        JobEvent{false, recovered ? "HostRecovered" : "Registered", Where(spec)});
    if (!replaces.empty()) {
      events.emplace_back(object, JobEvent{false, "WorkerReplaced",
                                           "takes worker " + std::to_string(c.claim->worker) +
                                               " of slice " + c.claim->slice + " from lost host " +
                                               replaces + ", which is deleted"});
      batch.Delete(codec::kHostKind, replaces);
    }
    const std::string stored = StoredHostJsonLocked(h);
    bytes += stored.size() + spec.name.size();
    for (size_t e = events.size(); e > 0 && events[e - 1].first == object; --e)
      bytes += events[e - 1].first.size() + events[e - 1].second.message.size() +
               kRegistrationEventBytes;
    batch.Put(codec::kHostKind, spec.name, stored);
    Accepted a{
        i,
        spec.name,
        std::nullopt,
        replaces,
        std::nullopt,
        !known || !existing->second.spec.SameMembership(spec) || recovered || !replaces.empty()};
    if (known) a.previous = existing->second;
    if (auto gone = hosts_.find(replaces); gone != hosts_.end()) {
      a.replaced = gone->second;
      EraseHostLocked(replaces);
    }
    PutHostLocked(std::move(h));
    accepted.push_back(std::move(a));
  }
  // What is left: one commit for the rest of the batch (a fleet registering at once pays one
  // fsync, or one etcd round, per commit, not per host).
  commit();
  return out;
}

Result<bool> Controller::HostCredentialMatches(const std::string& host,
                                               std::string_view credential) const {
  {
    // A quiet host's credential is where its beats are answered (quiet_beats.cc): no lock.
    std::lock_guard quiet(quiet_mu_);
    if (auto it = quiet_.find(host); it != quiet_.end())
      return protocol::IsValidCredential(credential) &&
             protocol::ConstantTimeEquals(it->second.credential_hash,
                                          protocol::CredentialHash(credential));
  }
  auto lock = Hold();
  auto it = hosts_.find(host);
  if (it == hosts_.end() || it->second.credential_hash.empty())
    return NotFound("host '" + host + "' is not registered; register first");
  return protocol::IsValidCredential(credential) &&
         protocol::ConstantTimeEquals(it->second.credential_hash,
                                      protocol::CredentialHash(credential));
}

Result<Json> Controller::DeleteHost(const std::string& name) {
  auto lock = Hold();
  auto it = hosts_.find(name);
  if (it == hosts_.end()) return NotFound("host '" + name + "' not found");
  if (!it->second.status.lost) {
    std::string users;
    for (const auto& kind : kinds_)
      for (const std::string& user : kind->HostUsers(name))
        users += (users.empty() ? "" : ", ") + user;
    if (!users.empty())
      return FailedPrecondition("host '" + name + "' runs workers of " + users +
                                "; delete those or let them finish first, or wait until the host "
                                "is Lost");
  }
  store::WriteBatch batch;
  batch.Delete(codec::kHostKind, name);
  auto committed =
      CommitWithEvents(batch, "host/" + name,
                       {JobEvent{false, "HostDeleted",
                                 "an admin deleted the host; its name may be registered again"}});
  if (!committed.ok()) return Unavailable(committed.status().message());
  Json gone = HostJsonLocked(it->second);
  EraseHostLocked(name);
  inventory_dirty_ = true;
  inventory_grew_only_ = false;
  Emit(codec::kHostKind, "DELETED", gone);
  AnnounceEvents();
  schedule_requested_ = true;
  return Json{{"name", name}, {"status", "Deleted"}};
}

Status Controller::HostRecovered(RegisteredHost& h) {
  h.status.lost = false;
  recovered_unwritten_.insert(h.spec.name);  // written at the next lease check (leases.cc)
  if (auto id = host_ids_.find(h.spec.name); id != host_ids_.end())
    TESSERA_RETURN_IF_ERROR(inventory_.SetHealth(id->second, Health::kHealthy));
  schedule_requested_ = true;  // its chips are free again
  return Status::Ok();
}

void Controller::ApplyReportsLocked(const std::string& host, const protocol::Heartbeat& beat,
                                    int64_t now, Status& failed) {
  for (const auto& kind : kinds_) kind->TakeHeartbeat(host, beat, now, failed);
  FenceReports(host, beat, failed);  // fencing.cc
}

Result<Json> Controller::Heartbeat(const std::string& name, const protocol::Heartbeat& beat) {
  if (auto quiet = TakeQuietBeat(name, /*credential_hash=*/nullptr, beat))
    return Json::parse(*quiet);
  HeartbeatArrived(name);     // heard now, however long a tick holds the lock
  std::lock_guard lock(mu_);  // not Hold(): a failure to apply them fails this beat too
  // The beats answered from memory first: this host's among them came before this one.
  TESSERA_RETURN_IF_ERROR(ApplySteadyBeatsLocked());
  auto it = hosts_.find(name);
  if (it == hosts_.end()) return NotFound("host '" + name + "' is not registered; register first");
  RegisteredHost& h = it->second;
  const int64_t now = NowMs();
  if (h.status.lost)
    if (Status s = HostRecovered(h); !s.ok()) return s;
  RenewLease(h, now);
  h.status.usage["cpuPercent"] = beat.usage.cpu_percent;
  h.status.usage["memoryBytes"] = static_cast<double>(beat.usage.memory_bytes);
  Status failed = Status::Ok();
  ApplyReportsLocked(name, beat, now, failed);
  // No pass here: one heartbeat arrives per host per interval, and a pass walks every pending
  // workload and may commit. A heartbeat that freed chips or requeued work asks the loop for one
  // (Tick), so a burst of heartbeats costs one pass, and no agent's request runs one.
  RequestPass();
  // Hosts whose owner moved with this report (chips released): watchers hear of it with the
  // change that moved it, not at the next tick.
  EmitDerivedChangesLocked(/*announce=*/true);
  if (!failed.ok()) return failed;
  Json answer = AssignmentsLocked(name);
  if (auto still = hosts_.find(name); still != hosts_.end())
    RememberQuietLocked(name, still->second, beat, answer);
  return answer;
}

// ---------------------------------------------------------------------------------------------
// Inventory

Status Controller::RefreshInventory() {
  if (!inventory_dirty_) return Status::Ok();
  const int64_t start = NowMs();
  inventory_dirty_ = false;
  inventory_grew_only_ = true;
  RebuildInventory();
  last_build_end_ms_ = NowMs();
  next_paced_build_ms_ =
      last_build_end_ms_ +
      std::min(kPacedBuildSpacing * (last_build_end_ms_ - start), kMaxPacedBuildWaitMs);
  return ReportInventoryConflicts();
}

bool Controller::InventoryBuildDueLocked() const {
  if (!inventory_dirty_) return false;
  if (!inventory_ready_ || !inventory_grew_only_) return true;
  // A wall clock set back (an NTP step) must not hold joining hosts off until it catches up.
  const int64_t now = NowMs();
  return now >= next_paced_build_ms_ || now < last_build_end_ms_;
}

Status Controller::RefreshInventoryPaced() {
  return InventoryBuildDueLocked() ? RefreshInventory() : Status::Ok();
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
  ++inventory_builds_;  // every host's owner is derived again (EmitDerivedChangesLocked)
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
    std::map<std::string, uint32_t> slice_index;  // name -> SliceId, as MakeFleet numbers them
    for (const auto& [slice, shape] : topology) {
      auto parsed = ParseShape(shape);
      if (!parsed.ok()) return;
      spec.slices.push_back(*parsed);
      slice_index[slice] = static_cast<uint32_t>(slice_names_.size());
      slice_names_.push_back(slice);
    }
    inv = Inventory::MakeFleet(spec);
    if (!inv.ok()) return;
    for (const auto& [name, h] : hosts_) {
      if (!h.spec.slice) continue;
      const auto& slice_hosts = inv->slice(SliceId(slice_index.at(h.spec.slice->name))).hosts;
      const int w = h.spec.slice->worker;
      if (w < 0 || w >= static_cast<int>(slice_hosts.size())) continue;
      host_ids_[name] = slice_hosts[w];
    }
  } else {
    // Hosts of a discovered TPU slice form a fixed 3D slice (never carved); the others, cubes.
    std::map<std::string, Shape> fixed;  // slice -> shape
    const auto fixed_slice_of = [](const RegisteredHost& h) -> std::optional<SliceTopology> {
      if (!h.claim || h.spec.discovered.empty()) return std::nullopt;
      auto topo = ResolveClaim(*h.claim);
      if (!topo.ok()) return std::nullopt;
      return *topo;
    };
    std::map<std::string, std::set<std::string>> blocks;
    for (const auto& [name, h] : hosts_) {
      if (auto topo = fixed_slice_of(h)) {
        fixed.emplace(h.claim->slice, topo->shape());
      } else if (h.spec.cube) {
        blocks[h.spec.cube->block].insert(h.spec.cube->name);
      }
    }
    std::vector<int> sizes;
    std::map<std::string, uint32_t> cube_index;
    // Cube ids follow block order then name order, as MakePod numbers them.
    uint32_t next = 0;
    for (const auto& [block, cubes] : blocks) {
      sizes.push_back(static_cast<int>(cubes.size()));
      for (const auto& c : cubes) cube_index[c] = next++;
    }
    std::vector<Shape> shapes;
    std::map<std::string, uint32_t> slice_index;  // name -> SliceId, as MakePod numbers them
    for (const auto& [slice, shape] : fixed) {
      shapes.push_back(shape);
      slice_index[slice] = static_cast<uint32_t>(slice_names_.size());
      slice_names_.push_back(slice);
    }
    inv = Inventory::MakePod(gen, sizes, shapes);
    if (!inv.ok()) return;
    for (const auto& [name, h] : hosts_) {
      if (auto topo = fixed_slice_of(h)) {
        const FixedSlice& slice = inv->slice(SliceId(slice_index.at(h.claim->slice)));
        const int w = h.claim->worker;
        if (slice.topology.shape() == topo->shape() && w >= 0 &&
            w < static_cast<int>(slice.hosts.size()))
          host_ids_[name] = slice.hosts[w];
        continue;
      }
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
  for (const auto& kind : kinds_) kind->ReserveHosts(inventory_conflicts_);
}

}  // namespace tessera::controller
