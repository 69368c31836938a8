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
//
// Nor because it was slow to answer: a beat counts when it arrives, not when it is handled.
// On etcd a tick's status commits hold the lock for up to a second, and the beats that are not
// quiet (a worker started or exited) wait in the head's channel worker meanwhile, one host's
// behind another's; at 10,000 hosts with 1,000 jobs starting some waited over 5 s, and their
// hosts were declared lost with the beat that would have renewed the lease in the queue.
// HeartbeatArrived notes the arrival under the small lock, and the lease check takes it first.
//
// A lost host that heartbeats again is Ready at once (HostRecovered); its document and its
// HostRecovered event are written at the next lease check, with the others that came back since,
// a chunk to a commit (WriteRecoveredHosts), as losses are. One commit each, an fsync or a raft
// round under the lock per host, made the recovery of a fleet after a stall a stall of its own,
// and so more losses. Until then the store still says Lost: a head that takes over in between
// loads the host Lost, and its next beat brings it back again.
#include <algorithm>
#include <cstdio>

#include "controller/controller.h"

namespace tessera::controller {

void Controller::RenewLease(RegisteredHost& host, int64_t now) const {
  host.status.last_heartbeat_ms = now;
  host.stalled_ms_at_heartbeat = stalled_ms_;
}

Status Controller::WriteRecoveredHosts() {
  while (!recovered_unwritten_.empty()) {
    store::WriteBatch batch;
    std::vector<std::pair<std::string, JobEvent>> events;
    std::vector<std::string> names;
    for (auto it = recovered_unwritten_.begin();
         it != recovered_unwritten_.end() && names.size() < kLostHostsPerCommit;) {
      auto h = hosts_.find(*it);
      if (h == hosts_.end() || h->second.status.lost) {  // deleted, or lost again (written so)
        it = recovered_unwritten_.erase(it);
        continue;
      }
      batch.Put(codec::kHostKind, *it, StoredHostJsonLocked(h->second));
      events.emplace_back("host/" + *it, JobEvent{false, "HostRecovered", "heartbeats resumed"});
      names.push_back(*it);
      ++it;
    }
    if (names.empty()) break;
    auto committed = CommitWithEvents(batch, events);
    if (!committed.ok()) return Unavailable(committed.status().message());
    for (const std::string& name : names) {
      RegisteredHost& h = hosts_.at(name);
      h.version = *committed;
      Emit(codec::kHostKind, "MODIFIED", HostJsonLocked(h));
      recovered_unwritten_.erase(name);
    }
    AnnounceEvents();
  }
  return Status::Ok();
}

Status Controller::ExpireLeases(int64_t now) {
  TESSERA_RETURN_IF_ERROR(MergeQuietBeatsLocked());  // quiet_beats.cc
  // Before any loss: a host that came back and went silent again is written Ready, then Lost.
  TESSERA_RETURN_IF_ERROR(WriteRecoveredHosts());
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
  // The hosts lost at once (a rack's switch, a partition, a failover the agents did not follow)
  // are written a chunk to a commit: one store round (a raft round on etcd) per chunk, not per
  // host, while every other caller waits for the lock.
  for (size_t first = 0; first < expired.size(); first += kLostHostsPerCommit) {
    const size_t end = std::min(expired.size(), first + kLostHostsPerCommit);
    TESSERA_RETURN_IF_ERROR(LoseHosts({expired.begin() + static_cast<std::ptrdiff_t>(first),
                                       expired.begin() + static_cast<std::ptrdiff_t>(end)},
                                      now));
  }
  return Status::Ok();
}

Status Controller::LoseHosts(const std::vector<std::string>& names, int64_t now) {
  store::WriteBatch batch;
  std::vector<std::pair<std::string, JobEvent>> events;
  std::vector<std::string> whys;
  for (const std::string& name : names) {
    ForgetQuietLocked(name);  // its next beat goes through Heartbeat: HostRecovered
    const RegisteredHost& h = hosts_.at(name);
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
    batch.Put(codec::kHostKind, name, StoredHostJsonLocked(lost));
    events.emplace_back("host/" + name, JobEvent{true, "HostLost", why});
    whys.emplace_back(why);
  }
  auto committed = CommitWithEvents(batch, events);
  if (!committed.ok()) return Unavailable(committed.status().message());
  for (const std::string& name : names) {
    RegisteredHost& h = hosts_.at(name);
    h.status.lost = true;
    h.version = *committed;
    Emit(codec::kHostKind, "MODIFIED", HostJsonLocked(h));
  }
  AnnounceEvents();
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i];
    RegisteredHost& h = hosts_.at(name);
    if (auto id = host_ids_.find(name); id != host_ids_.end())
      TESSERA_RETURN_IF_ERROR(inventory_.SetHealth(id->second, Health::kDown));
    for (const auto& kind : kinds_) {
      if (Status told = kind->HostLost(name, h.status.last_heartbeat_ms, whys[i], now);
          !told.ok()) {
        // Not every workload heard of these losses: the next tick expires the hosts not yet
        // told again and tells them (those already told take it as a no-op).
        for (size_t j = i; j < names.size(); ++j) hosts_.at(names[j]).status.lost = false;
        return told;
      }
    }
  }
  return Status::Ok();
}

}  // namespace tessera::controller
