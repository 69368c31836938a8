#include "sim/gpu_sim.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <queue>
#include <set>
#include <sstream>
#include <tuple>

namespace tessera::sim {
namespace {

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
  bool preempted = false;     // at most once per job
  int loan_of = -1;           // started on hosts held for this job, ...
  int64_t loan_until_s = 0;   // ... to end by this time (the hold's then)
  int reclaimed_for = -1;     // ran past such a time once: never backfilled on its hosts again
  int version = 0;            // bumped when a move changes end_s; stale finish events are skipped
  GpuPlacement placement;
};

uint64_t GpuSimMix(uint64_t h, uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  return h;
}

double GpuSimPercentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

// The GPUs a job of the trace asks for.
int GpusOf(const JobSpec& spec) {
  return std::max(1, spec.accelerators * std::max(1, spec.num_slices));
}

GpuClassStats GpuSimStats(std::string name, std::string sizes, const std::vector<double>& waits) {
  GpuClassStats s;
  s.name = std::move(name);
  s.sizes = std::move(sizes);
  s.jobs = static_cast<int64_t>(waits.size());
  s.p50_wait_h = GpuSimPercentile(waits, 0.5) / 3600;
  s.p95_wait_h = GpuSimPercentile(waits, 0.95) / 3600;
  double sum = 0;
  for (double w : waits) sum += w;
  s.mean_wait_h = waits.empty() ? 0 : sum / static_cast<double>(waits.size()) / 3600;
  return s;
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
  // Job j's plan off every other job's held hosts, else on those whose hold it ends before.
  GpuPlacement TryPlace(int j, int64_t now, int own, FailedPlans& failed);
  // Gives waiting job j (holding holds_[own], or -1) a reservation, or moves small jobs away
  // so that it starts now. True when it started.
  bool Hold(int j, int64_t now, int own);
  std::optional<GpuHold> ChooseDrain(int j, int64_t now, const std::vector<bool>& excluded) const;
  // preempting: also none that was preempted before.
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
  // a backfilled job's promise to a hold runs out (reclaim).
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
  std::vector<int64_t> started_waits_;
  std::vector<int> requeued_;           // preempted this pass, back in the queue after it
  bool preempting_off_ = false;         // the pass that restarts them preempts nothing
  std::vector<int64_t> finished_runs_;  // run times of the finished jobs, ascending (kHistory)  //
                                        // waits of the jobs started so far, ascending
  double held_gpu_s_ = 0;
  std::string broken_;
};

int64_t GpuSimRun::RunTime(const GpuSimJob& job, const GpuPlacement& p) const {
  const double factor = p.spans() ? o_.span_slowdown : 1.0;
  return std::max<int64_t>(1, static_cast<int64_t>(std::llround(job.duration_s * factor)));
}

int64_t GpuSimRun::LimitTime(const GpuSimJob& job, const GpuPlacement& p, int64_t elapsed) const {
  const double factor = p.spans() ? o_.span_slowdown : 1.0;
  int64_t estimate = job.limit_s;
  if (o_.estimates == GpuEstimate::kHistory && !job.stated && !finished_runs_.empty()) {
    // The median of the finished jobs' run times that are at least as long as this one has
    // run; past all of them, as long again as it has run.
    const double ran = static_cast<double>(elapsed) / factor;
    const auto from = std::lower_bound(finished_runs_.begin(), finished_runs_.end(),
                                       static_cast<int64_t>(std::llround(ran)));
    const auto n = finished_runs_.end() - from;
    estimate = n > 0 ? *(from + (n - 1) / 2) : 2 * static_cast<int64_t>(std::llround(ran));
  }
  return std::max<int64_t>(1, static_cast<int64_t>(std::llround(estimate * factor)));
}

int64_t GpuSimRun::ExpectedEnd(const GpuSimJob& job, int64_t now) const {
  // A job past its estimate is expected to end now (kLimit: its limit is all the scheduler
  // knows; kHistory never estimates before the time already run).
  const int64_t ran = Ran(job, now);
  // A restarted job is expected to run what its estimate leaves after what it ran before.
  return std::max(
      now, job.run_start_s + job.moved_s + LimitTime(job, job.placement, ran) - job.ran_before_s);
}

void GpuSimRun::Start(int j, const GpuPlacement& p, int64_t now) {
  GpuSimJob& job = jobs_[j];
  if (job.start_s >= 0 && job.preempted_at < 0) {
    broken_ = "job " + std::to_string(j) + " started twice";
    return;
  }
  // The plan came from this fleet a moment ago: applying it cannot fail unless the simulator
  // lost count of its GPUs, which the run reports as an internal error.
  if (Status s = ApplyGpuPlacement(fleet_, p); !s.ok()) {
    broken_ = "job " + std::to_string(j) + ": " + s.message();
    return;
  }
  job.placement = p;
  job.run_start_s = now;
  job.loan_of = -1;
  for (int h : p.hosts) {
    const int i = hold_of_host_[h];
    if (i >= 0 && holds_[i].job != j && (job.loan_of < 0 || holds_[i].until_s < job.loan_until_s)) {
      job.loan_of = holds_[i].job;
      job.loan_until_s = holds_[i].until_s;
    }
  }
  if (job.loan_of >= 0 && o_.reclaim && o_.policy == GpuPolicy::kTessera) {
    wakeups_.push(job.loan_until_s);
  }
  job.moved_s = 0;
  if (job.preempted_at >= 0) {
    // A restart: the rest of its run, after the restart cost (restoring its checkpoint).
    job.lost_s += now - job.preempted_at + o_.migrate_s;
    job.moved_s = o_.migrate_s;
    job.end_s = now + job.left_s + o_.migrate_s;
    job.preempted_at = -1;
  } else {
    job.start_s = now;
    job.end_s = now + RunTime(job, p);
    r_.start_s[j] = now;
    started_waits_.insert(
        std::upper_bound(started_waits_.begin(), started_waits_.end(), now - job.submit_s),
        now - job.submit_s);
    if (r_.reserved_s[j] >= 0 && now > r_.reserved_s[j]) ++r_.late_holds;
  }
  for (int h : p.hosts) held_by_[h].insert(j);
  running_changed_ = true;
  finishes_.emplace(job.end_s, j, job.version);
  for (int64_t level : o_.las_levels_s) {
    if (level > job.ran_before_s) {
      const int64_t at = now + job.moved_s + (level - job.ran_before_s);
      if (at < job.end_s) wakeups_.push(at);
      break;
    }
  }
  if (p.spans()) ++r_.spanned;
  held_gpu_s_ += static_cast<double>(p.gpus_per_host) * static_cast<double>(p.hosts.size()) *
                 static_cast<double>(job.end_s - now);
  r_.hash = GpuSimMix(r_.hash, static_cast<uint64_t>(j));
  r_.hash = GpuSimMix(r_.hash, static_cast<uint64_t>(now));
  for (int h : p.hosts) r_.hash = GpuSimMix(r_.hash, static_cast<uint64_t>(h));
}

bool GpuSimRun::Holdable(const GpuSimJob& job) const {
  const int gpd = Info(o_.system).gpus_per_domain();
  switch (o_.hold_for) {
    case GpuHoldFor::kWholeHost:
      return job.whole_host;
    case GpuHoldFor::kLarge:
      return job.gpus > gpd / 2;
    case GpuHoldFor::kDomainClass:
      return job.gpus > gpd / 2 && job.gpus <= gpd;
  }
  return false;
}

int64_t GpuSimRun::TailWait() const {
  if (started_waits_.empty()) return 0;
  const size_t n = started_waits_.size();
  const size_t rank = static_cast<size_t>(std::ceil(0.95 * static_cast<double>(n)));
  return started_waits_[std::min(n - 1, rank == 0 ? 0 : rank - 1)];
}

int GpuSimRun::HoldOf(int j) const {
  for (size_t i = 0; i < holds_.size(); ++i) {
    if (holds_[i].job == j) return static_cast<int>(i);
  }
  return -1;
}

void GpuSimRun::HoldsChanged() {
  std::fill(hold_of_host_.begin(), hold_of_host_.end(), -1);
  for (size_t i = 0; i < holds_.size(); ++i) {
    for (int h : holds_[i].hosts) hold_of_host_[h] = static_cast<int>(i);
  }
}

std::vector<bool> GpuSimRun::HeldHosts(uint64_t mask) const {
  std::vector<bool> avoid(fleet_.hosts.size(), false);
  for (size_t i = 0; i < holds_.size(); ++i) {
    if ((mask >> i) & 1) {
      for (int h : holds_[i].hosts) avoid[h] = true;
    }
  }
  return avoid;
}

GpuPlacement GpuSimRun::TryPlace(int j, int64_t now, int own, FailedPlans& failed) {
  const GpuSimJob& job = jobs_[j];
  static const std::vector<bool> kNone;
  // Every other hold avoided; then only those the job cannot end before (its shortest run).
  uint64_t all = 0, late = 0;
  for (size_t i = 0; i < holds_.size(); ++i) {
    if (static_cast<int>(i) == own) continue;
    all |= uint64_t{1} << i;
    // A job that broke its promise to a hold (reclaim) is not backfilled on its hosts again.
    if (now + LimitTime(job, GpuPlacement{}) > holds_[i].until_s ||
        holds_[i].job == job.reclaimed_for) {
      late |= uint64_t{1} << i;
    }
  }
  GpuPlacement none;
  for (const uint64_t mask : {all, late}) {
    const auto key = std::make_tuple(job.gpus, static_cast<int>(job.request.rule.rule),
                                     job.request.rule.segment_hosts, mask);
    if (failed.count(key)) continue;
    GpuPlacement p = PlanGpu(fleet_, job.request, o_.policy, mask == 0 ? kNone : HeldHosts(mask));
    if (!p.placed) {
      failed.insert(key);
      continue;
    }
    // On another job's held hosts, it must end by their time as placed (a span runs longer).
    bool in_time = true, on_held = false;
    for (int h : p.hosts) {
      const int i = hold_of_host_[h];
      if (i < 0 || i == own) continue;
      on_held = true;
      in_time = in_time && now + LimitTime(job, p) <= holds_[i].until_s;
    }
    if (!in_time) continue;
    if (on_held) ++r_.backfilled;
    return p;
  }
  return none;
}

void GpuSimRun::Schedule(int64_t now) {
  // A failure stays a failure for the rest of a pass while the holds stay (starts only take
  // GPUs), so each (size, rule, holds avoided) is planned at most once until something fits.
  FailedPlans failed;
  // Likewise each (size, rule, level, run time had, own hold) that found no room by preempting
  // (las): only a change of holds, a move, or a job started at a level above 0 (one more to
  // preempt) can make room there.
  std::set<std::tuple<int, int, int, int, int64_t, int>> no_room;
  const bool holding = (o_.policy == GpuPolicy::kTessera || o_.baseline_holds) && o_.holds > 0;
  // Per size of the jobs passed over (waiting, older than the one at hand): the most
  // GPU-seconds one of them has waited. A hold takes hosts those jobs could start on.
  std::map<int, int64_t> most_waited;
  std::map<int, int64_t> longest_wait;  // per size passed over: the longest wait (seconds)
  for (int j : queue_) {
    if (wait_state_[j] >= 0) {
      wait_s_[j][2 * wait_state_[j] + (wait_fragmented_[j] ? 1 : 0)] += now - last_pass_s_;
    }
  }
  const bool las = o_.policy == GpuPolicy::kTessera && !o_.las_levels_s.empty();
  if (las) {  // by level, then in submission order (the queue's order)
    std::vector<std::pair<int, int>> by_level;  // (level, job): each level computed once
    by_level.reserve(queue_.size());
    for (int j : queue_) by_level.emplace_back(Level(j, now), j);
    std::stable_sort(by_level.begin(), by_level.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t i = 0; i < by_level.size(); ++i) queue_[i] = by_level[i].second;
  }
  for (auto it = queue_.begin(); it != queue_.end();) {
    const int j = *it;
    const int own = HoldOf(j);
    wait_state_[j] = kWaitUnheld;
    GpuPlacement p = TryPlace(j, now, own, failed);
    if (!p.placed && las && !preempting_off_) {
      const auto key = std::make_tuple(jobs_[j].gpus, static_cast<int>(jobs_[j].request.rule.rule),
                                       jobs_[j].request.rule.segment_hosts, Level(j, now),
                                       Ran(jobs_[j], now), own);
      if (!no_room.count(key) && PreemptLongerRun(j, now, own)) {
        if (own >= 0) {
          holds_.erase(holds_.begin() + own);
          HoldsChanged();
        }
        failed.clear();
        no_room.clear();
        it = queue_.erase(it);
        continue;
      }
      no_room.insert(key);
    }
    if (p.placed) {
      Start(j, p, now);
      if (own >= 0) {
        holds_.erase(holds_.begin() + own);
        HoldsChanged();
        failed.clear();
        no_room.clear();
      }
      if (las && Level(j, now) > 0) no_room.clear();
      it = queue_.erase(it);
      continue;
    }
    const int64_t area = (now - jobs_[j].submit_s) * jobs_[j].gpus;
    bool jumps = false;  // a hold now would go before an older, smaller job that has a claim
    for (auto w = most_waited.begin(); w != most_waited.end() && w->first < jobs_[j].gpus; ++w) {
      jumps = jumps || o_.hold_when == GpuHoldWhen::kFifo ||
              (o_.hold_when == GpuHoldWhen::kGpuWait && w->second > area);
    }
    if (o_.hold_when == GpuHoldWhen::kTail) {
      const int64_t tail = TailWait();
      for (auto w = longest_wait.begin(); w != longest_wait.end() && w->first < jobs_[j].gpus;
           ++w) {
        jumps = jumps || w->second >= tail;
      }
    }
    if (holding && Holdable(jobs_[j])) {
      wait_state_[j] = jumps                                                      ? kWaitYielding
                       : (own < 0 && static_cast<int>(holds_.size()) >= o_.holds) ? kWaitSlotTaken
                                                                                  : kWaitUnheld;
    }
    if (holding && !jumps &&
        (own >= 0 || (Holdable(jobs_[j]) && static_cast<int>(holds_.size()) < o_.holds))) {
      const bool started = Hold(j, now, own);
      failed.clear();  // the holds changed, or jobs moved
      no_room.clear();
      if (started) {
        it = queue_.erase(it);
        continue;
      }
    }
    int64_t& most = most_waited[jobs_[j].gpus];
    most = std::max(most, area);
    int64_t& longest = longest_wait[jobs_[j].gpus];
    longest = std::max(longest, now - jobs_[j].submit_s);
    ++it;
  }
  if (las) std::sort(queue_.begin(), queue_.end());  // submission order again
  if (!requeued_.empty()) {
    // Back in submission order (older than most waiting jobs); one more pass may restart them.
    for (int v : requeued_) queue_.insert(std::lower_bound(queue_.begin(), queue_.end(), v), v);
    requeued_.clear();
    preempting_off_ = true;
    last_pass_s_ = now;  // this pass's waits are counted
    Schedule(now);
    preempting_off_ = false;
    return;
  }
  NoteWaits(now);
}

void GpuSimRun::NoteWaits(int64_t now) {
  last_pass_s_ = now;
  // GPUs free in the fleet (moves can gather them on whole hosts of one domain).
  int free_all = 0;
  for (const GpuHostState& h : fleet_.hosts) {
    if (h.usable) free_all += h.free_gpus;
  }
  for (int j : queue_) {
    if (HoldOf(j) >= 0) wait_state_[j] = kWaitHeld;
    wait_fragmented_[j] = free_all >= jobs_[j].gpus;
  }
}

std::vector<GpuWaitCause> GpuSimRun::DomainTailWaits(int64_t p95_s) const {
  const int gpd = Info(o_.system).gpus_per_domain();
  std::array<int64_t, 2 * kWaitStates> sum{};
  int64_t n = 0;
  for (size_t j = 0; j < jobs_.size(); ++j) {
    const GpuSimJob& job = jobs_[j];
    if (job.start_s < 0 || job.gpus <= gpd / 2 || job.gpus > gpd) continue;
    if (job.start_s - job.submit_s + job.lost_s < p95_s) continue;
    ++n;
    for (size_t k = 0; k < sum.size(); ++k) sum[k] += wait_s_[j][k];
  }
  std::vector<GpuWaitCause> out;
  for (int s = 0; s < kWaitStates; ++s) {
    GpuWaitCause c;
    c.state = kGpuWaitStateNames[s];
    if (n > 0) {
      const double per = 3600.0 * static_cast<double>(n);
      c.mean_h = static_cast<double>(sum[2 * s] + sum[2 * s + 1]) / per;
      c.fragmented_h = static_cast<double>(sum[2 * s + 1]) / per;
    }
    out.push_back(c);
  }
  return out;
}

std::optional<GpuHold> GpuSimRun::ChooseDrain(int j, int64_t now,
                                              const std::vector<bool>& excluded) const {
  // The hosts the job can have soonest: per host, when its last job ends. Groups as the rule
  // asks (the whole job in one domain when required, else segments, else hosts), the groups
  // that drain soonest first; fewest GPUs in use breaks ties.
  const GpuSimJob& job = jobs_[j];
  const int g = fleet_.gpus_per_host();
  const int n = (job.gpus + g - 1) / g;
  const DomainRuleSpec& rule = job.request.rule;
  const int unit = rule.rule == DomainRule::kSegment ? rule.segment_hosts : 1;
  std::vector<std::vector<std::tuple<int64_t, int, int>>> per_domain(fleet_.domains);
  for (int h = 0; h < static_cast<int>(fleet_.hosts.size()); ++h) {
    const GpuHostState& s = fleet_.hosts[h];
    if (!s.usable || excluded[h]) continue;
    if (rule.rule != DomainRule::kPreferred && !s.nvlink_ready) continue;
    int64_t free_at = now;
    for (int other : held_by_[h]) free_at = std::max(free_at, ExpectedEnd(jobs_[other], now));
    per_domain[s.domain].emplace_back(free_at, g - s.free_gpus, h);
  }
  for (auto& d : per_domain) std::sort(d.begin(), d.end());
  struct Group {
    int64_t free_at = 0;
    int used = 0;
    std::vector<int> hosts;
  };
  std::vector<Group> groups;
  const int group = rule.rule == DomainRule::kRequired ? n : unit;
  for (const auto& d : per_domain) {
    for (size_t s = 0; s + group <= d.size(); s += group) {
      Group gr;
      for (size_t i = s; i < s + group; ++i) {
        gr.free_at = std::max(gr.free_at, std::get<0>(d[i]));
        gr.used += std::get<1>(d[i]);
        gr.hosts.push_back(std::get<2>(d[i]));
      }
      groups.push_back(std::move(gr));
      if (rule.rule == DomainRule::kRequired) break;  // one group per domain
    }
  }
  std::stable_sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) {
    return a.free_at != b.free_at ? a.free_at < b.free_at : a.used < b.used;
  });
  GpuHold hold;
  hold.job = j;
  hold.until_s = now;
  for (const Group& gr : groups) {
    if (static_cast<int>(hold.hosts.size()) >= n) break;
    hold.hosts.insert(hold.hosts.end(), gr.hosts.begin(), gr.hosts.end());
    hold.until_s = std::max(hold.until_s, gr.free_at);
  }
  if (static_cast<int>(hold.hosts.size()) < n) return std::nullopt;
  std::sort(hold.hosts.begin(), hold.hosts.end());
  return hold;
}

