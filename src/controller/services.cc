// Controller: Services (workload/service_lifecycle.h) in the head. The user API (apply, get,
// list, scale, delete, load reports, log location), the driver of service steps
// (RunServiceStep: step, one store write with the events, free group slices, revision +
// notify, emit), placement of each replica group on one whole slice through the planner, the
// group's assignments (the slice's TPU environment plus the TESSERA_* serving variables and
// PORT), agents' process reports, lost hosts, timers and readiness probe targets.
//
// Without ClusterQueues, placement is first come, first served by service uid and replica,
// before training jobs are scheduled. With ClusterQueues, every group is admitted through the
// same cycle as the jobs (service_admission.cc; docs/serving.md "Admission").
#include <algorithm>

#include "codec/service_json.h"
#include "codec/service_manifest.h"
#include "controller/controller.h"
#include "protocol/credential.h"
#include "workload/effects_applier.h"
#include "workload/service_admission.h"
#include "workload/worker_env.h"

namespace tessera::controller {
namespace {

std::string ServiceObject(const std::string& name) { return "service/" + name; }

}  // namespace

Service* Controller::FindService(const std::string& name) {
  auto it = services_.find(name);
  return it == services_.end() ? nullptr : &it->second;
}

Status Controller::RunServiceStep(const std::string& name, const ServiceStep& step,
                                  bool store_uid_counter) {
  Service* svc = FindService(name);
  if (svc == nullptr) return NotFound("service '" + name + "' not found");
  // The head's side of the applier (workload/effects_applier.h), as RunStep's for jobs; a step
  // that took next_uid_ as a group's owner id stores the counter in the same write.
  class HeadSink final : public HeadSinkBase<Service> {
   public:
    HeadSink(Controller& c, const std::string& name, bool store_uid_counter)
        : HeadSinkBase(c), name_(name), store_uid_counter_(store_uid_counter) {}
    Result<int64_t> Commit(const Service& svc, const Effects& e) override {
      store::WriteBatch batch;
      if (e.remove)
        batch.Delete(codec::kServiceKind, name_);
      else if (e.persist)
        batch.Update(codec::kServiceKind, name_,
                     codec::ServiceJson(svc, c_.EndpointScheme()).dump(), svc.runtime.version);
      if (store_uid_counter_)
        batch.Put(kUidCounterKind, kUidCounterName, Json{{"next", c_.next_uid_ + 1}}.dump());
      auto committed = c_.CommitWithEvents(batch, ServiceObject(name_), e.events);
      if (!committed.ok()) return Unavailable(committed.status().message());
      if (store_uid_counter_) ++c_.next_uid_;
      return committed;
    }
    void Announce(Service& svc, const Effects& e) override {
      applied_ = true;
      if (e.remove) {
        c_.Emit(codec::kServiceKind, "DELETED", codec::ServiceJson(svc, c_.EndpointScheme()));
        c_.services_.erase(name_);
      } else if (e.persist) {
        c_.Emit(codec::kServiceKind, "MODIFIED", codec::ServiceJson(svc, c_.EndpointScheme()));
      }
      c_.AnnounceEvents();
    }
    bool applied() const { return applied_; }

   private:
    const std::string name_;  // a copy: the object may be erased under a reference to its name
    const bool store_uid_counter_;
    bool applied_ = false;
  };
  const std::string reservation = svc->spec.reservation;
  HeadSink sink(*this, name, store_uid_counter);
  TESSERA_RETURN_IF_ERROR(ApplyStep(*svc, step, sink, NowMs()));
  if (sink.applied()) NoteReservationUsers(reservation);  // reservation_health.cc: status.users
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// Users

Status Controller::ServiceRefusalLocked(const ServiceSpec& spec, const Json& doc) {
  if (Status s = RefreshInventory(); !s.ok()) return s;
  if (jobs_.count(spec.name))
    return AlreadyExists("metadata.name: a TrainJob is named '" + spec.name +
                         "'; a Service needs a name of its own");
  // Roles written under spec.roles are named by index; a single role written under spec, by
  // spec itself.
  const bool listed = doc.is_object() && doc.contains("spec") && doc["spec"].is_object() &&
                      doc["spec"].contains("roles");
  for (size_t i = 0; i < spec.roles.size() && inventory_ready_; ++i) {
    const ServiceRoleSpec& role = spec.roles[i];
    const std::string field = listed ? "spec.roles[" + std::to_string(i) + "]" : "spec";
    if (role.accelerator != inventory_.generation())
      return InvalidArgument(field + ".accelerator: this cluster has " +
                             std::string(GenerationName(inventory_.generation())) + " hosts; a " +
                             std::string(GenerationName(role.accelerator)) +
                             " replica can never run here");
    Inventory empty = inventory_;
    for (OwnerId owner : inventory_.Owners()) empty.Release(owner);
    for (const Host& h : empty.hosts())
      if (Status s = empty.SetHealth(h.id, Health::kHealthy); !s.ok()) return s;
    PlanResult p = planner_.Plan(empty, {role.accelerator, role.topology, 1});
    if (p.reason == NoFit::kNeverFits || p.reason == NoFit::kNotEnoughChips)
      return InvalidArgument(field + ".topology: one " + role.topology.ToString() +
                             " replica can never fit this cluster: " + p.message);
  }
  if (!spec.priority.empty() && !priority_classes_.count(spec.priority))
    return InvalidArgument("spec.priority: PriorityClass '" + spec.priority + "' does not exist");
  return ServiceInReservationRefusalLocked(spec, doc);  // reservation_services.cc
}

Result<Json> Controller::ApplyServiceLocked(const Json& doc) {
  auto spec = codec::ParseService(doc);
  if (!spec.ok()) return spec.status();
  if (Status refused = ServiceRefusalLocked(*spec, doc); !refused.ok()) return refused;
  const std::string name = spec->name;
  const View view(*this);
  if (Service* existing = FindService(name)) {
    if (existing->status.deleting)
      return FailedPrecondition("metadata.name: service '" + name + "' is being deleted; wait");
    Status s = RunServiceStep(
        name, [&](Service& svc) { return services_life_.Apply(svc, std::move(*spec), view); });
    if (!s.ok()) return s;
    ScheduleAfterRequest();
    auto it = services_.find(name);
    if (it == services_.end()) return Json{{"name", name}};
    return codec::ServiceJson(it->second, EndpointScheme());
  }
  Service svc = ServiceLifecycle::Create(std::move(*spec), next_uid_, NowMs());
  store::WriteBatch batch;
  batch.Create(codec::kServiceKind, name, codec::ServiceJson(svc, EndpointScheme()).dump());
  batch.Put(kUidCounterKind, kUidCounterName, Json{{"next", next_uid_ + 1}}.dump());
  auto committed =
      CommitWithEvents(batch, ServiceObject(name), {JobEvent{false, "Created", "accepted"}});
  if (!committed.ok()) {
    if (committed.status().code() == StatusCode::kAlreadyExists)
      return AlreadyExists("metadata.name: '" + name + "' already exists");
    return Unavailable(committed.status().message());
  }
  ++next_uid_;
  svc.runtime.version = *committed;
  Json out = codec::ServiceJson(svc, EndpointScheme());
  Emit(codec::kServiceKind, "ADDED", out);
  AnnounceEvents();
  services_[name] = std::move(svc);
  schedule_requested_ = true;
  ScheduleAfterRequest();
  return out;
}

Result<Json> Controller::GetServiceLocked(const std::string& name) const {
  auto it = services_.find(name);
  if (it == services_.end()) return NotFound("service '" + name + "' not found");
  return codec::ServiceJson(it->second, EndpointScheme());
}

Json Controller::ListServicesLocked() const {
  std::vector<const Service*> all;
  for (const auto& [name, svc] : services_) all.push_back(&svc);
  std::sort(all.begin(), all.end(),
            [](const Service* a, const Service* b) { return a->uid < b->uid; });
  Json items = Json::array();
  for (const Service* s : all) items.push_back(codec::ServiceJson(*s, EndpointScheme()));
  return {{"kind", "ServiceList"}, {"items", items}};
}

Json Controller::ListServices() const {
  auto lock = Hold();
  return ListServicesLocked();
}

Result<Json> Controller::DeleteServiceLocked(const std::string& name) {
  if (!services_.count(name)) return NotFound("service '" + name + "' not found");
  const View view(*this);
  Status s = RunServiceStep(name, [&](Service& svc) { return services_life_.Delete(svc, view); });
  if (!s.ok()) return s;
  ScheduleAfterRequest();
  return Json{{"name", name}, {"status", services_.count(name) ? "Deleting" : "Deleted"}};
}

Result<Json> Controller::ScaleService(const std::string& name, const std::string& role,
                                      int replicas) {
  auto lock = Hold();
  if (!services_.count(name)) return NotFound("service '" + name + "' not found");
  const View view(*this);
  Status refused = Status::Ok();
  Status s = RunServiceStep(name, [&](Service& svc) {
    auto e = services_life_.Scale(svc, role, replicas, view);
    if (!e.ok()) {
      refused = e.status();
      return ServiceEffects{};
    }
    return *e;
  });
  if (!refused.ok()) return refused;
  if (!s.ok()) return s;
  ScheduleAfterRequest();
  return codec::ServiceJson(services_.at(name), EndpointScheme());
}

Result<Json> Controller::ReportServiceLoad(const std::string& name, const std::string& role,
                                           double ongoing_requests, RouterTraffic traffic) {
  auto lock = Hold();
  Service* svc = FindService(name);
  if (svc == nullptr) return NotFound("service '" + name + "' not found");
  if (svc->spec.Role(role) == nullptr)
    return InvalidArgument("role: '" + role + "' is not a role of service " + name);
  // Stamped with the head's clock: the autoscaler's delays and window are the head's time,
  // whatever the router's clock says.
  LoadSample sample;
  sample.time_ms = NowMs();
  sample.ongoing_requests = ongoing_requests;
  sample.queued_prompt_tokens = traffic.queued_prompt_tokens;
  sample.queued_requests = traffic.queued;
  sample.completed = static_cast<int64_t>(traffic.requests);
  sample.refused = traffic.refused;
  sample.output_tokens =
      traffic.output_tokens > 0 ? static_cast<int64_t>(traffic.output_tokens) : -1;
  sample.ttft_count = static_cast<int64_t>(traffic.ttft_count);
  sample.ttft_sum_ms = traffic.ttft_sum_s * 1000;
  sample.tpot_count = static_cast<int64_t>(traffic.tpot_count);
  sample.tpot_sum_ms = traffic.tpot_sum_s * 1000;
  services_life_.Load(*svc, role, sample);
  // The last report as it came, for the dashboard (not a change: no store write, no watch event).
  traffic.at_ms = NowMs();
  svc->runtime.traffic[role] = std::move(traffic);
  return Json{{"accepted", true}};
}

Result<Controller::LogLocation> Controller::LocateServiceLog(const std::string& name,
                                                             const std::string& role, int replica,
                                                             int worker) const {
  auto lock = Hold();
  auto it = services_.find(name);
  if (it == services_.end()) return NotFound("service '" + name + "' not found");
  const RoleStatus* rs = it->second.status.Role(role);
  if (rs == nullptr)
    return InvalidArgument("role: '" + role + "' is not a role of service " + name);
  const ReplicaStatus* r = nullptr;
  for (const ReplicaStatus& x : rs->replicas)
    if (x.replica == replica) r = &x;
  if (r == nullptr)
    return InvalidArgument("replica: role " + role + " has no replica " + std::to_string(replica));
  if (r->processes.empty() || r->incarnation == 0)
    return NotFound("replica " + std::to_string(replica) + " has no processes (" + r->reason + ")");
  if (worker < 0 || worker >= static_cast<int>(r->processes.size()))
    return InvalidArgument("worker: replica " + std::to_string(replica) + " has workers 0.." +
                           std::to_string(r->processes.size() - 1));
  const ServiceProcess& p = r->processes[static_cast<size_t>(worker)];
  auto h = hosts_.find(p.host);
  if (h == hosts_.end()) return NotFound("host " + p.host + " is gone");
  LogLocation loc;
  loc.host = p.host;
  loc.address = h->second.spec.address;
  loc.port = h->second.spec.agent_port;
  if (loc.port == 0)
    return NotFound("host " + p.host + " serves no logs: its agent has no agentPort");
  loc.token = protocol::LogTokenFromHash(h->second.credential_hash);
  loc.path = "/logs/" + ReplicaWorkloadName(name, role, replica) + "/" +
             std::to_string(it->second.uid) + "/" + std::to_string(r->incarnation) + "/" +
             std::to_string(worker);
  loc.running = p.phase != ProcessPhase::kExited;
  return loc;
}

// ---------------------------------------------------------------------------------------------
// Placement

Status Controller::ScheduleServices() {
  TESSERA_RETURN_IF_ERROR(HoldServiceGroupsMissingSecrets());  // secrets.cc
  std::vector<Service*> order;
  for (auto& [name, svc] : services_) order.push_back(&svc);
  std::sort(order.begin(), order.end(), [](Service* a, Service* b) { return a->uid < b->uid; });
  const int64_t now = NowMs();
  for (Service* svc : order) {
    const std::string name = svc->name();
    for (const ReplicaKey& key : ServiceLifecycle::DueRestarts(*svc, now)) {
      const RoleStatus* rs = svc->status.Role(key.role);
      const ServiceRoleSpec* spec = svc->spec.Role(key.role);
      if (rs == nullptr || spec == nullptr) continue;
      std::vector<WorkerHost> hosts;
      for (const ReplicaStatus& r : rs->replicas)
        if (r.replica == key.replica)
          for (const ServiceProcess& p : r.processes) hosts.push_back({p.host, p.address});
      const GroupPorts ports = ServiceGroupPorts(hosts, spec->port);
      TESSERA_RETURN_IF_ERROR(RunServiceStep(
          name, [&](Service& s) { return services_life_.Restart(s, key, ports, now); }));
    }
    // With ClusterQueues, waiting groups are admitted by the cycle (service_admission.cc);
    // inside a SliceReservation they are placed on its hosts (reservation_services.cc).
    if (services_.count(name) == 0 || !cluster_queues_.empty() || !svc->spec.reservation.empty())
      continue;
    for (const ReplicaKey& key : ServiceLifecycle::WaitingForSlice(*svc)) {
      const ServiceRoleSpec* spec = svc->spec.Role(key.role);
      if (spec == nullptr || roles_missing_secrets_.count(name + "/" + key.role)) continue;
      PlanResult plan = planner_.Plan(inventory_, {spec->accelerator, spec->topology, 1});
      if (!plan.placed()) {
        const std::string reason = NoFitName(plan.reason);
        TESSERA_RETURN_IF_ERROR(RunServiceStep(name, [&](Service& s) {
          return services_life_.SetPending(s, key, reason, plan.message);
        }));
        continue;
      }
      auto placed = PlaceGroup(name, key, plan);
      if (!placed.ok()) return placed.status();
    }
  }
  return Status::Ok();
}

void Controller::ReserveServiceGroups() {
  for (const auto& [name, svc] : services_)
    for (const RoleStatus& role : svc.status.roles)
      for (const ReplicaStatus& r : role.replicas) {
        // Inside a SliceReservation the hosts are the reservation's (ReserveReservations).
        if (!r.placed() || !svc.spec.reservation.empty()) continue;
        std::vector<HostId> ids;
        for (const ServiceProcess& p : r.processes)
          if (auto it = host_ids_.find(p.host); it != host_ids_.end()) ids.push_back(it->second);
        if (ids.empty()) continue;
        if (Status s = inventory_.Reserve(OwnerId(r.owner), ids); !s.ok())
          inventory_conflicts_.push_back("service " + name + " replica " + role.name + "/" +
                                         std::to_string(r.replica) + ": " + s.message());
      }
}

std::string Controller::ServiceOwnerOf(uint64_t owner) const {
  for (const auto& [name, svc] : services_)
    for (const RoleStatus& role : svc.status.roles)
      for (const ReplicaStatus& r : role.replicas)
        if (r.owner == owner) return name;
  return "";
}

// ---------------------------------------------------------------------------------------------
// Assignments and agents' reports

void Controller::AppendServiceAssignments(const std::string& host,
                                          std::vector<protocol::Assignment>& out,
                                          std::vector<protocol::StopRequest>& stop) const {
  std::vector<const Service*> order;
  for (const auto& [name, svc] : services_)
    if (svc.OnHost(host)) order.push_back(&svc);
  std::sort(order.begin(), order.end(),
            [](const Service* a, const Service* b) { return a->uid < b->uid; });
  for (const Service* svc : order)
    for (const RoleStatus& role : svc->status.roles) {
      const ServiceRoleSpec* spec = svc->spec.Role(role.name);
      for (const ReplicaStatus& r : role.replicas) {
        if (!r.OnHost(host)) continue;
        const std::string workload = ReplicaWorkloadName(svc->name(), role.name, r.replica);
        // A group recreated after a failure or moved off a lost host: kill what is left of it
        // at once. A preempted group gets the preemption's grace, as a preempted job's
        // workers do. Groups scaled down, replaced or deleted get their own grace.
        if (r.stopping && r.after_stop != AfterStop::kRemove)
          stop.push_back({workload, r.incarnation,
                          StoppingForPreemption(r) ? options_.preemption_grace_ms : 0, svc->uid});
        if (!r.Assigned() || spec == nullptr) continue;
        auto topology = SliceTopology::Make(spec->accelerator, spec->topology);
        if (!topology.ok()) continue;  // validated at apply: cannot happen
        AttemptLayout layout;
        layout.job = workload;
        layout.attempt = r.incarnation;
        layout.topology = *topology;
        layout.slices.emplace_back();
        for (const ServiceProcess& p : r.processes) {
          auto h = hosts_.find(p.host);
          layout.slices.back().push_back(
              {p.host, p.address,
               h != hosts_.end() && h->second.claim && !h->second.spec.discovered.empty()});
        }
        layout.slice_names = {r.slice};
        layout.master_port = r.master_port;
        layout.jax_port = r.master_port + 1;
        const ServiceProcess& leader = r.processes[0];
        for (const WorkerEnv& e : ComputeWorkerEnv(layout)) {
          if (e.host != host) continue;
          std::map<std::string, std::string> env = spec->env;
          AddSecretValues(svc->name(), spec->secret_env, env);  // secrets.cc
          for (const auto& [k, v] : e.env) env[k] = v;
          const ServiceProcess& p = r.processes[static_cast<size_t>(e.worker)];
          env["TESSERA_SERVICE"] = svc->name();
          env["TESSERA_ROLE"] = role.name;
          for (const auto& [k, v] : KvRoleEnv(*spec)) env[k] = v;     // prefill/decode roles
          for (const auto& [k, v] : WarmStartEnv(*spec)) env[k] = v;  // spec.warmStart
          env["TESSERA_REPLICA"] = std::to_string(r.replica);
          env["TESSERA_LEADER_ADDRESS"] = leader.address + ":" + std::to_string(leader.port);
          env["TESSERA_GROUP_SIZE"] = std::to_string(r.processes.size());
          env["TESSERA_WORKER_INDEX"] = std::to_string(e.worker);
          env["PORT"] = std::to_string(p.port);
          protocol::Assignment a;
          a.key = {workload, r.incarnation, e.rank, svc->uid};
          a.worker = e.worker;
          a.command = spec->command;
          a.env = std::move(env);
          a.working_dir = spec->working_dir;
          a.grace_ms = spec->grace_ms;
          a.kind = protocol::WorkloadKind::kService;  // kept serving when its agent fences
          // Start-up priority: below the serving groups until the group is first Ready.
          a.nice = r.ready_once ? 0 : spec->startup_nice;
          // Only the leader serves requests: it alone gets a certificate (for its endpoint).
          if (e.worker == 0 && options_.replica_tls)
            a.tls = options_.replica_tls(
                {svc->name(), svc->uid, role.name, r.replica, r.incarnation, p.host, p.address});
          out.push_back(std::move(a));
        }
      }
    }
}

void Controller::ServiceReports(const std::string& host, const protocol::Heartbeat& beat,
                                int64_t now, Status& failed) {
  const View view(*this);
  auto run = [&](const std::string& name, const ServiceStep& step) {
    Status s = RunServiceStep(name, step);
    if (failed.ok() && !s.ok()) failed = s;
  };
  std::set<std::pair<std::string, uint64_t>> running_here;
  for (const protocol::WorkerReport& w : beat.workers) {
    if (w.state == protocol::WorkerState::kRunning) running_here.insert({w.key.job, w.key.uid});
    auto ref = ParseReplicaWorkloadName(w.key.job);
    if (!ref) continue;
    Service* svc = FindService(ref->service);
    if (svc == nullptr || svc->uid != w.key.uid) continue;
    const ReplicaKey key{ref->role, ref->replica};
    const int worker = w.key.rank;
    // Only the host the process was placed on speaks for it.
    bool here = false;
    if (const RoleStatus* rs = svc->status.Role(ref->role))
      for (const ReplicaStatus& r : rs->replicas)
        if (r.replica == ref->replica && worker >= 0 &&
            worker < static_cast<int>(r.processes.size()))
          here = r.processes[static_cast<size_t>(worker)].host == host;
    if (!here) continue;
    if (w.state == protocol::WorkerState::kRunning)
      run(ref->service, [&](Service& s) {
        return services_life_.ProcessRunning(s, key, w.key.attempt, worker, w.pid);
      });
    else
      run(ref->service, [&](Service& s) {
        return services_life_.ProcessExited(s, key, w.key.attempt, worker, w.exit_code, w.signal,
                                            view, now);
      });
  }
  // Groups being stopped: this heartbeat may confirm their processes here are gone.
  std::vector<std::pair<std::string, ReplicaKey>> confirmed;
  for (const auto& [name, svc] : services_) {
    if (beat.revision < svc.runtime.stop_revision) continue;
    for (const RoleStatus& role : svc.status.roles)
      for (const ReplicaStatus& r : role.replicas)
        if (r.stopping && r.unconfirmed.count(host) &&
            !running_here.count({ReplicaWorkloadName(name, role.name, r.replica), svc.uid}))
          confirmed.push_back({name, {role.name, r.replica}});
  }
  for (const auto& [name, key] : confirmed)
    run(name, [&](Service& s) { return services_life_.ConfirmStopped(s, key, host, view); });
}

Status Controller::ServicesHostLost(const std::string& host, const std::string& why) {
  const View view(*this);
  std::vector<std::string> affected;
  for (const auto& [name, svc] : services_)
    if (svc.OnHost(host)) affected.push_back(name);
  for (const auto& name : affected)
    TESSERA_RETURN_IF_ERROR(RunServiceStep(
        name, [&](Service& s) { return services_life_.HostLost(s, host, why, view); }));
  return Status::Ok();
}

Status Controller::TickServices(int64_t now) {
  const View view(*this);
  std::vector<std::string> names;
  for (const auto& [name, svc] : services_) names.push_back(name);
  Status first = Status::Ok();
  for (const auto& name : names) {
    if (!services_.count(name)) continue;
    Status s =
        RunServiceStep(name, [&](Service& svc) { return services_life_.Tick(svc, view, now); });
    if (first.ok()) first = s;
  }
  return first;
}

Status Controller::LoadServices() {
  auto objects = store_.List(codec::kServiceKind);
  if (!objects.ok()) return objects.status();
  for (const auto& obj : *objects) {
    Json doc = Json::parse(obj.body, nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded()) return Internal("stored Service " + obj.name + " is not JSON");
    auto svc = codec::ServiceFromJson(doc);
    if (!svc.ok()) return svc.status();
    svc->runtime.version = obj.resource_version;
    next_uid_ = std::max(next_uid_, svc->uid + 1);
    for (const RoleStatus& role : svc->status.roles)
      for (const ReplicaStatus& r : role.replicas) next_uid_ = std::max(next_uid_, r.owner + 1);
    // Nothing probed while the head was down, and lastProbeMs is stored only when a phase
    // changes: without this the first tick would make every ready replica Unready (out of
    // routing) before its first probe. A ready replica is probed at once and stale only if no
    // result comes within the probe timeout.
    const int64_t started = NowMs();
    for (RoleStatus& role : svc->status.roles)
      if (const ServiceRoleSpec* spec = svc->spec.Role(role.name))
        for (ReplicaStatus& r : role.replicas)
          if (r.phase == ReplicaPhase::kReady)
            r.last_probe_ms = started - spec->readiness.period_ms;
    services_[obj.name] = std::move(*svc);
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// Readiness

std::vector<Controller::ProbeTarget> Controller::DueProbes() const {
  auto lock = Hold();
  const int64_t now = NowMs();
  std::vector<ProbeTarget> out;
  for (const auto& [name, svc] : services_)
    for (const RoleStatus& role : svc.status.roles) {
      const ServiceRoleSpec* spec = svc.spec.Role(role.name);
      if (spec == nullptr) continue;
      for (const ReplicaStatus& r : role.replicas) {
        const ServiceProcess* leader = r.leader();
        if (!r.Assigned() || leader == nullptr || leader->phase != ProcessPhase::kRunning) continue;
        const int64_t last = std::max(r.last_probe_ms, r.started_ms);
        if (r.last_probe_ms != 0 && now - last < spec->readiness.period_ms) continue;
        out.push_back({name, role.name, r.replica, r.incarnation, leader->address, leader->port,
                       spec->readiness.path, spec->readiness.timeout_ms,
                       static_cast<bool>(options_.replica_tls)});
      }
    }
  return out;
}

void Controller::ReportReadiness(const ProbeTarget& target, bool ready,
                                 const std::string& message) {
  auto lock = Hold();
  if (!services_.count(target.service)) return;
  const int64_t now = NowMs();
  const View view(*this);
  Status s = RunServiceStep(target.service, [&](Service& svc) {
    return services_life_.Readiness(svc, {target.role, target.replica}, target.incarnation, ready,
                                    message, view, now);
  });
  if (!s.ok()) deferred_error_ = s;
}

}  // namespace tessera::controller
