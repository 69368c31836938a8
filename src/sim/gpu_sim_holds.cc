// Holds, EASY backfill on held hosts, moves off hosts and reclaiming held hosts (tessera).
#include <algorithm>
#include <utility>

#include "sim/gpu_sim_run.h"

namespace tessera::sim::gpu_sim_internal {

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

std::vector<bool> GpuSimRun::HeldForOthers(int own) const {
  uint64_t others = 0;
  for (size_t i = 0; i < holds_.size(); ++i) {
    if (static_cast<int>(i) != own) others |= uint64_t{1} << i;
  }
  return HeldHosts(others);
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

bool GpuSimRun::StartOn(int j, const std::vector<int>& hosts, int64_t now, const char* made) {
  const GpuPlacement p = PlanOn(j, hosts);
  if (!p.placed) {
    broken_ =
        "job " + std::to_string(j) + " does not fit the hosts " + made + " for it: " + p.message;
    return false;
  }
  Start(j, p, now);
  return true;
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

bool GpuSimRun::Hold(int j, int64_t now, int own) {
  const GpuSimJob& job = jobs_[j];
  // Hosts held for other jobs are not this job's to take or to clear.
  const std::vector<bool> excluded = HeldForOthers(own);
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
      if (!StartOn(j, movable, now, "cleared")) return false;
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
      if (!StartOn(j, victims_hosts, now, "emptied")) return false;
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

}  // namespace tessera::sim::gpu_sim_internal
