#include "cli/gpu_up_plan.h"

#include <cstdio>

#include "topology/gpu_system.h"

namespace tessera::cli {
namespace {

// An nvidia-smi uuid for GPU `gpu` of host `host` of domain `domain`, unique in the cluster.
std::string FakeGpuUuid(int domain, int host, int gpu) {
  char uuid[64];
  std::snprintf(uuid, sizeof uuid, "GPU-e0000000-%04x-4000-8000-%012x", domain, host * 16 + gpu);
  return uuid;
}

std::string FakeNvidiaSmiXml(const GpuSystemInfo& info, int domain, int host, int64_t memory_mib) {
  const bool fabric = info.hosts_per_domain > 1;
  char cluster[64];
  std::snprintf(cluster, sizeof cluster, "e0000000-0000-4000-8000-%012x", domain);
  std::string xml =
      "<?xml version=\"1.0\" ?>\n<nvidia_smi_log>\n"
      "\t<driver_version>emulated (tessera up --gpu)</driver_version>\n"
      "\t<attached_gpus>" +
      std::to_string(info.gpus_per_host) + "</attached_gpus>\n";
  for (int g = 0; g < info.gpus_per_host; ++g) {
    xml += "\t<gpu id=\"0000000" + std::to_string(g) + ":01:00.0\">\n\t\t<uuid>" +
           FakeGpuUuid(domain, host, g) + "</uuid>\n\t\t<fabric>\n";
    xml += fabric ? "\t\t\t<state>Completed</state>\n\t\t\t<status>Success</status>\n"
                    "\t\t\t<cliqueId>1</cliqueId>\n\t\t\t<clusterUuid>" +
                        std::string(cluster) + "</clusterUuid>\n"
                  : "\t\t\t<state>N/A</state>\n\t\t\t<status>N/A</status>\n";
    xml += "\t\t</fabric>\n\t\t<fb_memory_usage>\n\t\t\t<total>" + std::to_string(memory_mib) +
           " MiB</total>\n\t\t</fb_memory_usage>\n\t</gpu>\n";
  }
  return xml + "</nvidia_smi_log>\n";
}

}  // namespace

Result<std::vector<GpuUpHost>> GpuUpHosts(const GpuUpSpec& spec) {
  auto system = ParseGpuSystem(spec.system);
  if (!system.ok()) return InvalidArgument("--gpu: " + system.status().message());
  const GpuSystemInfo& info = Info(*system);
  const std::string topology = info.gpus_per_host == 4 ? "2x2" : "2x4";
  std::vector<GpuUpHost> hosts;
  char name[64];
  if (info.hosts_per_domain > 1) {
    if (spec.hosts != 0)
      return InvalidArgument("--hosts: a " + std::string(info.name) +
                             " cluster is sized by --domains (and --trays per domain)");
    if (spec.domains < 1 || spec.domains > 8)
      return InvalidArgument("--domains: a " + std::string(info.name) +
                             " cluster needs 1 to 8 NVLink domains, e.g. --domains 2");
    const int trays = spec.trays == 0 ? info.hosts_per_domain : spec.trays;
    if (trays < 1 || trays > info.hosts_per_domain)
      return InvalidArgument("--trays: 1 to " + std::to_string(info.hosts_per_domain) +
                             " trays per domain");
    for (int d = 0; d < spec.domains; ++d)
      for (int t = 0; t < trays; ++t) {
        std::snprintf(name, sizeof name, "nvl72-%02d-t%02d", d, t);
        hosts.push_back({name, topology, FakeNvidiaSmiXml(info, d, t, 189471)});
      }
    return hosts;
  }
  if (spec.domains != 0 || spec.trays != 0)
    return InvalidArgument("--domains: each " + std::string(info.name) +
                           " host is its own NVLink domain; size the cluster with --hosts N");
  if (spec.hosts < 1 || spec.hosts > 64)
    return InvalidArgument("--hosts: a " + std::string(info.name) +
                           " cluster needs 1 to 64 hosts, e.g. --hosts 2");
  const int64_t memory = *system == GpuSystem::kH200 ? 143771 : 81559;
  for (int h = 0; h < spec.hosts; ++h) {
    std::snprintf(name, sizeof name, "hgx-%02d", h);
    hosts.push_back({name, topology, FakeNvidiaSmiXml(info, h, 0, memory)});
  }
  return hosts;
}

std::string GpuDemoJobYaml(const GpuUpSpec& spec) {
  auto system = ParseGpuSystem(spec.system);
  const bool nvl = system.ok() && Info(*system).hosts_per_domain > 1;
  const bool one_domain = nvl && (spec.trays == 0 || spec.trays >= 2);
  return "# A demo GPU TrainJob that fits the cluster `tessera up --gpu " + spec.system +
         "` started: two hosts,\n"
         "# one worker each, examples/train/train.py over gloo; run from the repository's top "
         "folder.\n"
         "apiVersion: tessera/v1\n"
         "kind: TrainJob\n"
         "metadata:\n"
         "  name: gpu-demo\n"
         "spec:\n"
         "  gpu:\n"
         "    system: " +
         spec.system + "\n    hosts: 2\n    domain: " + (one_domain ? "required" : "preferred") +
         "\n"
         "  template:\n"
         "    command: [/usr/bin/python3, examples/train/train.py]\n"
         "    env:\n"
         "      STEPS: \"50\"\n";
}

}  // namespace tessera::cli
