// The state and steps of one GPU domain simulation run (gpu_sim.h), shared by its source
// files: gpu_sim.cc (the event loop, the queue's pass, starting jobs, the entry points),
// gpu_sim_holds.cc (holds, backfill on held hosts, moves off hosts, reclaiming held hosts) and
// gpu_sim_las.cc (least attained service: levels and preemption). Internal to tessera_sim.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <queue>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "sim/gpu_sim.h"

namespace tessera::sim::gpu_sim_internal {

struct GpuSimJob {
  int gpus = 1;
  int64_t submit_s = 0;
  int64_t duration_s = 1;
  // Its time limit as the scheduler knows it: the trace's expected duration, else
  // GpuSimOptions::default_estimate_s (kLimit; kTrue: duration_s, an oracle).
  int64_t limit_s = 1;
  bool stated = false;  // the trace gave an expected duration (kHistory uses it when given)
  GpuRequest request;
  bool whole_host = false;
  // Run state.
  int64_t start_s = -1;
  int64_t end_s = -1;
  int64_t moved_s = 0;        // restart costs added by moves (this run)
  int64_t run_start_s = -1;   // start of its current run (a preempted job restarts)
  int64_t ran_before_s = 0;   // run before it was preempted
  int64_t preempted_at = -1;  // when it was preempted and requeued (-1: not waiting to restart)
  int64_t left_s = 0;         // its run time left when preempted
  int64_t lost_s = 0;         // waited after its first start: requeued, and restart costs
  bool preempted = false;     // stopped at least once (preempt: each job at most once)
  int loan_of = -1;           // started on hosts held for this job, ...
  int64_t loan_until_s = 0;   // ... to end by this time (the hold's then)
  int reclaimed_for = -1;     // ran past such a time once: never backfilled on its hosts again
  int version = 0;            // bumped when a move changes end_s; stale finish events are skipped
  GpuPlacement placement;
};

inline uint64_t GpuSimMix(uint64_t h, uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  return h;
}

// A reservation: `hosts` are all free by `until_s` (every job on them ends by then), and only a
// job that ends by then may start on them, besides the one they are held for.
struct GpuHold {
  int job = -1;
  int64_t until_s = 0;
  std::vector<int> hosts;
};

// Why a waiting job waits, from one pass to the next (GpuWaitCause).
enum GpuWaitState { kWaitHeld, kWaitYielding, kWaitSlotTaken, kWaitUnheld, kWaitStates };
constexpr const char* kGpuWaitStateNames[kWaitStates] = {"held", "yielding", "slot taken",
                                                         "unheld"};

class GpuSimRun {
 public:
  GpuSimRun(const GpuSimOptions& o, std::vector<GpuSimJob> jobs)
      : o_(o),
        jobs_(std::move(jobs)),
        fleet_(GpuFleet::Make(o.system, o.domains)),
        held_by_(fleet_.hosts.size()),
        hold_of_host_(fleet_.hosts.size(), -1),
        wait_state_(jobs_.size(), -1),
        wait_fragmented_(jobs_.size(), false),
        wait_s_(jobs_.size()) {}

  GpuSimResult Run();
  // Empty, or what broke the simulator's own accounting (a bug, never input).
  const std::string& broken() const { return broken_; }

 private:
  using Finish = std::tuple<int64_t, int, int>;  // end, job, version
  struct RunningLevel {  // a running job, its level and the run time it has had
    int job;
    int level;
    int64_t ran;
  };
  // Plans that failed this pass: (gpus, rule, segment, held hosts avoided as a bit per hold).
  using FailedPlans = std::set<std::tuple<int, int, int, uint64_t>>;

