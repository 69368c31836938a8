// The GPU system catalog: the systems users name (`h100`, `h200`, `gb200-nvl72`), how many
// GPUs a host holds and how many hosts share one NVLink domain.
//
// On HGX H100/H200 the NVLink domain is one 8-GPU host: a job larger than a host crosses the
// network between hosts whatever the scheduler does. On GB200 NVL72 a rack of 18 trays (hosts)
// of 4 GPUs shares one NVLink fabric (an NVLink clique, as nvidia-smi's `cliqueId` names it), so
// a job of up to 18 trays can keep all of its traffic on NVLink if it stays in one clique.
// docs/topology.md has the table. Pure: a function of its inputs.
//
// Thread-safety: the catalog is immutable after static initialisation; all functions are safe
// to call from any thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tessera {

enum class GpuSystem { kH100, kH200, kGb200Nvl72 };

struct GpuSystemInfo {
  GpuSystem system;
  std::string_view name;         // as users write it: "h100", "gb200-nvl72"
  std::string_view description;  // "HGX H100, 8 GPUs per host"
  int gpus_per_host;             // GPUs one host (tray) holds
  int hosts_per_domain;          // hosts that share one NVLink domain (clique)
  int gpus_per_domain() const { return gpus_per_host * hosts_per_domain; }
};

const GpuSystemInfo& Info(GpuSystem s);
const std::vector<GpuSystem>& AllGpuSystems();
std::string_view GpuSystemName(GpuSystem s);
// "h100, h200, gb200-nvl72": for error messages.
std::string ValidGpuSystemsText();

// Accepts the catalog names in any case ("h100", "GB200-NVL72"); anything else is an
// InvalidArgument that lists the valid names.
Result<GpuSystem> ParseGpuSystem(std::string_view text);

// Whole hosts for a request of `gpus` GPUs on system `s`: ceil(gpus / gpus_per_host).
// InvalidArgument when gpus < 1.
Result<int> HostsForGpus(GpuSystem s, int gpus);

}  // namespace tessera
