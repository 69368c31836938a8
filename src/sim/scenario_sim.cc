#include "sim/scenario_sim.h"

#include <algorithm>
#include <cstdio>

namespace tessera::sim {

// What a step may ask of the simulated cluster, answered as the head's View answers it.
class ScenarioSim::View : public ClusterView {
 public:
  explicit View(const ScenarioSim& sim) : sim_(sim) {}
  bool HostLost(const std::string& host) const override {
    return !sim_.host_ids_.count(host) || sim_.lost_.count(host) > 0;
  }
  int LargestFitWithoutJob(const TrainJob& job, int lo, int hi) const override {
    Inventory without = sim_.inventory_;
    without.Release(OwnerId(job.uid));
    const PlanResult plan = sim_.PlanLargest(without, job, lo, hi);
    return plan.placed() ? static_cast<int>(plan.slices.size()) : 0;
  }

 private:
  const ScenarioSim& sim_;
};

// The simulated store of the applier: every commit succeeds and keeps its events; freed chips
// go back to the inventory; a removed object is forgotten.
template <typename Object>
class ScenarioSim::Sink final : public SimEffectsSink<Object> {
 public:
  Sink(ScenarioSim& sim, std::map<std::string, Object>& objects, std::string kind, std::string name)
      : sim_(sim), objects_(objects), object_(std::move(kind) + "/" + name), name_(name) {}
  Result<int64_t> Commit(const Object& object, const Effects& effects) override {
    for (const JobEvent& e : effects.events) sim_.events_.push_back({object_, e});
    return SimEffectsSink<Object>::Commit(object, effects);
  }
  void Release(uint64_t owner) override { sim_.inventory_.Release(OwnerId(owner)); }
  int64_t BumpAssignments() override { return ++sim_.assignment_revision_; }
  void Announce(Object& /*object*/, const Effects& effects) override {
    if (effects.remove) objects_.erase(name_);
  }
  void Schedule() override { sim_.schedule_requested_ = true; }

