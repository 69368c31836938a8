// Worker environment: the variables every worker process of a job attempt is started with, so
// that TPU runtimes, JAX and torch.distributed find their peers (domain.md section 2).
//
// Pure: a function of the attempt's placement and ports. The controller computes it afresh for
// every attempt (a stale MASTER_PORT or MEGASCALE_SLICE_ID after a restart is a known cause of
// hangs). Thread-safety: stateless.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "topology/topology.h"

namespace tessera {

struct WorkerHost {
  std::string name;     // host name, as listed in TPU_WORKER_HOSTNAMES
  std::string address;  // where peers reach it (MASTER_ADDR, coordinators)
  // A host of a discovered TPU slice (docs/discovery.md): TPU_WORKER_HOSTNAMES lists its
  // address, as the TPU runtime of a provisioned slice expects, instead of its tessera name.
  bool discovered = false;
};

struct AttemptLayout {
  std::string job;
  int attempt = 0;
  SliceTopology topology;
  // slices[s][w]: the host running worker w of slice s (worker-id order, from the planner).
  std::vector<std::vector<WorkerHost>> slices;
  std::vector<std::string> slice_names;  // TPU_NAME of each slice
  int master_port = 0;                   // torch.distributed rendezvous, fresh per attempt
  int jax_port = 0;                      // JAX coordinator, fresh per attempt
  int megascale_port = 8081;             // by convention
  std::string checkpoint_dir;            // may be empty
};

struct WorkerEnv {
  int slice = 0;
  int worker = 0;  // TPU_WORKER_ID
  int rank = 0;    // RANK: slice * hosts_per_slice + worker
  std::string host;
  std::map<std::string, std::string> env;
};

// One entry per worker, in rank order.
std::vector<WorkerEnv> ComputeWorkerEnv(const AttemptLayout& layout);

}  // namespace tessera
