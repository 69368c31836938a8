#include "admission/gpu_preemption.h"

#include <algorithm>
#include <numeric>
#include <tuple>

namespace tessera {
namespace {

// The fleet with the hosts of the chosen candidates free.
GpuFleet Freed(const GpuFleet& fleet, const std::vector<WorkloadId>& holders,
               const std::vector<PreemptionCandidate>& candidates, const std::vector<int>& chosen) {
  GpuFleet f = fleet;
  const int per_host = fleet.gpus_per_host();
  for (size_t h = 0; h < f.hosts.size() && h < holders.size(); ++h) {
    if (!holders[h].valid()) continue;
    for (int c : chosen)
      if (candidates[c].workload == holders[h]) f.hosts[h].free_gpus = per_host;
  }
  return f;
}

bool Touches(const GpuPlacement& plan, const std::vector<WorkloadId>& holders, WorkloadId id) {
  for (int h : plan.hosts)
    if (h < static_cast<int>(holders.size()) && holders[h] == id) return true;
  return false;
}

}  // namespace

GpuVictimSet FindGpuVictims(const GpuFleet& fleet, const std::vector<WorkloadId>& holders,
                            const GpuRequest& request, GpuPolicy policy,
                            const std::vector<PreemptionCandidate>& candidates,
                            const VictimSetCheck& check) {
  GpuVictimSet out;
  const int per_host = fleet.gpus_per_host();
  std::vector<int64_t> gpus(candidates.size(), 0);
  for (size_t h = 0; h < holders.size(); ++h)
    for (size_t c = 0; c < candidates.size(); ++c)
      if (holders[h].valid() && candidates[c].workload == holders[h]) gpus[c] += per_host;
  // Cheapest first: Kueue's rank, then priority, then lost work, then id.
  std::vector<int> order(candidates.size());
  std::iota(order.begin(), order.end(), 0);
  auto cost_key = [&](int c) {
    const PreemptionCandidate& p = candidates[c];
    return std::make_tuple(p.rank, p.priority, p.lost_work_chip_ms, gpus[c], p.workload);
  };
  std::sort(order.begin(), order.end(), [&](int a, int b) { return cost_key(a) < cost_key(b); });
  auto accepts = [&](const std::vector<int>& chosen, GpuPlacement& plan) {
    plan = PlanGpu(Freed(fleet, holders, candidates, chosen), request, policy);
    if (!plan.placed) return false;
    std::vector<int> sorted = chosen;
    std::sort(sorted.begin(), sorted.end());
    return !check || check(sorted);
  };
  std::vector<int> chosen;
  GpuPlacement plan;
  bool ok = false;
  for (int c : order) {
    if (gpus[c] == 0) continue;  // holds no host of this fleet: its leaving frees no room
    chosen.push_back(c);
    if (accepts(chosen, plan)) {
      ok = true;
      break;
    }
  }
  if (!ok) {
    out.message = chosen.empty()
                      ? "no running workload that may be preempted holds a host here"
                      : "even with every candidate gone: " +
                            (plan.placed ? std::string("the quota check fails") : plan.message);
    return out;
  }
  // Put back what the set does without, most expensive first.
  for (size_t i = chosen.size(); i-- > 0;) {
    std::vector<int> without = chosen;
    without.erase(without.begin() + static_cast<long>(i));
    GpuPlacement p;
    if (accepts(without, p)) {
      chosen = std::move(without);
      plan = std::move(p);
    }
  }
  // Every victim must hold a host of the placement: when the planner's choice leaves one
  // unused, plan again on the victims' hosts and the free hosts of their domains only.
  auto unused = [&](const GpuPlacement& p) {
    std::vector<int> u;
    for (size_t i = 0; i < chosen.size(); ++i)
      if (!Touches(p, holders, candidates[chosen[i]].workload)) u.push_back(static_cast<int>(i));
    return u;
  };
  if (!unused(plan).empty()) {
    std::vector<bool> victim_host(fleet.hosts.size(), false);
    std::vector<bool> victim_domain(static_cast<size_t>(std::max(fleet.domains, 0)), false);
    for (size_t h = 0; h < holders.size() && h < fleet.hosts.size(); ++h)
      for (int c : chosen)
        if (candidates[c].workload == holders[h]) {
          victim_host[h] = true;
          const int d = fleet.hosts[h].domain;
          if (d >= 0 && d < fleet.domains) victim_domain[d] = true;
        }
    std::vector<bool> avoid(fleet.hosts.size(), true);
    for (size_t h = 0; h < fleet.hosts.size(); ++h) {
      const int d = fleet.hosts[h].domain;
      avoid[h] = !victim_host[h] && !(d >= 0 && d < fleet.domains && victim_domain[d]);
    }
    GpuPlacement p = PlanGpu(Freed(fleet, holders, candidates, chosen), request, policy, avoid);
    if (p.placed && unused(p).empty()) plan = std::move(p);
  }
  if (!unused(plan).empty()) {
    out.message =
        "the placement does not use every victim's hosts (it would evict a workload "
        "only to free quota)";
    return out;
  }
  out.found = true;
  out.plan = std::move(plan);
  for (int c : chosen) {
    const PreemptionCandidate& p = candidates[c];
    out.victims.push_back(p.workload);
    out.cost.max_rank = std::max(out.cost.max_rank, p.rank);
    out.cost.max_priority = std::max(out.cost.max_priority, p.priority);
    out.cost.chips += gpus[c];
    out.cost.lost_work_chip_ms += p.lost_work_chip_ms;
  }
  std::sort(out.victims.begin(), out.victims.end());
  return out;
}

}  // namespace tessera
