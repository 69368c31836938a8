// Least attained service (tessera, las_levels_s): levels and preemption.
#include <algorithm>
#include <cmath>

#include "sim/gpu_sim_run.h"

namespace tessera::sim::gpu_sim_internal {

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
  const std::vector<bool> excluded = HeldForOthers(own);
  // The fleet as it would be without the running jobs of a higher level that have run longer
  // (a promoted job, at level 0 again, preempts only jobs that have run longer than it). The
  // jobs holds are made for (a whole domain's clique, the hardest to place again) are stopped
  // only when stopping the others makes no room, and only for a job at least as large, and not
  // within preempt_exempt_s of their restart after a preemption.
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
      const bool exempt = o_.preempt_exempt_s > 0 && jobs_[v].preempted &&
                          now - jobs_[v].run_start_s - jobs_[v].moved_s < o_.preempt_exempt_s;
      if (held_kind && (jobs_[v].gpus > job.gpus || !with_held || exempt)) continue;
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
  return StartOn(j, room.hosts, now, "emptied");
}

}  // namespace tessera::sim::gpu_sim_internal
