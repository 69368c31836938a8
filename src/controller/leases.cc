// Controller: host leases. A host that has not heartbeated for lease_ms is lost: it is marked
// down in the inventory (nothing new is placed on it), and every workload with workers there
// is told (TrainLifecycle::HostLost: fail the attempt under its failure policy, or count the
// host as confirmed when its workers were being stopped anyway). It comes back with its next
// heartbeat or registration (host_registry.cc).
//
// A host's silence is the time the head was listening and heard nothing. When the head itself
// stalls (a store write under its lock that takes seconds, or a loaded machine that does not
// schedule it), heartbeats queue behind the lock, and the first check after the stall would
// find every host silent. So a gap between two checks longer than lease_stall_ms counts, beyond
// that allowance, as the head's stall (stalled_ms_), and each host's silence leaves out the
// stalls since it was last heard from. A dead host is then found later by at most the stall;
// a live one is not declared lost because the head was not listening.
#include <algorithm>
#include <cstdio>

#include "controller/controller.h"

namespace tessera::controller {

void Controller::RenewLease(RegisteredHost& host, int64_t now) const {
  host.status.last_heartbeat_ms = now;
  host.stalled_ms_at_heartbeat = stalled_ms_;
}

Status Controller::ExpireLeases(int64_t now) {
  if (options_.lease_stall_ms > 0 && last_lease_check_ms_ >= 0 &&
      now - last_lease_check_ms_ > options_.lease_stall_ms)
    stalled_ms_ += now - last_lease_check_ms_ - options_.lease_stall_ms;
  last_lease_check_ms_ = std::max(last_lease_check_ms_, now);
  auto silence = [&](const RegisteredHost& h) {
    return now - h.status.last_heartbeat_ms - (stalled_ms_ - h.stalled_ms_at_heartbeat);
  };
  std::vector<std::string> expired;
  for (const auto& [name, h] : hosts_)
    if (!h.status.lost && silence(h) > options_.lease_ms) expired.push_back(name);
  for (const auto& name : expired) {
    RegisteredHost& h = hosts_.at(name);
    const int64_t stalled = stalled_ms_ - h.stalled_ms_at_heartbeat;
    char uncounted[64] = "";
    if (stalled > 0)
      std::snprintf(uncounted, sizeof uncounted,
                    "; %.1f s of it the head itself stalled and did not count",
                    static_cast<double>(stalled) / 1000.0);
    char why[160];
    std::snprintf(why, sizeof why, "no heartbeat for %.1f s (lease %lld ms%s)",
                  static_cast<double>(now - h.status.last_heartbeat_ms) / 1000.0,
                  static_cast<long long>(options_.lease_ms), uncounted);
    RegisteredHost lost = h;
    lost.status.lost = true;
    TESSERA_RETURN_IF_ERROR(PersistHost(lost, {JobEvent{true, "HostLost", why}}));
    h = std::move(lost);
    if (auto id = host_ids_.find(name); id != host_ids_.end())
      TESSERA_RETURN_IF_ERROR(inventory_.SetHealth(id->second, Health::kDown));
    for (const auto& kind : kinds_) {
      if (Status told = kind->HostLost(name, h.status.last_heartbeat_ms, why, now); !told.ok()) {
        // Not every workload heard of the loss: the next tick expires the host again and tells
        // them (those already told take it as a no-op).
        h.status.lost = false;
        return told;
      }
    }
  }
  return Status::Ok();
}

}  // namespace tessera::controller
