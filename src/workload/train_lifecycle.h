// TrainLifecycle: every rule of a TrainJob's life, as pure steps `(job, input, now) -> effects`.
//
// Each step changes the job in place and returns the Effects the caller must apply: persist
// or remove the job's document, release its chips, tell hosts their assignments changed, emit
// events, run a scheduling pass. Nothing here does I/O, reads a clock or starts a thread; what
// a step needs to know of the cluster it asks a ClusterView. The head's controller and the
// simulator both drive the same steps, so a failure takes the same decisions in both
// (docs/elastic.md has the rules, docs/simulator.md how the simulator feeds them).
//
// The stop protocol lives here once: a step that ends or restarts an attempt withdraws every
// assignment (`Effects::assignments_changed`), lists the hosts that must confirm their workers
// are gone (`TrainJobRuntime::unconfirmed`; lost hosts cannot and are skipped), and when the
// last one confirms (ConfirmStopped, HostLost) the chips are released and the job goes on:
// back to Pending for a restart, removed after a delete, or kept finished.
//
// Thread-safety: the lifecycle is immutable after construction; steps on different jobs may
// run concurrently.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "admission/admission.h"
#include "workload/train_job.h"

namespace tessera {

// One event for people (`tessera get events`): "Warning" or "Normal", a reason, a message.
struct JobEvent {
  bool warning = false;
  std::string reason;
  std::string message;
};
inline JobEvent Normal(std::string reason, std::string message) {
  return {false, std::move(reason), std::move(message)};
}
inline JobEvent Warning(std::string reason, std::string message) {
  return {true, std::move(reason), std::move(message)};
}

// What the driver applies after a step, in this order: persist or remove (a failed write
// rolls the step back and applies nothing else), release chips, bump the assignments revision
// and notify `notify_hosts`, emit `events`, schedule.
struct Effects {
  bool persist = false;  // write the job's document
  bool remove = false;   // delete the job's document and forget the job
  bool release_chips = false;
  // The job's assignments changed (placed, or withdrawn for a stop). While the job is stopping,
  // the revision this makes is the one hosts must have applied before they can confirm.
  bool assignments_changed = false;
  std::set<std::string> notify_hosts;
  std::vector<JobEvent> events;
  bool schedule = false;  // chips were released or the job went back to the queue

  bool empty() const {
    return !persist && !remove && !release_chips && !assignments_changed && events.empty() &&
           !schedule;
  }
  void Merge(Effects other);
};

// What a step may ask of the cluster. The head answers from its host registry and inventory,
// the simulator from its own.
class ClusterView {
 public:
  virtual ~ClusterView() = default;
  // A host whose lease ran out: it cannot confirm that its workers stopped.
  virtual bool HostLost(const std::string& host) const = 0;
  // The largest number of slices in [lo, hi] of the job's shape that would fit if the job
  // released its own chips; 0 when not even `lo` fits.
  virtual int LargestFitWithoutJob(const TrainJob& job, int lo, int hi) const = 0;
  // When the workers on lost `host` are surely gone: its agent's fence time counted from when
  // it was last heard of, plus a margin (docs/ha.md "Fencing"). A stop that leaves workers on
  // a lost host holds the chips, so no replacement attempt starts, until then. 0 (the
  // default): nothing to wait for (an agent that does not fence, or the simulator).
  virtual int64_t FencedAtMs(const std::string& /*host*/) const { return 0; }
  // Whole slices of `topology` that a new group could be placed on now: an autoscaler's cap on
  // a scale-up. -1 (the default): unknown, no cap.
  virtual int FreeSlices(Generation /*accelerator*/, const Shape& /*topology*/) const { return -1; }
};

// Where a new attempt runs: chosen by the scheduler, ports drawn by the driver.
struct AttemptPlacement {
  std::vector<std::vector<std::string>> hosts;  // [slice][worker] host name
  std::vector<std::string> slice_names;
  int master_port = 0;
  int jax_port = 0;
};

// A worker's progress line as the agent relays it.
struct ProgressInput {
  enum class Type { kProgress, kCheckpoint, kRestore, kAlive };
  Type type = Type::kProgress;
  int rank = -1;
  int64_t step = -1;
  int64_t time_ms = 0;  // the worker's clock; 0: unknown (the head's now is used)
  double seconds = 0;   // checkpoint save or restore time
};

struct TrainLifecycleOptions {
  // A rank whose liveness ticks are older than this is taken as stopped (hang verdicts). The
  // head uses its host lease.
  int64_t alive_timeout_ms = 5000;
  // A running job's progress (its steps and their times) is persisted, and pushed to watchers,
  // at most this often. The head's `--progress-write-interval-ms`.
  int64_t progress_write_ms = 1000;
};

class TrainLifecycle {
 public:
  explicit TrainLifecycle(TrainLifecycleOptions options = {}) : options_(options) {}

