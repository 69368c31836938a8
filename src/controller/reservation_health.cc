// Controller: what happens to a SliceReservation while it is held (docs/reservations.md, "Users"
// and "A lost host"), the driver of ReservationLifecycle's SetUsers, HostsLost, LostSliceFreed,
// Replace and WaitForSlices:
//
// - status.users is written when the set of workloads inside changes (a job holding chips, a
//   Service with a placed group), so a watch of slicereservations sees users come and go.
//   NoteReservationUsers is called by RunStep and RunServiceStep after every step of a workload
//   that names a reservation; a failed write is reported by Tick, which writes it again.
// - Every tick, a held slice with a host that is Lost (its lease expired) or deleted is given
//   up: the reservation is Rescheduling, naming the host, and keeps its other slices. The
//   workloads on that slice are handled by their own recovery (a job's attempt fails under its
//   failure policy, a replica group is recreated elsewhere, both inside the reservation); the
//   lost slice's hosts stay held until none of them runs there, then they are released.
// - Every scheduling pass, before any pending reservation or workload is placed, a Rescheduling
//   reservation takes whole healthy free slices of its shape for the ones it lost (it keeps its
//   admission and quota: it does not queue or preempt again), and is Ready once it has them all.
//
// Hooked in by one line each: RunStep (controller.cc), RunServiceStep (services.cc),
// TickReservations and ScheduleReservations (reservations.cc).
#include <algorithm>
#include <cstdio>
#include <set>

#include "controller/controller.h"

