// Agent: fencing (agent/fence.h, docs/agent-protocol.md "Fencing"). When no head has answered
// a heartbeat for the fence time the agent stops its training workers (SIGKILL: the head starts
// their replacement once the same time has passed on its side, so there is no time for a
// grace) and starts none until a head answers again; serving replicas keep serving. Refusals
// (a stale term, a stale attempt, a worker stopped by the fence) go to the head in the next
// heartbeat.
#include <algorithm>
#include <chrono>

#include "agent/agent.h"
#include "agent/logfmt.h"

namespace tessera::agent {
namespace {

constexpr size_t kMaxLoggedRefusals = 4096;

}  // namespace

void Agent::FenceLoop() {
  // A fraction of the fence time, so the fence is at most 5% late (10..250 ms).
  const std::chrono::milliseconds poll(std::clamp<int64_t>(fence_.fence_ms() / 20, 10, 250));
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, poll, [&] { return stopping_; });
    if (stopping_) return;
    CheckFenceLocked();
  }
}

void Agent::CheckFenceLocked() {
  if (!fence_.enabled() || fenced_ || !fence_.Over(MonotonicNowMs())) return;
  FenceLocked("no head has answered a heartbeat for " +
              std::to_string(MonotonicNowMs() - fence_.last_contact_ms()) + " ms (fence " +
              std::to_string(fence_.fence_ms()) + " ms)");
}

void Agent::FenceLocked(const std::string& why) {
  fenced_ = true;
  Log("agent.fenced",
      "fenceMs=" + std::to_string(fence_.fence_ms()) + " reason=" + LogfmtQuoted(why));
  for (auto& [key, record] : workers_) {
    if (!record.process || record.process->exit_info()) continue;
    const protocol::WorkloadKind kind = KindOf(record.assignment);
    if (FencePolicyFor(kind) == FenceAction::kKeepRunning) {
      Log("worker.fence_kept",
          "worker=" + key.ToString() + " kind=" + protocol::WorkloadKindName(kind));
      continue;
    }
    Log("worker.fenced", "worker=" + key.ToString() + " signal=SIGKILL");
    record.stop_grace_ms = 0;
    record.process->StopAsync(std::chrono::milliseconds(0));
    RefuseLocked({0, key.job, key.uid, key.attempt,
                  "fenced: " + why + "; the training worker was stopped (SIGKILL)"});
  }
}

void Agent::ContactLocked(int64_t sent_ms) {
  if (!fence_.enabled()) return;
  fence_.Contact(std::max(sent_ms, fence_.last_contact_ms()));
  if (fence_.Over(MonotonicNowMs())) {
    // Sent before a freeze (or answered very late): the head may have given up on this host
    // meanwhile. Fence now; the next heartbeat is a fresh contact.
    if (!fenced_)
      FenceLocked(
          "a head answered only after the fence time (the agent was frozen, or the "
          "answer was delayed)");
    return;
  }
  if (fenced_) Log("agent.unfenced", "reason=\"a head answered a heartbeat\"");
  fenced_ = false;
  if (Status written = WriteContactFile(contact_file_, fence_.last_contact_ms()); !written.ok())
    Log("agent.contact_file_failed", "error=" + LogfmtQuoted(written.message()));
}

void Agent::SaveFenceMemoryLocked() {
  if (!fence_.TakeChanged()) return;
  if (Status saved = SaveFenceMemory(memory_file_, fence_.Memory()); !saved.ok())
    Log("agent.fence_memory_failed",
        "error=" + LogfmtQuoted(saved.message()) +
            " effect=\"a restart of this agent forgets the newest term and attempts\"");
}

void Agent::RefuseLocked(protocol::Refusal refusal) {
  const std::string seen = std::to_string(refusal.term) + " " + refusal.job + "/" +
                           std::to_string(refusal.uid) + "/" + std::to_string(refusal.attempt) +
                           " " + refusal.reason;
  if (!refusals_logged_.insert(seen).second) return;  // reported once
  if (refusals_logged_.size() > kMaxLoggedRefusals) refusals_logged_.clear();
  Log("agent.refused",
      "term=" + std::to_string(refusal.term) +
          (refusal.job.empty() ? std::string(" what=snapshot")
                               : " job=" + refusal.job + " uid=" + std::to_string(refusal.uid) +
                                     " attempt=" + std::to_string(refusal.attempt)) +
          " reason=" + LogfmtQuoted(refusal.reason));
  fence_.Refuse(std::move(refusal));
  wake_ = true;  // the head hears of it in a heartbeat sent now
}

}  // namespace tessera::agent
