// GPU jobs through the controller (gpu_jobs.cc): hosts that register GPUs form NVLink domains,
// a GPU job is placed in one clique, its workers get the GPU environment and an IMEX channel.
#include "controller/controller_test_util.h"

namespace tessera::controller {
namespace {

// A GB200 tray's registration: 4 GPUs of clique `clique` (fabric `state`), as a one-host v6e
// 2x2 slice, the layout `tessera up --gpu` gives it.
Json TrayRegistration(const std::string& name, const std::string& clique,
                      const std::string& state = "Completed") {
  Json gpus = Json::array();
  for (int g = 0; g < 4; ++g)
    gpus.push_back({{"uuid", "GPU-" + name + "-" + std::to_string(g)},
                    {"memoryMiB", 189471},
                    {"fabric",
                     {{"clusterUuid", "cluster-a"},
                      {"cliqueId", clique},
                      {"state", state},
                      {"status", "Success"}}}});
  return {{"name", name},
          {"generation", "v6e"},
          {"chips", 4},
          {"address", "10.0.0." + std::to_string(name.back() - '0')},
          {"agentPort", 9000},
          {"slice", {{"name", name}, {"topology", "2x2"}, {"worker", 0}}},
          {"discovered", {{"source", "nvidia-smi"}, {"gpus", gpus}}}};
}

Json GpuJobDoc(const std::string& name, Json gpu) {
  return {{"apiVersion", "tessera/v1"},
          {"kind", "TrainJob"},
          {"metadata", {{"name", name}}},
          {"spec", {{"gpu", gpu}, {"template", {{"command", {"python3", "train.py"}}}}}}};
}

class ControllerGpuTest : public ControllerTest {
 protected:
  // Clique 1: t0 (address .0) ... t2; clique 2: u0, u1; a tray whose fabric is in progress.
  void RegisterTrays() {
    for (const char* t : {"t2", "t0", "t1"}) Ok(Register(*c_, TrayRegistration(t, "1")));
    for (const char* u : {"u1", "u0"}) Ok(Register(*c_, TrayRegistration(u, "2")));
    Ok(Register(*c_, TrayRegistration("v0", "3", "In Progress")));
  }
  std::map<std::string, std::string> EnvOf(const std::string& host, const std::string& job) {
    Json a = Ok(c_->Assignments(host));
    for (const Json& x : a["assignments"])
      if (x["job"] == job) return x["env"].get<std::map<std::string, std::string>>();
    ADD_FAILURE() << "no assignment of " << job << " on " << host << ": " << a.dump();
    return {};
  }
};

TEST_F(ControllerGpuTest, HostsShowTheirDomainAndWhyOneStandsAlone) {
  RegisterTrays();
  Json hosts = c_->ListHosts();
  std::map<std::string, Json> gpu;
  for (const Json& h : hosts["items"]) gpu[h["metadata"]["name"]] = h["status"]["gpu"];
  EXPECT_EQ(gpu["t0"]["domain"], "cluster-a/1");
  EXPECT_EQ(gpu["t0"]["system"], "gb200-nvl72");
  EXPECT_EQ(gpu["t0"]["gpus"], 4);
  EXPECT_EQ(gpu["t0"]["nvlinkReady"], true);
  EXPECT_EQ(gpu["u1"]["domain"], "cluster-a/2");
  EXPECT_EQ(gpu["v0"]["domain"], "host/v0");
  EXPECT_EQ(gpu["v0"]["nvlinkReady"], false);
  EXPECT_NE(gpu["v0"]["reason"].get<std::string>().find("state 'In Progress'"), std::string::npos)
      << gpu["v0"];
}

TEST_F(ControllerGpuTest, AJobIsPlacedInOneCliqueWithRanksByHostAndAnImexChannel) {
  RegisterTrays();
  Ok(c_->Apply(GpuJobDoc("a", {{"system", "gb200-nvl72"}, {"hosts", 2}})));
  ASSERT_TRUE(c_->RunPass().ok());
  Json job = Ok(c_->GetJob("a"));
  ASSERT_EQ(job["status"]["phase"], "Starting") << job["status"].dump();
  // Best fit: clique 2 has exactly two free trays; ranks by host name.
  EXPECT_EQ(job["status"]["placement"][0]["hosts"], (Json{"u0", "u1"}));
  EXPECT_EQ(job["status"]["gpu"]["domains"], (Json{"cluster-a/2", "cluster-a/2"}));
  EXPECT_EQ(job["status"]["gpu"]["imexChannel"], 0);
  auto e0 = EnvOf("u0", "a");
  auto e1 = EnvOf("u1", "a");
  EXPECT_EQ(e0["RANK"], "0");
  EXPECT_EQ(e1["RANK"], "1");
  EXPECT_EQ(e1["NODE_RANK"], "1");
  EXPECT_EQ(e1["WORLD_SIZE"], "2");
  EXPECT_EQ(e1["LOCAL_RANK"], "0");
  EXPECT_EQ(e1["MASTER_ADDR"], "10.0.0.0");
  EXPECT_EQ(e1["MASTER_PORT"], std::to_string(job["status"]["masterPort"].get<int>()));
  EXPECT_EQ(e1["CUDA_VISIBLE_DEVICES"], "0,1,2,3");
  EXPECT_EQ(e1["TESSERA_IMEX_CHANNEL"], "0");
  EXPECT_EQ(e1.count("TPU_WORKER_ID"), 0u);

  // A second two-tray job goes to clique 1 with the next channel; a third one of three trays
  // waits (one tray of clique 1 is left, and v0 is not NVLink-attached).
  Ok(c_->Apply(GpuJobDoc("b", {{"system", "gb200-nvl72"}, {"hosts", 2}})));
  Ok(c_->Apply(GpuJobDoc("c", {{"system", "gb200-nvl72"}, {"hosts", 3}})));
  ASSERT_TRUE(c_->RunPass().ok());
  Json b = Ok(c_->GetJob("b"));
  EXPECT_EQ(b["status"]["placement"][0]["hosts"], (Json{"t0", "t1"}));
  EXPECT_EQ(b["status"]["gpu"]["imexChannel"], 1);
  Json c = Ok(c_->GetJob("c"));
  EXPECT_EQ(c["status"]["phase"], "Pending");
  EXPECT_EQ(c["status"]["reason"], "NotEnoughHosts") << c["status"].dump();

  // The record survives a head restart.
  c_.reset();
  Start();
  Json again = Ok(c_->GetJob("a"));
  EXPECT_EQ(again["status"]["gpu"], job["status"]["gpu"]);
  EXPECT_EQ(EnvOf("u1", "a")["TESSERA_IMEX_CHANNEL"], "0");
}

TEST_F(ControllerGpuTest, OneHostJobsGetNoImexChannelAndPreferredSpills) {
  RegisterTrays();
  Ok(c_->Apply(GpuJobDoc("one", {{"system", "gb200-nvl72"}, {"hosts", 1}})));
  Ok(c_->Apply(
      GpuJobDoc("wide", {{"system", "gb200-nvl72"}, {"hosts", 4}, {"domain", "preferred"}})));
  ASSERT_TRUE(c_->RunPass().ok());
  Json one = Ok(c_->GetJob("one"));
  EXPECT_EQ(one["status"]["phase"], "Starting");
  EXPECT_EQ(one["status"]["gpu"]["imexChannel"], -1);
  EXPECT_EQ(EnvOf(one["status"]["placement"][0]["hosts"][0], "one").count("TESSERA_IMEX_CHANNEL"),
            0u);
  Json wide = Ok(c_->GetJob("wide"));
  ASSERT_EQ(wide["status"]["phase"], "Starting") << wide["status"].dump();
  const Json& domains = wide["status"]["gpu"]["domains"];
  ASSERT_EQ(domains.size(), 4u);
  // Ranks are ordered by domain: hosts of one clique hold consecutive ranks.
  for (size_t i = 1; i < domains.size(); ++i)
    EXPECT_LE(domains[i - 1].get<std::string>(), domains[i].get<std::string>());
}

TEST_F(ControllerGpuTest, RefusalsNameTheField) {
  RegisterTrays();
  // More trays in one clique than a GB200 NVL72 domain has.
  Status big = Err(c_->Apply(GpuJobDoc("big", {{"system", "gb200-nvl72"}, {"hosts", 19}})));
  EXPECT_EQ(big.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FieldOf(big), "spec.gpu.hosts") << big.message();
  // Four trays in one clique: the cliques have three and two.
  Status clique = Err(c_->Apply(GpuJobDoc("four", {{"system", "gb200-nvl72"}, {"hosts", 4}})));
  EXPECT_EQ(FieldOf(clique), "spec.gpu.hosts") << clique.message();
  Status system = Err(c_->Apply(GpuJobDoc("x", {{"system", "a100"}, {"hosts", 1}})));
  EXPECT_EQ(FieldOf(system), "spec.gpu.system") << system.message();
  // No h100 host has registered: the job waits, and says why.
  Ok(c_->Apply(GpuJobDoc("h", {{"system", "h100"}, {"hosts", 1}})));
  ASSERT_TRUE(c_->RunPass().ok());
  Json h = Ok(c_->GetJob("h"));
  EXPECT_EQ(h["status"]["reason"], "NoGpuHosts") << h["status"].dump();
}

Json QueueDoc(const std::string& kind, const std::string& name, Json spec) {
  return {{"apiVersion", "tessera/v1"},
          {"kind", kind},
          {"metadata", {{"name", name}}},
          {"spec", std::move(spec)}};
}

// With ClusterQueues, GPU jobs are admitted through them: quota in GPUs, reasons, preemption.
TEST_F(ControllerGpuTest, GpuJobsGoThroughClusterQueuesWithQuotaInGpus) {
  RegisterTrays();
  Ok(c_->Apply(QueueDoc(
      "ClusterQueue", "gpus",
      {{"quotas",
        {{{"resource", "nvidia.com/gpu"}, {"gpuSystem", "gb200-nvl72"}, {"nominalQuota", 8}}}},
       {"preemption", {{"withinClusterQueue", "LowerPriority"}}}})));
  Ok(c_->Apply(QueueDoc("LocalQueue", "default", {{"clusterQueue", "gpus"}})));
  Ok(c_->Apply({{"apiVersion", "tessera/v1"},
                {"kind", "PriorityClass"},
                {"metadata", {{"name", "high"}}},
                {"value", 100}}));
  Ok(c_->Apply(GpuJobDoc("a", {{"system", "gb200-nvl72"}, {"hosts", 2}})));
  Ok(c_->Apply(GpuJobDoc("b", {{"system", "gb200-nvl72"}, {"hosts", 1}})));
  ASSERT_TRUE(c_->RunPass().ok());
  Json a = Ok(c_->GetJob("a"));
  ASSERT_EQ(a["status"]["phase"], "Starting") << a["status"].dump();
  EXPECT_EQ(a["status"]["gpu"]["domains"], (Json{"cluster-a/2", "cluster-a/2"}));
  Json b = Ok(c_->GetJob("b"));
  EXPECT_EQ(b["status"]["phase"], "Pending");
  EXPECT_EQ(b["status"]["reason"], "OverQuota") << b["status"].dump();
  EXPECT_NE(b["status"]["message"].get<std::string>().find(
                "needs 4 GPUs; queue gpus uses 8 of nominal 8 GPUs"),
            std::string::npos)
      << b["status"].dump();
  ASSERT_EQ(b["status"]["wouldHelp"].size(), 1u) << b["status"].dump();
  EXPECT_EQ(b["status"]["wouldHelp"][0]["name"], "a");
  Json cq = c_->ListClusterQueues()["items"][0];
  ASSERT_EQ(cq["metadata"]["name"], "gpus");
  ASSERT_EQ(cq["status"]["gpus"].size(), 1u) << cq["status"].dump();
  EXPECT_EQ(cq["status"]["gpus"][0]["gpuSystem"], "gb200-nvl72");
  EXPECT_EQ(cq["status"]["gpus"][0]["usedGpus"], 8);
  EXPECT_EQ(cq["status"]["gpus"][0]["pendingWorkloads"], 1);

  // A high-priority job preempts a (same queue, lower priority) and starts on its hosts once
  // a's workers have stopped.
  Json high = GpuJobDoc("high", {{"system", "gb200-nvl72"}, {"hosts", 2}});
  high["spec"]["priority"] = "high";
  Ok(c_->Apply(high));
  ASSERT_TRUE(c_->RunPass().ok());
  a = Ok(c_->GetJob("a"));
  EXPECT_EQ(a["status"]["phase"], "Pending") << a["status"].dump();
  EXPECT_EQ(a["status"]["preemptions"], 1);
  Json h = Ok(c_->GetJob("high"));
  EXPECT_EQ(h["status"]["reason"], "WaitingForPreemption") << h["status"].dump();
}

TEST_F(ControllerGpuTest, AQueueWithoutGpuQuotaSaysHowToAddOne) {
  RegisterTrays();
  Ok(c_->Apply(QueueDoc("ClusterQueue", "tpu",
                        {{"quotas", {{{"generation", "v6e"}, {"nominalQuota", 64}}}}})));
  Ok(c_->Apply(QueueDoc("LocalQueue", "default", {{"clusterQueue", "tpu"}})));
  Ok(c_->Apply(GpuJobDoc("a", {{"system", "gb200-nvl72"}, {"hosts", 1}})));
  ASSERT_TRUE(c_->RunPass().ok());
  Json a = Ok(c_->GetJob("a"));
  EXPECT_EQ(a["status"]["reason"], "OverQuota") << a["status"].dump();
  EXPECT_NE(a["status"]["message"].get<std::string>().find(
                "add {resource: nvidia.com/gpu, gpuSystem: gb200-nvl72, nominalQuota: GPUS}"),
            std::string::npos)
      << a["status"].dump();
}

}  // namespace
}  // namespace tessera::controller
