#include "workload/gpu_worker_env.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

GpuAttemptLayout TwoTrays() {
  GpuAttemptLayout l;
  l.job = "llm";
  l.attempt = 1;
  l.system = GpuSystem::kGb200Nvl72;
  l.hosts = {{"tray-b", "10.0.0.2", "c/1", 4}, {"tray-a", "10.0.0.1", "c/1", 4}};
  l.master_port = 29500;
  l.imex_channel = 3;
  l.checkpoint_dir = "/ckpt/llm";
  return l;
}

TEST(GpuWorkerEnv, OneWorkerPerHostInPlacementOrderWithEveryVariable) {
  auto envs = ComputeGpuWorkerEnv(TwoTrays());
  ASSERT_EQ(envs.size(), 2u);
  EXPECT_EQ(envs[0].host, "tray-b");
  EXPECT_EQ(envs[1].host, "tray-a");
  const std::map<std::string, std::string> want = {
      {"RANK", "1"},
      {"NODE_RANK", "1"},
      {"WORLD_SIZE", "2"},
      {"LOCAL_RANK", "0"},
      {"LOCAL_WORLD_SIZE", "1"},
      {"MASTER_ADDR", "10.0.0.2"},
      {"MASTER_PORT", "29500"},
      {"CUDA_VISIBLE_DEVICES", "0,1,2,3"},
      {"TESSERA_GPU_SYSTEM", "gb200-nvl72"},
      {"TESSERA_GPU_DOMAIN", "c/1"},
      {"TESSERA_GPU_DOMAINS", "1"},
      {"TESSERA_IMEX_CHANNEL", "3"},
      {"TESSERA_IMEX_CHANNEL_DEVICE", "/dev/nvidia-caps-imex-channels/channel3"},
      {"TESSERA_JOB", "llm"},
      {"TESSERA_ATTEMPT", "1"},
      {"TESSERA_CHECKPOINT_DIR", "/ckpt/llm"},
  };
  EXPECT_EQ(envs[1].env, want);
  EXPECT_EQ(envs[1].rank, 1);
  EXPECT_EQ(envs[1].worker, 1);
  EXPECT_EQ(envs[1].slice, 0);
  EXPECT_EQ(envs[0].env.at("RANK"), "0");
}

TEST(GpuWorkerEnv, NoImexChannelNoImexVariablesAndDomainsCounted) {
  GpuAttemptLayout l = TwoTrays();
  l.imex_channel = -1;
  l.checkpoint_dir = "";
  l.system = GpuSystem::kH100;
  l.hosts = {{"h0", "10.0.1.0", "host/h0", 8}, {"h1", "10.0.1.1", "host/h1", 8}};
  auto envs = ComputeGpuWorkerEnv(l);
  ASSERT_EQ(envs.size(), 2u);
  for (const auto& e : envs) {
    EXPECT_EQ(e.env.count("TESSERA_IMEX_CHANNEL"), 0u);
    EXPECT_EQ(e.env.count("TESSERA_CHECKPOINT_DIR"), 0u);
    EXPECT_EQ(e.env.at("CUDA_VISIBLE_DEVICES"), "0,1,2,3,4,5,6,7");
    EXPECT_EQ(e.env.at("TESSERA_GPU_DOMAINS"), "2");
  }
  EXPECT_TRUE(ComputeGpuWorkerEnv(GpuAttemptLayout{}).empty());
}

TEST(GpuWorkerEnv, ImexChannelOnlyForHostsSharingAClique) {
  EXPECT_TRUE(NeedsImexChannel({"c/1", "c/1"}, {true, true}));
  EXPECT_TRUE(NeedsImexChannel({"c/1", "c/2", "c/2"}, {true, true, true}));
  EXPECT_FALSE(NeedsImexChannel({"c/1", "c/2"}, {true, true}));          // one host per clique
  EXPECT_FALSE(NeedsImexChannel({"c/1"}, {true}));                       // one host
  EXPECT_FALSE(NeedsImexChannel({"host/a", "host/b"}, {false, false}));  // HGX hosts
  EXPECT_EQ(PickImexChannel({}), 0);
  EXPECT_EQ(PickImexChannel({0, 1, 3}), 2);
  std::set<int> all;
  for (int c = 0; c < kImexChannels; ++c) all.insert(c);
  EXPECT_EQ(PickImexChannel(all), -1);
}

}  // namespace
}  // namespace tessera
