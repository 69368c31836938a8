#include "workload/service_lifecycle.h"

#include <algorithm>
#include <cstdio>

namespace tessera {
namespace {

JobEvent Normal(std::string reason, std::string message) {
  return {false, std::move(reason), std::move(message)};
}
JobEvent Warning(std::string reason, std::string message) {
  return {true, std::move(reason), std::move(message)};
}

std::string Seconds(int64_t ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f s", static_cast<double>(ms) / 1000.0);
  return buf;
}

std::string Name(const RoleStatus& role, const ReplicaStatus& r) {
  return "replica " + role.name + "/" + std::to_string(r.replica);
}

std::set<std::string> HostsOf(const ReplicaStatus& r) {
  std::set<std::string> hosts;
  for (const ServiceProcess& p : r.processes) hosts.insert(p.host);
  return hosts;
}

// Live: counts towards the role's replicas (not being stopped for good).
bool Live(const ReplicaStatus& r) { return r.phase != ReplicaPhase::kTerminating; }

int DesiredFor(const ServiceRoleSpec& spec, int current) {
  if (!spec.autoscaling) return spec.replicas;
  return std::clamp(current, spec.autoscaling->min_replicas, spec.autoscaling->max_replicas);
}

struct Found {
  RoleStatus* role = nullptr;
  ReplicaStatus* replica = nullptr;
};

Found Find(Service& service, const ReplicaKey& key) {
  Found f;
  f.role = service.status.Role(key.role);
  if (f.role == nullptr) return f;
  for (ReplicaStatus& r : f.role->replicas)
    if (r.replica == key.replica) f.replica = &r;
  return f;
}

// Processes of the current incarnation of a group that runs now.
ServiceProcess* CurrentProcess(ReplicaStatus& r, int incarnation, int worker) {
  if (incarnation != r.incarnation || !r.Assigned() || worker < 0 ||
      worker >= static_cast<int>(r.processes.size()))
    return nullptr;
  return &r.processes[static_cast<size_t>(worker)];
}

}  // namespace

void ServiceEffects::Merge(ServiceEffects other) {
  Effects::Merge(std::move(static_cast<Effects&>(other)));
  for (uint64_t o : other.release_owners) release_owners.push_back(o);
}

Service ServiceLifecycle::Create(ServiceSpec spec, uint64_t uid, int64_t now) {
  Service s;
  s.uid = uid;
  s.created_ms = now;
  s.spec = std::move(spec);
  for (const ServiceRoleSpec& rs : s.spec.roles) {
    RoleStatus role;
    role.name = rs.name;
    role.desired_replicas = rs.autoscaling ? rs.autoscaling->min_replicas : rs.replicas;
    for (int i = 0; i < role.desired_replicas; ++i) {
      ReplicaStatus r;
      r.replica = role.next_replica++;
      r.generation = role.generation;
      role.replicas.push_back(std::move(r));
    }
    s.status.roles.push_back(std::move(role));
  }
  ServiceEffects unused;  // a new service is persisted by its creator
  Settle(s, unused);
  return s;
}

// ---------------------------------------------------------------------------------------------
// Users

ServiceEffects ServiceLifecycle::Apply(Service& service, ServiceSpec spec,
                                       const ClusterView& cluster) const {
  ServiceEffects e;
  e.persist = true;
  for (const ServiceRoleSpec& rs : spec.roles) {
    RoleStatus* role = service.status.Role(rs.name);
    if (role == nullptr) {
      RoleStatus added;
      added.name = rs.name;
      added.desired_replicas = DesiredFor(rs, rs.autoscaling ? rs.autoscaling->min_replicas : 0);
      service.status.roles.push_back(std::move(added));
      e.events.push_back(Normal("RoleAdded", "role " + rs.name + " added"));
      continue;
    }
    const ServiceRoleSpec* old = service.spec.Role(rs.name);
    if (old != nullptr && !old->SameTemplate(rs)) {
      ++role->generation;
      e.events.push_back(Normal("RollingUpdate", "role " + rs.name + " generation " +
                                                     std::to_string(role->generation) +
                                                     ": replacing replicas one group at a time"));
    }
    const int desired = DesiredFor(rs, role->desired_replicas);
    if (desired != role->desired_replicas)
      e.events.push_back(Normal("Scaled", "role " + rs.name + ": " +
                                              std::to_string(role->desired_replicas) + " -> " +
                                              std::to_string(desired) + " replicas"));
    role->desired_replicas = desired;
  }
  service.spec = std::move(spec);
  e.Merge(Reconcile(service, cluster));
  return e;
}

Result<ServiceEffects> ServiceLifecycle::Scale(Service& service, const std::string& role_name,
                                               int replicas, const ClusterView& cluster) const {
  ServiceRoleSpec* spec = nullptr;
  for (ServiceRoleSpec& rs : service.spec.roles)
    if (rs.name == role_name) spec = &rs;
  RoleStatus* role = service.status.Role(role_name);
  if (spec == nullptr || role == nullptr) {
    std::string known;
    for (const ServiceRoleSpec& rs : service.spec.roles)
      known += (known.empty() ? "" : ", ") + rs.name;
    return InvalidArgument("role: '" + role_name + "' is not a role of service " + service.name() +
                           "; its roles: " + known);
  }
  if (spec->autoscaling)
    return InvalidArgument("role: " + role_name +
                           " is autoscaled; change spec.autoscaling.minReplicas/maxReplicas "
                           "with apply instead");
  if (replicas < 0) return InvalidArgument("replicas: must be 0 or more");
  if (service.status.deleting)
    return FailedPrecondition("service " + service.name() + " is being deleted");
  ServiceEffects e;
  if (spec->replicas == replicas && role->desired_replicas == replicas) return e;
  e.events.push_back(Normal("Scaled", "role " + role_name + ": " +
                                          std::to_string(role->desired_replicas) + " -> " +
                                          std::to_string(replicas) + " replicas"));
  spec->replicas = replicas;
  role->desired_replicas = replicas;
  e.persist = true;
  e.Merge(Reconcile(service, cluster));
  return e;
}

ServiceEffects ServiceLifecycle::Delete(Service& service, const ClusterView& cluster) const {
  ServiceEffects e;
  if (service.status.deleting) return e;
  service.status.deleting = true;
  e.persist = true;
  e.events.push_back(Normal("Deleting", "stopping every replica group, then freeing its slice"));
  for (RoleStatus& role : service.status.roles)
    for (ReplicaStatus& r : role.replicas)
      if (!(r.phase == ReplicaPhase::kTerminating && r.stopping))
        Terminate(role, r, "the service is deleted", cluster, e);
  Settle(service, e);
  return e;
}

// ---------------------------------------------------------------------------------------------
// Placement

std::vector<ReplicaKey> ServiceLifecycle::WaitingForSlice(const Service& service) {
  std::vector<ReplicaKey> out;
  if (service.status.deleting) return out;
  for (const RoleStatus& role : service.status.roles)
    for (const ReplicaStatus& r : role.replicas)
      if (r.phase == ReplicaPhase::kPending && !r.placed() && !r.stopping)
        out.push_back({role.name, r.replica});
  return out;
}

ServiceEffects ServiceLifecycle::Place(Service& service, const ReplicaKey& key,
                                       const GroupPlacement& placement, int64_t now) const {
  ServiceEffects e;
  Found f = Find(service, key);
  if (f.replica == nullptr || f.replica->placed() || f.replica->phase != ReplicaPhase::kPending)
    return e;
  ReplicaStatus& r = *f.replica;
  r.owner = placement.owner;
  r.slice = placement.slice;
  r.processes.clear();
  for (size_t w = 0; w < placement.hosts.size(); ++w) {
    ServiceProcess p;
    p.host = placement.hosts[w].name;
    p.address = placement.hosts[w].address;
    p.port = w < placement.ports.size() ? placement.ports[w] : 0;
    r.processes.push_back(std::move(p));
  }
  r.master_port = placement.master_port;
  r.incarnation += 1;
  r.phase = ReplicaPhase::kStarting;
  r.reason = "Placed";
  r.message =
      "placed on " + r.slice + "; starting " + std::to_string(r.processes.size()) + " processes";
  r.started_ms = now;
  r.ready_since_ms = 0;
  r.ready_once = false;
  r.last_probe_ms = 0;
  e.persist = true;
  e.assignments_changed = true;
  e.notify_hosts = HostsOf(r);
  e.events.push_back(Normal("Placed", Name(*f.role, r) + " " + r.message));
  Settle(service, e);
  return e;
}

ServiceEffects ServiceLifecycle::SetPending(Service& service, const ReplicaKey& key,
                                            const std::string& reason,
                                            const std::string& message) const {
  ServiceEffects e;
  Found f = Find(service, key);
  if (f.replica == nullptr || f.replica->phase != ReplicaPhase::kPending) return e;
  if (f.replica->reason == reason && f.replica->message == message) return e;
  f.replica->reason = reason;
  f.replica->message = message;
  e.persist = true;
  Settle(service, e);
  return e;
}

ServiceEffects ServiceLifecycle::Evict(Service& service, const ReplicaKey& key,
                                       const std::string& message,
                                       const ClusterView& cluster) const {
  ServiceEffects e;
  Found f = Find(service, key);
  if (f.replica == nullptr || !f.replica->placed() || !Live(*f.replica)) return e;
  ReplicaStatus& r = *f.replica;
  r.phase = ReplicaPhase::kRecreating;
  r.reason = "Preempted";
  r.message = message;
  r.ready_since_ms = 0;
  e.events.push_back(Warning("Preempted", Name(*f.role, r) + ": " + message));
  if (r.stopping) {
    r.after_stop = AfterStop::kRequeue;  // already being stopped: free the slice when it ends
    e.persist = true;
  } else {
    BeginStop(r, AfterStop::kRequeue, cluster, e);
  }
  Settle(service, e);
  return e;
}

std::vector<ReplicaKey> ServiceLifecycle::DueRestarts(const Service& service, int64_t now) {
  std::vector<ReplicaKey> out;
  if (service.status.deleting) return out;
  for (const RoleStatus& role : service.status.roles)
    for (const ReplicaStatus& r : role.replicas)
      if (r.phase == ReplicaPhase::kRecreating && !r.stopping && r.placed() &&
          now >= r.restart_at_ms)
        out.push_back({role.name, r.replica});
  return out;
}

ServiceEffects ServiceLifecycle::Restart(Service& service, const ReplicaKey& key,
                                         const GroupPorts& ports, int64_t now) const {
  ServiceEffects e;
  Found f = Find(service, key);
  if (f.replica == nullptr || f.replica->phase != ReplicaPhase::kRecreating ||
      f.replica->stopping || !f.replica->placed() || now < f.replica->restart_at_ms)
    return e;
  ReplicaStatus& r = *f.replica;
  r.incarnation += 1;
  r.master_port = ports.master_port;
  for (size_t w = 0; w < r.processes.size(); ++w) {
    ServiceProcess& p = r.processes[w];
    p.phase = ProcessPhase::kPending;
    p.pid = 0;
    p.exit_code = p.signal = 0;
    if (w < ports.ports.size()) p.port = ports.ports[w];
  }
  r.phase = ReplicaPhase::kStarting;
  r.reason = "Recreated";
  r.message = "group started again on " + r.slice + " (restart " + std::to_string(r.restarts) + ")";
  r.started_ms = now;
  r.ready_since_ms = 0;
  r.ready_once = false;
  r.last_probe_ms = 0;
  e.persist = true;
  e.assignments_changed = true;
  e.notify_hosts = HostsOf(r);
  e.events.push_back(Normal("Recreated", Name(*f.role, r) + " " + r.message));
  Settle(service, e);
  return e;
}

// ---------------------------------------------------------------------------------------------
// Processes and readiness

ServiceEffects ServiceLifecycle::ProcessRunning(Service& service, const ReplicaKey& key,
                                                int incarnation, int worker, int64_t pid) const {
  ServiceEffects e;
  Found f = Find(service, key);
  if (f.replica == nullptr) return e;
  ServiceProcess* p = CurrentProcess(*f.replica, incarnation, worker);
  if (p == nullptr || p->phase != ProcessPhase::kPending) return e;
  p->phase = ProcessPhase::kRunning;
  p->pid = pid;
  e.persist = true;
  ReplicaStatus& r = *f.replica;
  const bool all = std::all_of(r.processes.begin(), r.processes.end(),
                               [](const auto& q) { return q.phase == ProcessPhase::kRunning; });
  if (all && r.phase == ReplicaPhase::kStarting) {
    const ServiceRoleSpec* spec = service.spec.Role(key.role);
    r.reason = "Running";
    r.message = "all " + std::to_string(r.processes.size()) +
                " processes running; waiting for the leader's " +
                (spec ? spec->readiness.path : std::string("readiness path"));
  }
  return e;
}

ServiceEffects ServiceLifecycle::ProcessExited(Service& service, const ReplicaKey& key,
                                               int incarnation, int worker, int exit_code,
                                               int signal, const ClusterView& cluster,
                                               int64_t now) const {
  ServiceEffects e;
  Found f = Find(service, key);
  if (f.replica == nullptr) return e;
  ServiceProcess* p = CurrentProcess(*f.replica, incarnation, worker);
  if (p == nullptr || p->phase == ProcessPhase::kExited) return e;
  p->phase = ProcessPhase::kExited;
  p->exit_code = exit_code;
  p->signal = signal;
  const std::string how = signal != 0 ? "was killed by signal " + std::to_string(signal)
                                      : "exited with code " + std::to_string(exit_code);
  Recreate(*f.role, *f.replica, "ProcessExited",
           "worker " + std::to_string(worker) + " on host " + p->host + " " + how, cluster, now, e);
  Settle(service, e);
  return e;
}

ServiceEffects ServiceLifecycle::Readiness(Service& service, const ReplicaKey& key, int incarnation,
                                           bool ready, const std::string& message,
                                           const ClusterView& cluster, int64_t now) const {
  ServiceEffects e;
  Found f = Find(service, key);
  if (f.replica == nullptr) return e;
  ReplicaStatus& r = *f.replica;
  if (r.incarnation != incarnation || !r.Assigned()) return e;
  r.last_probe_ms = now;
  if (ready) {
    r.ready_once = true;
    if (r.phase == ReplicaPhase::kReady) return e;
    const bool first = r.phase == ReplicaPhase::kStarting;
    r.phase = ReplicaPhase::kReady;
    r.ready_since_ms = now;
    r.reason = "Ready";
    r.message = first ? "ready " + Seconds(now - r.started_ms) + " after start" : "ready again";
    e.persist = true;
    e.events.push_back(Normal("Ready", Name(*f.role, r) + " " + r.message));
    e.Merge(Reconcile(service, cluster));  // a rolling update may take its next step
    return e;
  }
  if (!r.ready_once) {
    // Start-up grace: a server compiling its model fails its probes for minutes. Tick recreates
    // the group when the grace runs out.
    if (r.message == "readiness: " + message) return e;
    r.message = "readiness: " + message;
    e.persist = true;
    return e;
  }
  if (r.phase == ReplicaPhase::kUnready && r.message == message) return e;
  const bool was_ready = r.phase == ReplicaPhase::kReady;
  r.phase = ReplicaPhase::kUnready;
  r.ready_since_ms = 0;
  r.reason = "Unready";
  r.message = message;
  e.persist = true;
  if (was_ready)
    e.events.push_back(
        Warning("Unready", Name(*f.role, r) + ": " + message + "; it leaves the ready endpoints"));
  Settle(service, e);
  return e;
}

ServiceEffects ServiceLifecycle::ConfirmStopped(Service& service, const ReplicaKey& key,
                                                const std::string& host,
                                                const ClusterView& cluster) const {
  ServiceEffects e;
  Found f = Find(service, key);
  if (f.replica == nullptr || !f.replica->stopping || !f.replica->unconfirmed.erase(host)) return e;
  if (f.replica->unconfirmed.empty()) FinishStop(*f.replica, e);
  e.Merge(Reconcile(service, cluster));
  return e;
}

ServiceEffects ServiceLifecycle::HostLost(Service& service, const std::string& host,
                                          const std::string& why,
                                          const ClusterView& cluster) const {
  ServiceEffects e;
  for (RoleStatus& role : service.status.roles)
    for (ReplicaStatus& r : role.replicas) {
      if (!r.placed() || !r.OnHost(host)) continue;
      // The slice lost a host: the group cannot start there again.
      if (r.stopping) {
        if (r.after_stop == AfterStop::kRestart) r.after_stop = AfterStop::kRequeue;
        if (r.unconfirmed.erase(host) && r.unconfirmed.empty()) FinishStop(r, e);
        e.persist = true;
        continue;
      }
      if (r.phase == ReplicaPhase::kTerminating) continue;
      if (r.phase != ReplicaPhase::kRecreating) ++r.restarts;
      r.phase = ReplicaPhase::kRecreating;
      r.reason = "HostLost";
      r.message = "host " + host + " lost: " + why + "; the group moves to another slice";
      r.ready_since_ms = 0;
      e.events.push_back(Warning("HostLost", Name(role, r) + ": " + r.message));
      BeginStop(r, AfterStop::kRequeue, cluster, e);
    }
  e.Merge(Reconcile(service, cluster));
  return e;
}

// ---------------------------------------------------------------------------------------------
// Timers and the autoscaler

void ServiceLifecycle::Load(Service& service, const std::string& role,
                            const LoadSample& sample) const {
  const ServiceRoleSpec* spec = service.spec.Role(role);
  if (spec == nullptr) return;
  const int64_t lookback =
      spec->autoscaling ? spec->autoscaling->lookback_ms : AutoscalerConfig{}.lookback_ms;
  std::vector<LoadSample>& samples = service.runtime.load[role];
  samples.push_back(sample);
  std::erase_if(samples,
                [&](const LoadSample& s) { return s.time_ms < sample.time_ms - lookback; });
}

ServiceEffects ServiceLifecycle::Tick(Service& service, const ClusterView& cluster,
                                      int64_t now) const {
  ServiceEffects e;
  if (service.status.deleting) return e;
  for (RoleStatus& role : service.status.roles) {
    const ServiceRoleSpec* spec = service.spec.Role(role.name);
    if (spec == nullptr) continue;
    const ReadinessSpec& rd = spec->readiness;
    for (ReplicaStatus& r : role.replicas) {
      if (!r.Assigned()) continue;
      if (!r.ready_once && now - r.started_ms >= rd.startup_grace_ms) {
        Recreate(role, r, "StartupTimeout",
                 "the leader did not pass " + rd.path + " within the start-up grace of " +
                     Seconds(rd.startup_grace_ms),
                 cluster, now, e);
      } else if (r.phase == ReplicaPhase::kReady &&
                 now - r.last_probe_ms > rd.period_ms + rd.timeout_ms) {
        r.phase = ReplicaPhase::kUnready;
        r.ready_since_ms = 0;
        r.reason = "Unready";
        r.message = "no readiness result for " + Seconds(now - r.last_probe_ms);
        e.persist = true;
        e.events.push_back(Warning("Unready", Name(role, r) + ": " + r.message));
      }
    }
    if (!spec->autoscaling) continue;
    const auto load = service.runtime.load.find(role.name);
    AutoscalerDecision d =
        Autoscale(*spec->autoscaling,
                  load == service.runtime.load.end() ? std::vector<LoadSample>{} : load->second,
                  role.desired_replicas, role.autoscaler.state, now);
    role.autoscaler_at_ms = now;
    const int before = role.desired_replicas;
    role.autoscaler = d;
    if (d.desired_replicas != before) {
      role.desired_replicas = d.desired_replicas;
      e.persist = true;
      e.events.push_back(Normal("Autoscaled", "role " + role.name + ": " + std::to_string(before) +
                                                  " -> " + std::to_string(d.desired_replicas) +
                                                  " replicas: " + d.reason));
    }
  }
  e.Merge(Reconcile(service, cluster));
  return e;
}

// ---------------------------------------------------------------------------------------------
// Groups: recreate, terminate, the stop protocol

void ServiceLifecycle::Recreate(RoleStatus& role, ReplicaStatus& r, const std::string& reason,
                                const std::string& message, const ClusterView& cluster, int64_t now,
                                ServiceEffects& e) const {
  if (r.ready_since_ms > 0 && now - r.ready_since_ms >= options_.backoff_reset_after_ms)
    r.backoff_ms = 0;  // it had been healthy for long: this failure starts a new series
  r.backoff_ms = r.backoff_ms == 0 ? options_.backoff_initial_ms
                                   : std::min(2 * r.backoff_ms, options_.backoff_max_ms);
  r.restart_at_ms = now + r.backoff_ms;
  ++r.restarts;
  r.phase = ReplicaPhase::kRecreating;
  r.reason = reason;
  r.message = message + "; recreating the whole group in " + Seconds(r.backoff_ms);
  r.ready_since_ms = 0;
  e.events.push_back(Warning(reason, Name(role, r) + ": " + r.message));
  BeginStop(r, AfterStop::kRestart, cluster, e);
}

void ServiceLifecycle::Terminate(RoleStatus& role, ReplicaStatus& r, const std::string& why,
                                 const ClusterView& cluster, ServiceEffects& e) {
  r.phase = ReplicaPhase::kTerminating;
  r.reason = "Terminating";
  r.message = why;
  r.ready_since_ms = 0;
  e.persist = true;
  e.events.push_back(Normal("Terminating", Name(role, r) + ": " + why));
  if (r.stopping) {
    r.after_stop = AfterStop::kRemove;
    return;
  }
  if (!r.placed()) return;  // Settle drops it
  // Recreating and waiting for its backoff: its processes are gone already.
  BeginStop(r, AfterStop::kRemove, cluster, e);
}

void ServiceLifecycle::BeginStop(ReplicaStatus& r, AfterStop after, const ClusterView& cluster,
                                 ServiceEffects& e) {
  const bool was_assigned =
      r.Assigned() || r.phase == ReplicaPhase::kRecreating || r.phase == ReplicaPhase::kTerminating;
  r.stopping = true;
  r.after_stop = after;
  r.unconfirmed.clear();
  for (const ServiceProcess& p : r.processes)
    if (p.phase != ProcessPhase::kExited && !cluster.HostLost(p.host)) r.unconfirmed.insert(p.host);
  e.persist = true;
  if (was_assigned) {
    e.assignments_changed = true;
    e.notify_hosts.merge(HostsOf(r));
  }
  if (r.unconfirmed.empty()) FinishStop(r, e);
}

void ServiceLifecycle::FinishStop(ReplicaStatus& r, ServiceEffects& e) {
  r.stopping = false;
  r.unconfirmed.clear();
  e.persist = true;
  for (ServiceProcess& p : r.processes)
    if (p.phase != ProcessPhase::kExited) p.phase = ProcessPhase::kExited;
  switch (r.after_stop) {
    case AfterStop::kRestart:
      return;  // DueRestarts lists it once the backoff is over
    case AfterStop::kRequeue:
      e.release_owners.push_back(r.owner);
      e.schedule = true;
      r.owner = 0;
      r.slice.clear();
      r.processes.clear();
      r.phase = ReplicaPhase::kPending;
      r.message = r.message + "; waiting for a new slice";
      return;
    case AfterStop::kRemove:
      if (r.placed()) e.release_owners.push_back(r.owner);
      e.schedule = true;
      r.owner = 0;
      r.processes.clear();
      return;  // Settle drops it (Terminating, not stopping)
  }
}

// ---------------------------------------------------------------------------------------------
// Reconciling replica counts and rollouts

ServiceEffects ServiceLifecycle::Reconcile(Service& service, const ClusterView& cluster) {
  ServiceEffects e;
  if (service.status.deleting) {
    Settle(service, e);
    return e;
  }
  for (RoleStatus& role : service.status.roles) {
    const ServiceRoleSpec* spec = service.spec.Role(role.name);
    const int desired = spec == nullptr ? 0 : role.desired_replicas;
    const int surge = spec == nullptr ? 0 : spec->rollout.max_surge;
    const int unavailable = spec == nullptr ? desired : spec->rollout.max_unavailable;
    // Each pass changes at most one group, and passes repeat until nothing changes.
    for (int guard = 0; guard < 4 * static_cast<int>(role.replicas.size()) + 64; ++guard) {
      std::vector<ReplicaStatus*> current, old;
      int ready = 0;
      for (ReplicaStatus& r : role.replicas) {
        if (!Live(r)) continue;
        (r.generation == role.generation ? current : old).push_back(&r);
        ready += r.phase == ReplicaPhase::kReady ? 1 : 0;
      }
      const int live = static_cast<int>(current.size() + old.size());
      // Stopping preference: groups that serve nothing first, then the newest.
      auto victim = [](std::vector<ReplicaStatus*>& v) {
        return *std::min_element(v.begin(), v.end(), [](ReplicaStatus* a, ReplicaStatus* b) {
          const bool ar = a->phase == ReplicaPhase::kReady, br = b->phase == ReplicaPhase::kReady;
          if (ar != br) return !ar;
          return a->replica > b->replica;
        });
      };
      if (static_cast<int>(current.size()) > desired) {
        Terminate(role, *victim(current), "scaled down to " + std::to_string(desired) + " replicas",
                  cluster, e);
        continue;
      }
      auto add = [&] {
        ReplicaStatus r;
        r.replica = role.next_replica++;
        r.generation = role.generation;
        e.events.push_back(Normal("ReplicaAdded", "replica " + role.name + "/" +
                                                      std::to_string(r.replica) + " generation " +
                                                      std::to_string(r.generation)));
        role.replicas.push_back(std::move(r));
        e.persist = true;
        e.schedule = true;
      };
      if (old.empty()) {
        if (static_cast<int>(current.size()) < desired) {
          add();
          continue;
        }
        break;
      }
      // A rolling update: one group at a time, each step once the previous new group is ready.
      const bool new_in_progress = std::any_of(
          current.begin(), current.end(), [](auto* r) { return r->phase != ReplicaPhase::kReady; });
      if (new_in_progress) break;
      if (live < desired + surge && static_cast<int>(current.size()) < desired) {
        add();
        continue;
      }
      ReplicaStatus* v = victim(old);
      const int ready_after = ready - (v->phase == ReplicaPhase::kReady ? 1 : 0);
      if (ready_after >= desired - unavailable || v->phase != ReplicaPhase::kReady) {
        Terminate(role, *v, "replaced by generation " + std::to_string(role.generation), cluster,
                  e);
        continue;
      }
      break;
    }
  }
  Settle(service, e);
  return e;
}

void ServiceLifecycle::Settle(Service& service, ServiceEffects& e) {
  ServiceStatus& st = service.status;
  for (RoleStatus& role : st.roles)
    std::erase_if(role.replicas, [](const ReplicaStatus& r) {
      return r.phase == ReplicaPhase::kTerminating && !r.stopping && !r.placed();
    });
  std::erase_if(st.roles, [&](const RoleStatus& role) {
    return role.replicas.empty() && service.spec.Role(role.name) == nullptr;
  });
  if (st.deleting) {
    bool empty = true;
    for (const RoleStatus& role : st.roles) empty = empty && role.replicas.empty();
    if (empty) {
      e.remove = true;
      e.persist = false;
      e.events.push_back(Normal("Deleted", "every replica group stopped; slices freed"));
      return;
    }
    st.phase = ServicePhase::kDeleting;
    st.reason = "Deleting";
    st.message = "stopping replica groups";
    return;
  }
  int desired = 0, ready = 0, placed = 0, broken = 0, pending = 0;
  bool rolling = false;
  std::string pending_why;
  for (const RoleStatus& role : st.roles) {
    const bool in_spec = service.spec.Role(role.name) != nullptr;
    desired += in_spec ? role.desired_replicas : 0;
    for (const ReplicaStatus& r : role.replicas) {
      if (r.generation != role.generation || !in_spec) rolling = true;
      if (!Live(r)) {
        rolling = true;
        continue;
      }
      if (r.phase == ReplicaPhase::kReady && r.generation == role.generation && in_spec) ++ready;
      if (r.placed()) ++placed;
      if (r.phase == ReplicaPhase::kUnready || r.phase == ReplicaPhase::kRecreating) ++broken;
      if (r.phase == ReplicaPhase::kPending) {
        ++pending;
        if (pending_why.empty())
          pending_why = "replica " + role.name + "/" + std::to_string(r.replica) + ": " + r.reason +
                        ": " + r.message;
      }
    }
  }
  ServicePhase phase;
  std::string reason, message;
  const std::string counts =
      std::to_string(ready) + " of " + std::to_string(desired) + " replicas ready";
  if (ready == desired && !rolling && broken == 0 && pending == 0) {
    phase = ServicePhase::kReady;
    reason = "Ready";
    message = counts;
  } else if (broken > 0) {
    phase = ServicePhase::kDegraded;
    reason = "Degraded";
    message = counts + "; " + std::to_string(broken) + " unready or being recreated";
  } else if (placed == 0 && pending > 0) {
    phase = ServicePhase::kPending;
    reason = "Pending";
    message = pending_why;
  } else {
    phase = ServicePhase::kProgressing;
    reason = rolling ? "RollingUpdate" : "Progressing";
    message = counts + (pending > 0 ? "; " + pending_why : "");
  }
  if (phase != st.phase || reason != st.reason || message != st.message) {
    st.phase = phase;
    st.reason = reason;
    st.message = message;
    if (!e.remove) e.persist = true;
  }
}

}  // namespace tessera
