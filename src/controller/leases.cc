// Controller: host leases. A host that has not heartbeated for lease_ms is lost: it is marked
// down in the inventory (nothing new is placed on it), and every workload with workers there
// is told (TrainLifecycle::HostLost: fail the attempt under its failure policy, or count the
// host as confirmed when its workers were being stopped anyway). It comes back with its next
// heartbeat or registration (host_registry.cc).
#include <cstdio>

#include "controller/controller.h"

namespace tessera::controller {

Status Controller::ExpireLeases(int64_t now) {
  std::vector<std::string> expired;
  for (const auto& [name, h] : hosts_)
    if (!h.status.lost && now - h.status.last_heartbeat_ms > options_.lease_ms)
      expired.push_back(name);
  const View view(*this);
  for (const auto& name : expired) {
    RegisteredHost& h = hosts_.at(name);
    char why[96];
    std::snprintf(why, sizeof why, "no heartbeat for %.1f s (lease %lld ms)",
                  static_cast<double>(now - h.status.last_heartbeat_ms) / 1000.0,
                  static_cast<long long>(options_.lease_ms));
    RegisteredHost lost = h;
    lost.status.lost = true;
    TESSERA_RETURN_IF_ERROR(PersistHost(lost, {JobEvent{true, "HostLost", why}}));
    h = std::move(lost);
    if (auto id = host_ids_.find(name); id != host_ids_.end())
      TESSERA_RETURN_IF_ERROR(inventory_.SetHealth(id->second, Health::kDown));
    std::vector<std::string> affected;
    for (const auto& [jn, job] : jobs_)
      if (job.OnHost(name)) affected.push_back(jn);
    for (const auto& jn : affected) {
      Status told = RunStep(jn, [&](TrainJob& job) {
        return train_.HostLost(job, name, h.status.last_heartbeat_ms, why, view, now);
      });
      if (!told.ok()) {
        // Not every workload heard of the loss: the next tick expires the host again and tells
        // them (those already told take it as a no-op).
        h.status.lost = false;
        return told;
      }
    }
    if (Status told = ServicesHostLost(name, why); !told.ok()) {  // services.cc
      h.status.lost = false;
      return told;
    }
  }
  return Status::Ok();
}

}  // namespace tessera::controller
