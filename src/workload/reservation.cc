#include "workload/reservation.h"

#include <algorithm>
#include <array>
#include <set>

#include "workload/phase_names.h"

namespace tessera {
namespace {

constexpr std::array<const char*, 3> kReservationPhaseNames = {"Pending", "Ready", "Expired"};
static_assert(kReservationPhaseNames.size() == static_cast<size_t>(ReservationPhase::kExpired) + 1,
              "one name per ReservationPhase; kExpired is the last phase");

JobEvent Normal(std::string reason, std::string message) {
  return {false, std::move(reason), std::move(message)};
}
JobEvent Warning(std::string reason, std::string message) {
  return {true, std::move(reason), std::move(message)};
}

std::string Held(const SliceReservation& r) {
  size_t hosts = 0;
  for (const ReservedSlice& s : r.status.slices) hosts += s.hosts.size();
  return std::to_string(r.spec.num_slices) + " x " +
         std::string(GenerationName(r.spec.accelerator)) + " " + r.spec.topology.ToString() + " (" +
         std::to_string(r.chips()) + " chips on " + std::to_string(hosts) + " hosts)";
}

}  // namespace

const char* ReservationPhaseName(ReservationPhase phase) {
  return kReservationPhaseNames[static_cast<size_t>(phase)];
}

Result<ReservationPhase> ParseReservationPhase(std::string_view name) {
  return ParsePhaseName<ReservationPhase>(kReservationPhaseNames, name, "status.phase");
}

SliceReservation ReservationLifecycle::Create(SliceReservationSpec spec, std::string spec_document,
                                              uint64_t uid, int64_t now) {
  SliceReservation r;
  r.uid = uid;
  r.created_ms = now;
  r.spec = std::move(spec);
  r.spec_document = std::move(spec_document);
  return r;
}

ReservationEffects ReservationLifecycle::Place(SliceReservation& r,
                                               std::vector<ReservedSlice> slices, int64_t now) {
  SliceReservationStatus& st = r.status;
  st.phase = ReservationPhase::kReady;
  st.slices = std::move(slices);
  st.ready_ms = now;
  st.expires_ms = r.spec.ttl_ms > 0 ? now + r.spec.ttl_ms : 0;
  st.reason = "Ready";
  st.message = "holding " + Held(r) +
               (st.expires_ms > 0 ? "; expires in " + std::to_string(r.spec.ttl_ms / 1000) + " s"
                                  : "; held until deleted");
  st.pending_reason.clear();
  st.queue_position = 0;
  st.would_help.clear();
  ReservationEffects e;
  e.persist = true;
  e.events.push_back(Normal("Ready", st.message));
  e.schedule = true;  // workloads waiting for it may start now
  return e;
}

ReservationEffects ReservationLifecycle::SetPending(SliceReservation& r, const std::string& reason,
                                                    const std::string& message, int position,
                                                    std::vector<WouldHelp> would_help) {
  SliceReservationStatus& st = r.status;
  ReservationEffects e;
  if (st.phase != ReservationPhase::kPending || st.releasing || st.deleting) return e;
  if (st.reason == reason && st.pending_reason == reason && st.message == message &&
      st.queue_position == position && st.would_help == would_help)
    return e;
  st.reason = reason;
  st.pending_reason = reason;
  st.message = message;
  st.queue_position = position;
  st.would_help = std::move(would_help);
  e.persist = true;
  return e;
}

Result<ReservationEffects> ReservationLifecycle::Delete(SliceReservation& r,
                                                        const std::vector<std::string>& users,
                                                        bool force, int64_t /*now*/) {
  SliceReservationStatus& st = r.status;
  ReservationEffects e;
  if (st.deleting) return e;
  if (!users.empty() && !force) {
    std::string names;
    for (const std::string& u : users) names += (names.empty() ? "" : ", ") + u;
    return Conflict("slicereservation '" + r.name() + "' is in use by " + names +
                    "; delete them first, or delete it with --force (?force=true) to stop them");
  }
  st.deleting = true;
  if (!users.empty()) {
    st.releasing = true;
    st.reason = "Deleting";
    st.message = "deleted with force; stopping its workloads, then releasing its hosts";
    e.persist = true;
    e.stop_users = true;
    e.events.push_back(Warning("Deleting", st.message));
    return e;
  }
  e.remove = true;
  e.release_chips = r.HoldsChips();
  e.schedule = e.release_chips;
  e.events.push_back(Normal("Deleted", r.HoldsChips() ? "released " + Held(r) : "deleted"));
  return e;
}

ReservationEffects ReservationLifecycle::Evict(SliceReservation& r, const std::string& message,
                                               int64_t /*now*/) {
  SliceReservationStatus& st = r.status;
  ReservationEffects e;
  if (st.deleting || st.releasing) return e;
  st.phase = ReservationPhase::kPending;
  st.reason = "Preempted";
  st.pending_reason = st.reason;
  st.message = message;
  st.expires_ms = 0;
  st.would_help.clear();
  st.queue_position = 0;
  ++st.preemptions;
  st.releasing = true;
  e.persist = true;
  e.stop_users = true;
  e.events.push_back(Warning("Preempted", message + "; its workloads are stopped, then it waits"));
  return e;
}

ReservationEffects ReservationLifecycle::Tick(SliceReservation& r, int64_t now) {
  SliceReservationStatus& st = r.status;
  ReservationEffects e;
  if (st.phase != ReservationPhase::kReady || st.releasing || st.deleting || st.expires_ms == 0 ||
      now < st.expires_ms)
    return e;
  st.phase = ReservationPhase::kExpired;
  st.reason = "Expired";
  st.message = "its ttl of " + std::to_string(r.spec.ttl_ms / 1000) +
               " s passed; stopping its workloads, then releasing its hosts";
  st.releasing = true;
  e.persist = true;
  e.stop_users = true;
  e.events.push_back(Normal("Expired", st.message));
  return e;
}

ReservationEffects ReservationLifecycle::UsersStopped(SliceReservation& r, int64_t /*now*/) {
  SliceReservationStatus& st = r.status;
  ReservationEffects e;
  if (!st.releasing) return e;
  const std::string held = Held(r);
  st.releasing = false;
  e.release_chips = r.HoldsChips();
  e.schedule = true;
  st.slices.clear();
  if (st.deleting) {
    e.remove = true;
    e.events.push_back(Normal("Deleted", "released " + held));
    return e;
  }
  e.persist = true;
  if (st.phase == ReservationPhase::kExpired) {
    st.message = "its ttl of " + std::to_string(r.spec.ttl_ms / 1000) + " s passed; released " +
                 held + " (delete it, or apply it again under a new name)";
    e.events.push_back(Normal("Released", "ttl passed; released " + held));
  } else {
    st.message += "; released, waiting to be admitted again";
    e.events.push_back(Normal("Released", "preempted; released " + held));
  }
  return e;
}

Result<Inventory> InsideReservation(const Inventory& inv, OwnerId reservation,
                                    const std::vector<HostId>& in_use) {
  const std::vector<HostId> held = inv.HostsOf(reservation);
  std::set<HostId> usable(held.begin(), held.end());
  for (HostId h : in_use) usable.erase(h);
  Inventory inside = inv;
  inside.Release(reservation);
  for (const Host& h : inside.hosts()) {
    if (usable.count(h.id) || h.health == Health::kDown) continue;
    TESSERA_RETURN_IF_ERROR(inside.SetHealth(h.id, Health::kDown));
  }
  return inside;
}

}  // namespace tessera
