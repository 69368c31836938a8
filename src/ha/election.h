// Leader election among tessera heads: the pure part. ElectionState decides, from the times of
// what happened (a monotonic clock in milliseconds, injected), whether a head should try to
// acquire the leader key, renew its lease, or step down. elector.h runs it against etcd.
//
// The rules (docs/ha.md, "Election"):
//   - A candidate tries to create the leader key (bound to its lease) every `retry`.
//   - A leader renews every `retry`. A renewal counts from the moment its request was SENT,
//     because etcd restarts the lease's TTL no earlier than that.
//   - A leader whose last successful renewal was sent `renew_deadline` ago or more steps down,
//     before the lease (which is longer) can have expired for anybody else. A lease reported
//     gone, or a leader key that is no longer its own, steps it down at once.
//   - Stepping down is final for this process (the head exits and is restarted as a
//     candidate): a deposed leader never resumes writing with state it read as leader.
// The term is the leader key's create_revision in etcd: it only grows, and the store compares
// it in every write (etcd_store.h SetFence), so a deposed leader's write fails whatever its
// clock says.
//
// Thread-safety: a value; the caller serialises calls.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace tessera::ha {

// Kubernetes' leader-election defaults (client-go leaderelection).
struct ElectionConfig {
  std::chrono::milliseconds lease{15'000};
  std::chrono::milliseconds renew_deadline{10'000};
  std::chrono::milliseconds retry{2'000};
};

// OK when lease > renew_deadline > 1.2 x retry, retry >= 100 ms, and lease is whole seconds
// of at least 2 s (etcd grants leases in seconds and never shorter than about 2 s); otherwise
// kInvalidArgument naming the flags (--election-lease-ms, --election-renew-deadline-ms,
// --election-retry-ms) and the rule.
Status ValidateElectionConfig(const ElectionConfig& config);

enum class Role { kCandidate, kLeader, kSteppedDown };
const char* RoleName(Role role);

enum class Action {
  kWait,      // nothing until `at`
  kAcquire,   // try to create the leader key now
  kRenew,     // renew the lease now
  kStepDown,  // stop acting as leader now (renew deadline passed)
  kNone,      // stepped down: nothing more, ever
};

struct Decision {
  Action action = Action::kWait;
  int64_t at_ms = 0;  // for kWait: when to ask again
};

class ElectionState {
 public:
  explicit ElectionState(ElectionConfig config) : config_(config) {}

  Decision Next(int64_t now_ms) const;

  // The acquire request sent at sent_ms created the key: this head leads with `term`.
  void OnAcquired(int64_t sent_ms, int64_t term);
  // Another head holds the key (or etcd did not answer): try again after `retry`.
  void OnNotAcquired(int64_t now_ms);
  // The renewal sent at sent_ms succeeded.
  void OnRenewed(int64_t sent_ms);
  // A renewal failed (etcd unreachable, timeout): keep leading until the deadline.
  void OnRenewFailed(int64_t now_ms);
  // The lease is gone or the key is not ours any more: step down now.
  void OnLost();
  // Next() said kStepDown, or the head is shutting down.
  void StepDown();

  Role role() const { return role_; }
  int64_t term() const { return term_; }
  // When the leadership is certainly over for everybody else (last renewal + lease); for
  // logging only.
  int64_t lease_end_ms() const { return last_renew_sent_ms_ + config_.lease.count(); }
  const ElectionConfig& config() const { return config_; }

 private:
  ElectionConfig config_;
  Role role_ = Role::kCandidate;
  int64_t term_ = 0;
  int64_t next_attempt_ms_ = 0;     // candidate: next acquire; leader: next renew
  int64_t last_renew_sent_ms_ = 0;  // leader: the last successful renewal (or the acquire)
};

}  // namespace tessera::ha
