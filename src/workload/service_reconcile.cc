// ServiceLifecycle (service_lifecycle.h), the rules that act on whole groups: recreate,
// terminate and the stop protocol (BeginStop, FinishStop), and Reconcile and Settle, which
// bring each role to its desired count and roll a new template one group at a time.
#include <algorithm>

#include "workload/service_lifecycle.h"
#include "workload/service_lifecycle_internal.h"

namespace tessera {

using namespace service_detail;  // the helpers of service_lifecycle_internal.h

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
  r.message = message + "; recreating the whole group in " + WholeSeconds(r.backoff_ms);
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

bool ServiceLifecycle::TookTraffic(const Service& service, const std::string& role,
                                   const ReplicaStatus& r) {
  if (service.runtime.took_traffic.count({role, r.replica})) return true;
  const auto report = service.runtime.traffic.find(role);
  if (report == service.runtime.traffic.end()) return true;  // no router reports on the role
  const RouterTraffic& t = report->second;
  if (t.at_ms < r.ready_since_ms) return false;  // the router may not know it is ready yet
  const auto mine = t.in_flight.find(r.replica);
  if (mine == t.in_flight.end()) return false;  // the router does not route to it yet
  if (mine->second > 0 || t.ongoing_requests <= 0) return true;
  // In the rotation for a whole report period: it had its chance at every request since.
  const auto since = service.runtime.routed_since.find({role, r.replica});
  return since != service.runtime.routed_since.end() && t.at_ms - since->second >= kRoutedForMs;
}

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
      // A rolling update: one group at a time, each step once the previous new group is ready
      // and has taken traffic (TookTraffic).
      const bool new_in_progress =
          std::any_of(current.begin(), current.end(), [&](const ReplicaStatus* r) {
            return r->phase != ReplicaPhase::kReady || !TookTraffic(service, role.name, *r);
          });
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
