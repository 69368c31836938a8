#include "placement/gpu_naive_planner.h"

#include <algorithm>

namespace tessera {

GpuNaiveAnswer NaiveGpuFit(const GpuFleet& fleet, const GpuRequest& request,
                           const std::vector<bool>& avoid) {
  GpuNaiveAnswer a;
  const GpuSystemInfo& info = Info(fleet.system);
  const int hosts = static_cast<int>(fleet.hosts.size());
  auto open = [&](int h) { return fleet.hosts[h].usable && (avoid.empty() || !avoid[h]); };
  if (request.gpus < 1) return a;
  if (request.gpus < info.gpus_per_host) {
    for (int h = 0; h < hosts; ++h) {
      if (!open(h) || fleet.hosts[h].free_gpus < request.gpus) continue;
      a.fits = true;
      a.fewest_domains = 1;
      if (a.best_fit_room < 0 || fleet.hosts[h].free_gpus < a.best_fit_room) {
        a.best_fit_room = fleet.hosts[h].free_gpus;
      }
    }
    return a;
  }
  const int n = (request.gpus + info.gpus_per_host - 1) / info.gpus_per_host;
  const DomainRule rule = request.rule.rule;
  const int unit = rule == DomainRule::kSegment ? request.rule.segment_hosts : 1;
  if (unit < 1 || n % unit != 0) return a;
  if (rule == DomainRule::kSegment && unit > info.hosts_per_domain) return a;
  // Eligible hosts of each domain, counted one host at a time.
  std::vector<int> room(fleet.domains, 0);
  for (int h = 0; h < hosts; ++h) {
    const GpuHostState& s = fleet.hosts[h];
    if (!open(h) || s.free_gpus != info.gpus_per_host) continue;
    if (rule != DomainRule::kPreferred && !s.nvlink_ready) continue;
    ++room[s.domain];
  }
  for (int d = 0; d < fleet.domains; ++d) {
    const int units = room[d] / unit;
    if (units >= n / unit && (a.best_fit_room < 0 || units < a.best_fit_room)) {
      a.best_fit_room = units;
    }
  }
  for (uint32_t mask = 1; mask < (1u << fleet.domains); ++mask) {
    const int size = __builtin_popcount(mask);
    if (rule == DomainRule::kRequired && size != 1) continue;
    int units = 0;
    for (int d = 0; d < fleet.domains; ++d) {
      if (mask & (1u << d)) units += room[d] / unit;
    }
    if (units < n / unit) continue;
    if (!a.fits || size < a.fewest_domains) a.fewest_domains = size;
    a.fits = true;
  }
  return a;
}

}  // namespace tessera
