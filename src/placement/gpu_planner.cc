#include "placement/gpu_planner.h"

#include <algorithm>
#include <charconv>
#include <string>

namespace tessera {
namespace {

// Per-planning facts shared by the rules.
struct GpuPlanContext {
  const GpuFleet& fleet;
  const std::vector<bool>& avoid;
  int gpus_per_host;
  int hosts_per_domain;
};

bool GpuHostOpen(const GpuPlanContext& c, int h) {
  const GpuHostState& s = c.fleet.hosts[h];
  return s.usable && (c.avoid.empty() || !c.avoid[h]);
}

bool GpuHostWhollyFree(const GpuPlanContext& c, int h) {
  return GpuHostOpen(c, h) && c.fleet.hosts[h].free_gpus == c.gpus_per_host;
}

// Eligible whole free hosts of each domain, in id order; ready ones first when `ready_first`,
// and only ready ones when `ready_only`.
std::vector<std::vector<int>> GpuDomainRooms(const GpuPlanContext& c, bool ready_only,
                                             int* not_ready_skipped) {
  std::vector<std::vector<int>> ready(c.fleet.domains), not_ready(c.fleet.domains);
  for (int h = 0; h < static_cast<int>(c.fleet.hosts.size()); ++h) {
    if (!GpuHostWhollyFree(c, h)) continue;
    const GpuHostState& s = c.fleet.hosts[h];
    (s.nvlink_ready ? ready : not_ready)[s.domain].push_back(h);
  }
  for (int d = 0; d < c.fleet.domains; ++d) {
    if (ready_only) {
      *not_ready_skipped += static_cast<int>(not_ready[d].size());
    } else {
      ready[d].insert(ready[d].end(), not_ready[d].begin(), not_ready[d].end());
    }
  }
  return ready;
}

// How many units (hosts, or segments of `unit` hosts) each domain can take.
std::vector<int> GpuUnits(const std::vector<std::vector<int>>& rooms, int unit) {
  std::vector<int> units;
  units.reserve(rooms.size());
  for (const auto& r : rooms) units.push_back(static_cast<int>(r.size()) / unit);
  return units;
}

// Tessera: `need` units in the fewest domains; one domain by best fit when one holds them all,
// else the roomiest domains and a best-fit last one. Returns units per domain, or empty.
std::vector<int> GpuTesseraSpread(const std::vector<int>& units, int need, bool one_only) {
  const int domains = static_cast<int>(units.size());
  std::vector<int> take(domains, 0);
  int best = -1;
  for (int d = 0; d < domains; ++d) {
    if (units[d] >= need && (best < 0 || units[d] < units[best])) best = d;
  }
  if (best >= 0) {
    take[best] = need;
    return take;
  }
  if (one_only) return {};
  std::vector<int> order(domains);
  for (int d = 0; d < domains; ++d) order[d] = d;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return units[a] > units[b]; });
  int sum = 0, k = 0;
  while (k < domains && sum + units[order[k]] < need) sum += units[order[k++]];
  if (k == domains) return {};
  // The first k domains (roomiest) are taken whole; the remainder goes to the best-fit domain
  // among the others, which exists because order[k] holds it.
  for (int i = 0; i < k; ++i) take[order[i]] = units[order[i]];
  const int rest = need - sum;
  int last = -1;
  for (int i = k; i < domains; ++i) {
    const int d = order[i];
    if (units[d] >= rest &&
        (last < 0 || units[d] < units[last] || (units[d] == units[last] && d < last))) {
      last = d;
    }
  }
  take[last] = rest;
  return take;
}

// Slurm topology/block: the smallest level (blocks of 2^L consecutive domains) with a block
// holding `need` units, the best-fit block of that level, then its roomiest domains.
std::vector<int> GpuSlurmSpread(const std::vector<int>& units, int need, bool one_only) {
  const int domains = static_cast<int>(units.size());
  for (int size = 1; size < 2 * domains; size *= 2) {
    if (one_only && size > 1) break;
    int best = -1, best_cap = 0;
    for (int b = 0; b * size < domains; ++b) {
      int cap = 0;
      for (int d = b * size; d < std::min(domains, (b + 1) * size); ++d) cap += units[d];
      if (cap >= need && (best < 0 || cap < best_cap)) best = b, best_cap = cap;
    }
    if (best < 0) continue;
    std::vector<int> in_block;
    for (int d = best * size; d < std::min(domains, (best + 1) * size); ++d) in_block.push_back(d);
    std::stable_sort(in_block.begin(), in_block.end(),
                     [&](int a, int b) { return units[a] > units[b]; });
    std::vector<int> take(domains, 0);
    int left = need;
    for (int d : in_block) {
      const int t = std::min(left, units[d]);
      take[d] = t;
      left -= t;
      if (left == 0) break;
    }
    return take;
  }
  return {};
}