std::vector<int> GpuSimRun::ChooseMovable(const GpuSimJob& job, int64_t now,
                                          const std::vector<bool>& excluded,
                                          bool preempting) const {
  // Hosts the job could have if small jobs moved away: usable, not held for another job, holding
  // no whole-host job nor one started this instant (it could have gone elsewhere), NVLink-ready
  // unless the rule is preferred. Cheapest = fewest GPUs in use.
  const int g = fleet_.gpus_per_host();
  const int n = (job.gpus + g - 1) / g;
  const DomainRuleSpec& rule = job.request.rule;
  const int unit = rule.rule == DomainRule::kSegment ? rule.segment_hosts : 1;
  std::vector<std::vector<std::pair<int, int>>> per_domain(fleet_.domains);  // (used, host)
  for (int h = 0; h < static_cast<int>(fleet_.hosts.size()); ++h) {
    const GpuHostState& s = fleet_.hosts[h];
    if (!s.usable || excluded[h]) continue;
    if (rule.rule != DomainRule::kPreferred && !s.nvlink_ready) continue;
    bool movable = true;
    for (int other : held_by_[h]) {
      movable = movable && !jobs_[other].whole_host && jobs_[other].run_start_s < now &&
                (!preempting || !jobs_[other].preempted);
    }
    if (!movable) continue;
    per_domain[s.domain].emplace_back(g - s.free_gpus, h);
  }
  for (auto& d : per_domain) std::sort(d.begin(), d.end());
  // Candidate groups: the whole job in one domain (required), or segments of `unit` hosts.
  std::vector<std::pair<int, std::vector<int>>> groups;  // (cost, hosts)
  const int group = rule.rule == DomainRule::kRequired ? n : unit;
  for (const auto& d : per_domain) {
    for (size_t s = 0; s + group <= d.size(); s += group) {
      int cost = 0;
      std::vector<int> hosts;
      for (size_t i = s; i < s + group; ++i) cost += d[i].first, hosts.push_back(d[i].second);
      groups.emplace_back(cost, std::move(hosts));
      if (rule.rule == DomainRule::kRequired) break;  // one group per domain
    }
  }
  std::stable_sort(groups.begin(), groups.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<int> chosen;
  for (const auto& [cost, hosts] : groups) {
    if (static_cast<int>(chosen.size()) >= n) break;
    chosen.insert(chosen.end(), hosts.begin(), hosts.end());
  }
  if (static_cast<int>(chosen.size()) < n) return {};
  chosen.resize(n);
  return chosen;
}

GpuPlacement GpuSimRun::PlanOn(int j, const std::vector<int>& hosts) const {
  std::vector<bool> elsewhere(fleet_.hosts.size(), true);
  for (int h : hosts) elsewhere[h] = false;
  return PlanGpu(fleet_, jobs_[j].request, o_.policy, elsewhere);
}

bool GpuSimRun::MoveOff(const std::vector<int>& hosts, const std::vector<bool>& excluded) {
  std::vector<bool> avoid = excluded;
  for (int h : hosts) avoid[h] = true;
  std::vector<int> movers;
  for (int h : hosts) {
    for (int j : held_by_[h]) movers.push_back(j);
  }
  std::sort(movers.begin(), movers.end());
  movers.erase(std::unique(movers.begin(), movers.end()), movers.end());
  std::vector<std::pair<int, GpuPlacement>> moved;  // job, old placement
  bool all = true;
  for (int j : movers) {
    GpuSimJob& job = jobs_[j];
    ReleaseGpuPlacement(fleet_, job.placement);
    const GpuPlacement p = PlanGpu(fleet_, job.request, GpuPolicy::kTessera, avoid);
    if (!p.placed || !ApplyGpuPlacement(fleet_, p).ok()) {
      all = false;
      // Back where it was: its GPUs were just released, so this cannot fail.
      if (Status s = ApplyGpuPlacement(fleet_, job.placement); !s.ok()) {
        broken_ = "moving job " + std::to_string(j) + ": " + s.message();
        return false;
      }
      break;
    }
    moved.emplace_back(j, job.placement);
    job.placement = p;
  }
  if (!all) {
    for (auto it = moved.rbegin(); it != moved.rend(); ++it) {
      GpuSimJob& job = jobs_[it->first];
      ReleaseGpuPlacement(fleet_, job.placement);
      job.placement = it->second;
      // Its old GPUs were free until the move took them: restoring cannot fail.
      if (Status s = ApplyGpuPlacement(fleet_, job.placement); !s.ok()) {
        broken_ = "restoring job " + std::to_string(it->first) + ": " + s.message();
        return false;
      }
    }
    return false;
  }
  for (auto& [j, old] : moved) {
    GpuSimJob& job = jobs_[j];
    for (int h : old.hosts) held_by_[h].erase(j);
    for (int h : job.placement.hosts) held_by_[h].insert(j);
    running_changed_ = true;
    job.end_s += o_.migrate_s;
    job.moved_s += o_.migrate_s;
    ++job.version;
    finishes_.emplace(job.end_s, j, job.version);
    ++r_.migrations;
    const double gpus = static_cast<double>(job.placement.gpus_per_host);
    r_.migrated_gpu_h += gpus * static_cast<double>(o_.migrate_s) / 3600;
    held_gpu_s_ += gpus * static_cast<double>(o_.migrate_s);
    r_.hash = GpuSimMix(r_.hash, 0xABCDull ^ static_cast<uint64_t>(j));
  }
  return true;
}

void GpuSimRun::Preempt(int j, int64_t now) {
  GpuSimJob& job = jobs_[j];
  ReleaseGpuPlacement(fleet_, job.placement);
  for (int h : job.placement.hosts) held_by_[h].erase(j);
  running_changed_ = true;
  const double gpus = static_cast<double>(job.placement.gpus_per_host) *
                      static_cast<double>(job.placement.hosts.size());
  held_gpu_s_ -= gpus * static_cast<double>(job.end_s - now);  // the part it will not run here
  job.left_s = std::max<int64_t>(1, job.end_s - now);
  job.ran_before_s += std::max<int64_t>(0, now - job.run_start_s - job.moved_s);
  job.preempted_at = now;
  job.preempted = true;
  ++job.version;  // its finish event is stale
  wait_state_[j] = -1;
  requeued_.push_back(j);
  if (!o_.las_levels_s.empty()) wakeups_.push(PromotedAt(job));  // a pass then
  ++r_.preemptions;
  r_.preempted_gpu_h += gpus * static_cast<double>(o_.migrate_s) / 3600;
  r_.hash = GpuSimMix(r_.hash, 0xDCBAull ^ static_cast<uint64_t>(j));
}

int64_t GpuSimRun::PromotedAt(const GpuSimJob& job) const {
  return job.preempted_at + static_cast<int64_t>(std::ceil(o_.las_starve_limit *
                                                           static_cast<double>(job.ran_before_s)));
}

int64_t GpuSimRun::Ran(const GpuSimJob& job, int64_t now) const {
  const bool running = job.start_s >= 0 && job.preempted_at < 0;
  return job.ran_before_s +
         (running ? std::max<int64_t>(0, now - job.run_start_s - job.moved_s) : 0);
}

int GpuSimRun::Level(int j, int64_t now) const {
  const GpuSimJob& job = jobs_[j];
  const int64_t ran = Ran(job, now);
  // Preempted, and waiting for las_starve_limit times what it ran: first in line again.
  if (job.preempted_at >= 0 && now >= PromotedAt(job)) return 0;
  int level = 0;
  while (level < static_cast<int>(o_.las_levels_s.size()) && ran >= o_.las_levels_s[level]) {
    ++level;
  }
  return level;
}

const std::vector<GpuSimRun::RunningLevel>& GpuSimRun::RunningLevels(int64_t now) {
  if (running_changed_ || running_at_ != now) {
    running_.clear();
    std::set<int> seen;
    for (const std::set<int>& on : held_by_) {
      for (int v : on) {
        if (seen.insert(v).second) running_.push_back({v, Level(v, now), Ran(jobs_[v], now)});
      }
    }
    running_at_ = now;
    running_changed_ = false;
  }
  return running_;
}

bool GpuSimRun::PreemptLongerRun(int j, int64_t now, int own) {
  const GpuSimJob& job = jobs_[j];
  const int level = Level(j, now);
  const int64_t ran = Ran(job, now);
  uint64_t others = 0;
  for (size_t i = 0; i < holds_.size(); ++i) {
    if (static_cast<int>(i) != own) others |= uint64_t{1} << i;
  }
  const std::vector<bool> excluded = HeldHosts(others);
  // The fleet as it would be without the running jobs of a higher level that have run longer
  // (a promoted job, at level 0 again, preempts only jobs that have run longer than it). The
  // jobs holds are made for (a whole domain's clique, the hardest to place again) are stopped
  // only when stopping the others makes no room, and only for a job at least as large.
  std::set<int> longer;
  GpuPlacement room;
  for (const bool with_held : {false, true}) {
    GpuFleet without = fleet_;
    longer.clear();
    bool any_held = false;
    for (const RunningLevel& r : RunningLevels(now)) {
      const int v = r.job;
      if (r.level <= level || r.ran <= ran) continue;
      const bool held_kind = Holdable(jobs_[v]);
      if (held_kind && (jobs_[v].gpus > job.gpus || !with_held)) continue;
      any_held = any_held || held_kind;
      longer.insert(v);
      ReleaseGpuPlacement(without, jobs_[v].placement);
    }
    if (with_held && !any_held) return false;  // the same fleet as the first try
    if (longer.empty()) continue;
    room = PlanGpu(without, job.request, o_.policy, excluded);
    if (room.placed) break;
  }
  if (!room.placed) return false;
  // On each of its hosts, stop the jobs of the highest level first (then the youngest) until
  // the host has the GPUs the plan takes there.
  std::set<int> victims;
  for (int h : room.hosts) {
    int free = fleet_.hosts[h].free_gpus;
    for (int v : victims) {
      for (int vh : jobs_[v].placement.hosts)
        free += vh == h ? jobs_[v].placement.gpus_per_host : 0;
    }
    std::vector<int> here;
    for (int v : held_by_[h]) {
      if (longer.count(v) && !victims.count(v)) here.push_back(v);
    }
    std::sort(here.begin(), here.end(), [&](int a, int b) {
      const int la = Level(a, now), lb = Level(b, now);
      return la != lb ? la > lb : a > b;
    });
    for (size_t k = 0; k < here.size() && free < room.gpus_per_host; ++k) {
      victims.insert(here[k]);
      free += jobs_[here[k]].placement.gpus_per_host;
    }
  }
  for (int v : victims) Preempt(v, now);
  const GpuPlacement p = PlanOn(j, room.hosts);
  if (!p.placed) {
    broken_ = "job " + std::to_string(j) + " does not fit the hosts emptied for it: " + p.message;
    return false;
  }
  Start(j, p, now);
  return true;
}

bool GpuSimRun::Hold(int j, int64_t now, int own) {
  const GpuSimJob& job = jobs_[j];
  // Hosts held for other jobs are not this job's to take or to clear.
  uint64_t others = 0;
  for (size_t i = 0; i < holds_.size(); ++i) {
    if (static_cast<int>(i) != own) others |= uint64_t{1} << i;
  }
  const std::vector<bool> excluded = HeldHosts(others);
  if (own >= 0 && o_.policy == GpuPolicy::kTessera && o_.reclaim && !preempting_off_ &&
      Reclaim(j, now, own)) {
    return true;
  }
  const std::optional<GpuHold> drain = ChooseDrain(j, now, excluded);
  // Moving costs each moved job migrate_s; waiting for the drain costs the held job its wait.
  if (o_.policy == GpuPolicy::kTessera && o_.defrag &&
      (!drain || drain->until_s - now > o_.migrate_s)) {
    const std::vector<int> movable = ChooseMovable(job, now, excluded);
    if (!movable.empty() && MoveOff(movable, excluded)) {
      const GpuPlacement p = PlanOn(j, movable);
      if (!p.placed) {
        broken_ =
            "job " + std::to_string(j) + " does not fit the hosts cleared for it: " + p.message;
        return false;
      }
      Start(j, p, now);
      if (own >= 0) holds_.erase(holds_.begin() + own);
      HoldsChanged();
      return true;
    }
    // Preempt instead: stop the small jobs on the hosts with the fewest GPUs in use (each job
    // at most once), requeue them in their place in the queue, and start the held job there.
    const std::vector<int> victims_hosts = o_.preempt && !preempting_off_
                                               ? ChooseMovable(job, now, excluded, true)
                                               : std::vector<int>{};
    if (!victims_hosts.empty()) {
      std::set<int> victims;
      for (int h : victims_hosts) victims.insert(held_by_[h].begin(), held_by_[h].end());
      for (int v : victims) Preempt(v, now);
      const GpuPlacement p = PlanOn(j, victims_hosts);
      if (!p.placed) {
        broken_ =
            "job " + std::to_string(j) + " does not fit the hosts emptied for it: " + p.message;
        return false;
      }
      Start(j, p, now);
      if (own >= 0) holds_.erase(holds_.begin() + own);
      HoldsChanged();
      return true;
    }
  }
  if (!drain) return false;
  if (own >= 0) {
    // The hosts held so far still drain by their time: a new choice is never later. Once that
    // time has passed with the hosts still busy (a job ran past its estimate), the hold is made
    // again from the estimates of now, as EASY does each pass.
    if (drain->until_s <= holds_[own].until_s || holds_[own].until_s <= now) {
      holds_[own] = *drain;
    }
  } else {
    holds_.push_back(*drain);
    ++r_.holds;
    if (r_.reserved_s[j] < 0) r_.reserved_s[j] = drain->until_s;
  }
  HoldsChanged();
  return false;
}

bool GpuSimRun::Reclaim(int j, int64_t now, int own) {
  // The jobs started on its hosts to end by a time now past and still running there: preempted,
  // as a time limit would stop them, whether or not the held job then fits (the jobs that were
  // on its hosts before the hold may still run past their estimates).
  std::set<int> loans;
  for (int h : holds_[own].hosts) {
    for (int v : held_by_[h]) {
      if (jobs_[v].loan_of == j && jobs_[v].loan_until_s <= now) loans.insert(v);
    }
  }
  if (loans.empty()) return false;
  for (int v : loans) {
    Preempt(v, now);
    jobs_[v].reclaimed_for = j;
  }
  r_.reclaims += static_cast<int64_t>(loans.size());
  const GpuPlacement p = PlanOn(j, holds_[own].hosts);
  if (!p.placed) return false;
  Start(j, p, now);
  holds_.erase(holds_.begin() + own);
  HoldsChanged();
  return true;
}

GpuSimResult GpuSimRun::Run() {
  r_.policy = std::string(GpuPolicyName(o_.policy));
  r_.jobs = static_cast<int64_t>(jobs_.size());
  r_.start_s.assign(jobs_.size(), -1);
  r_.reserved_s.assign(jobs_.size(), -1);
  const int g = fleet_.gpus_per_host();
  const int gpd = Info(o_.system).gpus_per_domain();
  size_t next = 0;
  int64_t first_submit = jobs_.empty() ? 0 : jobs_.front().submit_s, last_end = first_submit;
  while (next < jobs_.size() || !finishes_.empty()) {
    int64_t now = next < jobs_.size() ? jobs_[next].submit_s : INT64_MAX;
    if (!finishes_.empty()) now = std::min(now, std::get<0>(finishes_.top()));
    if (!wakeups_.empty()) now = std::min(now, wakeups_.top());
    while (!wakeups_.empty() && wakeups_.top() <= now) wakeups_.pop();
    while (!finishes_.empty() && std::get<0>(finishes_.top()) <= now) {
      auto [end, j, version] = finishes_.top();
      finishes_.pop();
      if (version != jobs_[j].version) continue;
      ReleaseGpuPlacement(fleet_, jobs_[j].placement);
      for (int h : jobs_[j].placement.hosts) held_by_[h].erase(j);
      running_changed_ = true;
      if (o_.estimates == GpuEstimate::kHistory) {
        const int64_t ran = jobs_[j].duration_s;
        finished_runs_.insert(std::upper_bound(finished_runs_.begin(), finished_runs_.end(), ran),
                              ran);
      }
      last_end = std::max(last_end, end);
    }
    while (next < jobs_.size() && jobs_[next].submit_s <= now) {
      const int j = static_cast<int>(next++);
      // A job no empty fleet could hold is reported, not queued forever.
      const GpuFleet empty = GpuFleet::Make(o_.system, o_.domains);
      const GpuPlacement p = PlanGpu(empty, jobs_[j].request, o_.policy);
      if (!p.placed) {
        ++r_.never_placed;
        continue;
      }
      queue_.push_back(j);
    }
    Schedule(now);
    if (!broken_.empty()) break;
  }
  for (const GpuHostState& h : fleet_.hosts) {
    if (h.free_gpus != g && broken_.empty()) broken_ = "GPUs still held after the last job";
  }
  std::vector<double> small, domain, multi, all;
  for (const GpuSimJob& job : jobs_) {
    if (job.start_s < 0) continue;
    // A preempted job's wait counts its time requeued and its restart cost too.
    const double w = static_cast<double>(job.start_s - job.submit_s + job.lost_s);
    all.push_back(w);
    (job.gpus <= gpd / 2 ? small : job.gpus <= gpd ? domain : multi).push_back(w);
  }
  r_.classes.push_back(GpuSimStats("small", "1-" + std::to_string(gpd / 2) + " GPUs", small));
  r_.classes.push_back(GpuSimStats(
      "domain", std::to_string(gpd / 2 + 1) + "-" + std::to_string(gpd) + " GPUs", domain));
  r_.classes.push_back(GpuSimStats("multi-domain", std::to_string(gpd + 1) + "+ GPUs", multi));
  r_.overall = GpuSimStats("all", "", all);
  r_.domain_tail_waits =
      DomainTailWaits(static_cast<int64_t>(std::llround(GpuSimPercentile(domain, 0.95))));
  r_.makespan_s = last_end - first_submit;
  const double capacity = static_cast<double>(fleet_.hosts.size()) * g *
                          static_cast<double>(std::max<int64_t>(1, r_.makespan_s));
  r_.utilisation = held_gpu_s_ / capacity;
  return r_;
}

}  // namespace

