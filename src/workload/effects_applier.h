// The one applier of lifecycle effects. TrainLifecycle and ServiceLifecycle return Effects; the
// head's controller and every simulator apply them here, so the order of application and the
// bookkeeping it implies are written once:
//
//   1. nothing to do (no flag, no event, no slice to free): stop;
//   2. commit: write the document (or delete it) with the events, in one write. A failed
//      commit applies nothing else (RunStep also restores the object as it was);
//   3. after a write of the document: its new version; a TrainJob's progress and detail are
//      no longer dirty (persisted at `now`);
//   4. free chips: a TrainJob's own owner (its uid) when `release_chips`, a Service's
//      `release_owners`;
//   5. assignments changed: a new assignments revision; a stop (a TrainJob stopping, any change
//      of a Service) waits for hosts that applied that revision;
//   6. notify `notify_hosts`;
//   7. announce: the driver tells watchers (and forgets a removed object);
//   8. schedule a pass when asked.
//
// What differs between drivers sits behind EffectsSink: the head writes its store, releases its
// inventory, wakes agents and emits watch events; a simulator keeps a simulated store and clock
// and its own hosts. Pure: no I/O, no clock (time arrives as `now`), no threads.
//
// Thread-safety: the functions keep no state; the caller serializes calls on one object and
// one sink.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <type_traits>
#include <utility>

#include "common/status.h"
#include "workload/service_lifecycle.h"
#include "workload/train_lifecycle.h"

namespace tessera {

// The parts of applying effects that differ between the head and the simulators. `Object` is
// TrainJob or Service.
template <typename Object>
class EffectsSink {
 public:
  virtual ~EffectsSink() = default;
  // One write: the object's document when `effects.persist` (deleted instead when
  // `effects.remove`), with `effects.events`. Returns the document's new version (a driver
  // without versions returns any value). An error means nothing was written.
  virtual Result<int64_t> Commit(const Object& object, const Effects& effects) = 0;
  // Frees the chips of inventory owner `owner`.
  virtual void Release(uint64_t owner) = 0;
  // Some assignment changed: returns the new assignments revision (hosts that report it have
  // applied the change).
  virtual int64_t BumpAssignments() = 0;
  // These hosts' assignments changed: wake them.
  virtual void NotifyHosts(const std::set<std::string>& hosts) = 0;
  // After everything else: tell watchers what changed. A removed object (`effects.remove`) may
  // be forgotten here; the applier does not touch it afterwards.
  virtual void Announce(Object& object, const Effects& effects) = 0;
  // Run a scheduling pass soon.
  virtual void Schedule() = 0;
};

using TrainEffectsSink = EffectsSink<TrainJob>;
using ServiceEffectsSink = EffectsSink<Service>;

// What a driver notes once the job's document is in the store at `version` (ApplyEffects' step
// 3; a driver that writes several jobs' statuses in one commit calls it for each).
void NotePersisted(TrainJob& job, int64_t version, int64_t now);

// Applies effects a step returned (the object has already changed). On a failed commit returns
// its error and applies nothing else; the object keeps the step's changes (drivers whose commit
// can fail use ApplyStep).
Status ApplyEffects(TrainJob& job, Effects effects, TrainEffectsSink& sink, int64_t now);
Status ApplyEffects(Service& service, ServiceEffects effects, ServiceEffectsSink& sink);

// Runs `step` on `object` and applies its effects. On a failed commit the object is restored to
// what it was before the step, and the commit's error is returned.
template <typename Object, typename Step>
Status ApplyStep(Object& object, const Step& step, EffectsSink<Object>& sink, int64_t now) {
  Object before = object;
  auto effects = step(object);
  Status applied = Status::Ok();
  if constexpr (std::is_same_v<Object, TrainJob>)
    applied = ApplyEffects(object, std::move(effects), sink, now);
  else
    applied = ApplyEffects(object, std::move(effects), sink);
  if (!applied.ok()) object = std::move(before);
  return applied;
}

}  // namespace tessera
