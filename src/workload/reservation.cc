#include "workload/reservation.h"

#include <algorithm>
#include <array>
#include <set>

#include "workload/phase_names.h"

namespace tessera {
namespace {

constexpr std::array<const char*, 4> kReservationPhaseNames = {"Pending", "Ready", "Rescheduling",
                                                               "Expired"};
static_assert(kReservationPhaseNames.size() == static_cast<size_t>(ReservationPhase::kExpired) + 1,
              "one name per ReservationPhase; kExpired is the last phase");

std::string Held(const SliceReservation& r) {
  size_t hosts = 0;
  for (const ReservedSlice& s : r.status.slices) hosts += s.hosts.size();
  return std::to_string(r.spec.num_slices) + " x " +
         std::string(GenerationName(r.spec.accelerator)) + " " + r.spec.topology.ToString() + " (" +
         std::to_string(r.chips()) + " chips on " + std::to_string(hosts) + " hosts)";
}

// Hosts it holds: its slices, and lost slices whose workloads have not stopped yet.
bool HoldsAnyHost(const SliceReservation& r) {
  return r.HoldsChips() || std::any_of(r.status.lost_slices.begin(), r.status.lost_slices.end(),
                                       [](const LostSlice& l) { return l.held; });
}

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& i : items) out += (out.empty() ? "" : ", ") + i;
  return out;
}

// While Rescheduling: which hosts were lost, what it re-acquires, and (`waiting`) why not yet.
std::string ReschedulingMessage(const SliceReservation& r, const std::string& waiting) {
  const SliceReservationStatus& st = r.status;
  std::vector<std::string> lost;
  for (const LostSlice& l : st.lost_slices)
    lost.push_back("host " + l.host + " of slice " + l.slice.name + " lost (" + l.why + ")");
  const int missing = r.missing_slices();
  return Join(lost) + "; re-acquiring " + std::to_string(missing) + " whole " +
         std::string(GenerationName(r.spec.accelerator)) + " " + r.spec.topology.ToString() +
         (missing == 1 ? " slice" : " slices") + ", holding " + std::to_string(st.slices.size()) +
         " of " + std::to_string(r.spec.num_slices) + (waiting.empty() ? "" : ": " + waiting);
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
  e.release_chips = HoldsAnyHost(r);
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
  const bool held =
      st.phase == ReservationPhase::kReady || st.phase == ReservationPhase::kRescheduling;
  if (!held || st.releasing || st.deleting || st.expires_ms == 0 || now < st.expires_ms) return e;
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
  e.release_chips = HoldsAnyHost(r);
  e.schedule = true;
  st.slices.clear();
  st.lost_slices.clear();
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

ReservationEffects ReservationLifecycle::SetUsers(SliceReservation& r,
                                                  std::vector<std::string> users) {
  ReservationEffects e;
  if (r.status.users == users) return e;
  r.status.users = std::move(users);
  e.persist = true;
  return e;
}

ReservationEffects ReservationLifecycle::HostsLost(SliceReservation& r,
                                                   const std::map<std::string, std::string>& lost,
                                                   int64_t /*now*/) {
  SliceReservationStatus& st = r.status;
  ReservationEffects e;
  const bool held =
      st.phase == ReservationPhase::kReady || st.phase == ReservationPhase::kRescheduling;
  if (!held || st.releasing || st.deleting) return e;
  std::vector<ReservedSlice> kept;
  for (ReservedSlice& s : st.slices) {
    auto host = std::find_if(s.hosts.begin(), s.hosts.end(),
                             [&](const std::string& h) { return lost.count(h) > 0; });
    if (host == s.hosts.end()) {
      kept.push_back(std::move(s));
      continue;
    }
    LostSlice l{s, *host, lost.at(*host), true};
    e.events.push_back(Warning("SliceLost", "slice " + s.name + " is no longer whole: host " +
                                                l.host + " lost (" + l.why +
                                                "); its workloads are stopped by their own "
                                                "recovery, then its hosts are released"));
    st.lost_slices.push_back(std::move(l));
  }
  st.slices = std::move(kept);
  if (e.events.empty()) return e;
  st.phase = ReservationPhase::kRescheduling;
  st.reason = "SliceLost";
  st.pending_reason.clear();
  st.message = ReschedulingMessage(r, "");
  e.persist = true;
  e.schedule = true;  // a whole free slice may replace it now
  return e;
}

ReservationEffects ReservationLifecycle::LostSliceFreed(SliceReservation& r,
                                                        const std::string& slice, int64_t /*now*/) {
  SliceReservationStatus& st = r.status;
  ReservationEffects e;
  auto it = std::find_if(st.lost_slices.begin(), st.lost_slices.end(),
                         [&](const LostSlice& l) { return l.slice.name == slice && l.held; });
  if (it == st.lost_slices.end()) return e;
  it->held = false;
  e.release_hosts = it->slice.hosts;
  e.events.push_back(Normal("LostSliceReleased", "released the hosts of lost slice " + slice +
                                                     " (" + Join(it->slice.hosts) +
                                                     "): no workload runs there any more"));
  // Listed while Rescheduling (its message names it), forgotten once replaced.
  if (st.phase != ReservationPhase::kRescheduling) st.lost_slices.erase(it);
  e.persist = true;
  e.schedule = true;  // the healthy ones are free for others now
  return e;
}

ReservationEffects ReservationLifecycle::Replace(SliceReservation& r,
                                                 std::vector<ReservedSlice> slices, int64_t now) {
  SliceReservationStatus& st = r.status;
  ReservationEffects e;
  if (st.phase != ReservationPhase::kRescheduling || st.releasing || st.deleting || slices.empty())
    return e;
  std::vector<std::string> lost, added;
  for (const LostSlice& l : st.lost_slices) lost.push_back(l.slice.name);
  for (ReservedSlice& s : slices) {
    added.push_back(s.name);
    st.slices.push_back(std::move(s));
  }
  e.persist = true;
  e.schedule = true;  // workloads waiting inside may start on it
  if (static_cast<int>(st.slices.size()) < r.spec.num_slices) {
    st.message = ReschedulingMessage(r, "re-acquired " + Join(added) + " so far");
    e.events.push_back(Normal("SliceReplaced", "re-acquired " + Join(added)));
    return e;
  }
  st.phase = ReservationPhase::kReady;
  st.reason = "Ready";
  st.pending_reason.clear();
  st.message =
      "holding " + Held(r) + " again (" + Join(added) + " replacing lost " + Join(lost) + ")" +
      (st.expires_ms > 0
           ? "; expires in " + std::to_string(std::max<int64_t>(0, st.expires_ms - now) / 1000) +
                 " s, as before"
           : "; held until deleted");
  std::erase_if(st.lost_slices, [](const LostSlice& l) { return !l.held; });
  e.events.push_back(Normal("SliceReplaced", st.message));
  return e;
}

ReservationEffects ReservationLifecycle::WaitForSlices(SliceReservation& r,
                                                       const std::string& reason,
                                                       const std::string& message) {
  SliceReservationStatus& st = r.status;
  ReservationEffects e;
  if (st.phase != ReservationPhase::kRescheduling || st.releasing || st.deleting) return e;
  std::string text = ReschedulingMessage(r, message);
  if (st.pending_reason == reason && st.message == text) return e;
  st.pending_reason = reason;
  st.message = std::move(text);
  e.persist = true;
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
