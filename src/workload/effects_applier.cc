#include "workload/effects_applier.h"

namespace tessera {

void NotePersisted(TrainJob& job, int64_t version, int64_t now) {
  job.runtime.version = version;
  job.runtime.progress_dirty = false;
  job.runtime.detail_dirty = false;
  job.runtime.persisted_ms = now;
}

Status ApplyEffects(TrainJob& job, Effects effects, TrainEffectsSink& sink, int64_t now) {
  if (effects.empty()) return Status::Ok();
  auto committed = sink.Commit(job, effects);
  if (!committed.ok()) return committed.status();
  if (effects.persist && !effects.remove) NotePersisted(job, *committed, now);
  if (effects.release_chips) sink.Release(job.uid);
  if (effects.assignments_changed) {
    const int64_t revision = sink.BumpAssignments();
    if (job.status.stopping) job.runtime.stop_revision = revision;
  }
  sink.NotifyHosts(effects.notify_hosts);
  const bool schedule = effects.schedule;
  sink.Announce(job, effects);  // may forget a removed job
  if (schedule) sink.Schedule();
  return Status::Ok();
}

Status ApplyEffects(Service& service, ServiceEffects effects, ServiceEffectsSink& sink) {
  if (effects.empty() && effects.release_owners.empty()) return Status::Ok();
  auto committed = sink.Commit(service, effects);
  if (!committed.ok()) return committed.status();
  if (effects.persist && !effects.remove) service.runtime.version = *committed;
  for (uint64_t owner : effects.release_owners) sink.Release(owner);
  if (effects.assignments_changed) service.runtime.stop_revision = sink.BumpAssignments();
  sink.NotifyHosts(effects.notify_hosts);
  const bool schedule = effects.schedule;
  sink.Announce(service, effects);  // may forget a removed service
  if (schedule) sink.Schedule();
  return Status::Ok();
}

}  // namespace tessera
