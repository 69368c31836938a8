// Controller: Services inside SliceReservations (docs/reservations.md). A Service that names
// spec.reservation has every replica group of every role placed only on the reservation's hosts
// that its other users (jobs and groups) do not hold, as a TrainJob inside one is
// (reservations.cc): never through the admission cycle or first come, first served
// (ScheduleServices and AddServiceWorkloads skip it), holding no hosts of its own, so quota is
// charged once, to the reservation, and the hosts stay held when the groups stop. A group that
// cannot be placed waits with the reason a job would have (ReservationNotFound, Pending,
// Expired, Releasing, Full). A Service with a placed group is a user of the reservation: named
// in status.users and in the refusal of a delete, and its groups are stopped by `--force`.
//
// Hooked in by one line each: ServiceRefusalLocked (services.cc), ScheduleReservationUsers and
// StopReservationUsers (reservations.cc).
#include <algorithm>

#include "controller/controller.h"

namespace tessera::controller {

std::vector<HostId> Controller::ReservationHostsInUse(const std::string& name, uint64_t except_job,
                                                      bool with_lost) const {
  std::vector<HostId> in_use;
  if (auto r = reservations_.find(name); with_lost && r != reservations_.end())
    in_use = ReservationLostHosts(r->second);  // reservation_health.cc
  auto add = [&](const std::string& host) {
    if (auto h = host_ids_.find(host); h != host_ids_.end()) in_use.push_back(h->second);
  };
  for (const auto& [job_name, job] : jobs_) {
    if (job.spec.reservation != name || !job.HoldsChips() || job.uid == except_job) continue;
    for (const auto& slice : job.status.placement)
      for (const std::string& host : slice) add(host);
  }
  for (const auto& [svc_name, svc] : services_) {
    if (svc.spec.reservation != name) continue;
    for (const RoleStatus& role : svc.status.roles)
      for (const ReplicaStatus& r : role.replicas)
        if (r.placed())
          for (const ServiceProcess& p : r.processes) add(p.host);
  }
  return in_use;
}

bool Controller::ReservationUnusable(const std::string& name, std::string& reason,
                                     std::string& message) const {
  auto it = reservations_.find(name);
  if (it == reservations_.end()) {
    reason = "ReservationNotFound";
    message = "waiting for slicereservation '" + name + "', which does not exist (apply it)";
  } else if (it->second.status.releasing || it->second.status.deleting) {
    reason = "ReservationReleasing";
    message =
        "slicereservation '" + name + "' is being released (" + it->second.status.message + ")";
  } else if (it->second.status.phase == ReservationPhase::kExpired) {
    reason = "ReservationExpired";
    message = "slicereservation '" + name + "' expired: " + it->second.status.message;
  } else if (it->second.status.phase == ReservationPhase::kPending) {
    reason = "ReservationPending";
    message = "slicereservation '" + name + "' is not Ready yet (" + it->second.status.reason +
              ": " + it->second.status.message + ")";
  } else {
    return false;
  }
  return true;
}

Status Controller::ServiceInReservationRefusalLocked(const ServiceSpec& spec, const Json& doc) {
  // Placed groups run on hosts of the reservation they were placed in (or outside any): moving
  // them would need a new placement of every group.
  if (const Service* existing = FindService(spec.name);
      existing != nullptr && existing->spec.reservation != spec.reservation &&
      existing->PlacedReplicas() > 0) {
    auto where = [](const std::string& r) {
      return r.empty() ? std::string("outside any slicereservation")
                       : "inside slicereservation '" + r + "'";
    };
    return FailedPrecondition("spec.reservation: service '" + spec.name + "' has " +
                              std::to_string(existing->PlacedReplicas()) +
                              " replica groups placed " + where(existing->spec.reservation) +
                              "; it cannot move while they run: delete the service first (tessera "
                              "delete service " +
                              spec.name + ") or keep spec.reservation as it is");
  }
  if (spec.reservation.empty()) return Status::Ok();
  auto it = reservations_.find(spec.reservation);
  if (it == reservations_.end()) return Status::Ok();  // it waits for the reservation
  const SliceReservation& r = it->second;
  const bool listed = doc.is_object() && doc.contains("spec") && doc["spec"].is_object() &&
                      doc["spec"].contains("roles");
  const std::string holds = std::to_string(r.spec.num_slices) + " x " +
                            std::string(GenerationName(r.spec.accelerator)) + " " +
                            r.spec.topology.ToString();
  for (const ServiceRoleSpec& role : spec.roles) {
    const std::string what = (listed ? "role '" + role.name + "': one " : std::string("one ")) +
                             std::string(GenerationName(role.accelerator)) + " " +
                             role.topology.ToString() + " replica";
    auto refuse = [&](const std::string& why) {
      return InvalidArgument("spec.reservation: " + what +
                             " can never run inside slicereservation '" + r.name() + "' (" + holds +
                             "): " + why + "; ask for a smaller replica, or reserve more");
    };
    if (role.accelerator != r.spec.accelerator) return refuse("another accelerator");
    if (role.topology.chips() > r.chips()) return refuse("more chips");
    // Held whole now (not Rescheduling): plan on its slices as if it had no other users.
    if (r.status.phase == ReservationPhase::kReady && r.HoldsChips() && inventory_ready_) {
      auto inside = InsideReservation(inventory_, OwnerId(r.uid), ReservationLostHosts(r));
      if (!inside.ok()) return inside.status();
      PlanResult p = planner_.Plan(*inside, {role.accelerator, role.topology, 1});
      if (!p.placed()) return refuse(p.message);
    }
  }
  return Status::Ok();
}

Status Controller::ScheduleReservationServices() {
  TESSERA_RETURN_IF_ERROR(HoldServiceGroupsMissingSecrets());  // secrets.cc, as ScheduleServices
  std::vector<const Service*> inside;
  for (const auto& [name, svc] : services_)
    if (!svc.spec.reservation.empty()) inside.push_back(&svc);
  std::sort(inside.begin(), inside.end(),
            [](const Service* a, const Service* b) { return a->uid < b->uid; });
  std::vector<std::string> order;
  for (const Service* svc : inside) order.push_back(svc->name());
  for (const std::string& name : order) {
    const Service* svc = FindService(name);
    if (svc == nullptr) continue;
    const std::string rname = svc->spec.reservation;
    for (const ReplicaKey& key : ServiceLifecycle::WaitingForSlice(*svc)) {
      svc = FindService(name);
      if (svc == nullptr) break;
      const ServiceRoleSpec* spec = svc->spec.Role(key.role);
      if (spec == nullptr || roles_missing_secrets_.count(name + "/" + key.role)) continue;
      std::string reason, message;
      if (!ReservationUnusable(rname, reason, message)) {
        if (!inventory_ready_) return Status::Ok();
        const SliceReservation& r = reservations_.at(rname);
        auto free = InsideReservation(inventory_, OwnerId(r.uid), ReservationHostsInUse(rname, 0));
        if (!free.ok()) return free.status();
        PlanResult plan = planner_.Plan(*free, {spec->accelerator, spec->topology, 1});
        if (plan.placed()) {
          auto placed = PlaceGroup(name, key, plan);
          if (!placed.ok()) return placed.status();
          if (*placed) continue;
        }
        std::string users;
        for (const std::string& u : ReservationUsers(rname))
          users += (users.empty() ? "" : ", ") + u;
        reason = "ReservationFull";
        message = "slicereservation '" + rname + "' has no room for it now: " + plan.message +
                  (users.empty() ? "" : "; in use by " + users);
        if (r.status.phase == ReservationPhase::kRescheduling)
          message += "; it is Rescheduling (" + r.status.message + ")";
      }
      TESSERA_RETURN_IF_ERROR(RunServiceStep(
          name, [&](Service& s) { return services_life_.SetPending(s, key, reason, message); }));
    }
  }
  return Status::Ok();
}

Status Controller::StopReservationServices(const std::string& name) {
  const View view(*this);
  const std::string message = "its slicereservation '" + name + "' is being released";
  std::vector<std::pair<std::string, ReplicaKey>> groups;
  for (const auto& [svc_name, svc] : services_) {
    if (svc.spec.reservation != name) continue;
    for (const RoleStatus& role : svc.status.roles)
      for (const ReplicaStatus& r : role.replicas)
        if (r.placed()) groups.push_back({svc_name, {role.name, r.replica}});
  }
  for (const auto& [svc_name, key] : groups)
    TESSERA_RETURN_IF_ERROR(RunServiceStep(
        svc_name, [&](Service& s) { return services_life_.Evict(s, key, message, view); }));
  return Status::Ok();
}

}  // namespace tessera::controller