void GpuFinish(const GpuPlanContext& c, GpuPlacement& p) {
  std::sort(p.hosts.begin(), p.hosts.end(), [&](int a, int b) {
    const int da = c.fleet.hosts[a].domain, db = c.fleet.hosts[b].domain;
    return da != db ? da < db : a < b;
  });
  for (int h : p.hosts) {
    const int d = c.fleet.hosts[h].domain;
    if (p.domains.empty() || p.domains.back() != d) p.domains.push_back(d);
  }
  std::sort(p.domains.begin(), p.domains.end());
  p.domains.erase(std::unique(p.domains.begin(), p.domains.end()), p.domains.end());
  p.placed = true;
}

GpuPlacement GpuNoPlace(GpuPlacement p, GpuNoFit reason, std::string message) {
  p.placed = false;
  p.reason = reason;
  p.message = std::move(message);
  p.hosts.clear();
  p.domains.clear();
  return p;
}

GpuPlacement GpuPlanSmall(const GpuPlanContext& c, int gpus, GpuPolicy policy) {
  GpuPlacement p;
  p.gpus_per_host = gpus;
  const int hosts = static_cast<int>(c.fleet.hosts.size());
  std::vector<int> domain_whole(c.fleet.domains, 0), domain_free(c.fleet.domains, 0);
  for (int h = 0; h < hosts; ++h) {
    if (!GpuHostOpen(c, h)) continue;
    domain_free[c.fleet.hosts[h].domain] += c.fleet.hosts[h].free_gpus;
    if (GpuHostWhollyFree(c, h)) ++domain_whole[c.fleet.hosts[h].domain];
  }
  int best = -1;
  for (int h = 0; h < hosts; ++h) {
    if (!GpuHostOpen(c, h) || c.fleet.hosts[h].free_gpus < gpus) continue;
    if (best < 0) {
      best = h;
      if (policy == GpuPolicy::kFirstFit) break;
      continue;
    }
    const GpuHostState &a = c.fleet.hosts[h], &b = c.fleet.hosts[best];
    bool better = false;
    if (policy == GpuPolicy::kTessera) {
      // The fullest host that fits; then the domain with the fewest whole free hosts.
      better = a.free_gpus != b.free_gpus ? a.free_gpus < b.free_gpus
                                          : domain_whole[a.domain] < domain_whole[b.domain];
    } else {
      // Slurm: the fullest domain (block) with a host for it, then the fullest host there.
      better = domain_free[a.domain] != domain_free[b.domain]
                   ? domain_free[a.domain] < domain_free[b.domain]
                   : a.free_gpus < b.free_gpus;
    }
    if (better) best = h;
  }
  if (best < 0) {
    int most = 0;
    for (int h = 0; h < hosts; ++h) {
      if (GpuHostOpen(c, h)) most = std::max(most, c.fleet.hosts[h].free_gpus);
    }
    return GpuNoPlace(p, GpuNoFit::kNotEnoughHosts,
                      "no host has " + std::to_string(gpus) + " free GPUs (the most free on one " +
                          "host is " + std::to_string(most) + ")");
  }
  p.hosts.push_back(best);
  GpuFinish(c, p);
  return p;
}

}  // namespace

std::string_view DomainRuleName(DomainRule r) {
  switch (r) {
    case DomainRule::kRequired:
      return "required";
    case DomainRule::kPreferred:
      return "preferred";
    case DomainRule::kSegment:
      return "segment";
  }
  return "?";
}

std::string DomainRuleSpec::ToString() const {
  if (rule == DomainRule::kSegment) return "segment:" + std::to_string(segment_hosts);
  return std::string(DomainRuleName(rule));
}

