// The pod-scale recovery simulation (recovery_sim.h): an event loop in milliseconds over one
// TrainJob driven by the head's TrainLifecycle, its effects applied by the head's applier.
#include "sim/recovery_sim.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <queue>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/rng.h"
#include "sim/sim_effects.h"
#include "workload/recovery.h"
#include "workload/train_lifecycle.h"

namespace tessera::sim {

const char* CheckpointTierName(CheckpointTier tier) {
  return tier == CheckpointTier::kDisk ? "disk" : "memory";
}

Result<CheckpointTier> ParseCheckpointTier(const std::string& name) {
  if (name == "disk") return CheckpointTier::kDisk;
  if (name == "memory") return CheckpointTier::kMemory;
  return InvalidArgument("unknown checkpoint tier \"" + name + "\": use disk or memory");
}

namespace {

constexpr double kHostNetworkBytesPerS = 100e9 / 8;  // an assumed 100 Gb/s host network

// bench/recovery/ckpt_cost.py --mb 1024 --runs 3 on this machine (bench/README.md, "Pod-scale
// recovery"): tessera.checkpoint.save_torch (serialize + write + fsync), load_torch (read, CRC,
// deserialize, warm page cache) and a copy into preallocated host memory, medians.
constexpr double kMeasuredSaveBytesPerS = 0.117e9;
constexpr double kMeasuredLoadBytesPerS = 0.391e9;
constexpr double kMeasuredCopyBytesPerS = 3.46e9;

// Llama 3 (arXiv:2407.21783, section 3.3.1): Tectonic sustains 2 TB/s for the 16,384-GPU job.
constexpr double kLlama3DiskBytesPerS = 2e12;

}  // namespace

RecoveryCosts MeasuredCosts() {
  RecoveryCosts c;
  c.name = "measured";
  c.detect_s = 5;  // the head's host lease (bench/recovery host loss: detected after 5.0-5.1 s)
  c.schedule_s = 0.11;
  c.start_s = 0.21;
  c.disk_save_s = kStateBytesPerHost / kMeasuredSaveBytesPerS;
  c.disk_restore_s = kStateBytesPerHost / kMeasuredLoadBytesPerS;
  c.memory_snapshot_s = kStateBytesPerHost / kMeasuredCopyBytesPerS;
  c.memory_replicate_s = kStateBytesPerHost / kHostNetworkBytesPerS;
  c.memory_restore_s = kStateBytesPerHost / kHostNetworkBytesPerS + c.memory_snapshot_s;
  c.disk_persist_s = c.disk_save_s;
  return c;
}

RecoveryCosts PublishedCosts() {
  RecoveryCosts c;
  c.name = "published";
  c.detect_s = 5;
  // Restarting thousands of hosts (processes, runtime and collective init, compilation cache) at
  // pod scale: an assumed minute, not tessera's 0.32 s on 4 workers (docs/elastic.md).
  c.schedule_s = 0.11;
  c.start_s = 60;
  const double job_share = 9216.0 / 16384.0;  // of Llama 3's storage bandwidth
  const double state_bytes = kStateBytesPerHost * 2304;
  c.disk_save_s = state_bytes / (kLlama3DiskBytesPerS * job_share);
  c.disk_restore_s = c.disk_save_s;
  c.memory_snapshot_s = kStateBytesPerHost / 4 / 32e9;  // HBM -> host at an assumed 32 GB/s/chip
  c.memory_replicate_s = kStateBytesPerHost / kHostNetworkBytesPerS;
  c.memory_restore_s = kStateBytesPerHost / kHostNetworkBytesPerS + c.memory_snapshot_s;
  c.disk_persist_s = c.disk_save_s;
  return c;
}

Result<RecoveryCosts> CostProfile(const std::string& name) {
  if (name == "measured") return MeasuredCosts();
  if (name == "published") return PublishedCosts();
  return InvalidArgument("unknown cost profile \"" + name + "\": use measured or published");
}

Status ValidateRecoverySimOptions(const RecoverySimOptions& o) {
  auto bad = [](const std::string& field, const std::string& must) {
    return InvalidArgument(field + " " + must);
  };
  if (o.chips_per_host < 1) return bad("chips_per_host", "must be at least 1");
  if (o.hosts_per_slice < 1) return bad("hosts_per_slice", "must be at least 1");
  const int64_t per_slice = static_cast<int64_t>(o.chips_per_host) * o.hosts_per_slice;
  if (o.chips < per_slice || o.chips % per_slice != 0)
    return bad("chips", "must be a positive multiple of chips_per_host x hosts_per_slice (" +
                            std::to_string(per_slice) + "), got " + std::to_string(o.chips));
  if (o.tier == CheckpointTier::kMemory && o.chips / o.chips_per_host < 2)
    return bad("chips",
               "must give at least 2 hosts for in-memory checkpoints (a host and its peer)");
  if (o.spare_slices < 0) return bad("spare_slices", "must be 0 or more");
  if (!(o.days > 0) || o.days > 3650) return bad("days", "must be in (0, 3650]");
  if (!(o.interruptions_per_chip_day >= 0))
    return bad("interruptions_per_chip_day", "must be 0 or more");
  if (!(o.step_s >= 0.001)) return bad("step_s", "must be at least 0.001");
  if (!(o.repair_hours * 3600 > o.costs.detect_s))
    return bad("repair_hours",
               "must be longer than costs.detect_s (a host is repaired only "
               "after the head noticed its loss)");
  if (o.interval_steps < 0) return bad("interval_steps", "must be 0 (Young/Daly) or more");
  if (o.disk_every_snapshots < 0)
    return bad("disk_every_snapshots", "must be 0 (Young/Daly) or more");
  if (!(o.peer_loss_share >= 0 && o.peer_loss_share <= 1))
    return bad("peer_loss_share", "must be in [0, 1]");
  const RecoveryCosts& c = o.costs;
  const std::pair<const char*, double> costs[] = {{"detect_s", c.detect_s},
                                                  {"schedule_s", c.schedule_s},
                                                  {"start_s", c.start_s},
                                                  {"disk_save_s", c.disk_save_s},
                                                  {"disk_restore_s", c.disk_restore_s},
                                                  {"memory_snapshot_s", c.memory_snapshot_s},
                                                  {"memory_replicate_s", c.memory_replicate_s},
                                                  {"memory_restore_s", c.memory_restore_s},
                                                  {"disk_persist_s", c.disk_persist_s}};
  for (const auto& [field, value] : costs)
    if (!(value >= 0) || value > 86400)
      return bad(std::string("costs.") + field, "must be in [0, 86400] seconds");
  return Status::Ok();
}

double YoungDalyInterval(double checkpoint_s, double mtbf_s) {
  return std::sqrt(2 * checkpoint_s * mtbf_s);
}

double DalyEfficiency(double interval_s, double checkpoint_s, double downtime_s, double mtbf_s) {
  if (!(mtbf_s > 0) || std::isinf(mtbf_s)) return interval_s / (interval_s + checkpoint_s);
  if (!(interval_s > 0)) return 0;
  const double wall =
      mtbf_s * std::exp(downtime_s / mtbf_s) * std::expm1((interval_s + checkpoint_s) / mtbf_s);
  return interval_s / wall;
}

YoungDalyBound ComputeYoungDalyBound(double checkpoint_s, double downtime_s, double mtbf_s) {
  YoungDalyBound b;
  b.checkpoint_s = checkpoint_s;
  b.downtime_s = downtime_s;
  b.mtbf_s = mtbf_s;
  b.interval_s = YoungDalyInterval(checkpoint_s, mtbf_s);
  b.efficiency = DalyEfficiency(b.interval_s, checkpoint_s, downtime_s, mtbf_s);
  b.first_order = 1 - std::sqrt(2 * checkpoint_s / mtbf_s) - downtime_s / mtbf_s;
  return b;
}

namespace {

constexpr int64_t kClockOffsetMs = 1000;  // the lifecycle reads a time of 0 as "unknown"

int64_t Ms(double s) { return std::llround(s * 1000); }

// Exponential with the given mean, in ms (at least 1).
int64_t ExponentialMs(Rng& rng, double mean_s) {
  const double u = 1.0 - rng.UniformDouble();  // (0, 1]
  return std::max<int64_t>(1, std::llround(-std::log(u) * mean_s * 1000));
}

class Engine final : public ClusterView {
 public:
  explicit Engine(const RecoverySimOptions& o) : o_(o), rng_(o.seed) {}

