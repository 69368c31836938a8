// The pod-scale recovery simulation (`tessera sim-recovery`, docs/elastic.md "Pod scale"): one
// large training job for weeks of simulated time under a Poisson interruption process, driven
// through the head's own TrainLifecycle (workload/train_lifecycle.h), with disk-only checkpoints
// or in-memory checkpoints replicated to a peer host; and the Young/Daly bound for the same costs.
//
// The model. The job runs on `chips / chips_per_host` hosts in slices of `hosts_per_slice`, with
// `spare_slices` healthy slices standing by. Interruptions arrive as a Poisson process of rate
// `interruptions_per_chip_day x chips` (each on a uniformly drawn host of the job; a share
// `peer_loss_share` takes that host's peer down with it). Training alternates `interval_steps`
// steps of `step_s` with a checkpoint that blocks training for the tier's cost. A failure at any
// moment (computing, checkpointing or recovering) loses the work since the restore point and
// costs detect + schedule + start + restore before training goes on. The failed host's slice is
// swapped for a spare one and repaired after `repair_hours` (the run waits when no spare is left).
//
// Tiers:
//   disk:   a checkpoint is durable when its blocking save ends; restore from disk.
//   memory: every host copies its state to host memory (blocking `memory_snapshot_s`), then sends
//           it to its peer (a host of the next slice) in the background (`memory_replicate_s`);
//           a snapshot counts once every copy has landed (the previous one is kept until then).
//           A lost host's state comes back from its peer. When both copies of some host's state
//           are gone, the job falls back to the newest durable disk checkpoint: every
//           `disk_every_snapshots`-th snapshot is persisted to disk from host memory in the
//           background (durable `disk_persist_s` later; training does not wait).
//
// The head's part: the job is a TrainJob. The engine calls Place for every attempt,
// WorkerRunning for each rank, Progress for checkpoints, restores and the last step before a
// failure, HostLost when the failed host's lease runs out (detect_s after the failure) and
// ConfirmStopped for every other host, and applies the lifecycle's decisions (restart at the same
// size). The head's figures (attempts, steps lost, time to recover, goodput) are reported beside
// the engine's own and must agree with them.
//
// Pure: no clock, no I/O, no threads; randomness only from the seed. Same options, same result
// (event_hash included). Thread-safety: none needed; a run owns its state.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace tessera::sim {

// Llama 3 (arXiv:2407.21783, section 3.3.4): 466 job interruptions in 54 days on 16,384 GPUs.
inline constexpr double kLlama3InterruptionsPerChipDay = 466.0 / (54.0 * 16384.0);

enum class CheckpointTier { kDisk, kMemory };
const char* CheckpointTierName(CheckpointTier tier);  // "disk", "memory"
Result<CheckpointTier> ParseCheckpointTier(const std::string& name);

// Seconds. Which figures and where they come from: MeasuredCosts, PublishedCosts, docs/elastic.md.
struct RecoveryCosts {
  std::string name;          // "measured", "published" or "custom"
  double detect_s = 5;       // failure -> the head notices (a lost host: its lease)
  double schedule_s = 0.11;  // the head places the next attempt
  double start_s = 0.21;     // workers start on the new placement until they can load state
  double disk_save_s = 1;    // training blocked while a disk checkpoint is written
  double disk_restore_s = 1;
  double memory_snapshot_s = 0.1;   // training blocked while state is copied to host memory
  double memory_replicate_s = 0.5;  // then, in the background, until the peer holds the copy
  double memory_restore_s = 0.5;    // a lost host's state fetched from its peer and loaded
  double disk_persist_s = 1;  // memory tier: a snapshot persisted from host memory, durable after
};

// Per-host training state of a Llama 3 405B-like model on 9,216 chips: 405e9 parameters x 16
// bytes (bf16 weights and gradients, fp32 master weights and two Adam moments) / 2,304 hosts.
inline constexpr double kStateBytesPerHost = 405e9 * 16 / 2304;

