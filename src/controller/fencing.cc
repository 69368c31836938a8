// Controller: fencing (docs/ha.md "Fencing"). The head's term goes into every assignment
// snapshot (assignments.cc); agents report the highest term they have seen and what they
// refused, which become events on the host here. A lost host's fence deadline, the moment
// its agent has surely stopped its training workers, is answered to the lifecycle through the
// View: the stop of an attempt with workers there waits for it (workload/train_fence.cc).
#include <cstdio>

#include "controller/controller.h"

namespace tessera::controller {

void Controller::SetTerm(uint64_t term) {
  auto lock = Hold();
  if (term > term_) term_ = term;
}

uint64_t Controller::term() const {
  auto lock = Hold();
  return term_;
}

uint64_t Controller::newest_agent_term() const {
  auto lock = Hold();
  return newest_agent_term_;
}

int64_t Controller::View::FencedAtMs(const std::string& host) const {
  auto it = c_.hosts_.find(host);
  if (it == c_.hosts_.end() || it->second.fence_ms <= 0) return 0;  // an agent that never fences
  return it->second.status.last_heartbeat_ms + it->second.fence_ms + c_.options_.fence_margin_ms;
}

void Controller::FenceReports(const std::string& host, const protocol::Heartbeat& beat,
                              Status& failed) {
  auto record = [&](const std::string& reason, const std::string& message) {
    std::fprintf(stderr, "head.%s host=%s %s\n", reason.c_str(), host.c_str(), message.c_str());
    Status s = RecordEvent("host/" + host, /*warning=*/true, reason, message);
    if (failed.ok() && !s.ok()) failed = s;
  };
  if (beat.term > term_ && beat.term > newest_agent_term_) {
    newest_agent_term_ = beat.term;
    record("StaleTerm", "the agent has seen term " + std::to_string(beat.term) +
                            ", newer than this head's term " + std::to_string(term_) +
                            ": another head has taken over, and the agent refuses this one");
  }
  auto known = hosts_.find(host);
  std::set<std::string> reported;
  for (const protocol::Refusal& r : beat.refused) {
    std::string what = r.job.empty() ? "a snapshot"
                                     : "job " + r.job + " (uid " + std::to_string(r.uid) +
                                           ") attempt " + std::to_string(r.attempt);
    if (r.term > 0) what += " of term " + std::to_string(r.term);
    std::string message = what + ": " + r.reason;
    const bool again = known != hosts_.end() && known->second.last_refusals.count(message);
    if (!again) record("AssignmentRefused", message);
    reported.insert(std::move(message));
  }
  if (known != hosts_.end()) known->second.last_refusals = std::move(reported);
}

}  // namespace tessera::controller
