// AgentFence: what the agent knows for fencing (docs/agent-protocol.md "Fencing", docs/ha.md).
//
// - The highest head term seen: a snapshot of an older term (a head that has been replaced)
//   is refused whole, so a deposed head can neither start nor stop anything.
// - The newest attempt seen per workload uid: an assignment of an older attempt is refused.
// - The last contact: when a heartbeat was last answered by a head (a round trip, the moment
//   the head also counts from; a line on the watch stream is not one). Once no head has
//   answered for fence_ms the fence is over: the agent stops its training workers
//   (FencePolicyFor) and starts none until a head answers again.
// - The refusals to report to the head in the next heartbeat.
//
// Times are milliseconds of a monotonic clock given by the caller, so this is tested with a
// fake clock. The contact file (WriteContactFile) carries the last contact, in CLOCK_MONOTONIC
// milliseconds, to the workers: the SDK (python/tessera/worker.py) exits a worker whose agent
// has not refreshed it for the fence time, which still works when the agent itself is frozen.
//
// Ownership: the agent owns one. Thread-safety: none; the agent calls it under its mutex.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "agent/fence_memory.h"
#include "common/status.h"
#include "protocol/wire.h"

namespace tessera::agent {

// What a fenced agent does with a worker of each kind. Training workers are stopped: the head
// restarts their job elsewhere once the fence is over, and two attempts must never run at once.
// Serving replicas keep serving: a request answered by a replica the head has given up on is
// still a correct answer, and stopping every replica during a head outage would take the
// service down with the head.
enum class FenceAction { kStop, kKeepRunning };
FenceAction FencePolicyFor(protocol::WorkloadKind kind);

// The assignment's kind; for a head that sends none, a replica is recognised by its
// TESSERA_SERVICE variable and anything else is training (stopped when fenced: the safe side).
protocol::WorkloadKind KindOf(const protocol::Assignment& assignment);

class AgentFence {
 public:
  // fence_ms 0: never fenced (the agent's library default; `tessera agent` defaults to 15 s).
  explicit AgentFence(int64_t fence_ms) : fence_ms_(fence_ms) {}

  int64_t fence_ms() const { return fence_ms_; }
  bool enabled() const { return fence_ms_ > 0; }

  // A head answered at `now_ms`: the fence starts over and is lifted.
  void Contact(int64_t now_ms);
  int64_t last_contact_ms() const { return last_contact_ms_; }
  // When the fence is over if no head answers before; 0 before the first contact or when off.
  int64_t deadline_ms() const;
  // True from deadline_ms() on until the next Contact.
  bool Over(int64_t now_ms) const;

  // "" to accept a snapshot of `term` (raising the highest term seen), or why it is refused.
  std::string CheckTerm(uint64_t term);
  // "" to accept an assignment (raising the newest attempt seen for its uid), or why it is
  // refused: an attempt older than one already seen for the same uid.
  std::string CheckAttempt(const protocol::WorkerKey& key);
  uint64_t term() const { return term_; }

  // What CheckTerm and CheckAttempt have seen, to keep across a restart (fence_memory.h).
  FenceMemory Memory() const { return {term_, newest_attempt_}; }
  // Starts from what an earlier run of the agent saw (before any snapshot is checked).
  void Remember(const FenceMemory& memory);
  // True once after CheckTerm raised the term or CheckAttempt recorded a newer attempt: the
  // memory should be saved before the snapshot is acted on.
  bool TakeChanged() { return std::exchange(changed_, false); }

  // Refusals for the next heartbeat: at most 64 are kept (the oldest are dropped).
  void Refuse(protocol::Refusal refusal);
  std::vector<protocol::Refusal> TakeRefusals();
  // Puts back refusals a failed heartbeat did not deliver (in front of newer ones).
  void Restore(std::vector<protocol::Refusal> refusals);

 private:
  int64_t fence_ms_;
  int64_t last_contact_ms_ = 0;
  bool contacted_ = false;
  uint64_t term_ = 0;
  bool changed_ = false;
  std::map<uint64_t, int> newest_attempt_;  // by uid; the 4096 highest uids
  std::vector<protocol::Refusal> refusals_;
};

// Writes `contact_ms` (decimal) into `path` atomically (a temporary file renamed over it).
// Unavailable naming the path when it cannot.
Status WriteContactFile(const std::string& path, int64_t contact_ms);

// CLOCK_MONOTONIC in milliseconds: the clock of the contact file, shared by every process of
// the machine (Python's time.monotonic()).
int64_t MonotonicNowMs();

}  // namespace tessera::agent
