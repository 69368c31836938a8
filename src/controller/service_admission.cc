// Controller: Services through the admission cycle (docs/serving.md "Admission"). Once a
// ClusterQueue exists, every replica group is one workload of the scheduling pass's cycle
// (workload/service_admission.h: one slice, the Service's LocalQueue and PriorityClass), beside
// the TrainJobs: ScheduleThroughQueues (scheduling.cc) calls AddServiceWorkloads while it builds
// the snapshot and the functions below for each decision about a group. A group is placed by
// ServiceLifecycle::Place, evicted by ServiceLifecycle::Evict (stopped, its slice freed once the
// hosts confirm, Pending again; the other groups keep serving), and a waiting group carries the
// cycle's reason (ServiceLifecycle::SetPending). Plumbing only: the rules are in admission and
// workload.
#include "workload/service_admission.h"

#include <algorithm>

#include "controller/controller.h"

namespace tessera::controller {

std::map<uint64_t, Controller::GroupRef> Controller::AddServiceWorkloads(
    Snapshot& snap, const std::vector<PriorityClass>& classes) {
  std::vector<const Service*> order;
  // A Service inside a SliceReservation is placed on its hosts, never admitted (its quota was
  // charged once, to the reservation: reservation_services.cc).
  for (const auto& [name, svc] : services_)
    if (svc.spec.reservation.empty()) order.push_back(&svc);
  std::sort(order.begin(), order.end(),
            [](const Service* a, const Service* b) { return a->uid < b->uid; });
  std::map<uint64_t, GroupRef> out;
  // Every uid and owner given so far is below next_uid_, so these ids are unique and own no
  // hosts; they live for this cycle only (a group's place in line is its Service's uid).
  uint64_t pending_id = next_uid_;
  for (const Service* svc : order) {
    const ServiceWorkloads groups = AdmissionWorkloads(*svc);
    for (uint64_t owner : groups.releasing) snap.inventory.Release(OwnerId(owner));
    int32_t priority = 0;
    if (!svc->spec.priority.empty()) {
      // Checked at apply; a class deleted since leaves the group at priority 0, as a job.
      auto resolved = ResolvePriority(classes, svc->spec.priority);
      if (resolved.ok()) priority = *resolved;
    }
    for (const GroupWorkload& g : groups.groups) {
      // A placed group whose hosts the inventory could not reserve (reported as an inventory
      // conflict) is left out rather than failing the whole cycle.
      if (g.state == WorkloadState::kRunning && !snap.inventory.Holds(OwnerId(g.owner))) continue;
      // Waits with SecretNotFound (secrets.cc) until its Secret is applied.
      if (g.state == WorkloadState::kPending &&
          roles_missing_secrets_.count(svc->name() + "/" + g.key.role))
        continue;
      const uint64_t id = g.state == WorkloadState::kPending ? pending_id++ : g.owner;
      snap.workloads.push_back(
          GroupAdmissionWorkload(*svc, g, WorkloadId(id), priority, kDefaultLocalQueue));
      out[id] = {svc->name(), g.key};
    }
  }
  return out;
}

std::set<std::string> Controller::HoldersOf(const PlanResult& plan) const {
  std::set<std::string> holders;
  for (const SlicePlacement& p : plan.slices)
    for (HostId h : p.hosts) {
      const OwnerId o = inventory_.host(h).owner;
      if (!o.valid()) continue;
      for (const auto& [name, job] : jobs_)
        if (job.uid == o.value()) holders.insert(name);
      for (const auto& [name, svc] : services_)
        for (const RoleStatus& role : svc.status.roles)
          for (const ReplicaStatus& r : role.replicas)
            if (r.owner == o.value())
              holders.insert(GroupWorkloadName(name, {role.name, r.replica}));
    }
  return holders;
}

Result<bool> Controller::PlaceGroup(const std::string& service, const ReplicaKey& key,
                                    const PlanResult& plan) {
  Service* svc = FindService(service);
  if (svc == nullptr || plan.slices.size() != 1) return false;
  const ServiceRoleSpec* spec = svc->spec.Role(key.role);
  const std::vector<ReplicaKey> waiting = ServiceLifecycle::WaitingForSlice(*svc);
  if (spec == nullptr || std::find(waiting.begin(), waiting.end(), key) == waiting.end())
    return false;  // placed, stopping or gone since the plan was made
  const uint64_t owner = next_uid_;
  // Inside a SliceReservation the group holds no hosts of its own: the reservation keeps them
  // (its owner id still names the group, and releasing it frees nothing).
  if (svc->spec.reservation.empty() && !ApplyPlan(inventory_, OwnerId(owner), plan).ok())
    return false;
  GroupPlacement placement;
  placement.owner = owner;
  const SlicePlacement& p = plan.slices[0];
  for (HostId id : p.hosts) {
    const std::string& hn = host_names_[id.value()];
    auto h = hosts_.find(hn);
    placement.hosts.push_back({hn, h == hosts_.end() ? "127.0.0.1" : h->second.spec.address});
  }
  placement.slice = p.fixed_slice.valid()
                        ? slice_names_[p.fixed_slice.value()]
                        : service + "-" + key.role + "-" + std::to_string(key.replica);
  const GroupPorts ports = ServiceGroupPorts(placement.hosts, spec->port);
  placement.master_port = ports.master_port;
  placement.ports = ports.ports;
  const int64_t now = NowMs();
  Status placed = RunServiceStep(
      service, [&](Service& s) { return services_life_.Place(s, key, placement, now); },
      /*store_uid_counter=*/true);
  if (!placed.ok()) {
    inventory_.Release(OwnerId(owner));  // the group is Pending again, as it was
    return placed;
  }
  return true;
}

Status Controller::AdmitGroup(const GroupRef& group, const Admission& admission) {
  if (FindService(group.service) == nullptr) return Status::Ok();
  const std::set<std::string> holders = HoldersOf(admission.placement);
  if (holders.empty()) {
    auto placed = PlaceGroup(group.service, group.key, admission.placement);
    if (!placed.ok()) return placed.status();
    if (*placed) return Status::Ok();
  }
  std::string names;
  for (const auto& n : holders) names += (names.empty() ? "" : ", ") + n;
  return SetGroupPending(
      group, "WaitingForPreemption",
      "admitted to " + admission.cluster_queue + "; starts once the workers of " +
          (names.empty() ? std::string("the preempted workloads") : names) + " have stopped");
}

Status Controller::EvictGroup(const GroupRef& group, const Eviction& eviction) {
  if (FindService(group.service) == nullptr) return Status::Ok();
  const View view(*this);
  std::string message = eviction.message;
  if (eviction.cause == EvictionCause::kPreempted)
    message += "; its processes get SIGTERM and " + std::to_string(eviction.grace_ms / 1000) +
               " s before SIGKILL";
  return RunServiceStep(
      group.service, [&](Service& s) { return services_life_.Evict(s, group.key, message, view); });
}

Status Controller::SetGroupPending(const GroupRef& group, const std::string& reason,
                                   const std::string& message) {
  if (FindService(group.service) == nullptr) return Status::Ok();
  return RunServiceStep(group.service, [&](Service& s) {
    return services_life_.SetPending(s, group.key, reason, message);
  });
}

}  // namespace tessera::controller
