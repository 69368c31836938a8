#include "workload/gpu_worker_env.h"

#include <map>

namespace tessera {

std::vector<WorkerEnv> ComputeGpuWorkerEnv(const GpuAttemptLayout& l) {
  std::vector<WorkerEnv> out;
  if (l.hosts.empty()) return out;
  const int world = static_cast<int>(l.hosts.size());
  std::set<std::string> domains;
  for (const GpuWorkerHost& h : l.hosts) domains.insert(h.domain);
  for (int r = 0; r < world; ++r) {
    const GpuWorkerHost& h = l.hosts[r];
    WorkerEnv e;
    e.slice = 0;
    e.worker = r;
    e.rank = r;
    e.host = h.name;
    auto& v = e.env;
    v["RANK"] = std::to_string(r);
    v["NODE_RANK"] = std::to_string(r);
    v["WORLD_SIZE"] = std::to_string(world);
    v["LOCAL_RANK"] = "0";  // one worker process per host
    v["LOCAL_WORLD_SIZE"] = "1";
    v["MASTER_ADDR"] = l.hosts[0].address;
    v["MASTER_PORT"] = std::to_string(l.master_port);
    std::string devices;
    for (int g = 0; g < h.gpus; ++g) devices += (g ? "," : "") + std::to_string(g);
    v["CUDA_VISIBLE_DEVICES"] = devices;
    v["TESSERA_GPU_SYSTEM"] = std::string(GpuSystemName(l.system));
    v["TESSERA_GPU_DOMAIN"] = h.domain;
    v["TESSERA_GPU_DOMAINS"] = std::to_string(domains.size());
    if (l.imex_channel >= 0) {
      v["TESSERA_IMEX_CHANNEL"] = std::to_string(l.imex_channel);
      v["TESSERA_IMEX_CHANNEL_DEVICE"] =
          "/dev/nvidia-caps-imex-channels/channel" + std::to_string(l.imex_channel);
    }
    v["TESSERA_JOB"] = l.job;
    v["TESSERA_ATTEMPT"] = std::to_string(l.attempt);
    if (!l.checkpoint_dir.empty()) v["TESSERA_CHECKPOINT_DIR"] = l.checkpoint_dir;
    out.push_back(std::move(e));
  }
  return out;
}

bool NeedsImexChannel(const std::vector<std::string>& domains, const std::vector<bool>& clique) {
  std::map<std::string, int> per_clique;
  for (size_t i = 0; i < domains.size() && i < clique.size(); ++i)
    if (clique[i] && ++per_clique[domains[i]] > 1) return true;
  return false;
}

int PickImexChannel(const std::set<int>& in_use) {
  for (int c = 0; c < kImexChannels; ++c)
    if (!in_use.count(c)) return c;
  return -1;
}

}  // namespace tessera