  Result<RecoverySimResult> Run();

  // ClusterView: a host is lost once its lease ran out (its failure was detected).
  bool HostLost(const std::string& host) const override { return lost_.count(host) > 0; }
  int LargestFitWithoutJob(const TrainJob&, int, int hi) const override {
    return FreeSlicesAfterSwap() >= 0 ? hi : 0;
  }

 private:
  // Interruptions are not events: the next one is drawn when the last is applied.
  enum class Ev {
    kDetect,
    kPlace,
    kWorkersUp,
    kResume,
    kFirstStep,
    kCheckpointStart,
    kCheckpointEnd,
    kReplicated,
    kPersisted,
    kRepair,
  };
  struct Event {
    int64_t t;
    uint64_t seq;
    Ev type;
    int64_t arg;
    uint64_t epoch;
    bool operator>(const Event& b) const { return t != b.t ? t > b.t : seq > b.seq; }
  };
  enum class Mode { kComputing, kCheckpointing, kDown };

  void Push(int64_t t, Ev type, int64_t arg = 0) {
    queue_.push(Event{t, seq_++, type, arg, epoch_});
  }
  void Mix(uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      hash_ ^= (v >> (8 * i)) & 0xff;
      hash_ *= 0x100000001b3ull;
    }
  }
  int64_t NowMs() const { return now_ + kClockOffsetMs; }
  std::string HostName(int slice, int worker) const {
    return "s" + std::to_string(slice) + "-h" + std::to_string(worker);
  }
  std::string HostOfPosition(int64_t pos) const {
    return HostName(placement_[pos / o_.hosts_per_slice],
                    static_cast<int>(pos % o_.hosts_per_slice));
  }
  // A host's peer is the same worker of the next slice (the next host with a single slice).
  int64_t Peer(int64_t pos) const { return (pos + peer_offset_) % hosts_; }
  int64_t HolderOf(int64_t pos) const {  // the position whose copy `pos` holds
    return (pos - peer_offset_ + hosts_) % hosts_;
  }
  // Spare slices left after every broken slice of the placement is swapped; < 0: too few.
  int64_t FreeSlicesAfterSwap() const {
    int64_t broken = 0;
    for (int s : placement_) broken += broken_.count(s);
    return static_cast<int64_t>(spares_.size()) - broken;
  }
  int64_t StepAt(int64_t t) const {
    if (mode_ == Mode::kComputing)
      return std::min(target_step_, seg_step_ + (t - seg_start_) / step_ms_);
    if (mode_ == Mode::kCheckpointing) return target_step_;
    return restore_step_;
  }

