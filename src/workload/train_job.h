// TrainJob: the typed resource of a multi-host training job: what the user asked for (spec),
// where it is in its life (status, with a phase enum), and the head-only bookkeeping its
// lifecycle needs (train_lifecycle.h). The API's JSON and YAML documents are codecs of these
// structs (codec/resource_json.h); nothing here knows HTTP, JSON or the store.
//
// Thread-safety: values.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "admission/admission.h"
#include "common/status.h"
#include "placement/gpu_planner.h"
#include "topology/gpu_system.h"
#include "topology/topology.h"
#include "workload/recovery.h"
#include "workload/secret_ref.h"

namespace tessera {

// What a GPU job asks for (spec.gpu; docs/runtime.md "GPU jobs"): `hosts` whole hosts of
// `system`, one worker each, placed among NVLink domains under `rule` by the GPU domain planner
// (placement/gpu_planner.h).
struct GpuJobSpec {
  GpuSystem system = GpuSystem::kH100;
  int hosts = 1;
  DomainRuleSpec rule;
  int gpus() const { return hosts * Info(system).gpus_per_host; }
};

// What a TrainJob asked for (metadata and spec of its document).
struct TrainJobSpec {
  std::string name;
  std::string queue;
  std::map<std::string, std::string> labels;
  Generation accelerator = Generation::kV6e;
  Shape topology;
  int min_slices = 1;  // `slices: N` sets min = max = N
  int max_slices = 1;
  std::string priority;
  // The SliceReservation it runs inside (workload/reservation.h); "": placed on the cluster.
  std::string reservation;
  int max_failures = 0;  // -1: unlimited
  HostLossPolicy on_host_loss = HostLossPolicy::kFail;
  int64_t grow_back_interval_ms = 60'000;  // resize: how often to look for capacity to grow
  int64_t mtbf_ms = 0;  // configured mean time between failures (checkpoint advice); 0: none
  int64_t hang_timeout_ms = 0;  // 0: hang detection off
  std::string checkpoint_dir;
  std::vector<std::string> command;
  std::map<std::string, std::string> env;
  // template.env entries whose values come from Secrets of the job's namespace: resolved into
  // each attempt's assignments only (secret_ref.h).
  SecretEnv secret_env;
  std::string working_dir;
  int64_t grace_ms = 10'000;  // SIGTERM to SIGKILL when workers are stopped
  // spec.expectedDuration: how long one run is expected to take, for EASY backfill's
  // reservations (admission/backfill.h); 0: none given (the head's default applies). A job that
  // runs past it is neither stopped nor preempted: a reservation waiting for it starts later.
  int64_t expected_duration_ms = 0;
  // spec.gpu: a GPU job. Its placement is one group of `gpu->hosts` hosts in rank order
  // (status.placement[0]); accelerator and topology then say nothing.
  std::optional<GpuJobSpec> gpu;
};

// Where a job is in its life. Pending -> Starting -> Running -> Succeeded | Failed, with
// Restarting (a failed or growing attempt's workers are being stopped; the chips stay held for
// the next attempt) and Terminating (deleted while workers run). docs/elastic.md draws it.
enum class JobPhase {
  kPending,
  kStarting,
  kRunning,
  kRestarting,
  kTerminating,
  kSucceeded,
  kFailed
};
const char* JobPhaseName(JobPhase phase);  // "Pending", "Starting", ...
Result<JobPhase> ParseJobPhase(std::string_view name);
// Every phase, in declaration order: for listings that must name each one (GET /metrics).
std::span<const JobPhase> AllJobPhases();
inline bool Finished(JobPhase p) { return p == JobPhase::kSucceeded || p == JobPhase::kFailed; }

enum class WorkerPhase { kPending, kRunning, kSucceeded, kFailed };
const char* WorkerPhaseName(WorkerPhase phase);
Result<WorkerPhase> ParseWorkerPhase(std::string_view name);
// Pending or Running: the process may exist.
inline bool MayRun(WorkerPhase p) {
  return p == WorkerPhase::kPending || p == WorkerPhase::kRunning;
}

struct WorkerStatus {
  std::string host;
  int slice = 0;
  int worker = 0;  // TPU worker id inside its slice
  WorkerPhase phase = WorkerPhase::kPending;
  int exit_code = 0;
  int signal = 0;
  int64_t pid = 0;
};

// A running job that would let a pending one in if it were preempted (admission's Blocker).
struct WouldHelp {
  std::string name;
  std::string cluster_queue;
  int priority = 0;
  int64_t chips = 0;
  bool preemptible = false;
  friend bool operator==(const WouldHelp&, const WouldHelp&) = default;
};

// Where a GPU job's current attempt sits among NVLink domains (status.gpu), recorded with its
// placement: the domain of each host of status.placement[0], and the IMEX channel the job's
// workers share when it spans hosts of one NVLink clique (multi-node NVLink needs one; -1:
// none).
struct GpuAttemptRecord {
  std::vector<std::string> domains;
  int imex_channel = -1;
  friend bool operator==(const GpuAttemptRecord&, const GpuAttemptRecord&) = default;
};

// What the head reports about a job (the document's status), plus the recovery state that
// must survive a head restart. Every field is persisted.
struct TrainJobStatus {
  JobPhase phase = JobPhase::kPending;
  std::string reason = "Pending";
  std::string message = "waiting for the scheduler";
  int attempt = -1;                                 // current or last attempt; -1: never placed
  std::vector<std::vector<std::string>> placement;  // [slice][worker] host name
  std::vector<std::string> slice_names;
  GpuAttemptRecord gpu;  // GPU jobs (spec.gpu) only
  int master_port = 0, jax_port = 0;
  std::map<int, WorkerStatus> workers;  // by rank
  bool stopping = false;  // workers are being stopped; chips held until every host confirms
  bool deleting = false;
  int64_t start_ms = 0, finish_ms = 0;
  int64_t last_step = -1;
  int64_t last_checkpoint_ms = 0;  // head clock of the last checkpoint report; 0: never
  int64_t last_checkpoint_step = -1;
  // Admission: why it waits, its place in line, which running jobs would let it in.
  std::string pending_reason;
  int queue_position = 0;
  std::vector<WouldHelp> would_help;
  StartGuardState start_guard;
  bool deactivated = false;
  int preemptions = 0;
  // Recovery (docs/elastic.md). attempts.back() is the current or last attempt.
  std::vector<AttemptRecord> attempts;
  int failures = 0;
  // After the workers of a restarted attempt are stopped, the job is placed again with a size
  // in [restart_min, restart_max] (0: the spec's range).
  int restart_min = 0, restart_max = 0;
  bool fast_stop = false;        // the attempt is broken: SIGKILL, no grace
  int64_t stop_grace_ms = -1;    // a stop's SIGTERM to SIGKILL; -1: the job's own
  int grow_target = 0;           // grow back to this many slices ...
  int64_t grow_after_step = -1;  // ... at the first checkpoint after this step
  int64_t pending_since_ms = 0, admitted_ms = 0;
  std::vector<std::pair<int64_t, int64_t>> progress;    // (time ms, step), the last 240
  std::vector<std::pair<int64_t, double>> checkpoints;  // (time ms, save s), the last 64
};

// In-memory state of the current attempt that is rebuilt, not persisted.
struct TrainJobRuntime {
  int64_t version = 0;                // store resource version
  std::set<std::string> unconfirmed;  // hosts that may still run a worker being stopped
  // Lost hosts that may still run a worker being stopped, and when their agent's fence has
  // surely stopped it (ClusterView::FencedAtMs): the stop finishes after the last of these.
  std::map<std::string, int64_t> fencing;
  int64_t stop_revision = 0;          // assignments revision that no longer lists the job
  std::map<int, RankProgress> ranks;  // current attempt, by rank
  int64_t progress_epoch_ms = 0;      // hang timers count from here at the earliest
  int64_t first_progress_ms = 0;      // the attempt's first step reached the head; 0: none
  int64_t next_grow_check_ms = 0;
  bool progress_dirty = false;  // progress not yet persisted
  // A new status.queuePosition or message under the same reason, not yet persisted
  // (TrainLifecycle::SetPending).
  bool detail_dirty = false;
  int64_t persisted_ms = 0;
};

struct TrainJob {
  uint64_t uid = 0;  // creation order; also the inventory owner id
  int64_t created_ms = 0;
  TrainJobSpec spec;
  std::string spec_document;  // the spec as the user wrote it (JSON text), echoed back
  TrainJobStatus status;
  TrainJobRuntime runtime;

  const std::string& name() const { return spec.name; }
  int slices() const { return static_cast<int>(status.placement.size()); }
  // Its chips are reserved: placed and not yet released.
  bool HoldsChips() const {
    const JobPhase p = status.phase;
    return p == JobPhase::kStarting || p == JobPhase::kRunning || p == JobPhase::kRestarting ||
           status.stopping;
  }
  // Its workers are assigned to hosts now.
  bool Assigned() const {
    return (status.phase == JobPhase::kStarting || status.phase == JobPhase::kRunning) &&
           !status.stopping;
  }
  bool OnHost(const std::string& host) const;
  // The size range a pending job may be placed with now: a restart's, else the spec's.
  std::pair<int, int> SizeRange() const;
};

}  // namespace tessera