// This machine (bench/README.md "Pod-scale recovery"): restart from bench/recovery (kill -> next
// step 0.42 s median: schedule 0.11 s, start 0.21 s, the rest restore and one step), detection
// by the host lease (5 s), and save/load/copy rates from bench/recovery/ckpt_cost.py applied to
// kStateBytesPerHost; replication and peer restore over an assumed 100 Gb/s host network.
RecoveryCosts MeasuredCosts();
// Published large-scale figures: disk bandwidth from Llama 3 (2 TB/s sustained for 16,384 GPUs,
// scaled to the job's share), restart at pod scale as stated in docs/elastic.md.
RecoveryCosts PublishedCosts();
// "measured" or "published"; an error naming the known ones otherwise.
Result<RecoveryCosts> CostProfile(const std::string& name);

struct RecoverySimOptions {
  int64_t chips = 9216;
  int chips_per_host = 4;
  int hosts_per_slice = 16;  // an Ironwood cube (4x4x4 chips)
  int spare_slices = 4;
  double days = 30;
  double interruptions_per_chip_day = kLlama3InterruptionsPerChipDay;
  double step_s = 6;
  double repair_hours = 4;
  CheckpointTier tier = CheckpointTier::kDisk;
  RecoveryCosts costs;
  int64_t interval_steps = 0;        // steps between checkpoints of the tier; 0: Young/Daly
  int64_t disk_every_snapshots = 0;  // memory tier: persist every k-th snapshot; 0: Young/Daly
  double peer_loss_share = 0;        // share of interruptions that take the host's peer too
  uint64_t seed = 1;
};
// kInvalidArgument naming the field and what it must be.
Status ValidateRecoverySimOptions(const RecoverySimOptions& options);

// Young/Daly. With exponential failures of mean M, a blocking checkpoint of cost C every tau of
// work and a downtime D per failure (during which failures strike too), the expected share of
// wall time spent on kept work is (Daly 2006, exact for this model)
//   E(tau) = tau / (M e^(D/M) (e^((tau + C)/M) - 1)),
// and its first-order optimum is Young's tau* = sqrt(2 C M), where E ~ 1 - sqrt(2C/M) - D/M.
double YoungDalyInterval(double checkpoint_s, double mtbf_s);
double DalyEfficiency(double interval_s, double checkpoint_s, double downtime_s, double mtbf_s);
struct YoungDalyBound {
  double checkpoint_s = 0;  // C
  double downtime_s = 0;    // D
  double mtbf_s = 0;        // M
  double interval_s = 0;    // sqrt(2 C M)
  double efficiency = 0;    // E(interval_s)
  double first_order = 0;   // 1 - sqrt(2C/M) - D/M
};
YoungDalyBound ComputeYoungDalyBound(double checkpoint_s, double downtime_s, double mtbf_s);

struct RecoverySimResult {
  RecoverySimOptions options;  // as run, with the intervals chosen
  int64_t hosts = 0;
  double mtbf_s = 0;  // of the job: 1 / (rate x chips)
  double wall_s = 0;
  double useful_s = 0;  // kept steps x step_s
  double ettr = 0;      // useful_s / wall_s
  // Where the rest went (seconds; useful + these = wall).
  double lost_s = 0;        // work thrown away by failures
  double checkpoint_s = 0;  // training blocked by checkpoints
  double downtime_s = 0;    // failure -> training again (detect, schedule, start, restore)
  double spare_wait_s = 0;  // of the downtime: waiting for a repaired slice
  int64_t interruptions = 0;
  int64_t correlated = 0;       // interruptions that took the peer too
  int64_t memory_restores = 0;  // recoveries from peers' copies
  int64_t disk_restores = 0;    // recoveries from disk (memory tier: the fallbacks)
  int64_t steps = 0;            // kept at the end
  int64_t steps_lost = 0;
  int64_t checkpoints = 0;       // of the tier
  int64_t disk_checkpoints = 0;  // durable on disk
  YoungDalyBound bound;
  // The head's figures, from the TrainJob's attempts (workload/recovery.h).
  int attempts = 0;
  int head_failures = 0;
  int64_t head_steps_lost = 0;
  double head_mean_time_to_recover_s = 0;
  double head_goodput = 0;
  uint64_t event_hash = 0;
};

// One run. kInvalidArgument for bad options; kInternal if the lifecycle and the engine disagree.
Result<RecoverySimResult> RunRecoverySim(const RecoverySimOptions& options);

}  // namespace tessera::sim