std::string_view GpuHoldForName(GpuHoldFor h) {
  switch (h) {
    case GpuHoldFor::kWholeHost:
      return "whole-host";
    case GpuHoldFor::kLarge:
      return "large";
    case GpuHoldFor::kDomainClass:
      return "domain";
  }
  return "?";
}

Result<GpuHoldFor> ParseGpuHoldFor(std::string_view text) {
  for (GpuHoldFor h : {GpuHoldFor::kWholeHost, GpuHoldFor::kLarge, GpuHoldFor::kDomainClass}) {
    if (text == GpuHoldForName(h)) return h;
  }
  return InvalidArgument("hold_for: unknown '" + std::string(text) +
                         "'; valid: whole-host (jobs of a host or more), large (more than half a "
                         "domain), domain (more than half a domain and at most one)");
}

std::string_view GpuHoldWhenName(GpuHoldWhen h) {
  switch (h) {
    case GpuHoldWhen::kAlways:
      return "always";
    case GpuHoldWhen::kFifo:
      return "fifo";
    case GpuHoldWhen::kGpuWait:
      return "gpu-wait";
    case GpuHoldWhen::kTail:
      return "tail";
  }
  return "?";
}

Result<GpuHoldWhen> ParseGpuHoldWhen(std::string_view text) {
  for (GpuHoldWhen h :
       {GpuHoldWhen::kAlways, GpuHoldWhen::kFifo, GpuHoldWhen::kGpuWait, GpuHoldWhen::kTail}) {
    if (text == GpuHoldWhenName(h)) return h;
  }
  return InvalidArgument(
      "hold_when: unknown '" + std::string(text) +
      "'; valid: gpu-wait (only when it has waited at least the GPU-hours of "
      "every older smaller waiting job), fifo (only when no older waiting job "
      "is smaller), tail (only when no older smaller waiting job has waited the p95 "
      "wait of the jobs started so far), always");
}