  void Apply(Effects e);
  void Fail(int64_t pos, bool with_peer);
  void LoseCopies(int64_t pos);
  void Detect(int64_t pos_host_index);
  void Place();
  void WorkersUp();
  void Resume();
  void StartSegment();
  void CheckpointStart();
  void CheckpointEnd();
  void Replicated(int64_t step);
  void Persisted(int64_t step);
  void Repair(int slice);
  void Report(ProgressInput::Type type, int64_t step, double seconds = 0);

  const RecoverySimOptions o_;
  Rng rng_;
  TrainLifecycle train_;
  SimEffectsSink<TrainJob> sink_;  // what the last Apply's steps released
  TrainJob job_;
  int64_t hosts_ = 0;
  int64_t peer_offset_ = 1;
  int64_t step_ms_ = 0;
  double mtbf_s_ = 0;

  std::priority_queue<Event, std::vector<Event>, std::greater<>> queue_;
  uint64_t seq_ = 0;
  uint64_t epoch_ = 0;  // bumped by every failure: training and start-up events go stale
  uint64_t hash_ = 0xcbf29ce484222325ull;
  int64_t now_ = 0;

  // Slices: the job's placement (physical slice ids), spares, broken ones (in repair).
  std::vector<int> placement_;
  std::set<int> spares_;
  std::set<int> broken_;
  std::set<std::string> lost_;            // hosts whose failure the head has noticed
  std::map<std::string, int> down_;       // host -> slice, down until repaired
  std::vector<std::string> detect_host_;  // by detect event arg

  // Training.
  Mode mode_ = Mode::kDown;
  int64_t seg_start_ = 0, seg_step_ = 0;  // computing since, from step
  int64_t target_step_ = 0;               // the step at which the next checkpoint starts
  int64_t interval_steps_ = 1;
  int64_t restore_step_ = 0;  // where the next attempt resumes
  bool restore_from_memory_ = false;
  int64_t down_since_ = -1;  // first failure of the current recovery
  int64_t wait_since_ = -1;  // waiting for a spare slice
  int64_t steps_computed_ = 0;
  double blocked_ms_ = 0;
  int64_t block_start_ = 0;

