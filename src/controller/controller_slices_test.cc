// Fixed slices discovered by agents (docs/discovery.md "What the head checks"): registration
// refusals that name the field and both claims, a partial slice that is not placed and says
// which workers are missing, a Lost host replaced by a host that takes its worker id, and the
// worker environment the head assigns by discovered worker id and address.
#include <algorithm>

#include "controller/controller_test_util.h"

namespace tessera::controller {
namespace {

// The registration of a discovered v5p/v4 host: its place in the slice's cube as the agent
// computes it (worker w of a 2x2xN slice is coord 0,0,w), and what it discovered.
Json TpuHost(const std::string& name, const std::string& slice, const std::string& type,
             const std::string& topology, int worker, const std::string& generation = "v5p") {
  return {{"name", name},
          {"generation", generation},
          {"chips", 4},
          {"address", "10.0.0." + std::to_string(10 + worker)},
          {"agentPort", 9000 + worker},
          {"cube", {{"name", slice}, {"block", "block-00"}, {"coord", {0, 0, worker % 4}}}},
          {"discovered",
           {{"source", "metadata"},
            {"acceleratorType", type},
            {"topology", topology},
            {"sliceName", slice},
            {"workerId", worker}}}};
}

Json V5pJob(const std::string& name, const std::string& topology) {
  Json doc = JobDoc(name, 1, topology);
  doc["spec"]["accelerator"] = "v5p";
  return doc;
}

const Json* FindHost(const Json& list, const std::string& name) {
  for (const Json& h : list["items"])
    if (h["metadata"]["name"] == name) return &h;
  return nullptr;
}

class SliceControllerTest : public ControllerTest {
 protected:
  // The host's document; an empty object (so a check fails, not the test binary) when absent.
  Json HostDoc(const std::string& name) {
    const Json list = c_->ListHosts();
    const Json* h = FindHost(list, name);
    return h != nullptr ? *h : Json::object();
  }
  // Every registered host heartbeats (no workers), so none is lost while the clock moves.
  void BeatAllBut(const std::string& silent) {
    const Json list = c_->ListHosts();
    for (const Json& h : list["items"]) {
      const std::string name = h["metadata"]["name"];
      if (name != silent) Ok(Beat(*c_, name, {{"workers", Json::array()}, {"revision", 0}}));
    }
  }
  std::map<std::string, std::map<std::string, std::string>> EnvByHost() {
    std::map<std::string, std::map<std::string, std::string>> out;
    const Json list = c_->ListHosts();
    for (const Json& h : list["items"]) {
      const std::string name = h["metadata"]["name"];
      const Json a = Ok(c_->Assignments(name));
      for (const Json& x : a["assignments"])
        out[name] = x["env"].get<std::map<std::string, std::string>>();
    }
    return out;
  }
};

TEST_F(SliceControllerTest, HostsOfOneSliceMustAgreeAndRefusalsChangeNothing) {
  Ok(Register(*c_, TpuHost("vm-0", "tpu-a", "v5p-16", "2x2x2", 0)));
  Ok(Register(*c_, TpuHost("vm-1", "tpu-a", "v5p-16", "2x2x2", 1)));
  const Json before = c_->ListHosts();
  const size_t events_before = c_->ListEvents()["items"].size();

  // Another accelerator type for the same slice.
  Status type = Err(Register(*c_, TpuHost("vm-2", "tpu-a", "v5p-32", "2x2x4", 2)));
  EXPECT_EQ(type.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(FieldOf(type), "discovered.acceleratorType") << type.message();
  for (const char* part : {"vm-2", "v5p-32 2x2x4", "v5p-16 2x2x2", "host vm-0"})
    EXPECT_NE(type.message().find(part), std::string::npos) << part << ": " << type.message();
  // A topology the accelerator type does not have.
  Status shape = Err(Register(*c_, TpuHost("vm-3", "tpu-b", "v5p-16", "2x2x4", 0)));
  EXPECT_EQ(shape.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FieldOf(shape), "discovered.topology") << shape.message();
  // A worker id a live host holds: both hosts named.
  Status taken = Err(Register(*c_, TpuHost("vm-9", "tpu-a", "v5p-16", "2x2x2", 1)));
  EXPECT_EQ(taken.code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(FieldOf(taken), "discovered.workerId") << taken.message();
  EXPECT_NE(taken.message().find("vm-9"), std::string::npos) << taken.message();
  EXPECT_NE(taken.message().find("live host vm-1"), std::string::npos) << taken.message();
  // A registered host that comes back with a claim the slice refuses keeps its record.
  Json changed = TpuHost("vm-1", "tpu-a", "v5p-32", "2x2x4", 1);
  Status again = Err(Register(*c_, changed));
  EXPECT_EQ(again.code(), StatusCode::kFailedPrecondition) << again.message();

  EXPECT_EQ(c_->ListHosts(), before);
  EXPECT_EQ(c_->ListEvents()["items"].size(), events_before);
  // A restart of the head loads the same hosts from the store.
  Start();
  ASSERT_EQ(c_->ListHosts()["items"].size(), 2u);
  EXPECT_EQ(HostDoc("vm-1")["spec"]["discovered"]["acceleratorType"], "v5p-16");
}

TEST_F(SliceControllerTest, APartialSliceIsNotPlacedAndSaysWhichWorkersAreMissing) {
  // A v4-32 (2x2x4, 4 hosts): names in the reverse of worker order, so name order is not
  // worker order.
  const std::vector<std::string> names = {"vm-d", "vm-c", "vm-b", "vm-a"};
  Ok(Register(*c_, TpuHost(names[0], "tpu-v4", "v4-32", "2x2x4", 0, "v4")));
  Ok(Register(*c_, TpuHost(names[2], "tpu-v4", "v4-32", "2x2x4", 2, "v4")));
  Json job = V5pJob("train", "2x2x4");
  job["spec"]["accelerator"] = "v4";
  Ok(c_->CreateJob(job));
  ASSERT_TRUE(c_->RunPass().ok());
  const Json pending = Ok(c_->GetJob("train"));
  EXPECT_EQ(pending["status"]["phase"], "Pending");
  const std::string message = pending["status"]["message"];
  EXPECT_NE(message.find("slice tpu-v4 (v4-32 2x2x4) would fit but is not placeable: "
                         "workers 1, 3 missing"),
            std::string::npos)
      << message;
  Json shown = HostDoc("vm-b");
  Json slice = shown["status"]["slice"];
  EXPECT_EQ(slice["name"], "tpu-v4");
  EXPECT_EQ(slice["topology"], "2x2x4");
  EXPECT_EQ(slice["worker"], 2);
  EXPECT_EQ(slice["workers"], 4);
  EXPECT_EQ(slice["missing"], Json({1, 3}));
  EXPECT_EQ(slice["placeable"], false);

  Ok(Register(*c_, TpuHost(names[3], "tpu-v4", "v4-32", "2x2x4", 3, "v4")));
  Ok(Register(*c_, TpuHost(names[1], "tpu-v4", "v4-32", "2x2x4", 1, "v4")));
  ASSERT_TRUE(c_->RunPass().ok());
  EXPECT_EQ(Phase("train"), "Starting");
  EXPECT_EQ(HostDoc("vm-b")["status"]["slice"]["placeable"], true);
  // The head assigns the worker environment: TPU_WORKER_ID is the discovered worker id and
  // TPU_WORKER_HOSTNAMES the hosts' addresses in worker order.
  const auto env = EnvByHost();
  ASSERT_EQ(env.size(), 4u);
  for (int w = 0; w < 4; ++w) {
    const auto& e = env.at(names[w]);
    EXPECT_EQ(e.at("TPU_WORKER_ID"), std::to_string(w)) << names[w];
    EXPECT_EQ(e.at("TPU_WORKER_HOSTNAMES"), "10.0.0.10,10.0.0.11,10.0.0.12,10.0.0.13");
    EXPECT_EQ(e.at("TPU_NAME"), "tpu-v4");
    EXPECT_EQ(e.at("TPU_TOPOLOGY"), "2x2x4");
  }
}

TEST_F(SliceControllerTest, AHostThatReplacesALostHostTakesItsWorkerId) {
  Ok(Register(*c_, TpuHost("vm-0", "tpu-a", "v5p-16", "2x2x2", 0)));
  Ok(Register(*c_, TpuHost("vm-1", "tpu-a", "v5p-16", "2x2x2", 1)));
  ASSERT_TRUE(c_->RunPass().ok());
  // vm-1 goes silent past its lease.
  for (int i = 0; i < 7; ++i) {
    clock_.AdvanceMs(1000);
    BeatAllBut("vm-1");
    ASSERT_TRUE(c_->Tick().ok());
  }
  ASSERT_EQ(HostDoc("vm-1")["status"]["state"], "Lost");
  EXPECT_EQ(HostDoc("vm-0")["status"]["slice"]["lost"], Json({1}));
  Ok(c_->CreateJob(V5pJob("train", "2x2x2")));
  ASSERT_TRUE(c_->RunPass().ok());
  EXPECT_EQ(Phase("train"), "Pending");
  EXPECT_NE(Ok(c_->GetJob("train"))["status"]["message"].get<std::string>().find("worker 1 lost"),
            std::string::npos);

  // A new machine with the same worker number takes vm-1's place.
  Ok(Register(*c_, TpuHost("vm-1b", "tpu-a", "v5p-16", "2x2x2", 1)));
  EXPECT_FALSE(HostDoc("vm-1").contains("metadata"));
  bool replaced = false;
  const Json events = c_->ListEvents();
  for (const Json& e : events["items"])
    replaced = replaced ||
               (e["reason"] == "WorkerReplaced" &&
                e["message"].get<std::string>().find("from lost host vm-1") != std::string::npos);
  EXPECT_TRUE(replaced);
  ASSERT_TRUE(c_->RunPass().ok());
  EXPECT_EQ(Phase("train"), "Starting");
  const auto env = EnvByHost();
  EXPECT_EQ(env.at("vm-1b").at("TPU_WORKER_ID"), "1");
  EXPECT_EQ(env.at("vm-0").at("TPU_WORKER_ID"), "0");
  // The lost machine coming back finds its worker id held by a live host.
  Status back = Err(Register(*c_, TpuHost("vm-1", "tpu-a", "v5p-16", "2x2x2", 1)));
  EXPECT_EQ(back.code(), StatusCode::kAlreadyExists);
  EXPECT_NE(back.message().find("live host vm-1b"), std::string::npos) << back.message();
  // The replacement survives a restart of the head.
  Start();
  EXPECT_FALSE(HostDoc("vm-1").contains("metadata"));
  EXPECT_TRUE(HostDoc("vm-1b").contains("metadata"));
}

TEST_F(SliceControllerTest, FixedSlicesSitBesideCubesAndAreNeverCarved) {
  // One emulated v5p cube host and a discovered v5p-16: a 2x2x1 job goes to the cube, never to
  // the fixed slice, even while the cube's other hosts are missing.
  Ok(Register(*c_, {{"name", "cube-h0"},
                    {"generation", "v5p"},
                    {"chips", 4},
                    {"address", "127.0.0.1"},
                    {"agentPort", 8999},
                    {"cube", {{"name", "cube-0"}, {"block", "block-00"}, {"coord", {0, 0, 0}}}}}));
  Ok(Register(*c_, TpuHost("vm-0", "tpu-a", "v5p-16", "2x2x2", 0)));
  Ok(Register(*c_, TpuHost("vm-1", "tpu-a", "v5p-16", "2x2x2", 1)));
  Ok(c_->CreateJob(V5pJob("small", "2x2x1")));
  Ok(c_->CreateJob(V5pJob("whole", "2x2x2")));
  ASSERT_TRUE(c_->RunPass().ok());
  EXPECT_EQ(Phase("small"), "Starting");
  EXPECT_EQ(Phase("whole"), "Starting");
  EXPECT_EQ(HostDoc("cube-h0")["status"]["job"], "small");
  EXPECT_EQ(HostDoc("vm-0")["status"]["job"], "whole");
  EXPECT_EQ(HostDoc("vm-1")["status"]["job"], "whole");
  EXPECT_FALSE(HostDoc("cube-h0")["status"].contains("slice"));
}

}  // namespace
}  // namespace tessera::controller