Result<DomainRuleSpec> ParseDomainRule(std::string_view text) {
  const std::string valid = "; valid: required, preferred, segment:K (K hosts per segment, K >= 1)";
  if (text == "required") return DomainRuleSpec{DomainRule::kRequired, 0};
  if (text == "preferred") return DomainRuleSpec{DomainRule::kPreferred, 0};
  constexpr std::string_view kSeg = "segment:";
  if (text.substr(0, kSeg.size()) == kSeg) {
    const std::string_view num = text.substr(kSeg.size());
    int k = 0;
    auto [ptr, ec] = std::from_chars(num.data(), num.data() + num.size(), k);
    if (num.empty() || ec != std::errc() || ptr != num.data() + num.size() || k < 1) {
      return InvalidArgument("domain: segment size '" + std::string(num) +
                             "' is not a whole number of hosts >= 1" + valid);
    }
    return DomainRuleSpec{DomainRule::kSegment, k};
  }
  return InvalidArgument("domain: unknown rule '" + std::string(text) + "'" + valid);
}

std::string_view GpuPolicyName(GpuPolicy p) {
  switch (p) {
    case GpuPolicy::kTessera:
      return "tessera";
    case GpuPolicy::kSlurmBlock:
      return "slurm-block";
    case GpuPolicy::kFirstFit:
      return "first-fit";
  }
  return "?";
}

Result<GpuPolicy> ParseGpuPolicy(std::string_view text) {
  for (GpuPolicy p : {GpuPolicy::kTessera, GpuPolicy::kSlurmBlock, GpuPolicy::kFirstFit}) {
    if (text == GpuPolicyName(p)) return p;
  }
  return InvalidArgument("policy: unknown GPU placement policy '" + std::string(text) +
                         "'; valid: tessera, slurm-block, first-fit");
}

std::string_view GpuNoFitName(GpuNoFit r) {
  switch (r) {
    case GpuNoFit::kNone:
      return "none";
    case GpuNoFit::kInvalidRequest:
      return "invalid-request";
    case GpuNoFit::kNeverFits:
      return "never-fits";
    case GpuNoFit::kNotEnoughHosts:
      return "not-enough-hosts";
    case GpuNoFit::kNoDomainFits:
      return "no-domain-fits";
  }
  return "?";
}

GpuFleet GpuFleet::Make(GpuSystem system, int domains) {
  GpuFleet f;
  f.system = system;
  f.domains = std::max(domains, 0);
  const GpuSystemInfo& info = Info(system);
  for (int d = 0; d < f.domains; ++d) {
    for (int i = 0; i < info.hosts_per_domain; ++i) {
      f.hosts.push_back(GpuHostState{d, info.gpus_per_host, true, true});
    }
  }
  return f;
}