namespace tessera::controller {

Status Controller::SyncReservationUsers(const std::string& name) {
  if (!reservations_.count(name)) return Status::Ok();
  std::vector<std::string> users = ReservationUsers(name);
  return RunReservationStep(name, [&](SliceReservation& r) {
    return ReservationLifecycle::SetUsers(r, std::move(users));
  });
}

void Controller::NoteReservationUsers(const std::string& name) {
  if (name.empty()) return;
  // The workload's own step is committed; a failed write of the users is Tick's to report
  // (TickReservations writes them again).
  if (Status s = SyncReservationUsers(name); !s.ok() && deferred_error_.ok()) deferred_error_ = s;
}

Status Controller::ReservationHostsLost(int64_t now) {
  std::vector<std::string> names;
  for (const auto& [name, r] : reservations_) names.push_back(name);
  Status first = Status::Ok();
  for (const std::string& name : names) {
    std::map<std::string, std::string> lost;
    for (const ReservedSlice& s : reservations_.at(name).status.slices)
      for (const std::string& host : s.hosts) {
        auto h = hosts_.find(host);
        if (h == hosts_.end()) {
          lost[host] = "the host was deleted";
        } else if (h->second.status.lost) {
          char why[96];
          std::snprintf(why, sizeof why, "no heartbeat for %.1f s (lease %lld ms)",
                        static_cast<double>(now - h->second.status.last_heartbeat_ms) / 1000.0,
                        static_cast<long long>(options_.lease_ms));
          lost[host] = why;
        }
      }
    if (lost.empty()) continue;
    Status s = RunReservationStep(
        name, [&](SliceReservation& r) { return ReservationLifecycle::HostsLost(r, lost, now); });
    if (first.ok()) first = s;
  }
  // Users written again where an earlier write failed (and after a restart).
  for (const std::string& name : names) {
    Status s = SyncReservationUsers(name);
    if (first.ok()) first = s;
  }
  return first;
}

Status Controller::ScheduleLostSlices() {
  if (!inventory_ready_) return Status::Ok();
  std::vector<const SliceReservation*> order;
  for (const auto& [name, r] : reservations_) order.push_back(&r);
  std::sort(order.begin(), order.end(),
            [](const SliceReservation* a, const SliceReservation* b) { return a->uid < b->uid; });
  std::vector<std::string> names;
  for (const SliceReservation* r : order) names.push_back(r->name());
  const int64_t now = NowMs();
  for (const std::string& name : names) {
    if (!reservations_.count(name)) continue;
    // Lost slices on whose hosts no workload of the reservation runs any more: released.
    std::set<HostId> used;
    for (HostId id : ReservationHostsInUse(name, 0, /*with_lost=*/false)) used.insert(id);
    std::vector<std::string> freed;
    for (const LostSlice& l : reservations_.at(name).status.lost_slices) {
      if (!l.held) continue;
      const bool in_use = std::any_of(l.slice.hosts.begin(), l.slice.hosts.end(), [&](auto& h) {
        auto id = host_ids_.find(h);
        return id != host_ids_.end() && used.count(id->second);
      });
      if (!in_use) freed.push_back(l.slice.name);
    }
    for (const std::string& slice : freed)
      TESSERA_RETURN_IF_ERROR(RunReservationStep(name, [&](SliceReservation& r) {
        return ReservationLifecycle::LostSliceFreed(r, slice, now);
      }));

    // Rescheduling: whole healthy free slices of its shape for the lost ones.
    const SliceReservation& r = reservations_.at(name);
    const int missing = r.missing_slices();
    if (missing <= 0 || r.status.releasing || r.status.deleting) continue;
    PlanResult plan = planner_.Plan(inventory_, {r.spec.accelerator, r.spec.topology, missing});
    if (plan.placed() && ApplyPlan(inventory_, OwnerId(r.uid), plan).ok()) {
      std::set<std::string> taken;
      for (const ReservedSlice& s : r.status.slices) taken.insert(s.name);
      for (const LostSlice& l : r.status.lost_slices) taken.insert(l.slice.name);
      std::vector<ReservedSlice> slices;
      std::vector<std::string> added_hosts;
      int next = 0;
      for (const SlicePlacement& p : plan.slices) {
        ReservedSlice slice;
        if (p.fixed_slice.valid()) {
          slice.name = slice_names_[p.fixed_slice.value()];
        } else {
          while (taken.count(name + "-s" + std::to_string(next))) ++next;
          slice.name = name + "-s" + std::to_string(next);
        }
        taken.insert(slice.name);
        for (HostId id : p.hosts) {
          slice.hosts.push_back(host_names_[id.value()]);
          added_hosts.push_back(slice.hosts.back());
        }
        slices.push_back(std::move(slice));
      }
      Status replaced = RunReservationStep(name, [&](SliceReservation& x) {
        return ReservationLifecycle::Replace(x, std::move(slices), now);
      });
      if (!replaced.ok()) {
        ReleaseReservationHosts(reservations_.at(name), added_hosts);  // as it was
        return replaced;
      }
      continue;
    }
    TESSERA_RETURN_IF_ERROR(RunReservationStep(name, [&](SliceReservation& x) {
      return ReservationLifecycle::WaitForSlices(
          x, NoFitName(plan.reason), plan.message + "; largest free: " + plan.largest_free);
    }));
  }
  return Status::Ok();
}

std::vector<HostId> Controller::ReservationLostHosts(const SliceReservation& r) const {
  std::vector<HostId> ids;
  for (const LostSlice& l : r.status.lost_slices)
    if (l.held)
      for (const std::string& host : l.slice.hosts)
        if (auto h = host_ids_.find(host); h != host_ids_.end()) ids.push_back(h->second);
  return ids;
}

void Controller::HoldReservationHosts(const SliceReservation& r, std::vector<HostId> ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  if (ids.empty()) return;
  // Reserve refuses down hosts, but a reservation keeps a lost host of a slice it still holds
  // (health changes keep ownership, as for a job): reserved as healthy, then down again.
  std::vector<HostId> down;
  for (HostId id : ids)
    if (inventory_.host(id).health == Health::kDown) down.push_back(id);
  Status s = Status::Ok();
  for (HostId id : down)
    if (s.ok()) s = inventory_.SetHealth(id, Health::kHealthy);
  if (s.ok()) s = inventory_.Reserve(OwnerId(r.uid), ids);
  for (HostId id : down)
    if (Status d = inventory_.SetHealth(id, Health::kDown); s.ok()) s = d;
  if (!s.ok()) inventory_conflicts_.push_back("slicereservation/" + r.name() + ": " + s.message());
}

void Controller::ReleaseReservationHosts(const SliceReservation& r,
                                         const std::vector<std::string>& hosts) {
  const std::set<std::string> drop(hosts.begin(), hosts.end());
  std::vector<HostId> keep;
  for (HostId id : inventory_.HostsOf(OwnerId(r.uid)))
    if (!drop.count(host_names_[id.value()])) keep.push_back(id);
  inventory_.Release(OwnerId(r.uid));
  HoldReservationHosts(r, std::move(keep));
}

}  // namespace tessera::controller
