#include "workload/train_lifecycle.h"

#include <algorithm>
#include <cstdio>

namespace tessera {
namespace {

constexpr size_t kProgressSamples = 240;
constexpr size_t kCheckpointSamples = 64;
// A waiting job's detail (its place in line, the job it waits behind, how many slices are free)
// is written at most this often while its reason stays: when the head of a long queue starts,
// every job behind it moves up one and waits behind the next, and a store write each, under the
// controller's lock, made a pass cost one commit per waiting job (the chaos benchmark's stall,
// docs/ha.md).
constexpr int64_t kDetailFlushMs = 5000;

std::string Seconds(int64_t ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f s", static_cast<double>(ms) / 1000.0);
  return buf;
}

std::set<std::string> HostsOf(const TrainJob& job) {
  std::set<std::string> hosts;
  for (const auto& [rank, w] : job.status.workers) hosts.insert(w.host);
  return hosts;
}

// Records the end of the current attempt; a no-op when it already ended.
void EndAttempt(TrainJob& job, const std::string& end_reason, int64_t now) {
  auto& attempts = job.status.attempts;
  if (attempts.empty() || attempts.back().ended_ms != 0) return;
  attempts.back().ended_ms = now;
  attempts.back().end_reason = end_reason;
}

}  // namespace

void Effects::Merge(Effects other) {
  persist = persist || other.persist;
  remove = remove || other.remove;
  release_chips = release_chips || other.release_chips;
  assignments_changed = assignments_changed || other.assignments_changed;
  notify_hosts.merge(other.notify_hosts);
  for (JobEvent& e : other.events) events.push_back(std::move(e));
  schedule = schedule || other.schedule;
}

TrainJob TrainLifecycle::Create(TrainJobSpec spec, std::string spec_document, uint64_t uid,
                                int64_t now) {
  TrainJob job;
  job.uid = uid;
  job.created_ms = now;
  job.spec = std::move(spec);
  job.spec_document = std::move(spec_document);
  job.status.pending_since_ms = now;
  job.runtime.progress_epoch_ms = now;
  return job;
}

// ---------------------------------------------------------------------------------------------
// Scheduling

Effects TrainLifecycle::Place(TrainJob& job, const AttemptPlacement& placement, int64_t now) const {
  TrainJobStatus& st = job.status;
  const int previous_slices = st.attempts.empty() ? 0 : st.attempts.back().slices;
  st.attempt += 1;
  st.placement = placement.hosts;
  st.slice_names = placement.slice_names;
  st.workers.clear();
  for (size_t s = 0; s < placement.hosts.size(); ++s)
    for (size_t w = 0; w < placement.hosts[s].size(); ++w) {
      const int rank = static_cast<int>(s * placement.hosts[s].size() + w);
      st.workers[rank] =
          WorkerStatus{placement.hosts[s][w], static_cast<int>(s), static_cast<int>(w)};
    }
  st.master_port = placement.master_port;
  st.jax_port = placement.jax_port;
  AttemptRecord record;
  record.attempt = st.attempt;
  record.slices = static_cast<int>(placement.hosts.size());
  record.world_size = static_cast<int>(st.workers.size());
  record.placed_ms = now;
  st.attempts.push_back(record);
  st.restart_min = st.restart_max = 0;
  st.fast_stop = false;
  st.stop_grace_ms = -1;
  st.grow_target = 0;
  st.grow_after_step = -1;
  st.admitted_ms = now;
  st.phase = JobPhase::kStarting;
  st.reason = "Placed";
  st.pending_reason.clear();
  st.queue_position = 0;
  st.would_help.clear();
  std::string where;
  for (const auto& n : st.slice_names) where += (where.empty() ? "" : ", ") + n;
  st.message = "attempt " + std::to_string(st.attempt) + " placed on " + where;
  st.start_ms = now;
  st.finish_ms = 0;
  job.runtime.ranks.clear();
  job.runtime.first_progress_ms = 0;
  job.runtime.next_grow_check_ms = now + job.spec.grow_back_interval_ms;

  Effects e;
  e.persist = true;
  e.assignments_changed = true;
  e.notify_hosts = HostsOf(job);
  e.events.push_back(Normal("Placed", st.message));
  if (previous_slices > 0 && previous_slices != job.slices())
    e.events.push_back(Normal("Resized", "attempt " + std::to_string(st.attempt) + " runs on " +
                                             std::to_string(job.slices()) + " slices (was " +
                                             std::to_string(previous_slices) + ")"));
  return e;
}

Effects TrainLifecycle::SetPending(TrainJob& job, const std::string& reason,
                                   const std::string& message, int position,
                                   std::vector<WouldHelp> would_help) const {
  TrainJobStatus& st = job.status;
  if (reason == st.reason && reason == st.pending_reason && would_help == st.would_help) {
    // The same reason; at most the detail changed. Reads see it at once; the store and the
    // watchers get it with the job's next write, or Tick's flush within kDetailFlushMs.
    if (position != st.queue_position || message != st.message) {
      st.queue_position = position;
      st.message = message;
      job.runtime.detail_dirty = true;
    }
    return {};
  }
  st.reason = reason;
  st.message = message;
  st.pending_reason = reason;
  st.queue_position = position;
  st.would_help = std::move(would_help);
  Effects e;
  e.persist = true;
  return e;
}

Effects TrainLifecycle::Evict(TrainJob& job, const Eviction& eviction, const ClusterView& cluster,
                              int64_t now) const {
  TrainJobStatus& st = job.status;
  const bool preempted = eviction.cause == EvictionCause::kPreempted;
  st.phase = JobPhase::kPending;
  st.reason = preempted ? "Preempted" : "StartTimeout";
  st.pending_reason = st.reason;
  st.message = eviction.message;
  st.start_guard = eviction.start_guard;
  st.deactivated = eviction.deactivated;
  if (preempted) ++st.preemptions;
  EndAttempt(job, preempted ? "Preempted" : "StartTimeout", now);
  st.pending_since_ms = now;
  st.would_help.clear();
  st.queue_position = 0;
  st.stop_grace_ms = preempted ? eviction.grace_ms : -1;
  Effects e;
  e.events.push_back(Warning(
      st.reason, eviction.message + (preempted ? "; workers get SIGTERM and " +
                                                     std::to_string(eviction.grace_ms / 1000) +
                                                     " s to checkpoint, then the job is requeued"
                                               : "")));
  BeginStopping(job, cluster, now, e);
  return e;
}

Effects TrainLifecycle::Delete(TrainJob& job, const ClusterView& cluster, int64_t now) const {
  TrainJobStatus& st = job.status;
  Effects e;
  if (st.deleting) return e;
  st.deleting = true;
  e.events.push_back(Normal("Deleting", "stopping every worker, then releasing chips"));
  if (st.stopping) {
    e.persist = true;  // the stop under way removes the job when it finishes
    return e;
  }
  if (job.HoldsChips()) {
    EndAttempt(job, "Deleted", now);
    e.Merge(Stop(job, JobPhase::kTerminating, "Deleted", "deleted by a user; stopping every worker",
                 cluster, now));
    return e;
  }
  e.remove = true;
  e.schedule = true;
  return e;
}

// ---------------------------------------------------------------------------------------------
// The stop protocol

void TrainLifecycle::BeginStopping(TrainJob& job, const ClusterView& cluster, int64_t now,
                                   Effects& effects) const {
  job.status.stopping = true;
  job.runtime.unconfirmed.clear();
  // Workers that reported their exit are known to be gone; every other one must be confirmed
  // stopped by its host (lost hosts cannot confirm and are marked down instead).
  for (const auto& [rank, w] : job.status.workers)
    if (MayRun(w.phase) && !cluster.HostLost(w.host)) job.runtime.unconfirmed.insert(w.host);
  HoldForFences(job, cluster, now, effects);  // workers on lost hosts: wait for their fence
  effects.assignments_changed = true;
  effects.notify_hosts.merge(HostsOf(job));
  // Nothing left to confirm (every worker exited, or their hosts are lost and fenced): done.
  if (job.runtime.unconfirmed.empty() && job.runtime.fencing.empty())
    FinishStopping(job, now, effects);
  else
    effects.persist = true;
}

void TrainLifecycle::FinishStopping(TrainJob& job, int64_t now, Effects& effects) const {
  TrainJobStatus& st = job.status;
  st.stopping = false;
  job.runtime.fencing.clear();
  effects.release_chips = true;
  effects.schedule = true;
  if (st.deleting) {
    effects.remove = true;
    effects.persist = false;
    effects.events.push_back(Normal("Deleted", "every worker stopped; chips released"));
    return;
  }
  if (st.phase == JobPhase::kRestarting) {
    st.phase = JobPhase::kPending;
    st.pending_since_ms = now;
  }
  effects.persist = true;
  effects.events.push_back(Normal("Released", "every worker stopped; chips released"));
}

Effects TrainLifecycle::Stop(TrainJob& job, JobPhase phase, const std::string& reason,
                             const std::string& message, const ClusterView& cluster,
                             int64_t now) const {
  TrainJobStatus& st = job.status;
  st.phase = phase;
  st.reason = reason;
  st.message = message;
  st.finish_ms = now;
  Effects e;
  e.events.push_back(phase == JobPhase::kFailed ? Warning(reason, message)
                                                : Normal(reason, message));
  BeginStopping(job, cluster, now, e);
  return e;
}

Effects TrainLifecycle::ConfirmStopped(TrainJob& job, const std::string& host, int64_t now) const {
  Effects e;
  if (!job.status.stopping || !job.runtime.unconfirmed.erase(host)) return e;
  if (job.runtime.unconfirmed.empty() && job.runtime.fencing.empty()) FinishStopping(job, now, e);
  return e;
}

// ---------------------------------------------------------------------------------------------
// Workers

Effects TrainLifecycle::WorkerRunning(TrainJob& job, int rank, int64_t pid, int64_t now) const {
  TrainJobStatus& st = job.status;
  Effects e;
  auto w = st.workers.find(rank);
  if (st.stopping || w == st.workers.end() || w->second.phase != WorkerPhase::kPending) return e;
  w->second.phase = WorkerPhase::kRunning;
  w->second.pid = pid;
  e.persist = true;
  const bool all_running = std::all_of(st.workers.begin(), st.workers.end(), [](const auto& kv) {
    return kv.second.phase != WorkerPhase::kPending;
  });
  if (all_running && st.phase == JobPhase::kStarting) {
    if (!st.attempts.empty()) st.attempts.back().running_ms = now;
    st.phase = JobPhase::kRunning;
    st.reason = "Running";
    st.message = "all " + std::to_string(st.workers.size()) + " workers running";
    e.events.push_back(Normal("Started", st.message));
  }
  return e;
}

Effects TrainLifecycle::WorkerExited(TrainJob& job, int rank, int exit_code, int signal,
                                     int64_t pid, int64_t finished_at_ms,
                                     const ClusterView& cluster, int64_t now) const {
  TrainJobStatus& st = job.status;
  auto it = st.workers.find(rank);
  if (st.stopping || it == st.workers.end() || !MayRun(it->second.phase)) return {};
  WorkerStatus& w = it->second;
  w.exit_code = exit_code;
  w.signal = signal;
  if (pid != 0) w.pid = pid;
  if (exit_code == 0 && signal == 0) {
    w.phase = WorkerPhase::kSucceeded;
    const bool all_done = std::all_of(st.workers.begin(), st.workers.end(), [](const auto& kv) {
      return kv.second.phase == WorkerPhase::kSucceeded;
    });
    if (!all_done) {
      Effects e;
      e.persist = true;
      return e;
    }
    EndAttempt(job, "Succeeded", now);
    return Stop(job, JobPhase::kSucceeded, "Completed",
                "all " + std::to_string(st.workers.size()) + " workers exited 0", cluster, now);
  }
  w.phase = WorkerPhase::kFailed;
  const std::string how = signal != 0 ? "was killed by signal " + std::to_string(signal)
                                      : "exited with code " + std::to_string(exit_code);
  return FailAttempt(job, FailureKind::kWorkerFailed, {rank}, finished_at_ms,
                     "worker rank " + std::to_string(rank) + " on host " + w.host + " " + how,
                     cluster, now);
}

Effects TrainLifecycle::Progress(TrainJob& job, const ProgressInput& p, const ClusterView& cluster,
                                 int64_t now) const {
  TrainJobStatus& st = job.status;
  Effects e;
  if (!st.workers.count(p.rank) || st.attempts.empty()) return e;
  // Step times come from the worker (they measure the training, not the heartbeat batching);
  // staleness for hang detection is judged on the head's clock.
  const int64_t at = p.time_ms > 0 ? p.time_ms : now;
  AttemptRecord& a = st.attempts.back();
  if (st.stopping) return StoppingProgress(job, p, at);
  RankProgress& rp = job.runtime.ranks[p.rank];
  if (p.type == ProgressInput::Type::kAlive) {
    rp.last_alive_ms = now;
    return e;
  }
  if (p.step < 0) return e;
  switch (p.type) {
    case ProgressInput::Type::kProgress: {
      if (job.runtime.first_progress_ms == 0) job.runtime.first_progress_ms = now;
      rp.last_step = std::max(rp.last_step, p.step);
      rp.last_step_ms = now;
      if (rp.last_alive_ms > 0) rp.last_alive_ms = now;  // a step is a sign of life too
      st.last_step = std::max(st.last_step, p.step);
      if (a.first_step < 0) {
        a.first_step = p.step;
        a.first_step_ms = at;
        if (st.attempts.size() >= 2)
          if (auto f = ComputeRecoveryFigures(st.attempts[st.attempts.size() - 2], a))
            e.events.push_back(Normal(
                "Recovered", "attempt " + std::to_string(a.attempt) + " completed step " +
                                 std::to_string(p.step) + " " + Seconds(f->time_to_recover_ms) +
                                 " after the failure (detect " + Seconds(f->time_to_detect_ms) +
                                 ", schedule " + Seconds(f->time_to_schedule_ms) + ", first step " +
                                 Seconds(f->time_to_first_step_ms) + "); " +
                                 std::to_string(f->steps_lost) + " steps lost"));
      }
      if (p.step > a.last_step) {
        a.last_step = p.step;
        a.last_step_ms = at;
      }
      if (!st.progress.empty() && at - st.progress.back().first < 1000) {
        st.progress.back().second = std::max(st.progress.back().second, st.last_step);
      } else {
        st.progress.emplace_back(at, st.last_step);
        if (st.progress.size() > kProgressSamples) st.progress.erase(st.progress.begin());
      }
      job.runtime.progress_dirty = true;
      break;
    }
    case ProgressInput::Type::kCheckpoint:
      rp.last_step_ms = now;  // saving is progress too (for hang detection)
      // The head's clock: preemption compares it with the head's now.
      st.last_checkpoint_ms = now;
      if (p.step > st.last_checkpoint_step) {  // every rank may report the same checkpoint
        st.last_checkpoint_step = p.step;
        st.checkpoints.emplace_back(at, p.seconds);
        if (st.checkpoints.size() > kCheckpointSamples)
          st.checkpoints.erase(st.checkpoints.begin());
      }
      job.runtime.progress_dirty = true;
      if (st.grow_target > 0 && p.step > st.grow_after_step)
        e.Merge(BeginGrowBack(job, cluster, now));
      break;
    case ProgressInput::Type::kRestore:
      a.restored = true;
      a.resumed_from_step = p.step;
      a.restore_seconds = std::max(a.restore_seconds, p.seconds);
      job.runtime.progress_dirty = true;
      break;
    case ProgressInput::Type::kAlive:
      break;
  }
  return e;
}

Effects TrainLifecycle::StoppingProgress(TrainJob& job, const ProgressInput& p, int64_t at) const {
  TrainJobStatus& st = job.status;
  AttemptRecord& a = st.attempts.back();
  Effects e;
  if (p.step < 0) return e;
  switch (p.type) {
    case ProgressInput::Type::kProgress:
      if (a.first_step < 0) {
        a.first_step = p.step;
        a.first_step_ms = at;
      }
      if (p.step > a.last_step) {
        a.last_step = p.step;
        a.last_step_ms = at;
      }
      st.last_step = std::max(st.last_step, p.step);
      break;
    case ProgressInput::Type::kCheckpoint:
      if (p.step > st.last_checkpoint_step) {
        st.last_checkpoint_step = p.step;
        st.checkpoints.emplace_back(at, p.seconds);
        if (st.checkpoints.size() > kCheckpointSamples)
          st.checkpoints.erase(st.checkpoints.begin());
      }
      break;
    case ProgressInput::Type::kRestore:
      a.restored = true;
      a.resumed_from_step = p.step;
      a.restore_seconds = std::max(a.restore_seconds, p.seconds);
      break;
    case ProgressInput::Type::kAlive:
      return e;
  }
  job.runtime.progress_dirty = true;
  return e;
}

// ---------------------------------------------------------------------------------------------
// Failures and recovery (docs/elastic.md)

Effects TrainLifecycle::FailAttempt(TrainJob& job, FailureKind kind, std::vector<int> ranks,
                                    int64_t failure_ms, const std::string& message,
                                    const ClusterView& cluster, int64_t now) const {
  TrainJobStatus& st = job.status;
  if (!st.attempts.empty() && st.attempts.back().ended_ms == 0) {
    AttemptRecord& a = st.attempts.back();
    a.failed_ranks = std::move(ranks);
    a.failure_ms = failure_ms > 0 ? std::min(failure_ms, now) : now;
    a.detected_ms = now;
    a.message = message;
  }
  EndAttempt(job, FailureKindName(kind), now);
  ++st.failures;
  const std::string reason = kind == FailureKind::kHang ? "HangDetected" : FailureKindName(kind);
  const RecoveryDecision d =
      DecideRecovery(kind, job.spec.on_host_loss, st.failures, job.spec.max_failures, job.slices(),
                     job.spec.min_slices, job.spec.max_slices);
  st.fast_stop = true;  // the attempt is broken: its state is in the last checkpoint
  st.grow_target = 0;
  if (d.fail) {
    std::string history;
    for (const AttemptRecord& a : st.attempts)
      history += (history.empty() ? "" : "; ") + std::string("attempt ") +
                 std::to_string(a.attempt) + " " + a.end_reason +
                 (a.last_step >= 0 ? " at step " + std::to_string(a.last_step) : "");
    return Stop(job, JobPhase::kFailed, reason, message + "; " + d.why + " (" + history + ")",
                cluster, now);
  }
  Effects e;
  e.events.push_back(Warning(reason, message));
  st.restart_min = d.min_slices;
  st.restart_max = d.max_slices;
  st.phase = JobPhase::kRestarting;
  st.reason = "Restarting";
  const std::string budget =
      job.spec.max_failures < 0 ? "unlimited" : std::to_string(job.spec.max_failures);
  st.message = message + "; failure " + std::to_string(st.failures) + " of " + budget +
               ": stopping every worker, then " + d.why;
  e.events.push_back(Normal("Restarting", st.message));
  BeginStopping(job, cluster, now, e);
  return e;
}

Effects TrainLifecycle::HostLost(TrainJob& job, const std::string& host, int64_t last_heartbeat_ms,
                                 const std::string& why, const ClusterView& cluster,
                                 int64_t now) const {
  TrainJobStatus& st = job.status;
  Effects e;
  const bool restarting = st.restart_min > 0 && (st.phase == JobPhase::kPending || st.stopping);
  if (!job.OnHost(host) || !(job.HoldsChips() || restarting)) return e;
  // A restart decided before this loss (its workers failed first, e.g. their peer died with the
  // host) follows the host-loss policy from now on: resize may take fewer slices.
  if (st.restart_min > 0 && job.spec.on_host_loss == HostLossPolicy::kResize &&
      st.restart_min > job.spec.min_slices) {
    st.restart_min = job.spec.min_slices;
    st.restart_max = job.spec.max_slices;
    e.events.push_back(
        Normal("Restarting", "host " + host +
                                 " of the failed attempt is lost too: restart at the largest size "
                                 "between " +
                                 std::to_string(job.spec.min_slices) + " and " +
                                 std::to_string(job.spec.max_slices) +
                                 " slices that fits (onHostLoss: resize)"));
    e.persist = true;
  }
  if (!job.HoldsChips()) return e;
  if (st.stopping) {
    e.Merge(LostWhileStopping(job, host, cluster, now));  // it cannot confirm: it is gone
    return e;
  }
  std::vector<int> ranks;
  for (const auto& [rank, w] : st.workers)
    if (w.host == host) ranks.push_back(rank);
  e.Merge(FailAttempt(job, FailureKind::kHostLost, ranks, last_heartbeat_ms,
                      "host " + host + " lost: " + why, cluster, now));
  return e;
}

Effects TrainLifecycle::Tick(TrainJob& job, const ClusterView& cluster, int64_t now) const {
  Effects e = CheckHang(job, cluster, now);
  e.Merge(CheckGrowBack(job, cluster, now));
  e.Merge(CheckFences(job, now));
  // Progress is persisted (and pushed to watchers) at most every progress_write_ms per job.
  if (!e.remove && job.runtime.progress_dirty &&
      now - job.runtime.persisted_ms >= options_.progress_write_ms)
    e.persist = true;
  if (!e.remove && job.runtime.detail_dirty && now - job.runtime.persisted_ms >= kDetailFlushMs)
    e.persist = true;
  return e;
}

bool TrainLifecycle::TickMayAct(const TrainJob& job) const {
  // What Tick's parts look at: CheckHang and CheckGrowBack act on a running job only,
  // CheckFences on a stopping job with fences, the flushes on dirty progress or detail.
  return job.status.phase == JobPhase::kRunning ||
         (job.status.stopping && !job.runtime.fencing.empty()) || job.runtime.progress_dirty ||
         job.runtime.detail_dirty;
}

Effects TrainLifecycle::CheckHang(TrainJob& job, const ClusterView& cluster, int64_t now) const {
  const TrainJobStatus& st = job.status;
  // Hang timers start at the attempt's first completed step: start-up (imports, rendezvous,
  // checkpoint restore) has no steps to report, and a group that never gets going fails in its
  // own rendezvous or collective timeout instead.
  if (st.phase != JobPhase::kRunning || st.stopping || job.spec.hang_timeout_ms <= 0 ||
      st.attempts.empty() || job.runtime.first_progress_ms == 0)
    return {};
  // Once a worker has finished, the job is past its last step: the others are finishing too
  // (final evaluation, checkpoint, teardown) and report no more steps.
  const bool finishing = std::any_of(st.workers.begin(), st.workers.end(), [](const auto& kv) {
    return kv.second.phase == WorkerPhase::kSucceeded;
  });
  if (finishing) return {};
  std::map<int, RankProgress> ranks;
  for (const auto& [rank, w] : st.workers) {
    auto it = job.runtime.ranks.find(rank);
    ranks[rank] = it == job.runtime.ranks.end() ? RankProgress{} : it->second;
  }
  const int64_t since = std::max(job.runtime.first_progress_ms, job.runtime.progress_epoch_ms);
  HangVerdict v =
      FindHungRanks(ranks, since, now, job.spec.hang_timeout_ms, options_.alive_timeout_ms);
  if (!v.hung) return {};
  return FailAttempt(job, FailureKind::kHang, v.stuck_ranks, v.since_ms, "hang: " + v.message,
                     cluster, now);
}

Effects TrainLifecycle::CheckGrowBack(TrainJob& job, const ClusterView& cluster,
                                      int64_t now) const {
  TrainJobStatus& st = job.status;
  if (st.phase != JobPhase::kRunning || st.stopping || st.deleting ||
      job.spec.on_host_loss != HostLossPolicy::kResize || job.slices() >= job.spec.max_slices ||
      now < job.runtime.next_grow_check_ms)
    return {};
  job.runtime.next_grow_check_ms = now + job.spec.grow_back_interval_ms;
  const int target = cluster.LargestFitWithoutJob(job, job.slices() + 1, job.spec.max_slices);
  if (target == 0) {
    st.grow_target = 0;
    return {};
  }
  if (st.grow_target == target) return {};
  st.grow_target = target;
  st.grow_after_step = st.last_checkpoint_step;
  Effects e;
  e.persist = true;
  e.events.push_back(Normal("GrowingBack", "capacity for " + std::to_string(target) +
                                               " slices is free; the job restarts at " +
                                               std::to_string(target) +
                                               " slices after its next checkpoint"));
  return e;
}

Effects TrainLifecycle::BeginGrowBack(TrainJob& job, const ClusterView& cluster,
                                      int64_t now) const {
  TrainJobStatus& st = job.status;
  const int target = cluster.LargestFitWithoutJob(job, job.slices() + 1, job.spec.max_slices);
  st.grow_target = 0;
  Effects e;
  if (target == 0) return e;  // the capacity went to someone else: look again later
  EndAttempt(job, "GrowBack", now);
  st.restart_min = job.slices();
  st.restart_max = job.spec.max_slices;
  st.fast_stop = false;  // SIGTERM and the grace period: the workers may save their state
  st.stop_grace_ms = -1;
  st.phase = JobPhase::kRestarting;
  st.reason = "GrowingBack";
  st.message = "checkpoint at step " + std::to_string(st.last_checkpoint_step) +
               " saved; restarting at " + std::to_string(target) + " slices";
  e.events.push_back(Normal("GrowingBack", st.message));
  BeginStopping(job, cluster, now, e);
  return e;
}

}  // namespace tessera
