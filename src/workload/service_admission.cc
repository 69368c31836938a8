#include "workload/service_admission.h"

namespace tessera {

ServiceWorkloads AdmissionWorkloads(const Service& service) {
  ServiceWorkloads out;
  for (const RoleStatus& role : service.status.roles) {
    const ServiceRoleSpec* spec = service.spec.Role(role.name);
    for (const ReplicaStatus& r : role.replicas) {
      // Being stopped for good or for a new slice: its chips are on their way out.
      const bool releasing = r.phase == ReplicaPhase::kTerminating ||
                             (r.stopping && r.after_stop != AfterStop::kRestart);
      if (r.placed() && (releasing || service.status.deleting || spec == nullptr)) {
        out.releasing.push_back(r.owner);
        continue;
      }
      if (spec == nullptr || service.status.deleting || releasing) continue;
      GroupWorkload g;
      g.key = {role.name, r.replica};
      g.request = {spec->accelerator, spec->topology, 1};
      if (r.placed()) {
        g.state = WorkloadState::kRunning;
        g.owner = r.owner;
      } else if (r.phase == ReplicaPhase::kPending && !r.stopping) {
        g.state = WorkloadState::kPending;
      } else {
        continue;
      }
      out.groups.push_back(std::move(g));
    }
  }
  return out;
}

std::string GroupWorkloadName(const std::string& service, const ReplicaKey& key) {
  return "service/" + service + "/" + key.role + "/" + std::to_string(key.replica);
}

Workload GroupAdmissionWorkload(const Service& service, const GroupWorkload& group, WorkloadId id,
                                int32_t priority, const std::string& default_queue) {
  Workload w;
  w.id = id;
  w.name = GroupWorkloadName(service.name(), group.key);
  w.local_queue = LocalQueueKeyOf(service.name(),
                                  service.spec.queue.empty() ? default_queue : service.spec.queue);
  w.priority = priority;
  w.request = group.request;
  w.creation_order = static_cast<int64_t>(service.uid);
  w.state = group.state;
  if (group.state == WorkloadState::kRunning) {
    const RoleStatus* role = service.status.Role(group.key.role);
    if (role != nullptr)
      for (const ReplicaStatus& r : role->replicas)
        if (r.replica == group.key.replica) w.admitted_at_ms = r.started_ms;
  }
  return w;
}

std::string GroupPendingMessage(const PendingStatus& status) {
  std::string m = status.message.str();
  if (status.position > 0)
    m += "; position " + std::to_string(status.position) + " in ClusterQueue " +
         status.cluster_queue;
  if (!status.would_help.empty()) {
    m += "; would help: ";
    for (size_t i = 0; i < status.would_help.size(); ++i) {
      const Blocker& b = status.would_help[i];
      if (i > 0) m += ", ";
      // Groups are named service/...; every other workload is a TrainJob.
      m += (b.name.find('/') == std::string::npos ? "trainjob " : "") + b.name + " (priority " +
           std::to_string(b.priority) + ", " + std::to_string(b.chips) + " chips, " +
           (b.preemptible ? "preemptible" : "must finish") + ")";
    }
  }
  return m;
}

bool StoppingForPreemption(const ReplicaStatus& r) {
  // ServiceLifecycle::Evict names the stop "Preempted"; a later host loss keeps the reason.
  return r.stopping && r.after_stop == AfterStop::kRequeue && r.reason == "Preempted";
}

}  // namespace tessera
