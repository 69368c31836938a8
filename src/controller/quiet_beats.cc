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
//
// A host running workers is steady in the same way: each beat reports the same running workers
// (and their new progress lines) and is answered with the same snapshot. Four thousand such
// hosts (1,000 jobs of 4) sent four thousand full beats a second through the lock, queued
// behind each tick, and their leases ran out while they waited. So a full heartbeat that
// reports only running workers is remembered with them (QuietHost::workers), and a next beat
// that reports exactly those workers and no refusals is answered from memory too; its reports
// wait in steady_ and are applied, in the order they came and by the same code as Heartbeat's
// (ApplyReportsLocked), whenever the lock is next taken (Hold, ApplySteadyBeatsLocked): before a
// tick checks leases or looks for hangs, before a read shows the job, before the host's later
// report (an exit after its last progress lines) is applied. Their reports wait at most until
// the next tick (or for the lock, if a tick holds it); their answers do not wait. A report that
// changes the host's assignments forgets it then (NotifyHosts), as any change does.
#include <algorithm>
#include <iterator>

#include "controller/controller.h"
#include "protocol/credential.h"

namespace tessera::controller {
namespace {

bool Quiet(const protocol::Heartbeat& beat) {
  return beat.workers.empty() && beat.progress.empty() && beat.refused.empty();
}

// A beat that may be remembered: no refusals, and every worker it reports running.
bool Steady(const protocol::Heartbeat& beat) {
  return beat.refused.empty() &&
         std::all_of(beat.workers.begin(), beat.workers.end(), [](const protocol::WorkerReport& w) {
           return w.state == protocol::WorkerState::kRunning;
         });
}

}  // namespace

std::optional<std::string> Controller::QuietHeartbeat(const std::string& host,
                                                      std::string_view credential,
                                                      const protocol::Heartbeat& beat) {
  if (!beat.refused.empty() || !protocol::IsValidCredential(credential)) return std::nullopt;
  const std::string hash = protocol::CredentialHash(credential);
  return TakeQuietBeat(host, &hash, beat);
}

std::optional<std::string> Controller::TakeQuietBeat(const std::string& host,
                                                     const std::string* credential_hash,
                                                     const protocol::Heartbeat& beat) {
  if (!beat.refused.empty()) return std::nullopt;
  const int64_t now = NowMs();
  std::lock_guard lock(quiet_mu_);
  auto it = quiet_.find(host);
  if (it == quiet_.end()) return std::nullopt;
  QuietHost& q = it->second;
  // Workers that stopped or started, or a buffer full while the lock is held for long.
  const bool quiet = Quiet(beat);
  if (beat.workers != q.workers || (!quiet && steady_.size() >= kMaxSteadyBeats))
    return std::nullopt;
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
  if (!quiet) steady_.push_back({host, beat, now});
  // Printed once per revision, not per beat: a running host's answer carries its workers' whole
  // environment. Changes elsewhere since: the same answer, newer.
  if (revision != q.revision || q.text.empty()) {
    q.answer["revision"] = revision;
    q.revision = revision;
    q.text = q.answer.dump();
  }
  return q.text;
}

void Controller::HeartbeatArrived(const std::string& host) {
  const int64_t now = NowMs();
  std::lock_guard lock(quiet_mu_);
  auto& when = arrived_[host];
  when = {std::max(when.first, now), stalled_ms_.load()};
}

void Controller::RememberQuietLocked(const std::string& host, const RegisteredHost& h,
                                     const protocol::Heartbeat& beat, const Json& answer) {
  const auto none = [&answer](const char* key) {
    auto it = answer.find(key);
    return it == answer.end() || it->empty();
  };
  // A host stored without a credential registers again (HostCredentialMatches' kNotFound). A
  // host with workers to run that reports none is about to start them: its next beat differs.
  const bool steady = Steady(beat) && !h.status.lost && h.last_refusals.empty() &&
                      !h.credential_hash.empty() && beat.term <= term_.load() &&
                      (!beat.workers.empty() || none("assignments")) && none("stop");
  std::lock_guard lock(quiet_mu_);
  if (!steady) {
    quiet_.erase(host);
    return;
  }
  QuietHost& q = quiet_[host];
  q.credential_hash = h.credential_hash;
  q.answer = answer;
  q.text.clear();  // printed at its first quiet beat
  q.workers = beat.workers;
  q.revision = assignment_revision_.load();
  q.term = term_.load();
  q.heard = false;  // this beat's lease is in hosts_ already
}

void Controller::ForgetQuietLocked(const std::string& host) {
  std::lock_guard lock(quiet_mu_);
  quiet_.erase(host);
}

void Controller::ForgetRunningQuietLocked() {
  std::lock_guard lock(quiet_mu_);
  std::erase_if(quiet_, [](const auto& entry) { return !entry.second.workers.empty(); });
}

Status Controller::MergeQuietBeatsLocked() {
  // The host was heard at `ms`, when the head had stalled `stalled_ms` in total.
  auto heard = [](RegisteredHost& h, int64_t ms, int64_t stalled_ms) {
    if (ms < h.status.last_heartbeat_ms) return;
    h.status.last_heartbeat_ms = ms;
    h.stalled_ms_at_heartbeat = stalled_ms;
  };
  {
    std::lock_guard lock(quiet_mu_);
    for (auto& [name, q] : quiet_) {
      if (!q.heard) continue;
      q.heard = false;
      auto it = hosts_.find(name);
      if (it == hosts_.end()) continue;
      RegisteredHost& h = it->second;
      heard(h, q.last_heartbeat_ms, q.stalled_ms_at_heartbeat);
      h.status.usage["cpuPercent"] = q.cpu_percent;
      h.status.usage["memoryBytes"] = q.memory_bytes;
    }
    // Beats that arrived and still wait to be handled: heard then (a Lost host comes back only
    // when its beat is handled, HostRecovered).
    for (const auto& [name, when] : arrived_) {
      auto it = hosts_.find(name);
      if (it != hosts_.end() && !it->second.status.lost) heard(it->second, when.first, when.second);
    }
    arrived_.clear();
  }
  return ApplySteadyBeatsLocked();
}

Status Controller::ApplySteadyBeatsLocked() {
  std::vector<SteadyBeat> steady;
  {
    std::lock_guard lock(quiet_mu_);
    steady.swap(steady_);
  }
  for (size_t i = 0; i < steady.size(); ++i) {
    const SteadyBeat& s = steady[i];
    if (!hosts_.count(s.host)) continue;  // deleted since: its reports count for nothing now
    Status failed = Status::Ok();
    ApplyReportsLocked(s.host, s.beat, s.now, failed);
    if (!failed.ok()) {
      // Its steps were undone (RunStep restores a job whose write failed), and applying a
      // report again is harmless (the steps take the highest step, checkpoint and phase).
      std::lock_guard lock(quiet_mu_);
      steady_.insert(steady_.begin(),
                     std::make_move_iterator(steady.begin() + static_cast<std::ptrdiff_t>(i)),
                     std::make_move_iterator(steady.end()));
      return failed;
    }
  }
  if (!steady.empty()) {
    RequestPass();
    EmitDerivedChangesLocked(/*announce=*/true);
  }
  return Status::Ok();
}

std::unique_lock<std::mutex> Controller::Hold() const {
  std::unique_lock lock(mu_);
  // Logically const for a read: it applies what was already answered, as if the beats had
  // waited for the lock. The controller itself is never a const object.
  auto& self = const_cast<Controller&>(*this);
  if (Status applied = self.ApplySteadyBeatsLocked(); !applied.ok() && deferred_error_.ok())
    self.deferred_error_ = applied;  // the next tick reports it (and applies them again)
  return lock;
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