  int64_t RunTime(const GpuSimJob& job, const GpuPlacement& p) const;
  // Its run time as the scheduler estimates it once it has run `elapsed` s (GpuEstimate), slowed
  // down when it spans.
  int64_t LimitTime(const GpuSimJob& job, const GpuPlacement& p, int64_t elapsed = 0) const;
  // When a running job is expected to end (never before `now`).
  int64_t ExpectedEnd(const GpuSimJob& job, int64_t now) const;
  void Start(int j, const GpuPlacement& p, int64_t now);
  void Schedule(int64_t now);
  bool Holdable(const GpuSimJob& job) const;
  // The p95 wait of the jobs started so far (0 before the first).
  int64_t TailWait() const;
  int HoldOf(int j) const;
  void HoldsChanged();
  // Hosts of the holds in `mask` (bit i: holds_[i]).
  std::vector<bool> HeldHosts(uint64_t mask) const;
  // Hosts held for jobs other than holds_[own]'s (own -1: every held host).
  std::vector<bool> HeldForOthers(int own) const;
  // Job j's plan off every other job's held hosts, else on those whose hold it ends before.
  GpuPlacement TryPlace(int j, int64_t now, int own, FailedPlans& failed);
  // Gives waiting job j (holding holds_[own], or -1) a reservation, or moves small jobs away
  // so that it starts now. True when it started.
  bool Hold(int j, int64_t now, int own);
  std::optional<GpuHold> ChooseDrain(int j, int64_t now, const std::vector<bool>& excluded) const;
  // The hosts job would get if their small jobs left them (the fewest GPUs in use first, in
  // groups its rule allows), or none if too few; preempting: none running a job preempted
  // before.
  std::vector<int> ChooseMovable(const GpuSimJob& job, int64_t now,
                                 const std::vector<bool>& excluded, bool preempting = false) const;
  // Stops running job j (checkpointed, its GPUs freed) and requeues it after this pass.
  void Preempt(int j, int64_t now);
  // The run time a job has had by `now` (what it ran before a preemption, and since).
  int64_t Ran(const GpuSimJob& job, int64_t now) const;
  // las_levels_s: how many levels job j has run past by `now` (0 once promoted).
  int Level(int j, int64_t now) const;
  // las_levels_s: when a preempted job goes back to level 0 (las_starve_limit).
  int64_t PromotedAt(const GpuSimJob& job) const;
  // Job j holds holds_[own]: preempts the jobs started on its hosts to end by a time now past
  // (backfilled) that still run there, and starts it if it then fits. True when it started.
  bool Reclaim(int j, int64_t now, int own);
  // las_levels_s: starts waiting job j by preempting running jobs of a higher level, off
  // other jobs' held hosts. True when it started.
  bool PreemptLongerRun(int j, int64_t now, int own);
  // las: the running jobs at `now` (computed again only after a change).
  const std::vector<RunningLevel>& RunningLevels(int64_t now);
  // Job j's plan on `hosts` alone (ones just emptied or cleared for it).
  GpuPlacement PlanOn(int j, const std::vector<int>& hosts) const;
  // Starts job j on `hosts`, which were `made` ("cleared", "emptied") for it. False, and the
  // run broken, when it does not fit them: the simulator lost count of their GPUs.
  bool StartOn(int j, const std::vector<int>& hosts, int64_t now, const char* made);
  // Moves every job off `hosts` (onto hosts neither in `hosts` nor `excluded`), or none.
  bool MoveOff(const std::vector<int>& hosts, const std::vector<bool>& excluded);
  // Records why each job still waiting after the pass at `now` waits (until the next pass).
  void NoteWaits(int64_t now);
  std::vector<GpuWaitCause> DomainTailWaits(int64_t p95_s) const;

  const GpuSimOptions& o_;
  std::vector<GpuSimJob> jobs_;
  GpuFleet fleet_;
  std::vector<std::set<int>> held_by_;  // per host: running jobs on it
  // las: the running jobs with their level and run time had at running_at_, until a job
  // starts, ends, moves or is preempted (RunningLevels).
  std::vector<RunningLevel> running_;
  int64_t running_at_ = -1;
  bool running_changed_ = true;
  std::deque<int> queue_;  // waiting jobs, submission order
  std::priority_queue<Finish, std::vector<Finish>, std::greater<>> finishes_;
  // Times a pass is due besides submissions and ends: a running job reaches its next level
  // (las_levels_s: the jobs it now yields to may preempt it), a preempted job is promoted,
  // a restarted job's exemption ends (preempt_exempt_s), a backfilled job's promise to a hold
  // runs out (reclaim).
  std::priority_queue<int64_t, std::vector<int64_t>, std::greater<>> wakeups_;
  std::vector<GpuHold> holds_;     // tessera: oldest held job first
  std::vector<int> hold_of_host_;  // index into holds_, or -1
  GpuSimResult r_;
  // Per job: its state since the last pass (-1: none yet), whether some domain then had its
  // GPUs free, and the seconds spent in each (state, fragmented) pair.
  std::vector<int> wait_state_;
  std::vector<bool> wait_fragmented_;
  std::vector<std::array<int64_t, 2 * kWaitStates>> wait_s_;
  int64_t last_pass_s_ = 0;
  std::vector<int64_t> started_waits_;  // waits of the jobs started so far, ascending
  std::vector<int> requeued_;           // preempted this pass, back in the queue after it
  bool preempting_off_ = false;         // the pass that restarts them preempts nothing
  std::vector<int64_t> finished_runs_;  // run times of the finished jobs, ascending (kHistory)
  double held_gpu_s_ = 0;
  std::string broken_;
};

}  // namespace tessera::sim::gpu_sim_internal
