// ServiceLifecycle (service_lifecycle.h), the steps a user or the clock drives: Create, Apply
// (a new template), Scale, Delete, and Tick (start-up grace, stale readiness, the autoscaler).
// A replica group's own events are in service_replica_events.cc; the rules that bring the
// groups to the desired count and template (Reconcile, Settle, the stop protocol) in
// service_reconcile.cc.
#include "workload/service_lifecycle.h"

#include <algorithm>

#include "workload/service_lifecycle_internal.h"

namespace tessera {

using namespace service_detail;  // the helpers of service_lifecycle_internal.h

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
    role.desired_replicas =
        rs.autoscaling ? AutoscaleInitialReplicas(*rs.autoscaling) : rs.replicas;
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
      added.desired_replicas =
          DesiredFor(rs, rs.autoscaling ? AutoscaleInitialReplicas(*rs.autoscaling) : 0);
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
    const auto report = service.runtime.traffic.find(role.name);
    for (ReplicaStatus& r : role.replicas) {
      if (r.phase == ReplicaPhase::kReady && report != service.runtime.traffic.end() &&
          report->second.at_ms >= r.ready_since_ms && report->second.in_flight.count(r.replica))
        service.runtime.routed_since.emplace(std::make_pair(role.name, r.replica),
                                             report->second.at_ms);
      // A new group that took traffic, or waited for the router long enough, is remembered:
      // the rollout takes its next step (Reconcile below).
      if (r.phase == ReplicaPhase::kReady && r.generation == role.generation &&
          (TookTraffic(service, role.name, r) ||
           now - r.ready_since_ms >= options_.traffic_wait_ms))
        service.runtime.took_traffic.insert({role.name, r.replica});
      if (!r.Assigned()) continue;
      if (!r.ready_once && now - r.started_ms >= rd.startup_grace_ms) {
        Recreate(role, r, "StartupTimeout",
                 "the leader did not pass " + rd.path + " within the start-up grace of " +
                     WholeSeconds(rd.startup_grace_ms),
                 cluster, now, e);
      } else if (r.phase == ReplicaPhase::kReady &&
                 now - r.last_probe_ms > rd.period_ms + rd.timeout_ms) {
        r.phase = ReplicaPhase::kUnready;
        r.ready_since_ms = 0;
        r.reason = "Unready";
        r.message = "no readiness result for " + WholeSeconds(now - r.last_probe_ms);
        e.persist = true;
        e.events.push_back(Warning("Unready", Name(role, r) + ": " + r.message));
      }
    }
    if (!spec->autoscaling) continue;
    const auto load = service.runtime.load.find(role.name);
    AutoscaleInput in;
    if (load != service.runtime.load.end()) in.samples = load->second;
    in.current_replicas = role.desired_replicas;
    in.ready_replicas = role.ReadyReplicas();
    for (const ReplicaStatus& r : role.replicas)
      if (!r.stopping && (r.phase == ReplicaPhase::kPending || r.phase == ReplicaPhase::kStarting ||
                          r.phase == ReplicaPhase::kRecreating))
        ++in.starting_replicas;
    in.free_slices = cluster.FreeSlices(spec->accelerator, spec->topology);
    in.max_ongoing_requests = spec->max_ongoing_requests;
    in.state = role.autoscaler.state;
    in.now_ms = now;
    AutoscalerDecision d = Autoscale(*spec->autoscaling, in);
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
  // Groups gone, or no longer Ready, are forgotten (a group Ready again must take traffic again).
  std::erase_if(service.runtime.took_traffic, [&](const std::pair<std::string, int>& k) {
    const RoleStatus* role = service.status.Role(k.first);
    if (role == nullptr) return true;
    return std::none_of(role->replicas.begin(), role->replicas.end(), [&](const ReplicaStatus& r) {
      return r.replica == k.second && r.phase == ReplicaPhase::kReady;
    });
  });
  std::erase_if(service.runtime.routed_since, [&](const auto& kv) {
    const RoleStatus* role = service.status.Role(kv.first.first);
    if (role == nullptr) return true;
    return std::none_of(role->replicas.begin(), role->replicas.end(), [&](const ReplicaStatus& r) {
      return r.replica == kv.first.second && r.phase == ReplicaPhase::kReady;
    });
  });
  e.Merge(Reconcile(service, cluster));
  return e;
}

}  // namespace tessera
