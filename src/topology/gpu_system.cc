#include "topology/gpu_system.h"

#include <cctype>
#include <string>

namespace tessera {
namespace {

const std::vector<GpuSystemInfo>& GpuCatalog() {
  static const std::vector<GpuSystemInfo> kCatalog = {
      {GpuSystem::kH100, "h100", "HGX H100: 8 GPUs per host, NVLink domain = one host", 8, 1},
      {GpuSystem::kH200, "h200", "HGX H200: 8 GPUs per host, NVLink domain = one host", 8, 1},
      {GpuSystem::kGb200Nvl72, "gb200-nvl72",
       "GB200 NVL72: 4 GPUs per tray (host), 18 trays per NVLink domain (72 GPUs)", 4, 18},
  };
  return kCatalog;
}

std::string GpuSystemLower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

const GpuSystemInfo& Info(GpuSystem s) {
  for (const GpuSystemInfo& info : GpuCatalog()) {
    if (info.system == s) return info;
  }
  return GpuCatalog().front();  // unreachable: every enumerator is in the catalog
}

const std::vector<GpuSystem>& AllGpuSystems() {
  static const std::vector<GpuSystem> kAll = [] {
    std::vector<GpuSystem> all;
    for (const GpuSystemInfo& info : GpuCatalog()) all.push_back(info.system);
    return all;
  }();
  return kAll;
}

std::string_view GpuSystemName(GpuSystem s) { return Info(s).name; }

std::string ValidGpuSystemsText() {
  std::string out;
  for (const GpuSystemInfo& info : GpuCatalog()) {
    if (!out.empty()) out += ", ";
    out += info.name;
  }
  return out;
}

Result<GpuSystem> ParseGpuSystem(std::string_view text) {
  const std::string lower = GpuSystemLower(text);
  for (const GpuSystemInfo& info : GpuCatalog()) {
    if (lower == info.name) return info.system;
  }
  if (text.empty())
    return InvalidArgument("gpu: empty; valid GPU systems: " + ValidGpuSystemsText());
  return InvalidArgument("gpu: unknown GPU system '" + std::string(text) +
                         "'; valid GPU systems: " + ValidGpuSystemsText());
}

Result<int> HostsForGpus(GpuSystem s, int gpus) {
  if (gpus < 1) {
    return InvalidArgument("gpus: " + std::to_string(gpus) + " must be at least 1");
  }
  const int per_host = Info(s).gpus_per_host;
  return (gpus + per_host - 1) / per_host;
}

}  // namespace tessera
