#include "workload/worker_env.h"

namespace tessera {

std::vector<WorkerEnv> ComputeWorkerEnv(const AttemptLayout& l) {
  std::vector<WorkerEnv> out;
  const int num_slices = static_cast<int>(l.slices.size());
  if (num_slices == 0) return out;
  const int hosts = static_cast<int>(l.slices[0].size());
  const int world = num_slices * hosts;
  const WorkerHost& chief = l.slices[0][0];
  for (int s = 0; s < num_slices; ++s) {
    std::string hostnames;
    for (const WorkerHost& h : l.slices[s])
      hostnames += (hostnames.empty() ? "" : ",") + (h.discovered ? h.address : h.name);
    for (int w = 0; w < static_cast<int>(l.slices[s].size()); ++w) {
      WorkerEnv e;
      e.slice = s;
      e.worker = w;
      e.rank = s * hosts + w;
      e.host = l.slices[s][w].name;
      auto& v = e.env;
      v["TPU_WORKER_ID"] = std::to_string(w);
      v["TPU_WORKER_HOSTNAMES"] = hostnames;
      v["TPU_NAME"] = s < static_cast<int>(l.slice_names.size()) ? l.slice_names[s] : l.job;
      v["TPU_ACCELERATOR_TYPE"] = l.topology.PodType();
      v["TPU_TOPOLOGY"] = l.topology.shape().ToString();
      if (num_slices > 1) {
        v["MEGASCALE_COORDINATOR_ADDRESS"] = chief.address;
        v["MEGASCALE_PORT"] = std::to_string(l.megascale_port);
        v["MEGASCALE_NUM_SLICES"] = std::to_string(num_slices);
        v["MEGASCALE_SLICE_ID"] = std::to_string(s);
      }
      v["RANK"] = std::to_string(e.rank);
      v["WORLD_SIZE"] = std::to_string(world);
      v["LOCAL_RANK"] = "0";  // one worker process per host
      v["MASTER_ADDR"] = chief.address;
      v["MASTER_PORT"] = std::to_string(l.master_port);
      v["JAX_COORDINATOR_ADDRESS"] = chief.address + ":" + std::to_string(l.jax_port);
      v["JAX_PROCESS_ID"] = std::to_string(e.rank);
      v["JAX_PROCESS_COUNT"] = std::to_string(world);
      v["TESSERA_JOB"] = l.job;
      v["TESSERA_ATTEMPT"] = std::to_string(l.attempt);
      if (!l.checkpoint_dir.empty()) v["TESSERA_CHECKPOINT_DIR"] = l.checkpoint_dir;
      out.push_back(std::move(e));
    }
  }
  return out;
}

}  // namespace tessera
