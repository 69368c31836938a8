#include "placement/gpu_domains.h"

#include <algorithm>
#include <map>

namespace tessera {
namespace {

bool FabricAttached(const GpuFacts& g) {
  return g.has_fabric && g.state == "Completed" && g.status == "Success";
}

std::string CliqueKey(const GpuFacts& g) { return g.cluster_uuid + "/" + g.clique_id; }

// The catalog system of a host: its label, else its GPUs' count and memory.
std::optional<GpuSystem> SystemOf(const GpuHostFacts& h, std::string* reason) {
  if (!h.system_label.empty()) {
    auto s = ParseGpuSystem(h.system_label);
    if (s.ok()) return *s;
    *reason = std::string("label ") + kGpuSystemLabel + ": '" + h.system_label +
              "' is not a GPU system; valid: " + ValidGpuSystemsText();
    return std::nullopt;
  }
  const int n = static_cast<int>(h.gpus.size());
  if (n == Info(GpuSystem::kGb200Nvl72).gpus_per_host) return GpuSystem::kGb200Nvl72;
  if (n == Info(GpuSystem::kH100).gpus_per_host) {
    const bool big = std::all_of(h.gpus.begin(), h.gpus.end(),
                                 [](const GpuFacts& g) { return g.memory_mib > 100 * 1024; });
    return big ? GpuSystem::kH200 : GpuSystem::kH100;
  }
  *reason = std::to_string(n) + " GPUs match no GPU system (" + ValidGpuSystemsText() +
            "); set the host label " + kGpuSystemLabel;
  return std::nullopt;
}

}  // namespace

std::vector<GpuHostDomain> FormGpuDomains(const std::vector<GpuHostFacts>& hosts) {
  std::vector<GpuHostDomain> out;
  for (const GpuHostFacts& h : hosts) {
    if (h.gpus.empty()) continue;
    GpuHostDomain d;
    d.host = h.name;
    std::string system_reason;
    d.system = SystemOf(h, &system_reason);
    d.domain = "host/" + h.name;
    const bool any_fabric =
        std::any_of(h.gpus.begin(), h.gpus.end(), [](const GpuFacts& g) { return g.has_fabric; });
    if (!any_fabric) {
      d.nvlink_ready = true;  // HGX: the host's own NVSwitches are its NVLink domain
    } else {
      const GpuFacts* not_attached = nullptr;
      const GpuFacts* other_clique = nullptr;
      for (const GpuFacts& g : h.gpus) {
        if (!not_attached && !FabricAttached(g)) not_attached = &g;
        if (!other_clique && g.has_fabric && CliqueKey(g) != CliqueKey(h.gpus[0]))
          other_clique = &g;
      }
      if (not_attached) {
        d.reason = "GPU " + not_attached->uuid + " is not NVLink-attached (fabric " +
                   (not_attached->has_fabric ? "state '" + not_attached->state + "', status '" +
                                                   not_attached->status + "'"
                                             : std::string("N/A")) +
                   "): a single-host domain, not used by domain: required jobs";
      } else if (other_clique || h.gpus[0].clique_id.empty()) {
        d.reason = other_clique ? "GPUs disagree on the NVLink clique (" + h.gpus[0].uuid + " " +
                                      CliqueKey(h.gpus[0]) + ", " + other_clique->uuid + " " +
                                      CliqueKey(*other_clique) +
                                      "): a single-host domain, not used by domain: required jobs"
                                : "GPUs report no cliqueId: a single-host domain, not used by "
                                  "domain: required jobs";
      } else {
        d.domain = CliqueKey(h.gpus[0]);
        d.clique = true;
        d.nvlink_ready = true;
      }
    }
    if (!system_reason.empty())
      d.reason = d.reason.empty() ? system_reason : system_reason + "; " + d.reason;
    out.push_back(std::move(d));
  }
  return out;
}

GpuFleetView MakeGpuFleetView(GpuSystem system, const std::vector<GpuHostDomain>& domains,
                              const std::vector<GpuHostUse>& use) {
  // (domain, host) -> index into `domains`, for the hosts of `system`.
  std::map<std::pair<std::string, std::string>, size_t> order;
  for (size_t i = 0; i < domains.size() && i < use.size(); ++i)
    if (domains[i].system == system) order[{domains[i].domain, domains[i].host}] = i;
  GpuFleetView v;
  v.fleet.system = system;
  const int per_host = Info(system).gpus_per_host;
  for (const auto& [key, i] : order) {
    if (v.domain_names.empty() || v.domain_names.back() != key.first)
      v.domain_names.push_back(key.first);
    GpuHostState s;
    s.domain = static_cast<int>(v.domain_names.size()) - 1;
    s.free_gpus = std::clamp(use[i].free_gpus, 0, per_host);
    s.usable = use[i].usable;
    s.nvlink_ready = domains[i].nvlink_ready;
    v.fleet.hosts.push_back(s);
    v.host_names.push_back(key.second);
  }
  v.fleet.domains = static_cast<int>(v.domain_names.size());
  return v;
}

}  // namespace tessera
