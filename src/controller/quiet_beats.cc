// Controller: quiet heartbeats. Most hosts of a large fleet are idle most of the time, and an
// idle host's heartbeat changes nothing but its lease: it reports no workers, no progress and
// no refusals, and is answered with the same empty snapshot as the last one. Such a beat needs
// none of the controller's state, yet under one lock it waited for whatever held the lock: a
// tick over 10,000 hosts, or a registration batch's store commit, one raft round on etcd,
// while ten thousand beats a second queued behind it.
//
// So a registration, a load, or a full heartbeat (Heartbeat, under the lock) that leaves its
// host quiet remembers the answer it gave, with the assignment revision and term it was made at
// (RememberQuietLocked).
// The host's next beat, if it is quiet too, is answered from that memory under quiet_mu_ alone
// (TakeQuietBeat) while the term is unchanged, with the newest revision whose changed hosts
// have been told (notified_revision_): every change to a host's assignments names the host
// (NotifyHosts), which forgets it first, so a host still remembered has nothing to run at that
// revision, and the answer is the one Heartbeat would give, byte for byte. A placement
// elsewhere leaves it quiet: with a global check instead, each change anywhere sent every
// idle host's next beat through the lock (10,000 full beats a second while jobs came and
// went). Its lease and usage wait in quiet_ and are merged into hosts_ before leases are
// checked (MergeQuietBeatsLocked); reads of a host show them (QuietStatusLocked). Whatever
// could make a beat not quiet takes the host out (ForgetQuietLocked): it left, was replaced or
// lost, or its assignments changed.
#include "controller/controller.h"
#include "protocol/credential.h"

namespace tessera::controller {
namespace {

bool Quiet(const protocol::Heartbeat& beat) {
  return beat.workers.empty() && beat.progress.empty() && beat.refused.empty();
}

}  // namespace

std::optional<Json> Controller::QuietHeartbeat(const std::string& host, std::string_view credential,
                                               const protocol::Heartbeat& beat) {
  if (!Quiet(beat) || !protocol::IsValidCredential(credential)) return std::nullopt;
  const std::string hash = protocol::CredentialHash(credential);
  return TakeQuietBeat(host, &hash, beat);
}

std::optional<Json> Controller::TakeQuietBeat(const std::string& host,
                                              const std::string* credential_hash,
                                              const protocol::Heartbeat& beat) {
  if (!Quiet(beat)) return std::nullopt;
  const int64_t now = NowMs();
  std::lock_guard lock(quiet_mu_);
  auto it = quiet_.find(host);
  if (it == quiet_.end()) return std::nullopt;
  QuietHost& q = it->second;
  // Read under quiet_mu_: NotifyHosts advances it only after forgetting the hosts it names, so
  // a change to this host's assignments up to `revision` has taken it out of quiet_ already.
  const int64_t revision = notified_revision_.load();
  if (revision < q.revision || q.term != term_.load() || beat.term > q.term) return std::nullopt;
  if (credential_hash != nullptr &&
      !protocol::ConstantTimeEquals(q.credential_hash, *credential_hash))
    return std::nullopt;
  q.heard = true;
  q.last_heartbeat_ms = std::max(q.last_heartbeat_ms, now);
  q.stalled_ms_at_heartbeat = stalled_ms_.load();
  q.cpu_percent = beat.usage.cpu_percent;
  q.memory_bytes = static_cast<double>(beat.usage.memory_bytes);
  if (revision != q.revision) {  // changes elsewhere since: the same empty answer, newer
    q.answer["revision"] = revision;
    q.revision = revision;
  }
  return q.answer;
}

void Controller::RememberQuietLocked(const std::string& host, const RegisteredHost& h,
                                     const protocol::Heartbeat& beat, const Json& answer) {
  const auto none = [&answer](const char* key) {
    auto it = answer.find(key);
    return it == answer.end() || it->empty();
  };
  // A host stored without a credential registers again (HostCredentialMatches' kNotFound). The
  // cheap checks first: a running host's full beat reports workers and ends there.
  const bool quiet = Quiet(beat) && !h.status.lost && h.last_refusals.empty() &&
                     !h.credential_hash.empty() && beat.term <= term_.load() &&
                     none("assignments") && none("stop");
  std::lock_guard lock(quiet_mu_);
  if (!quiet) {
    quiet_.erase(host);
    return;
  }
  QuietHost& q = quiet_[host];
  q.credential_hash = h.credential_hash;
  q.answer = answer;
  q.revision = assignment_revision_.load();
  q.term = term_.load();
  q.heard = false;  // this beat's lease is in hosts_ already
}

void Controller::ForgetQuietLocked(const std::string& host) {
  std::lock_guard lock(quiet_mu_);
  quiet_.erase(host);
}

void Controller::MergeQuietBeatsLocked() {
  std::lock_guard lock(quiet_mu_);
  for (auto& [name, q] : quiet_) {
    if (!q.heard) continue;
    q.heard = false;
    auto it = hosts_.find(name);
    if (it == hosts_.end()) continue;
    RegisteredHost& h = it->second;
    if (q.last_heartbeat_ms >= h.status.last_heartbeat_ms) {
      h.status.last_heartbeat_ms = q.last_heartbeat_ms;
      h.stalled_ms_at_heartbeat = q.stalled_ms_at_heartbeat;
    }
    h.status.usage["cpuPercent"] = q.cpu_percent;
    h.status.usage["memoryBytes"] = q.memory_bytes;
  }
}

HostStatus Controller::QuietStatusLocked(const RegisteredHost& h) const {
  HostStatus status = h.status;
  std::lock_guard lock(quiet_mu_);
  auto it = quiet_.find(h.spec.name);
  if (it == quiet_.end() || !it->second.heard) return status;
  const QuietHost& q = it->second;
  status.last_heartbeat_ms = std::max(status.last_heartbeat_ms, q.last_heartbeat_ms);
  status.usage["cpuPercent"] = q.cpu_percent;
  status.usage["memoryBytes"] = q.memory_bytes;
  return status;
}

}  // namespace tessera::controller
