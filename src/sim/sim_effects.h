// The simulators' side of the one effects applier (workload/effects_applier.h). A simulator has
// no store, no watchers and no agents to wake: a commit always succeeds (the document's version
// counts the simulated writes), a new assignments revision is a counter, and what the simulator
// itself acts on after a step is recorded for it: the inventory owners whose chips to free and
// whether a scheduling pass was asked for. Its hosts confirm a stop themselves, at once, once
// the step is applied (the caller calls ConfirmStopped for each host that is up). A simulator
// that acts on a commit or a release at once (the serving simulation) overrides those.
//
// Thread-safety: none; one sink belongs to one simulation run.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "workload/effects_applier.h"

namespace tessera::sim {

template <typename Object>
class SimEffectsSink : public EffectsSink<Object> {
 public:
  Result<int64_t> Commit(const Object& object, const Effects& /*effects*/) override {
    return object.runtime.version + 1;
  }
  void Release(uint64_t owner) override { released_.push_back(owner); }
  int64_t BumpAssignments() override { return ++assignment_revision_; }
  void NotifyHosts(const std::set<std::string>& /*hosts*/) override {}
  void Announce(Object& /*object*/, const Effects& /*effects*/) override {}
  void Schedule() override { schedule_ = true; }

  // What the steps applied since the last Clear asked of the simulator.
  const std::vector<uint64_t>& released() const { return released_; }
  bool schedule() const { return schedule_; }
  void Clear() {
    released_.clear();
    schedule_ = false;
  }

 private:
  std::vector<uint64_t> released_;
  bool schedule_ = false;
  int64_t assignment_revision_ = 0;
};

}  // namespace tessera::sim
