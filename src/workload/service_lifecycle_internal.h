// Small helpers shared by the files that implement ServiceLifecycle (service_lifecycle.cc,
// service_replica_events.cc, service_reconcile.cc): events, names and lookups on a Service.
// Internal to src/workload. Pure; stateless.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <utility>

#include "workload/service_lifecycle.h"

namespace tessera::service_detail {

inline std::string WholeSeconds(int64_t ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f s", static_cast<double>(ms) / 1000.0);
  return buf;
}

inline std::string Name(const RoleStatus& role, const ReplicaStatus& r) {
  return "replica " + role.name + "/" + std::to_string(r.replica);
}

inline std::set<std::string> HostsOf(const ReplicaStatus& r) {
  std::set<std::string> hosts;
  for (const ServiceProcess& p : r.processes) hosts.insert(p.host);
  return hosts;
}

// Live: counts towards the role's replicas (not being stopped for good).
inline bool Live(const ReplicaStatus& r) { return r.phase != ReplicaPhase::kTerminating; }

inline int DesiredFor(const ServiceRoleSpec& spec, int current) {
  if (!spec.autoscaling) return spec.replicas;
  return std::clamp(current, spec.autoscaling->min_replicas, spec.autoscaling->max_replicas);
}

struct Found {
  RoleStatus* role = nullptr;
  ReplicaStatus* replica = nullptr;
};

inline Found Find(Service& service, const ReplicaKey& key) {
  Found f;
  f.role = service.status.Role(key.role);
  if (f.role == nullptr) return f;
  for (ReplicaStatus& r : f.role->replicas)
    if (r.replica == key.replica) f.replica = &r;
  return f;
}

// Processes of the current incarnation of a group that runs now.
inline ServiceProcess* CurrentProcess(ReplicaStatus& r, int incarnation, int worker) {
  if (incarnation != r.incarnation || !r.Assigned() || worker < 0 ||
      worker >= static_cast<int>(r.processes.size()))
    return nullptr;
  return &r.processes[static_cast<size_t>(worker)];
}

}  // namespace tessera::service_detail
