// GPU worker environment: the variables each worker of a GPU job's attempt (spec.gpu) starts
// with, one worker per host, so that torch.distributed (NCCL) finds its peers and each worker
// sees its host's GPUs (docs/runtime.md "GPU jobs").
//
// Ranks follow the placement's host order, which the GPU domain planner gives by domain, then
// host (placement/gpu_domains.h): hosts of one NVLink clique hold consecutive ranks. A job
// spanning hosts of one clique shares an IMEX channel (multi-node NVLink memory import/export
// needs one); the head picks it (PickImexChannel) and records it on the placement.
//
// Pure: a function of the attempt's placement and ports. Thread-safety: stateless.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "topology/gpu_system.h"
#include "workload/worker_env.h"

namespace tessera {

struct GpuWorkerHost {
  std::string name;
  std::string address;  // MASTER_ADDR when it holds rank 0
  std::string domain;   // its NVLink domain's name (GpuHostDomain::domain)
  int gpus = 0;         // GPUs the worker sees: CUDA_VISIBLE_DEVICES=0..gpus-1
};

struct GpuAttemptLayout {
  std::string job;
  int attempt = 0;
  GpuSystem system = GpuSystem::kH100;
  std::vector<GpuWorkerHost> hosts;  // rank order
  int master_port = 0;
  int imex_channel = -1;  // -1: none
  std::string checkpoint_dir;
};

// One entry per host, in rank order (slice 0, worker = rank): RANK, NODE_RANK, WORLD_SIZE
// (hosts), LOCAL_RANK 0 and LOCAL_WORLD_SIZE 1 (one worker per host), MASTER_ADDR (rank 0's
// address), MASTER_PORT, CUDA_VISIBLE_DEVICES, TESSERA_GPU_SYSTEM, TESSERA_GPU_DOMAIN,
// TESSERA_GPU_DOMAINS (how many domains the job spans), TESSERA_IMEX_CHANNEL and
// TESSERA_IMEX_CHANNEL_DEVICE (/dev/nvidia-caps-imex-channels/channelN) when it has one,
// TESSERA_JOB, TESSERA_ATTEMPT, TESSERA_CHECKPOINT_DIR when set.
std::vector<WorkerEnv> ComputeGpuWorkerEnv(const GpuAttemptLayout& layout);

// Whether a placement needs an IMEX channel: more than one host, and some NVLink clique holds
// more than one of them (`clique[i]`: host i is in a clique domain; `domains[i]` its domain).
bool NeedsImexChannel(const std::vector<std::string>& domains, const std::vector<bool>& clique);

// IMEX channels are numbered 0..kImexChannels-1 (the driver's default channel count).
inline constexpr int kImexChannels = 2048;
// The lowest channel not in `in_use`; -1 when all are taken.
int PickImexChannel(const std::set<int>& in_use);

}  // namespace tessera
