#include "workload/worker_env.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

AttemptLayout TwoSlices() {
  AttemptLayout l;
  l.job = "train";
  l.attempt = 2;
  l.topology = *SliceTopology::Parse("v6e", "4x4");
  for (int s = 0; s < 2; ++s) {
    l.slices.emplace_back();
    for (int w = 0; w < 4; ++w)
      l.slices[s].push_back({"s" + std::to_string(s) + "-w" + std::to_string(w),
                             "10.0." + std::to_string(s) + "." + std::to_string(w)});
    l.slice_names.push_back("slice-00" + std::to_string(s));
  }
  l.master_port = 29500;
  l.jax_port = 29501;
  l.checkpoint_dir = "/ckpt/train";
  return l;
}

TEST(WorkerEnv, MultiSliceJobGetsEveryVariable) {
  auto envs = ComputeWorkerEnv(TwoSlices());
  ASSERT_EQ(envs.size(), 8u);
  const WorkerEnv& e = envs[6];  // slice 1, worker 2
  EXPECT_EQ(e.slice, 1);
  EXPECT_EQ(e.worker, 2);
  EXPECT_EQ(e.rank, 6);
  EXPECT_EQ(e.host, "s1-w2");
  const std::map<std::string, std::string> want = {
      {"TPU_WORKER_ID", "2"},
      {"TPU_WORKER_HOSTNAMES", "s1-w0,s1-w1,s1-w2,s1-w3"},
      {"TPU_NAME", "slice-001"},
      {"TPU_ACCELERATOR_TYPE", "v6e-16"},
      {"TPU_TOPOLOGY", "4x4"},
      {"MEGASCALE_COORDINATOR_ADDRESS", "10.0.0.0"},
      {"MEGASCALE_PORT", "8081"},
      {"MEGASCALE_NUM_SLICES", "2"},
      {"MEGASCALE_SLICE_ID", "1"},
      {"RANK", "6"},
      {"WORLD_SIZE", "8"},
      {"LOCAL_RANK", "0"},
      {"MASTER_ADDR", "10.0.0.0"},
      {"MASTER_PORT", "29500"},
      {"JAX_COORDINATOR_ADDRESS", "10.0.0.0:29501"},
      {"JAX_PROCESS_ID", "6"},
      {"JAX_PROCESS_COUNT", "8"},
      {"TESSERA_JOB", "train"},
      {"TESSERA_ATTEMPT", "2"},
      {"TESSERA_CHECKPOINT_DIR", "/ckpt/train"},
  };
  EXPECT_EQ(e.env, want);
  for (size_t i = 0; i < envs.size(); ++i) EXPECT_EQ(envs[i].rank, static_cast<int>(i));
}

TEST(WorkerEnv, SingleSliceHasNoMegascaleVariables) {
  AttemptLayout l = TwoSlices();
  l.slices.pop_back();
  l.checkpoint_dir.clear();
  auto envs = ComputeWorkerEnv(l);
  ASSERT_EQ(envs.size(), 4u);
  EXPECT_EQ(envs[3].env.count("MEGASCALE_SLICE_ID"), 0u);
  EXPECT_EQ(envs[3].env.count("TESSERA_CHECKPOINT_DIR"), 0u);
  EXPECT_EQ(envs[3].env.at("WORLD_SIZE"), "4");
}

TEST(WorkerEnv, EachAttemptGetsItsOwnPortsAndNumber) {
  AttemptLayout a = TwoSlices(), b = TwoSlices();
  b.attempt = 3;
  b.master_port = 31000;
  auto ea = ComputeWorkerEnv(a), eb = ComputeWorkerEnv(b);
  EXPECT_NE(ea[0].env.at("MASTER_PORT"), eb[0].env.at("MASTER_PORT"));
  EXPECT_EQ(eb[0].env.at("TESSERA_ATTEMPT"), "3");
}

}  // namespace
}  // namespace tessera
