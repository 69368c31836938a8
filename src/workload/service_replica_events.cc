// ServiceLifecycle (service_lifecycle.h), the events of one replica group: placement (Place,
// SetPending, Evict, Restart after its backoff) and what its processes report (running,
// exited, readiness results, stops confirmed, hosts lost).
#include <algorithm>

#include "workload/service_lifecycle.h"
#include "workload/service_lifecycle_internal.h"

namespace tessera {

using namespace service_detail;  // the helpers of service_lifecycle_internal.h

namespace {

// A group whose processes were just assigned (placed, or restarted on its slice) begins its new
// incarnation: Starting, its readiness history forgotten, its hosts told to fetch assignments.
void BeginIncarnation(const RoleStatus& role, ReplicaStatus& r, const std::string& reason,
                      std::string message, int64_t now, ServiceEffects& e) {
  r.phase = ReplicaPhase::kStarting;
  r.reason = reason;
  r.message = std::move(message);
  r.started_ms = now;
  r.ready_since_ms = 0;
  r.ready_once = false;
  r.last_probe_ms = 0;
  e.persist = true;
  e.assignments_changed = true;
  e.notify_hosts = HostsOf(r);
  e.events.push_back(Normal(reason, Name(role, r) + " " + r.message));
}

}  // namespace

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
  BeginIncarnation(
      *f.role, r, "Placed",
      "placed on " + r.slice + "; starting " + std::to_string(r.processes.size()) + " processes",
      now, e);
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
  BeginIncarnation(
      *f.role, r, "Recreated",
      "group started again on " + r.slice + " (restart " + std::to_string(r.restarts) + ")", now,
      e);
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
    // The group serves only once every process runs: a leader answering its probe before a
    // worker's agent confirmed the start is not yet a whole replica. The next probe decides.
    const auto waiting = std::find_if(r.processes.begin(), r.processes.end(), [](const auto& p) {
      return p.phase != ProcessPhase::kRunning;
    });
    if (waiting != r.processes.end()) {
      const std::string why = "the leader answers; waiting for worker " +
                              std::to_string(waiting - r.processes.begin()) + " on host " +
                              waiting->host + " to start";
      if (r.message == why) return e;
      r.message = why;
      e.persist = true;
      return e;
    }
    if (!r.ready_once) {
      r.ready_once = true;
      // Its assignments change: the agents give its processes the normal priority again.
      const ServiceRoleSpec* spec = service.spec.Role(key.role);
      if (spec != nullptr && spec->startup_nice > 0) {
        e.persist = true;
        e.assignments_changed = true;
        e.notify_hosts.merge(HostsOf(r));
      }
    }
    if (r.phase == ReplicaPhase::kReady) return e;
    const bool first = r.phase == ReplicaPhase::kStarting;
    r.phase = ReplicaPhase::kReady;
    r.ready_since_ms = now;
    r.reason = "Ready";
    r.message =
        first ? "ready " + WholeSeconds(now - r.started_ms) + " after start" : "ready again";
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

}  // namespace tessera
