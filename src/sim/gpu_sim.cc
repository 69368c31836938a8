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

#include "sim/gpu_sim_run.h"

namespace tessera::sim {
namespace gpu_sim_internal {
namespace {

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

}  // namespace

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
    if (o_.preempt_exempt_s > 0 && !o_.las_levels_s.empty() && Holdable(job)) {
      wakeups_.push(now + job.moved_s + o_.preempt_exempt_s);  // preemptible again then
    }
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

}  // namespace gpu_sim_internal

using gpu_sim_internal::GpuSimJob;
using gpu_sim_internal::GpuSimRun;
using gpu_sim_internal::GpusOf;

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
  if (options.preempt_exempt_s < 0) {
    return InvalidArgument("preempt_exempt_s: " + std::to_string(options.preempt_exempt_s) +
                           " must be >= 0 (0: a restarted job may be preempted at once)");
  }
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