  // A new job, accepted at `now`.
  static TrainJob Create(TrainJobSpec spec, std::string spec_document, uint64_t uid, int64_t now);

  // The scheduler placed the job (its chips are reserved): attempt + 1 starts, Starting.
  Effects Place(TrainJob& job, const AttemptPlacement& placement, int64_t now) const;
  // The job keeps waiting: records why, its place in line and what would help. Persists only
  // when something changed (this runs on every scheduling pass).
  Effects SetPending(TrainJob& job, const std::string& reason, const std::string& message,
                     int position, std::vector<WouldHelp> would_help) const;
  // Admission evicted the running job (preempted, or not started in time): stop and requeue.
  Effects Evict(TrainJob& job, const Eviction& eviction, const ClusterView& cluster,
                int64_t now) const;
  // A user deleted the job: stop every worker, then remove it.
  Effects Delete(TrainJob& job, const ClusterView& cluster, int64_t now) const;

  // Agents' reports for the current attempt (callers drop reports of other attempts).
  Effects WorkerRunning(TrainJob& job, int rank, int64_t pid, int64_t now) const;
  Effects WorkerExited(TrainJob& job, int rank, int exit_code, int signal, int64_t pid,
                       int64_t finished_at_ms, const ClusterView& cluster, int64_t now) const;
  // While the attempt is being stopped, its lines (written before its workers stopped) still
  // count in its record: last step, restore, checkpoints; nothing else (no hang timers, no
  // grow-back).
  Effects Progress(TrainJob& job, const ProgressInput& progress, const ClusterView& cluster,
                   int64_t now) const;
  // `host` applied the withdrawal and runs no worker of the job any more.
  Effects ConfirmStopped(TrainJob& job, const std::string& host, int64_t now) const;
  // `host` lost its lease at `now`; `last_heartbeat_ms` is when it was last heard of.
  Effects HostLost(TrainJob& job, const std::string& host, int64_t last_heartbeat_ms,
                   const std::string& why, const ClusterView& cluster, int64_t now) const;

  // Timers, on every tick: hang detection, the grow-back search, progress persistence (at most
  // once a second).
  Effects Tick(TrainJob& job, const ClusterView& cluster, int64_t now) const;
  // False when Tick(job, ...) would change nothing and return no effects at any time: the job
  // is not running, no lost host's fence is pending and nothing waits to be flushed (a finished
  // or waiting job). A driver over 100,000 stored jobs, most of them finished, skips those.
  bool TickMayAct(const TrainJob& job) const;

 private:
  Effects FailAttempt(TrainJob& job, FailureKind kind, std::vector<int> ranks, int64_t failure_ms,
                      const std::string& message, const ClusterView& cluster, int64_t now) const;
  Effects Stop(TrainJob& job, JobPhase phase, const std::string& reason, const std::string& message,
               const ClusterView& cluster, int64_t now) const;
  // Withdraws every assignment and lists the hosts that must confirm; finishes at once when
  // none must.
  void BeginStopping(TrainJob& job, const ClusterView& cluster, int64_t now,
                     Effects& effects) const;
  void FinishStopping(TrainJob& job, int64_t now, Effects& effects) const;
  // Progress's part while the job is stopping: the ended attempt's record only.
  Effects StoppingProgress(TrainJob& job, const ProgressInput& p, int64_t at) const;
  // Fencing (train_fence.cc): a stop waits for the fence of every lost host that may still
  // run a worker of the job (TrainJobRuntime::fencing) before it finishes.
  void HoldForFences(TrainJob& job, const ClusterView& cluster, int64_t now,
                     Effects& effects) const;
  Effects LostWhileStopping(TrainJob& job, const std::string& host, const ClusterView& cluster,
                            int64_t now) const;
  Effects CheckFences(TrainJob& job, int64_t now) const;
  Effects CheckHang(TrainJob& job, const ClusterView& cluster, int64_t now) const;
  Effects CheckGrowBack(TrainJob& job, const ClusterView& cluster, int64_t now) const;
  Effects BeginGrowBack(TrainJob& job, const ClusterView& cluster, int64_t now) const;

  TrainLifecycleOptions options_;
};

}  // namespace tessera