  // Disk: the newest durable checkpoint.
  int64_t disk_step_ = 0;
  int64_t persist_every_ = 0;  // memory tier: every k-th snapshot is persisted
  int64_t snapshots_since_persist_ = 0;
  bool persisting_ = false;
  // Memory: the newest complete snapshot (copies on every host and its peer) and which copies of
  // it are still alive.
  bool memory_valid_ = false;
  int64_t memory_step_ = 0;
  std::vector<char> own_, peer_;

  RecoverySimResult r_;
  Status error_;
};

void Engine::Report(ProgressInput::Type type, int64_t step, double seconds) {
  ProgressInput p;
  p.type = type;
  p.rank = 0;
  p.step = step;
  p.time_ms = NowMs();
  p.seconds = seconds;
  Apply(train_.Progress(job_, p, *this, NowMs()));
}

void Engine::Apply(Effects e) {
  sink_.Clear();
  auto apply = [&](Effects effects) {
    if (Status s = ApplyEffects(job_, std::move(effects), sink_, NowMs()); !s.ok() && error_.ok())
      error_ = Internal("applying a step: " + s.message());
  };
  apply(std::move(e));
  if (job_.status.stopping) {
    // Every host that is up confirms its workers are gone at once; a down one cannot, and the
    // stop waits for its lease to run out (Detect).
    const std::set<std::string> hosts = job_.runtime.unconfirmed;
    for (const std::string& h : hosts)
      if (!down_.count(h)) apply(train_.ConfirmStopped(job_, h, NowMs()));
  }
  Mix(static_cast<uint64_t>(job_.status.phase));
  if (job_.status.phase == JobPhase::kFailed && error_.ok())
    error_ = Internal("the lifecycle failed the job: " + job_.status.message);
  if (!sink_.released().empty() && job_.status.phase == JobPhase::kPending && !job_.status.stopping)
    Push(now_ + Ms(o_.costs.schedule_s), Ev::kPlace);
}

void Engine::LoseCopies(int64_t pos) {
  own_[pos] = 0;
  peer_[HolderOf(pos)] = 0;
}

void Engine::Fail(int64_t pos, bool with_peer) {
  ++r_.interruptions;
  if (with_peer) ++r_.correlated;
  const bool was_down = mode_ == Mode::kDown;
  if (mode_ == Mode::kCheckpointing) blocked_ms_ += static_cast<double>(now_ - block_start_);
  const int64_t last_step = StepAt(now_);
  if (!was_down) {
    steps_computed_ += last_step - seg_step_;
    down_since_ = now_;
    // The workers' last step before the failure, as they would have reported it.
    if (job_.status.phase == JobPhase::kRunning &&
        last_step > job_.status.attempts.back().last_step)
      Report(ProgressInput::Type::kProgress, last_step);
  }
  mode_ = Mode::kDown;
  ++epoch_;
  persisting_ = false;  // a persist in flight needs every host
  std::vector<int64_t> positions = {pos};
  if (with_peer) positions.push_back(Peer(pos));
  for (int64_t p : positions) {
    const int slice = placement_[p / o_.hosts_per_slice];
    const std::string host = HostOfPosition(p);
    if (down_.count(host)) continue;
    down_[host] = slice;
    if (broken_.insert(slice).second) Push(now_ + Ms(o_.repair_hours * 3600), Ev::kRepair, slice);
    LoseCopies(p);
    detect_host_.push_back(host);
    Push(now_ + Ms(o_.costs.detect_s), Ev::kDetect, static_cast<int64_t>(detect_host_.size()) - 1);
    Mix(0x4641494cull ^ static_cast<uint64_t>(p));
  }
  // Where the next attempt resumes: the newest complete snapshot while every host's state still
  // has a live copy, else the newest durable disk checkpoint.
  if (o_.tier == CheckpointTier::kMemory && memory_valid_) {
    bool complete = true;
    for (int64_t p : positions)
      for (int64_t q : {p, HolderOf(p), Peer(p)})
        if (!own_[q] && !peer_[q]) complete = false;
    if (!complete) memory_valid_ = false;
  }
  restore_from_memory_ = o_.tier == CheckpointTier::kMemory && memory_valid_;
  restore_step_ = restore_from_memory_ ? memory_step_ : disk_step_;
}

void Engine::Detect(int64_t index) {
  const std::string& host = detect_host_[index];
  if (!down_.count(host)) return;  // repaired already (repair shorter than the lease)
  lost_.insert(host);
  Apply(train_.HostLost(job_, host, NowMs() - Ms(o_.costs.detect_s),
                        "host down (simulated interruption)", *this, NowMs()));
}

void Engine::Place() {
  if (job_.status.phase != JobPhase::kPending || job_.status.stopping) return;
  if (FreeSlicesAfterSwap() < 0) {
    if (wait_since_ < 0) wait_since_ = now_;
    return;  // a repair places it
  }
  if (wait_since_ >= 0) {
    r_.spare_wait_s += static_cast<double>(now_ - wait_since_) / 1000;
    wait_since_ = -1;
  }
  for (int& s : placement_)
    if (broken_.count(s)) {
      const int spare = *spares_.begin();
      spares_.erase(spares_.begin());
      s = spare;
    }
  AttemptPlacement ap;
  for (size_t js = 0; js < placement_.size(); ++js) {
    std::vector<std::string> hosts;
    for (int w = 0; w < o_.hosts_per_slice; ++w) hosts.push_back(HostName(placement_[js], w));
    ap.hosts.push_back(std::move(hosts));
    ap.slice_names.push_back("slice-" + std::to_string(js));
  }
  ap.master_port = 1;
  ap.jax_port = 2;
  Apply(train_.Place(job_, ap, NowMs()));
  Mix(0x504c4143ull);  // "PLAC"
  Push(now_ + Ms(o_.costs.start_s), Ev::kWorkersUp);
}

void Engine::WorkersUp() {
  Effects e;
  int64_t pid = 1;
  // Highest rank first: the lifecycle's all-running check then stops at rank 0 until the end.
  for (auto it = job_.status.workers.rbegin(); it != job_.status.workers.rend(); ++it)
    e.Merge(train_.WorkerRunning(job_, it->first, pid++, NowMs()));
  Apply(std::move(e));
  const double restore_s =
      restore_from_memory_ ? o_.costs.memory_restore_s : o_.costs.disk_restore_s;
  Push(now_ + Ms(restore_s), Ev::kResume);
}

void Engine::Resume() {
  const double restore_s =
      restore_from_memory_ ? o_.costs.memory_restore_s : o_.costs.disk_restore_s;
  if (restore_from_memory_)
    ++r_.memory_restores;
  else
    ++r_.disk_restores;
  r_.downtime_s += static_cast<double>(now_ - down_since_) / 1000;
  down_since_ = -1;
  Report(ProgressInput::Type::kRestore, restore_step_, restore_s);
  if (restore_from_memory_) {
    std::fill(own_.begin(), own_.end(), 1);  // the new hosts hold what they restored
  } else {
    memory_valid_ = false;  // nothing in memory until the next snapshot lands
  }
  seg_step_ = restore_step_;
  StartSegment();
  Push(now_ + step_ms_, Ev::kFirstStep);
}

void Engine::StartSegment() {
  mode_ = Mode::kComputing;
  seg_start_ = now_;
  target_step_ = seg_step_ + interval_steps_;
  Push(now_ + interval_steps_ * step_ms_, Ev::kCheckpointStart);
}

void Engine::CheckpointStart() {
  steps_computed_ += target_step_ - seg_step_;
  seg_step_ = target_step_;
  mode_ = Mode::kCheckpointing;
  block_start_ = now_;
  const double c =
      o_.tier == CheckpointTier::kDisk ? o_.costs.disk_save_s : o_.costs.memory_snapshot_s;
  Push(now_ + Ms(c), Ev::kCheckpointEnd);
}

void Engine::CheckpointEnd() {
  blocked_ms_ += static_cast<double>(now_ - block_start_);
  const int64_t step = target_step_;
  Report(ProgressInput::Type::kProgress, step);
  if (o_.tier == CheckpointTier::kDisk) {
    disk_step_ = step;
    ++r_.checkpoints;
    ++r_.disk_checkpoints;
    Report(ProgressInput::Type::kCheckpoint, step, o_.costs.disk_save_s);
  } else if (Ms(o_.costs.memory_replicate_s) == 0) {
    Replicated(step);
  } else {
    Push(now_ + Ms(o_.costs.memory_replicate_s), Ev::kReplicated, step);
  }
  seg_step_ = step;
  StartSegment();
}

void Engine::Replicated(int64_t step) {
  ++r_.checkpoints;
  memory_valid_ = true;
  memory_step_ = step;
  std::fill(own_.begin(), own_.end(), 1);
  std::fill(peer_.begin(), peer_.end(), 1);
  Report(ProgressInput::Type::kCheckpoint, step, o_.costs.memory_snapshot_s);
  if (++snapshots_since_persist_ >= persist_every_ && !persisting_) {
    snapshots_since_persist_ = 0;
    persisting_ = true;
    Push(now_ + Ms(o_.costs.disk_persist_s), Ev::kPersisted, step);
  }
}

void Engine::Persisted(int64_t step) {
  persisting_ = false;
  disk_step_ = step;
  ++r_.disk_checkpoints;
}

void Engine::Repair(int slice) {
  broken_.erase(slice);
  for (auto it = down_.begin(); it != down_.end();)
    if (it->second == slice) {
      lost_.erase(it->first);
      it = down_.erase(it);
    } else {
      ++it;
    }
  if (std::find(placement_.begin(), placement_.end(), slice) == placement_.end())
    spares_.insert(slice);
  if (wait_since_ >= 0) Place();
}

Result<RecoverySimResult> Engine::Run() {
  if (Status st = ValidateRecoverySimOptions(o_); !st.ok()) return st;
  const int64_t slices = o_.chips / (o_.chips_per_host * o_.hosts_per_slice);
  hosts_ = o_.chips / o_.chips_per_host;
  peer_offset_ = slices > 1 ? o_.hosts_per_slice : 1;
  step_ms_ = std::max<int64_t>(1, Ms(o_.step_s));
  const double rate_per_s = o_.interruptions_per_chip_day * static_cast<double>(o_.chips) / 86400;
  mtbf_s_ = rate_per_s > 0 ? 1 / rate_per_s : std::numeric_limits<double>::infinity();
  own_.assign(hosts_, 1);
  peer_.assign(hosts_, 1);
  for (int s = 0; s < slices; ++s) placement_.push_back(s);
  for (int s = 0; s < o_.spare_slices; ++s) spares_.insert(static_cast<int>(slices) + s);

  // Intervals: Young/Daly unless given, in whole steps.
  auto steps_for = [&](double interval_s) {
    if (std::isinf(interval_s) || interval_s > 1e12) return int64_t{1} << 40;
    return std::max<int64_t>(1, std::llround(interval_s / o_.step_s));
  };
  const RecoveryCosts& c = o_.costs;
  const double tier_c = o_.tier == CheckpointTier::kDisk ? c.disk_save_s : c.memory_snapshot_s;
  interval_steps_ =
      o_.interval_steps > 0 ? o_.interval_steps : steps_for(YoungDalyInterval(tier_c, mtbf_s_));
  persist_every_ = o_.disk_every_snapshots > 0
                       ? o_.disk_every_snapshots
                       : std::max<int64_t>(1, steps_for(YoungDalyInterval(c.disk_save_s, mtbf_s_)) /
                                                  interval_steps_);
  r_.options = o_;
  r_.options.interval_steps = interval_steps_;
  r_.options.disk_every_snapshots = o_.tier == CheckpointTier::kMemory ? persist_every_ : 0;
  r_.hosts = hosts_;
  r_.mtbf_s = mtbf_s_;
  const double restore_s = o_.tier == CheckpointTier::kDisk ? c.disk_restore_s : c.memory_restore_s;
  r_.bound =
      ComputeYoungDalyBound(tier_c, c.detect_s + c.schedule_s + c.start_s + restore_s, mtbf_s_);

  TrainJobSpec spec;
  spec.name = "pod-job";
  spec.accelerator = Generation::k7x;
  spec.topology = Shape{4, 4, 4};
  spec.min_slices = spec.max_slices = static_cast<int>(slices);
  spec.max_failures = -1;
  spec.on_host_loss = HostLossPolicy::kPause;
  spec.command = {"train"};
  job_ = TrainLifecycle::Create(spec, "{}", 1, NowMs());

  const int64_t horizon = Ms(o_.days * 86400);
  // The first start pays no restart cost: training begins at 0 from step 0.
  Place();
  {
    Effects e;
    int64_t pid = 1;
    for (auto it = job_.status.workers.rbegin(); it != job_.status.workers.rend(); ++it)
      e.Merge(train_.WorkerRunning(job_, it->first, pid++, NowMs()));
    Apply(std::move(e));
  }
  ++epoch_;  // drop the start-up events Place scheduled
  seg_step_ = 0;
  StartSegment();
  Push(step_ms_, Ev::kFirstStep);
  int64_t next_failure = mtbf_s_ < std::numeric_limits<double>::infinity()
                             ? ExponentialMs(rng_, mtbf_s_)
                             : std::numeric_limits<int64_t>::max();

  while (error_.ok()) {
    const bool failure_next = queue_.empty() || next_failure < queue_.top().t;
    const int64_t t = failure_next ? next_failure : queue_.top().t;
    if (t >= horizon) break;
    now_ = t;
    if (failure_next) {
      const int64_t pos = static_cast<int64_t>(rng_.Uniform(static_cast<uint64_t>(hosts_)));
      const bool with_peer = o_.peer_loss_share > 0 && rng_.UniformDouble() < o_.peer_loss_share;
      next_failure = now_ + ExponentialMs(rng_, mtbf_s_);
      Fail(pos, with_peer);
      continue;
    }
    const Event ev = queue_.top();
    queue_.pop();
    const bool stale = ev.epoch != epoch_;
    switch (ev.type) {
      case Ev::kDetect:
        Detect(ev.arg);
        break;
      case Ev::kPlace:
        Place();
        break;
      case Ev::kRepair:
        Repair(static_cast<int>(ev.arg));
        break;
      case Ev::kWorkersUp:
        if (!stale) WorkersUp();
        break;
      case Ev::kResume:
        if (!stale) Resume();
        break;
      case Ev::kFirstStep:
        if (!stale && mode_ == Mode::kComputing)
          Report(ProgressInput::Type::kProgress, seg_step_ + 1);
        break;
      case Ev::kCheckpointStart:
        if (!stale) CheckpointStart();
        break;
      case Ev::kCheckpointEnd:
        if (!stale) CheckpointEnd();
        break;
      case Ev::kReplicated:
        if (!stale) Replicated(ev.arg);
        break;
      case Ev::kPersisted:
        if (!stale) Persisted(ev.arg);
        break;
    }
    if (!stale) {
      Mix(static_cast<uint64_t>(ev.type));
      Mix(static_cast<uint64_t>(ev.t));
    }
  }
  if (!error_.ok()) return error_;

  // Close the books at the horizon.
  now_ = horizon;
  if (mode_ == Mode::kCheckpointing) blocked_ms_ += static_cast<double>(now_ - block_start_);
  if (mode_ == Mode::kDown) r_.downtime_s += static_cast<double>(now_ - down_since_) / 1000;
  if (wait_since_ >= 0) r_.spare_wait_s += static_cast<double>(now_ - wait_since_) / 1000;
  const int64_t final_step = StepAt(now_);
  if (mode_ == Mode::kComputing) steps_computed_ += final_step - seg_step_;
  r_.steps = final_step;
  r_.steps_lost = steps_computed_ - final_step;
  r_.wall_s = static_cast<double>(horizon) / 1000;
  r_.useful_s = static_cast<double>(final_step) * static_cast<double>(step_ms_) / 1000;
  r_.ettr = r_.useful_s / r_.wall_s;
  r_.checkpoint_s = blocked_ms_ / 1000;
  r_.lost_s = r_.wall_s - r_.useful_s - r_.checkpoint_s - r_.downtime_s;

  if (job_.status.phase == JobPhase::kRunning && final_step > job_.status.attempts.back().last_step)
    Report(ProgressInput::Type::kProgress, final_step);
  const JobRecovery head = SummarizeRecovery(job_.status.attempts, NowMs());
  r_.attempts = static_cast<int>(job_.status.attempts.size());
  r_.head_failures = job_.status.failures;
  r_.head_steps_lost = head.steps_lost;
  r_.head_mean_time_to_recover_s = head.mean_time_to_recover_ms >= 0
                                       ? static_cast<double>(head.mean_time_to_recover_ms) / 1000
                                       : 0;
  r_.head_goodput = head.goodput;
  Mix(static_cast<uint64_t>(final_step));
  r_.event_hash = hash_;
  return r_;
}

}  // namespace

Result<RecoverySimResult> RunRecoverySim(const RecoverySimOptions& options) {
  Engine engine(options);
  return engine.Run();
}

}  // namespace tessera::sim