 private:
  ScenarioSim& sim_;
  std::map<std::string, Object>& objects_;
  const std::string object_;
  const std::string name_;
};

ScenarioSim::ScenarioSim(Inventory inventory, std::vector<std::string> host_names,
                         ScenarioSimOptions options)
    : inventory_(std::move(inventory)),
      host_names_(std::move(host_names)),
      options_(options),
      train_(TrainLifecycleOptions{options.lease_ms}) {
  for (size_t i = 0; i < host_names_.size(); ++i)
    host_ids_[host_names_[i]] = HostId(static_cast<uint32_t>(i));
}

void ScenarioSim::Start(int64_t now_ms) {
  now_ = now_ms;
  for (const std::string& h : host_names_) last_heartbeat_ms_[h] = now_ms;
}

Status ScenarioSim::RunJobStep(const std::string& name,
                               const std::function<Effects(TrainJob&)>& step) {
  auto it = jobs_.find(name);
  if (it == jobs_.end()) return NotFound("trainjob '" + name + "' not found");
  Sink<TrainJob> sink(*this, jobs_, "trainjob", name);
  return ApplyStep(it->second, step, sink, now_);
}

Status ScenarioSim::RunServiceStep(const std::string& name,
                                   const std::function<ServiceEffects(Service&)>& step) {
  auto it = services_.find(name);
  if (it == services_.end()) return NotFound("service '" + name + "' not found");
  Sink<Service> sink(*this, services_, "service", name);
  return ApplyStep(it->second, step, sink, now_);
}

// ---------------------------------------------------------------------------------------------
// Users

Status ScenarioSim::CreateJob(TrainJobSpec spec, std::string spec_document) {
  const std::string name = spec.name;
  if (jobs_.count(name) || services_.count(name))
    return AlreadyExists("metadata.name: '" + name + "' already exists");
  TrainJob job =
      TrainLifecycle::Create(std::move(spec), std::move(spec_document), next_uid_++, now_);
  job.runtime.persisted_ms = now_;
  events_.push_back({"trainjob/" + name, JobEvent{false, "Created", "accepted"}});
  jobs_[name] = std::move(job);
  schedule_requested_ = true;
  return Schedule();
}

Status ScenarioSim::CreateService(ServiceSpec spec) {
  const std::string name = spec.name;
  if (jobs_.count(name) || services_.count(name))
    return AlreadyExists("metadata.name: '" + name + "' already exists");
  Service svc = ServiceLifecycle::Create(std::move(spec), next_uid_++, now_);
  events_.push_back({"service/" + name, JobEvent{false, "Created", "accepted"}});
  services_[name] = std::move(svc);
  schedule_requested_ = true;
  return Schedule();
}

Status ScenarioSim::DeleteJob(const std::string& name) {
  auto it = jobs_.find(name);
  if (it == jobs_.end()) return NotFound("trainjob '" + name + "' not found");
  if (it->second.status.deleting) return Status::Ok();
  const View view(*this);
  TESSERA_RETURN_IF_ERROR(
      RunJobStep(name, [&](TrainJob& job) { return train_.Delete(job, view, now_); }));
  return Schedule();
}

Status ScenarioSim::DeleteService(const std::string& name) {
  if (!services_.count(name)) return NotFound("service '" + name + "' not found");
  const View view(*this);
  TESSERA_RETURN_IF_ERROR(
      RunServiceStep(name, [&](Service& svc) { return services_life_.Delete(svc, view); }));
  return Schedule();
}

Status ScenarioSim::ScaleService(const std::string& name, const std::string& role, int replicas) {
  if (!services_.count(name)) return NotFound("service '" + name + "' not found");
  const View view(*this);
  Status refused = Status::Ok();
  TESSERA_RETURN_IF_ERROR(RunServiceStep(name, [&](Service& svc) {
    auto e = services_life_.Scale(svc, role, replicas, view);
    if (!e.ok()) {
      refused = e.status();
      return ServiceEffects{};
    }
    return *e;
  }));
  TESSERA_RETURN_IF_ERROR(refused);
  return Schedule();
}

// ---------------------------------------------------------------------------------------------
// Agents

std::vector<ScenarioWorker> ScenarioSim::Assignments(const std::string& host) const {
  std::vector<ScenarioWorker> out;
  for (const auto& [name, job] : jobs_) {
    if (!job.Assigned()) continue;
    for (const auto& [rank, w] : job.status.workers)
      if (w.host == host) out.push_back({name, job.uid, job.status.attempt, rank});
  }
  for (const auto& [name, svc] : services_)
    for (const RoleStatus& role : svc.status.roles)
      for (const ReplicaStatus& r : role.replicas) {
        if (!r.Assigned()) continue;
        for (size_t w = 0; w < r.processes.size(); ++w)
          if (r.processes[w].host == host)
            out.push_back({ReplicaWorkloadName(name, role.name, r.replica), svc.uid, r.incarnation,
                           static_cast<int>(w)});
      }
  std::sort(out.begin(), out.end());
  return out;
}

Status ScenarioSim::Heartbeat(const std::string& host, const ScenarioReport& report) {
  if (!host_ids_.count(host)) return NotFound("host '" + host + "' is not registered");
  if (lost_.count(host))
    return FailedPrecondition("host '" + host + "' is lost; hosts do not come back here");
  last_heartbeat_ms_[host] = now_;
  const View view(*this);
  Status failed = Status::Ok();
  auto run = [&](const std::string& job, const std::function<Effects(TrainJob&)>& step) {
    Status s = RunJobStep(job, step);
    if (failed.ok() && !s.ok()) failed = s;
  };
  // The head's rule: a report counts for the job's current attempt, from the host its worker
  // was placed on; progress lines also while the attempt is being stopped.
  auto current = [&](const ScenarioWorker& key, bool stopping_too) -> TrainJob* {
    auto it = jobs_.find(key.workload);
    if (it == jobs_.end()) return nullptr;
    TrainJob& job = it->second;
    if (job.uid != key.uid || (job.status.stopping && !stopping_too) ||
        key.attempt != job.status.attempt)
      return nullptr;
    auto w = job.status.workers.find(key.rank);
    return w == job.status.workers.end() || w->second.host != host ? nullptr : &job;
  };
  for (const ScenarioReport::Progress& p : report.progress) {
    if (current(p.key, true) == nullptr) continue;
    run(p.key.workload, [&](TrainJob& j) { return train_.Progress(j, p.input, view, now_); });
  }
  for (const ScenarioReport::Worker& w : report.workers) {
    if (current(w.key, false) == nullptr) continue;
    const int64_t pid = 100;
    if (!w.exited)
      run(w.key.workload,
          [&](TrainJob& j) { return train_.WorkerRunning(j, w.key.rank, pid, now_); });
    else
      run(w.key.workload, [&](TrainJob& j) {
        return train_.WorkerExited(j, w.key.rank, w.exit_code, 0, pid, 0, view, now_);
      });
  }
  std::set<std::pair<std::string, uint64_t>> running_here;
  for (const ScenarioReport::Worker& w : report.workers)
    if (!w.exited) running_here.insert({w.key.workload, w.key.uid});
  std::vector<std::string> confirmed;
  for (const auto& [name, job] : jobs_)
    if (job.status.stopping && job.runtime.unconfirmed.count(host) &&
        report.revision >= job.runtime.stop_revision && !running_here.count({name, job.uid}))
      confirmed.push_back(name);
  for (const std::string& name : confirmed)
    run(name, [&](TrainJob& j) { return train_.ConfirmStopped(j, host, now_); });

  // Services' processes, as the head takes them.
  auto run_service = [&](const std::string& name,
                         const std::function<ServiceEffects(Service&)>& step) {
    Status s = RunServiceStep(name, step);
    if (failed.ok() && !s.ok()) failed = s;
  };
  for (const ScenarioReport::Worker& w : report.workers) {
    auto ref = ParseReplicaWorkloadName(w.key.workload);
    if (!ref) continue;
    auto it = services_.find(ref->service);
    if (it == services_.end() || it->second.uid != w.key.uid) continue;
    const ReplicaKey key{ref->role, ref->replica};
    const int worker = w.key.rank;
    bool here = false;
    if (const RoleStatus* rs = it->second.status.Role(ref->role))
      for (const ReplicaStatus& r : rs->replicas)
        if (r.replica == ref->replica && worker >= 0 &&
            worker < static_cast<int>(r.processes.size()))
          here = r.processes[static_cast<size_t>(worker)].host == host;
    if (!here) continue;
    if (!w.exited)
      run_service(ref->service, [&](Service& s) {
        return services_life_.ProcessRunning(s, key, w.key.attempt, worker, 100);
      });
    else
      run_service(ref->service, [&](Service& s) {
        return services_life_.ProcessExited(s, key, w.key.attempt, worker, w.exit_code, 0, view,
                                            now_);
      });
  }
  std::vector<std::pair<std::string, ReplicaKey>> stopped;
  for (const auto& [name, svc] : services_) {
    if (report.revision < svc.runtime.stop_revision) continue;
    for (const RoleStatus& role : svc.status.roles)
      for (const ReplicaStatus& r : role.replicas)
        if (r.stopping && r.unconfirmed.count(host) &&
            !running_here.count({ReplicaWorkloadName(name, role.name, r.replica), svc.uid}))
          stopped.push_back({name, {role.name, r.replica}});
  }
  for (const auto& [name, key] : stopped)
    run_service(name,
                [&](Service& s) { return services_life_.ConfirmStopped(s, key, host, view); });
  // A heartbeat that freed chips or requeued work gets a pass after it, as in the head.
  if (schedule_requested_) {
    Status pass = Schedule();
    if (failed.ok()) failed = pass;
  }
  return failed;
}

std::vector<ScenarioProbe> ScenarioSim::DueProbes() const {
  std::vector<ScenarioProbe> out;
  for (const auto& [name, svc] : services_)
    for (const RoleStatus& role : svc.status.roles) {
      const ServiceRoleSpec* spec = svc.spec.Role(role.name);
      if (spec == nullptr) continue;
      for (const ReplicaStatus& r : role.replicas) {
        const ServiceProcess* leader = r.leader();
        if (!r.Assigned() || leader == nullptr || leader->phase != ProcessPhase::kRunning) continue;
        const int64_t last = std::max(r.last_probe_ms, r.started_ms);
        if (r.last_probe_ms != 0 && now_ - last < spec->readiness.period_ms) continue;
        out.push_back({name, role.name, r.replica, r.incarnation});
      }
    }
  return out;
}

Status ScenarioSim::Readiness(const ScenarioProbe& probe, bool ready, const std::string& message) {
  if (!services_.count(probe.service)) return Status::Ok();
  const View view(*this);
  return RunServiceStep(probe.service, [&](Service& svc) {
    return services_life_.Readiness(svc, {probe.role, probe.replica}, probe.incarnation, ready,
                                    message, view, now_);
  });
}

// ---------------------------------------------------------------------------------------------
// Timers

Status ScenarioSim::ExpireLeases() {
  std::vector<std::string> expired;
  for (const auto& [host, last] : last_heartbeat_ms_)
    if (!lost_.count(host) && now_ - last > options_.lease_ms) expired.push_back(host);
  const View view(*this);
  for (const std::string& host : expired) {
    const int64_t last = last_heartbeat_ms_[host];
    char why[160];
    std::snprintf(why, sizeof why, "no heartbeat for %.1f s (lease %lld ms)",
                  static_cast<double>(now_ - last) / 1000.0,
                  static_cast<long long>(options_.lease_ms));
    lost_.insert(host);
    TESSERA_RETURN_IF_ERROR(inventory_.SetHealth(host_ids_.at(host), Health::kDown));
    std::vector<std::string> affected;
    for (const auto& [name, job] : jobs_)
      if (job.OnHost(host)) affected.push_back(name);
    for (const std::string& name : affected)
      TESSERA_RETURN_IF_ERROR(RunJobStep(
          name, [&](TrainJob& job) { return train_.HostLost(job, host, last, why, view, now_); }));
    std::vector<std::string> services;
    for (const auto& [name, svc] : services_)
      if (svc.OnHost(host)) services.push_back(name);
    for (const std::string& name : services)
      TESSERA_RETURN_IF_ERROR(RunServiceStep(
          name, [&](Service& s) { return services_life_.HostLost(s, host, why, view); }));
  }
  return Status::Ok();
}

Status ScenarioSim::Tick() {
  Status first = ExpireLeases();
  const View view(*this);
  std::vector<std::string> names;
  for (const auto& [name, job] : jobs_) names.push_back(name);
  for (const std::string& name : names) {
    if (!jobs_.count(name)) continue;
    Status s = RunJobStep(name, [&](TrainJob& job) { return train_.Tick(job, view, now_); });
    if (first.ok()) first = s;
  }
  names.clear();
  for (const auto& [name, svc] : services_) names.push_back(name);
  for (const std::string& name : names) {
    if (!services_.count(name)) continue;
    Status s =
        RunServiceStep(name, [&](Service& svc) { return services_life_.Tick(svc, view, now_); });
    if (first.ok()) first = s;
  }
  Status scheduled = Schedule();
  return first.ok() ? scheduled : first;
}

// ---------------------------------------------------------------------------------------------
// The scheduling pass

Status ScenarioSim::Schedule() {
  // Applying a decision may finish a stop at once and ask for another pass: the head runs it as
  // the next pass, at most four.
  for (int pass = 0; pass < 4; ++pass) {
    schedule_requested_ = false;
    TESSERA_RETURN_IF_ERROR(ScheduleServices());
    TESSERA_RETURN_IF_ERROR(ScheduleJobs());
    if (!schedule_requested_) break;
  }
  return Status::Ok();
}

PlanResult ScenarioSim::PlanLargest(const Inventory& inventory, const TrainJob& job, int lo,
                                    int hi) const {
  PlanResult plan;
  for (int n = hi; n >= lo; --n) {
    plan = planner_.Plan(inventory, {job.spec.accelerator, job.spec.topology, n});
    if (plan.placed()) return plan;
  }
  return plan;
}

Status ScenarioSim::ScheduleServices() {
  std::vector<std::string> order;
  {
    std::vector<std::pair<uint64_t, std::string>> by_uid;
    for (const auto& [name, svc] : services_) by_uid.push_back({svc.uid, name});
    std::sort(by_uid.begin(), by_uid.end());
    for (const auto& [uid, name] : by_uid) order.push_back(name);
  }
  for (const std::string& name : order) {
    if (!services_.count(name)) continue;
    for (const ReplicaKey& key : ServiceLifecycle::DueRestarts(services_.at(name), now_)) {
      const Service& svc = services_.at(name);
      const RoleStatus* rs = svc.status.Role(key.role);
      if (rs == nullptr || svc.spec.Role(key.role) == nullptr) continue;
      GroupPorts ports;
      ports.master_port = next_port_++;
      for (const ReplicaStatus& r : rs->replicas)
        if (r.replica == key.replica)
          for (size_t i = 0; i < r.processes.size(); ++i) ports.ports.push_back(next_port_++);
      TESSERA_RETURN_IF_ERROR(RunServiceStep(
          name, [&](Service& s) { return services_life_.Restart(s, key, ports, now_); }));
    }
    if (!services_.count(name)) continue;
    for (const ReplicaKey& key : ServiceLifecycle::WaitingForSlice(services_.at(name))) {
      if (!services_.count(name)) break;
      const ServiceRoleSpec* spec = services_.at(name).spec.Role(key.role);
      if (spec == nullptr) continue;
      PlanResult plan = planner_.Plan(inventory_, {spec->accelerator, spec->topology, 1});
      if (!plan.placed()) {
        const std::string reason = NoFitName(plan.reason);
        TESSERA_RETURN_IF_ERROR(RunServiceStep(name, [&](Service& s) {
          return services_life_.SetPending(s, key, reason, plan.message);
        }));
        continue;
      }
      const std::vector<ReplicaKey> waiting = ServiceLifecycle::WaitingForSlice(services_.at(name));
      if (plan.slices.size() != 1 ||
          std::find(waiting.begin(), waiting.end(), key) == waiting.end())
        continue;
      const uint64_t owner = next_uid_;
      if (!ApplyPlan(inventory_, OwnerId(owner), plan).ok()) continue;
      GroupPlacement placement;
      placement.owner = owner;
      for (HostId id : plan.slices[0].hosts) {
        placement.hosts.push_back({host_names_[id.value()], "127.0.0.1"});
        placement.ports.push_back(next_port_++);
      }
      placement.slice = name + "-" + key.role + "-" + std::to_string(key.replica);
      placement.master_port = next_port_++;
      ++next_uid_;  // the head stores the counter with the placement
      TESSERA_RETURN_IF_ERROR(RunServiceStep(
          name, [&](Service& s) { return services_life_.Place(s, key, placement, now_); }));
    }
  }
  return Status::Ok();
}

Status ScenarioSim::ScheduleJobs() {
  std::vector<std::pair<uint64_t, std::string>> pending;
  for (const auto& [name, job] : jobs_)
    if (job.status.phase == JobPhase::kPending && !job.status.deleting && !job.status.stopping)
      pending.push_back({job.uid, name});
  std::sort(pending.begin(), pending.end());
  std::string blocked_by;
  int position = 0;
  for (const auto& [uid, name] : pending) {
    ++position;
    std::string reason, message;
    if (!blocked_by.empty()) {
      reason = "Queued";
      message = "waiting behind trainjob " + blocked_by + " (first come, first served)";
    } else {
      const TrainJob& job = jobs_.at(name);
      const auto [lo, hi] = job.SizeRange();
      PlanResult plan = PlanLargest(inventory_, job, lo, hi);
      if (plan.placed() && ApplyPlan(inventory_, OwnerId(uid), plan).ok()) {
        AttemptPlacement placement;
        for (size_t s = 0; s < plan.slices.size(); ++s) {
          std::vector<std::string> hosts;
          for (HostId id : plan.slices[s].hosts) hosts.push_back(host_names_[id.value()]);
          placement.hosts.push_back(std::move(hosts));
          placement.slice_names.push_back(name + "-s" + std::to_string(s));
        }
        placement.master_port = next_port_;
        placement.jax_port = next_port_ + 1;
        next_port_ += 2;
        TESSERA_RETURN_IF_ERROR(
            RunJobStep(name, [&](TrainJob& j) { return train_.Place(j, placement, now_); }));
        --position;
        continue;
      }
      reason = NoFitName(plan.reason);
      message = plan.message;
      if (plan.reason != NoFit::kNeverFits && plan.reason != NoFit::kInvalidRequest)
        blocked_by = name;
    }
    TESSERA_RETURN_IF_ERROR(RunJobStep(
        name, [&](TrainJob& j) { return train_.SetPending(j, reason, message, position, {}); }));
  }
  return Status::Ok();
}

}  // namespace tessera::sim