GpuPlacement PlanGpu(const GpuFleet& fleet, const GpuRequest& request, GpuPolicy policy,
                     const std::vector<bool>& avoid) {
  const GpuSystemInfo& info = Info(fleet.system);
  const GpuPlanContext c{fleet, avoid, info.gpus_per_host, info.hosts_per_domain};
  GpuPlacement p;
  if (request.gpus < 1) {
    return GpuNoPlace(p, GpuNoFit::kInvalidRequest,
                      "gpus: " + std::to_string(request.gpus) + " must be at least 1");
  }
  if (!avoid.empty() && avoid.size() != fleet.hosts.size()) {
    return GpuNoPlace(p, GpuNoFit::kInvalidRequest, "avoid: one flag per host expected");
  }
  for (const GpuHostState& h : fleet.hosts) {
    if (h.domain < 0 || h.domain >= fleet.domains || h.free_gpus < 0 ||
        h.free_gpus > info.gpus_per_host) {
      return GpuNoPlace(p, GpuNoFit::kInvalidRequest,
                        "fleet: a host's domain or free GPUs are out of range");
    }
  }
  if (request.gpus < info.gpus_per_host) return GpuPlanSmall(c, request.gpus, policy);

  const int n = (request.gpus + info.gpus_per_host - 1) / info.gpus_per_host;
  const int hpd = info.hosts_per_domain;
  const DomainRuleSpec& rule = request.rule;
  p.gpus_per_host = info.gpus_per_host;
  int unit = 1;
  if (rule.rule == DomainRule::kSegment) {
    unit = rule.segment_hosts;
    if (unit < 1 || n % unit != 0) {
      return GpuNoPlace(p, GpuNoFit::kInvalidRequest,
                        "domain: segment:" + std::to_string(unit) + " does not divide the job's " +
                            std::to_string(n) + " hosts; use a segment size that divides it");
    }
  }
  p.min_domains = rule.rule == DomainRule::kSegment
                      ? (unit > hpd ? 1 : (n / unit + hpd / unit - 1) / (hpd / unit))
                      : (n + hpd - 1) / hpd;
  if (n > static_cast<int>(fleet.hosts.size())) {
    return GpuNoPlace(
        p, GpuNoFit::kNeverFits,
        std::to_string(n) + " hosts asked, the fleet has " + std::to_string(fleet.hosts.size()));
  }
  if (policy != GpuPolicy::kFirstFit) {
    if (rule.rule == DomainRule::kRequired && n > hpd) {
      return GpuNoPlace(p, GpuNoFit::kNeverFits,
                        std::to_string(n) + " hosts in one NVLink domain asked, a " +
                            std::string(info.name) + " domain has " + std::to_string(hpd) +
                            "; use domain: preferred or segment:K");
    }
    if (rule.rule == DomainRule::kSegment && unit > hpd) {
      return GpuNoPlace(p, GpuNoFit::kNeverFits,
                        "segment:" + std::to_string(unit) + " is larger than a " +
                            std::string(info.name) + " domain (" + std::to_string(hpd) + " hosts)");
    }
  }

  if (policy == GpuPolicy::kFirstFit) {
    for (int h = 0;
         h < static_cast<int>(fleet.hosts.size()) && static_cast<int>(p.hosts.size()) < n; ++h) {
      if (GpuHostWhollyFree(c, h)) p.hosts.push_back(h);
    }
    if (static_cast<int>(p.hosts.size()) < n) {
      const int got = static_cast<int>(p.hosts.size());
      return GpuNoPlace(p, GpuNoFit::kNotEnoughHosts,
                        std::to_string(n) + " free hosts needed, " + std::to_string(got) + " free");
    }
    GpuFinish(c, p);
    return p;
  }

  const bool ready_only = rule.rule != DomainRule::kPreferred;
  const std::vector<std::vector<int>> rooms = GpuDomainRooms(c, ready_only, &p.not_ready_skipped);
  const std::vector<int> units = GpuUnits(rooms, unit);
  const bool one_only = rule.rule == DomainRule::kRequired;
  const std::vector<int> take = policy == GpuPolicy::kTessera
                                    ? GpuTesseraSpread(units, n / unit, one_only)
                                    : GpuSlurmSpread(units, n / unit, one_only);
  if (take.empty()) {
    int total = 0, most = 0;
    for (const auto& r : rooms) {
      total += static_cast<int>(r.size());
      most = std::max(most, static_cast<int>(r.size()));
    }
    std::string why = std::to_string(n) + " hosts needed";
    if (rule.rule == DomainRule::kSegment) why += " in segments of " + std::to_string(unit);
    why += ", " + std::to_string(total) + " free" + (ready_only ? " and NVLink-ready" : "") +
           ", at most " + std::to_string(most) + " in one domain";
    if (p.not_ready_skipped > 0) {
      why += "; " + std::to_string(p.not_ready_skipped) +
             " free hosts left out: their GPUs' NVLink fabric is not ready";
    }
    return GpuNoPlace(p, total < n ? GpuNoFit::kNotEnoughHosts : GpuNoFit::kNoDomainFits, why);
  }
  for (int d = 0; d < fleet.domains; ++d) {
    for (int i = 0; i < take[d] * unit; ++i) p.hosts.push_back(rooms[d][i]);
  }
  GpuFinish(c, p);
  return p;
}

Status ApplyGpuPlacement(GpuFleet& fleet, const GpuPlacement& placement) {
  if (!placement.placed) return FailedPrecondition("placement: the plan did not place");
  for (int h : placement.hosts) {
    if (h < 0 || h >= static_cast<int>(fleet.hosts.size()) ||
        fleet.hosts[h].free_gpus < placement.gpus_per_host) {
      return FailedPrecondition("placement: host " + std::to_string(h) +
                                " lacks the GPUs the plan takes");
    }
  }
  for (int h : placement.hosts) fleet.hosts[h].free_gpus -= placement.gpus_per_host;
  return Status::Ok();
}

void ReleaseGpuPlacement(GpuFleet& fleet, const GpuPlacement& placement) {
  const int per_host = Info(fleet.system).gpus_per_host;
  for (int h : placement.hosts) {
    if (h < 0 || h >= static_cast<int>(fleet.hosts.size())) continue;
    fleet.hosts[h].free_gpus =
        std::min(per_host, fleet.hosts[h].free_gpus + placement.gpus_per_host);
  }
}

}  // namespace tessera