std::string_view GpuEstimateName(GpuEstimate e) {
  switch (e) {
    case GpuEstimate::kLimit:
      return "default";
    case GpuEstimate::kHistory:
      return "history";
    case GpuEstimate::kTrue:
      return "true";
  }
  return "?";
}

Result<GpuEstimate> ParseGpuEstimate(std::string_view text) {
  for (GpuEstimate e : {GpuEstimate::kLimit, GpuEstimate::kHistory, GpuEstimate::kTrue}) {
    if (text == GpuEstimateName(e)) return e;
  }
  return InvalidArgument("estimates: unknown '" + std::string(text) +
                         "'; valid: default (expected durations, else the default estimate), "
                         "history (the median run time of the finished jobs that ran as long), "
                         "true (the real run times, an oracle)");
}

Result<GpuSimResult> RunGpuSimulation(const Workload& workload, const GpuSimOptions& options) {
  if (options.domains < 1) {
    return InvalidArgument(
        "domains: " + std::to_string(options.domains) +
        " must be at least 1 (--hosts for h100/h200, --domains for gb200-nvl72)");
  }
  if (options.migrate_s < 0) return InvalidArgument("migrate_s: must be >= 0");
  if (options.default_estimate_s < 1) {
    return InvalidArgument("default_estimate_s: " + std::to_string(options.default_estimate_s) +
                           " must be at least 1 (the time limit of a job that states none)");
  }
  if (options.holds < 0 || options.holds > 64) {
    return InvalidArgument("holds: " + std::to_string(options.holds) +
                           " must be between 0 (no reservations) and 64");
  }
  if (!(options.las_starve_limit > 0 && options.las_starve_limit <= 100)) {
    return InvalidArgument(
        "las_starve_limit: must be above 0 and at most 100 (0 would let preempted jobs preempt "
        "one another at once, back and forth)");
  }
  for (size_t i = 0; i < options.las_levels_s.size(); ++i) {
    if (options.las_levels_s[i] < 1 ||
        (i > 0 && options.las_levels_s[i] <= options.las_levels_s[i - 1])) {
      return InvalidArgument("las_levels_s: levels must be positive and ascending");
    }
  }
  if (!(options.span_slowdown >= 1.0)) {
    return InvalidArgument("span_slowdown: must be >= 1 (1: spanning cliques costs nothing)");
  }
  const GpuSystemInfo& info = Info(options.system);
  std::vector<GpuSimJob> jobs;
  jobs.reserve(workload.jobs.size());
  for (const JobSpec& spec : workload.jobs) {
    GpuSimJob job;
    job.gpus = GpusOf(spec);
    job.submit_s = spec.submit_s;
    job.duration_s = std::max<int64_t>(1, spec.duration_s);
    job.stated = spec.expected_s > 0;
    job.limit_s = options.estimates == GpuEstimate::kTrue ? job.duration_s
                  : job.stated                            ? spec.expected_s
                                                          : options.default_estimate_s;
    job.whole_host = job.gpus >= info.gpus_per_host;
    job.request.gpus = job.gpus;
    if (options.rule) {
      job.request.rule = *options.rule;
      const int hosts = (job.gpus + info.gpus_per_host - 1) / info.gpus_per_host;
      // A segment that does not divide a job (or a required job larger than a domain) cannot
      // be asked as written: such a job falls back to preferred, as a user would write it.
      if ((options.rule->rule == DomainRule::kSegment &&
           hosts % options.rule->segment_hosts != 0) ||
          (options.rule->rule == DomainRule::kRequired && job.gpus > info.gpus_per_domain())) {
        job.request.rule = DomainRuleSpec{DomainRule::kPreferred, 0};
      }
    } else {
      job.request.rule = DomainRuleSpec{
          job.gpus <= info.gpus_per_domain() ? DomainRule::kRequired : DomainRule::kPreferred, 0};
    }
    jobs.push_back(job);
  }
  GpuSimRun run(options, std::move(jobs));
  GpuSimResult result = run.Run();
  if (!run.broken().empty()) return Internal("gpu simulation: " + run.broken());
  return result;
}

Result<GpuSimResult> RunDomainClassAlone(const Workload& workload, const GpuSimOptions& options) {
  const int gpd = Info(options.system).gpus_per_domain();
  Workload alone;
  alone.source = workload.source;
  for (const JobSpec& spec : workload.jobs) {
    const int gpus = GpusOf(spec);
    if (gpus > gpd / 2 && gpus <= gpd) alone.jobs.push_back(spec);
  }
  GpuSimOptions o;
  o.system = options.system;
  o.domains = options.domains;
  o.estimates = options.estimates;
  o.default_estimate_s = options.default_estimate_s;
  o.policy = GpuPolicy::kSlurmBlock;  // auto rule: required, each job in one domain
  o.holds = 0;
  o.defrag = false;
  auto r = RunGpuSimulation(alone, o);
  if (r.ok()) r->policy = "domain class alone";
  return r;
}

}  // namespace tessera::sim
