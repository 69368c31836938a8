// The pure part of `tessera up --gpu` (cluster_command.cc): the emulated GPU hosts, the
// `nvidia-smi -q -x` each one's agent reads (a script in the state directory prints it), and a
// GPU demo job. No I/O: cli_core_test.
//
// The hosts register as one-host v6e slices of as many chips as they have GPUs (2x2 for 4, 2x4
// for 8: the registration's layout, docs/deploy.md "GPU nodes"), discover their GPUs through
// the agent's real nvidia-smi path (`--devices nvidia --nvidia-smi SCRIPT`) and carry the label
// tessera.dev/gpu-system, so the head forms their NVLink domains as it does a real cluster's.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace tessera::cli {

struct GpuUpHost {
  std::string name;        // "nvl72-00-t03" (domain 0, tray 3) or "hgx-05"
  std::string topology;    // the v6e one-host shape of its GPU count: "2x2" or "2x4"
  std::string nvidia_smi;  // what `nvidia-smi -q -x` prints on it
};

struct GpuUpSpec {
  std::string system;  // a catalog name: gb200-nvl72, h100, h200
  int domains = 0;     // gb200-nvl72: NVLink domains (racks), 1..8
  int trays = 0;       // gb200-nvl72: trays per domain, 1..18 (0: 18, a whole rack)
  int hosts = 0;       // h100, h200: hosts, 1..64
};

// The hosts of the emulated cluster, domain by domain. Every GPU of a gb200-nvl72 domain
// reports one clusterUuid and cliqueId, fabric Completed/Success; HGX GPUs report no fabric
// (N/A). InvalidArgument naming the flag (--gpu, --domains, --trays, --hosts) and the fix.
Result<std::vector<GpuUpHost>> GpuUpHosts(const GpuUpSpec& spec);

// A GPU TrainJob of two hosts (domain: required on gb200-nvl72 when a domain has two trays,
// else preferred) that runs examples/train/train.py with gloo.
std::string GpuDemoJobYaml(const GpuUpSpec& spec);

}  // namespace tessera::cli
