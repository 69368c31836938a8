// GPU placement domains from what the agents discovered: which registered hosts share an
// NVLink clique, and the GpuFleet (gpu_planner.h) a GPU job of one system is planned on.
//
// A host's GPUs each report their NVLink fabric (`nvidia-smi -q -x`: clusterUuid, cliqueId,
// state, status; docs/discovery.md). The rules:
//   - every GPU fabric-attached (state Completed, status Success) and all on one clusterUuid and
//     cliqueId: the host joins the domain of that clique, with every other host of it;
//   - no GPU with a fabric (HGX H100/H200: the NVLink domain is the host): a domain of its own,
//     NVLink-ready (its GPUs talk over the host's own NVSwitches);
//   - GPUs that disagree on the clique, or some not fabric-attached (state In Progress, a
//     failure status, some with a fabric and some without): a domain of its own, not
//     NVLink-ready (clique-required jobs never use it), with the reason in `reason`.
// A host's GPU system is its label `tessera.dev/gpu-system` when it has one (a catalog name),
// else inferred from the GPUs: 4 per host is gb200-nvl72; 8 is h200 with more than 100 GiB
// each, else h100; any other count has no system (and the reason says so).
//
// Pure: no I/O, clocks or threads. Thread-safety: stateless functions of their arguments.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "placement/gpu_planner.h"
#include "topology/gpu_system.h"

namespace tessera {

inline constexpr const char* kGpuSystemLabel = "tessera.dev/gpu-system";

struct GpuFacts {
  std::string uuid;
  int64_t memory_mib = 0;
  bool has_fabric = false;  // false: nvidia-smi reported no fabric (N/A)
  std::string cluster_uuid, clique_id, state, status;
};

struct GpuHostFacts {
  std::string name;
  std::vector<GpuFacts> gpus;
  std::string system_label;  // the host's tessera.dev/gpu-system label; "" when none
};

struct GpuHostDomain {
  std::string host;
  std::optional<GpuSystem> system;  // empty: not a host of any catalog system (see reason)
  // The domain's name: "CLUSTERUUID/CLIQUEID" for a clique, "host/NAME" for a single host.
  std::string domain;
  bool clique = false;        // a member of a clique domain (other hosts may share it)
  bool nvlink_ready = false;  // may be used by clique-required jobs
  // Why the host is a single-host domain, or has no system, or is not NVLink-ready; "" when it
  // joined its clique, and for an HGX host's ordinary one-host domain.
  std::string reason;
};

// One entry per host of `hosts` that has GPUs, in the input's order.
std::vector<GpuHostDomain> FormGpuDomains(const std::vector<GpuHostFacts>& hosts);

// The fleet a job of `system` is planned on: the hosts of that system, domains numbered by
// name (ascending) and hosts by name inside their domain, so plans repeat and ranks (the
// planner's domain-then-id order) follow the domain, then the host name.
struct GpuFleetView {
  GpuFleet fleet;
  std::vector<std::string> host_names;    // by fleet host id
  std::vector<std::string> domain_names;  // by fleet domain index
};
// `use[i]` is how many GPUs of domains[i]'s host are free now (0 while another job holds
// it) and whether it is healthy; hosts of other systems are left out.
struct GpuHostUse {
  int free_gpus = 0;
  bool usable = true;
};
GpuFleetView MakeGpuFleetView(GpuSystem system, const std::vector<GpuHostDomain>& domains,
                              const std::vector<GpuHostUse>& use);

}  // namespace tessera
