// Host discovery (agent/discovery.h, nvidia_smi.h) against recorded formats: metadata attribute
// sets of multi-host v4, v5p and v6e slices (single and multi-slice), GKE environments, fake
// /dev trees, and nvidia-smi -q -x reports of an HGX H100 host and a GB200 NVL72 tray. The
// metadata server is a fake on 127.0.0.1 port 0; nvidia-smi is a shell script that cats a
// fixture. Every bad input is checked to name its field.
#include "agent/discovery.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>

#include "agent/agent.h"
#include "agent/nvidia_smi.h"
#include "agent/test_util.h"
#include "net/http_server.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;
using testing::ReadFile;
using testing::TempDir;

const std::string kData = TESSERA_DISCOVERY_TESTDATA;

// The attribute set of testdata/discovery/metadata/<name>, as the metadata server serves it:
// "attributes/<file>", and "id".
std::map<std::string, std::string> MetadataSet(const std::string& name) {
  std::map<std::string, std::string> out;
  for (const auto& entry : fs::directory_iterator(kData + "/metadata/" + name)) {
    const std::string file = entry.path().filename().string();
    out[file == "id" ? "id" : "attributes/" + file] = ReadFile(entry.path().string());
  }
  return out;
}

MetadataAnswers Answers(const std::map<std::string, std::string>& set) {
  MetadataAnswers a;
  auto get = [&](const std::string& key) -> std::optional<std::string> {
    auto it = set.find(key);
    if (it == set.end()) return std::nullopt;
    return it->second;
  };
  a.accelerator_type = get("attributes/accelerator-type");
  a.agent_worker_number = get("attributes/agent-worker-number");
  a.worker_network_endpoints = get("attributes/worker-network-endpoints");
  a.tpu_env = get("attributes/tpu-env");
  a.instance_id = get("id");
  return a;
}

// testdata/discovery/<file>: KEY=VALUE lines.
std::map<std::string, std::string> Environment(const std::string& file) {
  std::map<std::string, std::string> env;
  std::ifstream in(kData + "/" + file);
  for (std::string line; std::getline(in, line);) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

// The error message of `result`, which must have failed with `code`.
template <typename T>
std::string ErrorOf(const Result<T>& result, StatusCode code = StatusCode::kInvalidArgument) {
  EXPECT_FALSE(result.ok());
  if (result.ok()) return "";
  EXPECT_EQ(result.status().code(), code) << result.status().ToString();
  return result.status().message();
}

bool StartsWith(const std::string& text, const std::string& prefix) {
  return text.rfind(prefix, 0) == 0;
}

// A GCE metadata server on 127.0.0.1 port 0 that serves one attribute set under
// /computeMetadata/v1/instance/ and answers 403 to requests without "Metadata-Flavor: Google".
class FakeMetadata {
 public:
  explicit FakeMetadata(std::map<std::string, std::string> set) : set_(std::move(set)) {
    server_ = std::make_unique<net::HttpServer>(net::ServerOptions{});
    EXPECT_TRUE(server_
                    ->Handle(net::Method::kGet, "/computeMetadata/v1/instance/{path...}",
                             [this](const net::Request& r) {
                               std::lock_guard<std::mutex> lock(mu_);
                               ++requests_;
                               if (r.Header("Metadata-Flavor") != "Google") {
                                 ++without_flavor_;
                                 return net::Response::Text(403, "Missing Metadata-Flavor");
                               }
                               auto it = set_.find(r.params.at("path"));
                               if (it == set_.end()) return net::Response::Text(404, "not found");
                               return net::Response::Text(200, it->second);
                             })
                    .ok());
    EXPECT_TRUE(server_->Start().ok());
  }
  ~FakeMetadata() { server_->Stop(); }
  std::string url() const {
    return "http://127.0.0.1:" + std::to_string(server_->port()) + "/computeMetadata/v1";
  }
  int requests() const {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  int without_flavor() const {
    std::lock_guard<std::mutex> lock(mu_);
    return without_flavor_;
  }
  void Stop() { server_->Stop(); }

 private:
  std::map<std::string, std::string> set_;
  std::unique_ptr<net::HttpServer> server_;
  mutable std::mutex mu_;
  int requests_ = 0;
  int without_flavor_ = 0;
};

// A URL where nothing listens: the port of a server that was started and stopped.
std::string DeadUrl() {
  FakeMetadata gone(std::map<std::string, std::string>{});
  const std::string url = gone.url();
  gone.Stop();
  return url;
}

// An executable shell script `name` in `dir` with `body`.
std::string Script(const TempDir& dir, const std::string& name, const std::string& body) {
  const std::string path = dir.path() + "/" + name;
  std::ofstream(path) << "#!/bin/sh\n" << body;
  ::chmod(path.c_str(), 0755);
  return path;
}

std::string FakeNvidiaSmi(const TempDir& dir, const std::string& fixture) {
  return Script(dir, "nvidia-smi", "cat '" + kData + "/" + fixture + "'\n");
}

void Touch(const std::string& path) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << "";
}

// ----- tpu-env and worker-network-endpoints -----

TEST(TpuEnvTest, ParsesTheRecordedFormat) {
  auto env = ParseTpuEnv(ReadFile(kData + "/metadata/v5p-16-w1/tpu-env"));
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_EQ(env->at("TOPOLOGY"), "2x2x2");
  EXPECT_EQ(env->at("NODE_ID"), "train-v5p");
  EXPECT_EQ(env->at("INJECT_SLICE_BUILDER_FAULT"), "");
  auto bare = ParseTpuEnv("\nTOPOLOGY: 2x2\nZONE: \"us-east1-d\"\n\n");
  ASSERT_TRUE(bare.ok()) << bare.status().ToString();
  EXPECT_EQ(bare->at("ZONE"), "us-east1-d");
}

TEST(TpuEnvTest, GarbledLinesNameTheirLine) {
  EXPECT_TRUE(StartsWith(ErrorOf(ParseTpuEnv("TOPOLOGY: '2x2'\nthis is not it\n")),
                         "tpu-env line 2: 'this is not it' is not KEY: 'value'"));
  EXPECT_TRUE(StartsWith(ErrorOf(ParseTpuEnv("TOPOLOGY: '2x2\n")), "tpu-env line 1: "));
  EXPECT_NE(ErrorOf(ParseTpuEnv("TOPOLOGY: '2x2\n")).find("quote is not closed"),
            std::string::npos);
  EXPECT_TRUE(
      StartsWith(ErrorOf(ParseTpuEnv("A: '1'\nA: '2'\n")), "tpu-env line 2: A is given twice"));
  EXPECT_TRUE(StartsWith(ErrorOf(ParseTpuEnv("zone: 'x'\n")), "tpu-env line 1: key 'zone'"));
  EXPECT_TRUE(StartsWith(ErrorOf(ParseTpuEnv("ZONE: us east\n")), "tpu-env line 1: "));
}

TEST(WorkerEndpointsTest, TakesTheThirdFieldInWorkerOrder) {
  auto ips = ParseWorkerEndpoints("unknown:unknown:10.0.0.1,unknown:unknown:10.0.0.2\n");
  ASSERT_TRUE(ips.ok()) << ips.status().ToString();
  EXPECT_EQ(*ips, (std::vector<std::string>{"10.0.0.1", "10.0.0.2"}));
  EXPECT_TRUE(
      StartsWith(ErrorOf(ParseWorkerEndpoints("unknown:unknown:10.0.0.1,10.0.0.2")),
                 "worker-network-endpoints: entry 1 '10.0.0.2' is not ID:WORKER_NUMBER:IP"));
  EXPECT_TRUE(StartsWith(ErrorOf(ParseWorkerEndpoints("a:b:")), "worker-network-endpoints: "));
}

// ----- the metadata attribute sets -----

TEST(MetadataFactsTest, AMultiHostV4Slice) {
  auto facts = FactsFromMetadata(Answers(MetadataSet("v4-32-w2")));
  ASSERT_TRUE(facts.ok()) << facts.status().ToString();
  EXPECT_EQ(facts->source, "metadata");
  ASSERT_TRUE(facts->slice.has_value());
  EXPECT_EQ(facts->slice->generation(), Generation::kV4);
  EXPECT_EQ(facts->slice->shape(), Shape::Of(2, 2, 4));  // v4-32: 32 TensorCores, 16 chips
  EXPECT_EQ(facts->slice->hosts(), 4);
  EXPECT_EQ(facts->chips, 4);
  EXPECT_EQ(facts->worker_id, 2);
  EXPECT_EQ(facts->slice_name, "train-v4");
  EXPECT_EQ(facts->peers.size(), 4u);
  EXPECT_EQ(facts->peers[2], "10.130.0.13");
  EXPECT_EQ(facts->instance_id, "6502082742571311568");
  EXPECT_TRUE(facts->megascale.empty());
}

TEST(MetadataFactsTest, AMultiHostV5pSlice) {
  auto facts = FactsFromMetadata(Answers(MetadataSet("v5p-16-w1")));
  ASSERT_TRUE(facts.ok()) << facts.status().ToString();
  EXPECT_EQ(facts->slice->generation(), Generation::kV5p);
  EXPECT_EQ(facts->slice->shape(), Shape::Of(2, 2, 2));  // v5p-16: 8 chips of 2 hosts
  EXPECT_EQ(facts->slice->hosts(), 2);
  EXPECT_EQ(facts->worker_id, 1);
  protocol::Discovered wire = facts->ToWire();
  EXPECT_EQ(wire.source, "metadata");
  EXPECT_EQ(wire.accelerator_type, "v5p-16");
  EXPECT_EQ(wire.topology, "2x2x2");
  EXPECT_EQ(wire.slice_name, "train-v5p");
  EXPECT_EQ(wire.worker_id, 1);
  EXPECT_EQ(wire.peers, (std::vector<std::string>{"10.130.0.21", "10.130.0.22"}));
}

TEST(MetadataFactsTest, AV6eSliceCountsChips) {
  auto facts = FactsFromMetadata(Answers(MetadataSet("v6e-16-w3")));
  ASSERT_TRUE(facts.ok()) << facts.status().ToString();
  EXPECT_EQ(facts->slice->generation(), Generation::kV6e);
  EXPECT_EQ(facts->slice->shape(), Shape::Of(4, 4));  // v6e-16: 16 chips
  EXPECT_EQ(facts->slice->hosts(), 4);
  EXPECT_EQ(facts->worker_id, 3);
}

TEST(MetadataFactsTest, MultiSliceFactsAreKept) {
  auto v6e = FactsFromMetadata(Answers(MetadataSet("v6e-16-multislice-s1-w0")));
  ASSERT_TRUE(v6e.ok()) << v6e.status().ToString();
  EXPECT_EQ(v6e->megascale.at("MEGASCALE_NUM_SLICES"), "2");
  EXPECT_EQ(v6e->megascale.at("MEGASCALE_SLICE_ID"), "1");
  EXPECT_EQ(v6e->megascale.at("MEGASCALE_COORDINATOR_ADDRESS"), "10.140.0.2:8080");
  EXPECT_EQ(v6e->slice_name, "train-v6e-1");
  auto v5p = FactsFromMetadata(Answers(MetadataSet("v5p-32-multislice-s0-w3")));
  ASSERT_TRUE(v5p.ok()) << v5p.status().ToString();
  EXPECT_EQ(v5p->slice->shape(), Shape::Of(2, 2, 4));
  EXPECT_EQ(v5p->worker_id, 3);
  EXPECT_EQ(v5p->ToWire().megascale.at("MEGASCALE_NUM_SLICES"), "4");
}

// One attribute of a good set replaced (or removed, for nullopt): the error it gives.
std::string MetadataError(const std::string& set, const std::string& key,
                          std::optional<std::string> value) {
  auto attrs = MetadataSet(set);
  if (value) {
    attrs[key] = *value;
  } else {
    attrs.erase(key);
  }
  return ErrorOf(FactsFromMetadata(Answers(attrs)));
}

TEST(MetadataFactsTest, WrongAnswersNameTheAttribute) {
  const std::string env = ReadFile(kData + "/metadata/v5p-16-w1/tpu-env");
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string out = env;
    out.replace(out.find(from), from.size(), to);
    return out;
  };
  // A topology that disagrees with the accelerator type names both.
  std::string e = MetadataError("v5p-16-w1", "attributes/tpu-env",
                                replace("TOPOLOGY: '2x2x2'", "TOPOLOGY: '2x2x4'"));
  EXPECT_TRUE(StartsWith(e,
                         "tpu-env TOPOLOGY: '2x2x4' is 16 chips but accelerator-type 'v5p-16' "
                         "is 8 chips"))
      << e;
  e = MetadataError("v5p-16-w1", "attributes/accelerator-type", "v9z-16");
  EXPECT_TRUE(StartsWith(e, "accelerator-type: 'v9z-16' is not a TPU type tessera knows")) << e;
  e = MetadataError("v5p-16-w1", "attributes/accelerator-type", "v5p");
  EXPECT_TRUE(StartsWith(e, "accelerator-type: 'v5p' has no size")) << e;
  e = MetadataError("v5p-16-w1", "attributes/agent-worker-number", "2");
  EXPECT_TRUE(StartsWith(e, "tpu-env WORKER_ID: '1' but agent-worker-number is '2'")) << e;
  e = MetadataError("v4-32-w2", "attributes/agent-worker-number", "x");
  EXPECT_TRUE(StartsWith(e, "tpu-env WORKER_ID: '2' but agent-worker-number is 'x'")) << e;
  e = MetadataError("v5p-16-w1", "attributes/agent-worker-number", std::nullopt);
  EXPECT_TRUE(StartsWith(e, "agent-worker-number: missing")) << e;
  e = MetadataError("v5p-16-w1", "attributes/worker-network-endpoints",
                    "unknown:unknown:10.0.0.1,unknown:unknown:10.0.0.2,unknown:unknown:10.0.0.3");
  EXPECT_TRUE(StartsWith(e,
                         "worker-network-endpoints: 3 workers, but a v5p-16 slice of 2x2x2 "
                         "has 2 hosts"))
      << e;
  e = MetadataError("v5p-16-w1", "attributes/worker-network-endpoints", "10.0.0.1");
  EXPECT_TRUE(StartsWith(e, "worker-network-endpoints: entry 0")) << e;
  e = MetadataError("v5p-16-w1", "attributes/tpu-env", env + "garbage without a colon\n");
  EXPECT_TRUE(StartsWith(e, "tpu-env line ")) << e;
  e = MetadataError("v5p-16-w1", "attributes/tpu-env",
                    replace("ACCELERATOR_TYPE: 'v5p-16'", "ACCELERATOR_TYPE: 'v5p-32'"));
  EXPECT_TRUE(StartsWith(e, "tpu-env ACCELERATOR_TYPE: 'v5p-32' but accelerator-type is 'v5p-16'"))
      << e;
  e = MetadataError("v6e-16-multislice-s1-w0", "attributes/tpu-env",
                    ReadFile(kData + "/metadata/v6e-16-multislice-s1-w0/tpu-env") +
                        "MEGASCALE_NUM_SLICES: '3'\n");
  EXPECT_NE(e.find("MEGASCALE_NUM_SLICES is given twice"), std::string::npos) << e;
  e = MetadataError("v6e-16-w3", "attributes/tpu-env",
                    ReadFile(kData + "/metadata/v6e-16-w3/tpu-env") +
                        "MEGASCALE_NUM_SLICES: '2'\nMEGASCALE_SLICE_ID: '2'\n");
  EXPECT_TRUE(StartsWith(e, "tpu-env MEGASCALE_SLICE_ID: '2' must be an integer in 0..1")) << e;
  e = MetadataError(
      "v6e-16-w3", "attributes/tpu-env",
      ReadFile(kData + "/metadata/v6e-16-w3/tpu-env") + "MEGASCALE_NUM_SLICES: 'zero'\n");
  EXPECT_TRUE(StartsWith(e, "tpu-env MEGASCALE_NUM_SLICES: 'zero'")) << e;
}

TEST(MetadataFactsTest, AnAmbiguousTypeWithoutTopologyIsRefused) {
  auto attrs = MetadataSet("v6e-16-w3");
  attrs.erase("attributes/tpu-env");
  std::string e = ErrorOf(FactsFromMetadata(Answers(attrs)));
  EXPECT_TRUE(StartsWith(e, "tpu-env TOPOLOGY: required: v6e-16 is 16 chips")) << e;
}

TEST(MetadataFactsTest, NoAcceleratorTypeIsNotATpuVm) {
  auto attrs = MetadataSet("v5p-16-w1");
  attrs.erase("attributes/accelerator-type");
  std::string e = ErrorOf(FactsFromMetadata(Answers(attrs)), StatusCode::kNotFound);
  EXPECT_NE(e.find("accelerator-type is not set"), std::string::npos) << e;
}

// ----- GKE -----

TEST(GkeFactsTest, AV5pPod) {
  auto facts = FactsFromGkeEnvironment(Environment("gke-v5p-16-w1.env"));
  ASSERT_TRUE(facts.ok()) << facts.status().ToString();
  EXPECT_EQ(facts->source, "gke");
  EXPECT_EQ(facts->slice->shape(), Shape::Of(2, 2, 2));
  EXPECT_EQ(facts->worker_id, 1);
  EXPECT_EQ(facts->slice_name, "train-v5p");
  EXPECT_EQ(facts->peers[1], "train-v5p-1.train-v5p.default.svc");
}

TEST(GkeFactsTest, AMultiSliceV6ePod) {
  auto facts = FactsFromGkeEnvironment(Environment("gke-v6e-16-multislice.env"));
  ASSERT_TRUE(facts.ok()) << facts.status().ToString();
  EXPECT_EQ(facts->slice->shape(), Shape::Of(4, 4));
  EXPECT_EQ(facts->worker_id, 2);
  EXPECT_EQ(facts->megascale.size(), 4u);
  EXPECT_EQ(facts->megascale.at("MEGASCALE_COORDINATOR_ADDRESS"), "jax-job-slice-0-0.jax-job:8080");
}

TEST(GkeFactsTest, WrongVariablesAreNamed) {
  auto error = [](const std::string& key, std::optional<std::string> value) {
    auto env = Environment("gke-v5p-16-w1.env");
    if (value) {
      env[key] = *value;
    } else {
      env.erase(key);
    }
    return ErrorOf(FactsFromGkeEnvironment(env));
  };
  std::string e = error("TPU_TOPOLOGY", "2x2x4");
  EXPECT_TRUE(StartsWith(
      e, "TPU_TOPOLOGY: '2x2x4' is 16 chips but TPU_ACCELERATOR_TYPE 'v5p-16' is 8 chips"))
      << e;
  EXPECT_TRUE(StartsWith(error("TPU_TOPOLOGY", "2x2"), "TPU_TOPOLOGY: "))
      << error("TPU_TOPOLOGY", "2x2");
  EXPECT_TRUE(
      StartsWith(error("TPU_ACCELERATOR_TYPE", "h100-8"), "TPU_ACCELERATOR_TYPE: 'h100-8'"));
  EXPECT_TRUE(StartsWith(error("TPU_WORKER_ID", "2"), "TPU_WORKER_ID: '2' must be 0..1"));
  EXPECT_TRUE(StartsWith(error("TPU_WORKER_ID", std::nullopt), "TPU_WORKER_ID: required"));
  EXPECT_TRUE(
      StartsWith(error("TPU_ACCELERATOR_TYPE", std::nullopt), "TPU_ACCELERATOR_TYPE: required"));
  EXPECT_TRUE(
      StartsWith(error("TPU_WORKER_HOSTNAMES", "a,b,c"), "TPU_WORKER_HOSTNAMES: 3 workers"));
  EXPECT_TRUE(
      StartsWith(error("TPU_WORKER_HOSTNAMES", "a,"), "TPU_WORKER_HOSTNAMES: entry 1 is empty"));
  EXPECT_TRUE(StartsWith(error("MEGASCALE_NUM_SLICES", "0"), "MEGASCALE_NUM_SLICES: '0'"));
  auto none = FactsFromGkeEnvironment({{"PATH", "/bin"}});
  EXPECT_NE(ErrorOf(none, StatusCode::kNotFound).find("TPU_ACCELERATOR_TYPE"), std::string::npos);
}

// ----- local devices -----

TEST(LocalDevicesTest, AccelFilesCountAndAnAccelDirectoryIsIgnored) {
  TempDir root;
  for (int i = 0; i < 4; ++i) Touch(root.path() + "/dev/accel" + std::to_string(i));
  fs::create_directories(root.path() + "/dev/accel");  // an NVIDIA driver's, not a chip
  Touch(root.path() + "/dev/accel/accel0");
  LocalDeviceListing listing = ListLocalDevices(root.path());
  EXPECT_EQ(listing.accel_dirs, (std::vector<std::string>{"/dev/accel"}));
  auto facts = FactsFromLocalDevices(listing);
  ASSERT_TRUE(facts.ok()) << facts.status().ToString();
  EXPECT_EQ(facts->source, "devices");
  EXPECT_EQ(facts->chips, 4);
  EXPECT_EQ(facts->device_paths.front(), "/dev/accel0");
}

TEST(LocalDevicesTest, OnlyAnAccelDirectoryIsNoTpu) {
  TempDir root;
  fs::create_directories(root.path() + "/dev/accel");
  std::string e =
      ErrorOf(FactsFromLocalDevices(ListLocalDevices(root.path())), StatusCode::kNotFound);
  EXPECT_NE(e.find("ignored the directory /dev/accel"), std::string::npos) << e;
}

TEST(LocalDevicesTest, VfioGroupsOfGoogleCount) {
  TempDir root;
  auto group = [&](const std::string& g, const std::string& pci, const std::string& vendor) {
    Touch(root.path() + "/dev/vfio/" + g);
    const std::string dir = root.path() + "/sys/kernel/iommu_groups/" + g + "/devices/" + pci;
    fs::create_directories(dir);
    std::ofstream(dir + "/vendor") << vendor << "\n";
  };
  Touch(root.path() + "/dev/vfio/vfio");  // the container device: not a group
  group("12", "0000:00:04.0", "0x1ae0");
  group("13", "0000:00:05.0", "0x10de");
  group("14", "0000:00:06.0", "0x1ae0");
  auto facts = FactsFromLocalDevices(ListLocalDevices(root.path()));
  ASSERT_TRUE(facts.ok()) << facts.status().ToString();
  EXPECT_EQ(facts->chips, 2);
  EXPECT_EQ(facts->device_paths, (std::vector<std::string>{"/dev/vfio/12", "/dev/vfio/14"}));
}

TEST(LocalDevicesTest, VfioGroupsOfAnotherVendorAreNoTpu) {
  TempDir root;
  Touch(root.path() + "/dev/vfio/13");
  const std::string dir = root.path() + "/sys/kernel/iommu_groups/13/devices/0000:00:05.0";
  fs::create_directories(dir);
  std::ofstream(dir + "/vendor") << "0x10de\n";
  std::string e =
      ErrorOf(FactsFromLocalDevices(ListLocalDevices(root.path())), StatusCode::kNotFound);
  EXPECT_NE(e.find("13:0x10de"), std::string::npos) << e;
}

// ----- nvidia-smi -----

TEST(NvidiaSmiTest, AnHgxH100HostHasNoFabric) {
  auto gpus = ParseNvidiaSmiXml(ReadFile(kData + "/nvidia-smi-hgx-h100-8gpu.xml"));
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  ASSERT_EQ(gpus->size(), 8u);
  EXPECT_EQ(gpus->at(0).uuid, "GPU-5b1e0c4a-7d2f-4c1e-9a3b-0e6f1d2c3b00");
  EXPECT_EQ(gpus->at(7).memory_mib, 81559);
  EXPECT_FALSE(gpus->at(0).fabric.has_value());
  EXPECT_FALSE(NvlinkAttached(gpus->at(0)));
  auto facts = FactsFromGpus(*gpus);
  ASSERT_TRUE(facts.ok()) << facts.status().ToString();
  EXPECT_EQ(facts->chips, 8);
}

TEST(NvidiaSmiTest, AGb200TrayIsNvlinkAttached) {
  auto gpus = ParseNvidiaSmiXml(ReadFile(kData + "/nvidia-smi-gb200-nvl72-tray.xml"));
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  ASSERT_EQ(gpus->size(), 4u);
  for (const auto& g : *gpus) {
    ASSERT_TRUE(g.fabric.has_value());
    EXPECT_EQ(g.fabric->cluster_uuid, "7f3c2e10-5a4b-4c8d-9e1f-2a3b4c5d6e7f");
    EXPECT_EQ(g.fabric->clique_id, "32766");
    EXPECT_TRUE(NvlinkAttached(g));
    EXPECT_EQ(g.memory_mib, 189471);
  }
  auto facts = FactsFromGpus(*gpus);
  ASSERT_TRUE(facts.ok()) << facts.status().ToString();
  EXPECT_EQ(facts->ToWire().gpus.at(3).fabric->state, "Completed");
}

TEST(NvidiaSmiTest, AFabricInProgressIsRefused) {
  auto gpus = ParseNvidiaSmiXml(ReadFile(kData + "/nvidia-smi-gb200-nvl72-tray-in-progress.xml"));
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  EXPECT_FALSE(NvlinkAttached(gpus->at(2)));
  std::string e = ErrorOf(FactsFromGpus(*gpus));
  EXPECT_TRUE(StartsWith(e,
                         "gpus[2].fabric: GPU GPU-a4c2e8f0-1b3d-4e5f-8a9b-0c1d2e3f4002 has "
                         "fabric state 'In Progress'"))
      << e;
}

TEST(NvidiaSmiTest, BadReportsNameTheField) {
  const std::string good = ReadFile(kData + "/nvidia-smi-hgx-h100-8gpu.xml");
  std::string e = ErrorOf(ParseNvidiaSmiXml(good.substr(0, good.size() / 2)));
  EXPECT_TRUE(StartsWith(e, "nvidia-smi -q -x: line ")) << e;
  e = ErrorOf(ParseNvidiaSmiXml("<?xml version=\"1.0\" ?><other></other>"));
  EXPECT_TRUE(StartsWith(e, "nvidia-smi -q -x: the root element is <other>")) << e;
  auto edit = [&](const std::string& from, const std::string& to) {
    std::string out = good;
    out.replace(out.find(from), from.size(), to);
    return out;
  };
  e = ErrorOf(ParseNvidiaSmiXml(
      edit("<uuid>GPU-5b1e0c4a-7d2f-4c1e-9a3b-0e6f1d2c3b00</uuid>", "<uuid></uuid>")));
  EXPECT_TRUE(StartsWith(e, "gpus[0].uuid: missing")) << e;
  e = ErrorOf(ParseNvidiaSmiXml(edit("<total>81559 MiB</total>", "<total>lots</total>")));
  EXPECT_TRUE(StartsWith(e, "gpus[0].fb_memory_usage.total: 'lots' is not '<N> MiB'")) << e;
  e = ErrorOf(ParseNvidiaSmiXml(
      edit("<attached_gpus>8</attached_gpus>", "<attached_gpus>9</attached_gpus>")));
  EXPECT_TRUE(StartsWith(e, "attached_gpus: '9' but the report has 8")) << e;
  EXPECT_EQ(ErrorOf(FactsFromGpus({}), StatusCode::kNotFound), "nvidia-smi lists no GPU");
}

TEST(NvidiaSmiTest, RunsTheProgramAndReportsItsFailures) {
  TempDir dir;
  auto out = RunNvidiaSmi(FakeNvidiaSmi(dir, "nvidia-smi-hgx-h100-8gpu.xml"), "",
                          std::chrono::seconds(20));
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, ReadFile(kData + "/nvidia-smi-hgx-h100-8gpu.xml"));
  // Found on PATH by name.
  auto by_name = RunNvidiaSmi("nvidia-smi", "/nonexistent:" + dir.path(), std::chrono::seconds(20));
  EXPECT_TRUE(by_name.ok()) << by_name.status().ToString();

  std::string e = ErrorOf(RunNvidiaSmi(dir.path() + "/missing", "", std::chrono::seconds(20)),
                          StatusCode::kNotFound);
  EXPECT_TRUE(StartsWith(e, "--nvidia-smi: ")) << e;
  const std::string failing = Script(dir, "failing",
                                     "echo \"NVIDIA-SMI has failed because it couldn't "
                                     "communicate with the NVIDIA driver.\" >&2\nexit 9\n");
  e = ErrorOf(RunNvidiaSmi(failing, "", std::chrono::seconds(20)), StatusCode::kUnavailable);
  EXPECT_NE(e.find("exited with status 9: NVIDIA-SMI has failed"), std::string::npos) << e;
  const std::string slow = Script(dir, "slow", "exec sleep 30\n");
  e = ErrorOf(RunNvidiaSmi(slow, "", std::chrono::milliseconds(200)), StatusCode::kUnavailable);
  EXPECT_NE(e.find("ran longer than 200 ms"), std::string::npos) << e;
}

// ----- the metadata server -----

TEST(MetadataServerTest, FetchesTheAttributesWithTheFlavorHeader) {
  FakeMetadata server(MetadataSet("v5p-16-w1"));
  MetadataOptions options;
  options.url = server.url();
  auto answers = FetchMetadata(options);
  ASSERT_TRUE(answers.ok()) << answers.status().ToString();
  EXPECT_EQ(answers->accelerator_type, "v5p-16");
  EXPECT_EQ(answers->instance_id, "4471829304857129341");
  EXPECT_EQ(server.requests(), 5);
  EXPECT_EQ(server.without_flavor(), 0);
  auto facts = FactsFromMetadata(*answers);
  ASSERT_TRUE(facts.ok()) << facts.status().ToString();
  EXPECT_EQ(facts->worker_id, 1);
}

TEST(MetadataServerTest, A404ForTheAcceleratorTypeIsNotATpuVm) {
  FakeMetadata server(std::map<std::string, std::string>{{"id", "123"}});
  MetadataOptions options;
  options.url = server.url();
  auto answers = FetchMetadata(options);
  ASSERT_TRUE(answers.ok()) << answers.status().ToString();
  EXPECT_FALSE(answers->accelerator_type.has_value());
  EXPECT_EQ(server.requests(), 1);  // nothing more is asked
  EXPECT_EQ(FactsFromMetadata(*answers).status().code(), StatusCode::kNotFound);
}

TEST(MetadataServerTest, ADownServerIsUnavailable) {
  MetadataOptions options;
  options.url = DeadUrl();
  auto answers = FetchMetadata(options);
  EXPECT_EQ(answers.status().code(), StatusCode::kUnavailable) << answers.status().ToString();
  EXPECT_NE(answers.status().message().find("did not answer"), std::string::npos);
}

TEST(MetadataServerTest, UrlsAreCheckedAndNamed) {
  auto url = ParseHttpUrl("http://169.254.169.254:8080/computeMetadata/v1/");
  ASSERT_TRUE(url.ok());
  EXPECT_EQ(url->host, "169.254.169.254");
  EXPECT_EQ(url->port, 8080);
  EXPECT_EQ(url->path, "/computeMetadata/v1");
  EXPECT_EQ(ParseHttpUrl(kDefaultMetadataUrl)->port, 80);
  EXPECT_TRUE(StartsWith(ErrorOf(ParseHttpUrl("https://x/")), "--metadata-url: "));
  EXPECT_TRUE(StartsWith(ErrorOf(ParseHttpUrl("http://x:0/")), "--metadata-url: "));
  EXPECT_TRUE(StartsWith(ErrorOf(ParseHttpUrl("http:///v1")), "--metadata-url: "));
}

// ----- the order of sources -----

DiscoveryOptions Hermetic(const TempDir& dir, DevicesMode mode) {
  DiscoveryOptions d;
  d.mode = mode;
  d.environment = {{"PATH", dir.path() + "/bin"}};
  d.metadata.url = DeadUrl();
  d.dev_root = dir.path() + "/root";
  d.nvidia_smi = dir.path() + "/bin/nvidia-smi";
  return d;
}

TEST(DiscoverHostTest, TheGkeEnvironmentWinsOverTheMetadataServer) {
  TempDir dir;
  FakeMetadata server(MetadataSet("v6e-16-w3"));
  DiscoveryOptions d = Hermetic(dir, DevicesMode::kAuto);
  d.environment = Environment("gke-v5p-16-w1.env");
  d.metadata.url = server.url();
  std::vector<SourceNote> skipped;
  auto facts = DiscoverHost(d, skipped);
  ASSERT_TRUE(facts.ok()) << facts.status().ToString();
  EXPECT_EQ(facts->source, "gke");
  EXPECT_TRUE(skipped.empty());
  EXPECT_EQ(server.requests(), 0);
}

TEST(DiscoverHostTest, TheMetadataServerAnswersWhenThereIsNoGkeEnvironment) {
  TempDir dir;
  FakeMetadata server(MetadataSet("v6e-16-w3"));
  DiscoveryOptions d = Hermetic(dir, DevicesMode::kAuto);
  d.metadata.url = server.url();
  std::vector<SourceNote> skipped;
  auto facts = DiscoverHost(d, skipped);
  ASSERT_TRUE(facts.ok()) << facts.status().ToString();
  EXPECT_EQ(facts->source, "metadata");
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0].source, "gke");
}

TEST(DiscoverHostTest, DevicesThenNvidiaSmiWhenNoServerAnswers) {
  TempDir dir;
  DiscoveryOptions d = Hermetic(dir, DevicesMode::kAuto);
  Touch(d.dev_root + "/dev/accel0");
  std::vector<SourceNote> skipped;
  auto facts = DiscoverHost(d, skipped);
  ASSERT_TRUE(facts.ok()) << facts.status().ToString();
  EXPECT_EQ(facts->source, "devices");
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_EQ(skipped[1].source, "metadata");
  EXPECT_NE(skipped[1].reason.find("did not answer"), std::string::npos) << skipped[1].reason;

  fs::remove(d.dev_root + "/dev/accel0");
  fs::create_directories(dir.path() + "/bin");
  FakeNvidiaSmi(dir, "nvidia-smi-gb200-nvl72-tray.xml");
  fs::rename(dir.path() + "/nvidia-smi", dir.path() + "/bin/nvidia-smi");
  skipped.clear();
  facts = DiscoverHost(d, skipped);
  ASSERT_TRUE(facts.ok()) << facts.status().ToString();
  EXPECT_EQ(facts->source, "nvidia-smi");
  EXPECT_EQ(facts->gpus.size(), 4u);
  EXPECT_EQ(skipped.size(), 3u);
}

TEST(DiscoverHostTest, NothingAnswersSaysWhyForEachSource) {
  TempDir dir;
  std::vector<SourceNote> skipped;
  auto facts = DiscoverHost(Hermetic(dir, DevicesMode::kAuto), skipped);
  std::string e = ErrorOf(facts, StatusCode::kNotFound);
  EXPECT_EQ(skipped.size(), 4u);
  for (const char* source : {"gke: ", "metadata: ", "devices: ", "nvidia-smi: "}) {
    EXPECT_NE(e.find(source), std::string::npos) << source << " in " << e;
  }
}

TEST(DiscoverHostTest, AWrongAnswerStopsDiscovery) {
  TempDir dir;
  auto attrs = MetadataSet("v5p-16-w1");
  attrs["attributes/accelerator-type"] = "v5p-48";
  FakeMetadata server(attrs);
  DiscoveryOptions d = Hermetic(dir, DevicesMode::kAuto);
  d.metadata.url = server.url();
  Touch(d.dev_root + "/dev/accel0");  // would answer, but a wrong answer is not skipped
  std::vector<SourceNote> skipped;
  std::string e = ErrorOf(DiscoverHost(d, skipped));
  EXPECT_TRUE(StartsWith(e,
                         "metadata: tpu-env TOPOLOGY: '2x2x2' is 8 chips but accelerator-type "
                         "'v5p-48' is 24 chips"))
      << e;
}

TEST(DiscoverHostTest, ANamedSourceAsksOnlyItsOwn) {
  TempDir dir;
  fs::create_directories(dir.path() + "/bin");
  FakeNvidiaSmi(dir, "nvidia-smi-hgx-h100-8gpu.xml");
  fs::rename(dir.path() + "/nvidia-smi", dir.path() + "/bin/nvidia-smi");
  std::vector<SourceNote> skipped;
  auto tpu = DiscoverHost(Hermetic(dir, DevicesMode::kTpu), skipped);
  EXPECT_EQ(tpu.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(skipped.size(), 3u);  // gke, metadata, devices: not nvidia-smi
  skipped.clear();
  auto nvidia = DiscoverHost(Hermetic(dir, DevicesMode::kNvidia), skipped);
  ASSERT_TRUE(nvidia.ok()) << nvidia.status().ToString();
  EXPECT_TRUE(skipped.empty());
  EXPECT_EQ(nvidia->gpus.size(), 8u);
}

// ----- tessera agent --devices (MakeAgentSetup) -----

class DevicesFlagTest : public ::testing::Test {
 protected:
  void SetUp() override {
    token_file_ = dir_.path() + "/token";
    std::ofstream(token_file_) << "secret\n";
    flags_.head = "http://127.0.0.1:7600";
    flags_.join_token_file = token_file_;
    flags_.name = "h0";
    flags_.state_dir = dir_.path() + "/s";
    flags_.environment = std::map<std::string, std::string>{{"PATH", dir_.path() + "/bin"}};
    flags_.metadata_url = DeadUrl();
    flags_.dev_root = dir_.path() + "/root";
    flags_.nvidia_smi = dir_.path() + "/bin/nvidia-smi";
  }
  void InstallNvidiaSmi(const std::string& fixture) {
    fs::create_directories(dir_.path() + "/bin");
    std::ofstream(flags_.nvidia_smi) << "#!/bin/sh\ncat '" << kData << "/" << fixture << "'\n";
    ::chmod(flags_.nvidia_smi.c_str(), 0755);
  }
  std::string Error(const AgentFlags& flags) {
    auto setup = MakeAgentSetup(flags);
    if (setup.ok()) return "";
    EXPECT_EQ(setup.status().code(), StatusCode::kInvalidArgument);
    return setup.status().message();
  }
  TempDir dir_;
  std::string token_file_;
  AgentFlags flags_;
};

TEST_F(DevicesFlagTest, AGkeV5pHostIsPlacedInItsCube) {
  flags_.environment = Environment("gke-v5p-16-w1.env");
  auto setup = MakeAgentSetup(flags_);
  ASSERT_TRUE(setup.ok()) << setup.status().ToString();
  const AgentOptions& o = setup->options;
  EXPECT_EQ(o.generation, "v5p");
  ASSERT_TRUE(o.cube.has_value());
  EXPECT_EQ(o.cube->name, "train-v5p");
  EXPECT_EQ(o.cube->coord, (Coord{0, 0, 1}));  // worker 1 of a 1x1x2 host grid
  ASSERT_TRUE(o.discovered.has_value());
  EXPECT_EQ(o.discovered->source, "gke");
  EXPECT_EQ(o.discovered->topology, "2x2x2");
  ASSERT_EQ(o.discovery_log.size(), 1u);
  EXPECT_TRUE(o.discovery_log[0].answered);
  EXPECT_EQ(setup->devices->kind(), "gke");
  auto devices = setup->devices->Discover();
  ASSERT_TRUE(devices.ok());
  ASSERT_EQ(devices->size(), 4u);
  EXPECT_EQ(devices->at(0).coords, (Coord{0, 0, 1}));
}

TEST_F(DevicesFlagTest, AMetadataV6eHostIsAWorkerOfItsSlice) {
  FakeMetadata server(MetadataSet("v6e-16-multislice-s1-w0"));
  flags_.metadata_url = server.url();
  flags_.devices = "tpu";
  auto setup = MakeAgentSetup(flags_);
  ASSERT_TRUE(setup.ok()) << setup.status().ToString();
  const AgentOptions& o = setup->options;
  EXPECT_EQ(o.generation, "v6e");
  ASSERT_TRUE(o.slice.has_value());
  EXPECT_EQ(o.slice->name, "train-v6e-1");
  EXPECT_EQ(o.slice->topology, "4x4");
  EXPECT_EQ(o.slice->worker, 0);
  EXPECT_EQ(o.discovered->megascale.at("MEGASCALE_SLICE_ID"), "1");
  ASSERT_EQ(o.discovery_log.size(), 2u);
  EXPECT_EQ(o.discovery_log[0].source, "gke");
  EXPECT_FALSE(o.discovery_log[0].answered);
}

TEST_F(DevicesFlagTest, AV4HostOfTwoCubesGetsItsCube) {
  auto attrs = MetadataSet("v4-32-w2");
  // v4-128 is a full cube (4x4x4) of 16 hosts; v4-256 two cubes, 32 hosts.
  attrs["attributes/accelerator-type"] = "v4-256";
  attrs["attributes/agent-worker-number"] = "21";
  attrs["attributes/worker-network-endpoints"] = "";
  attrs["attributes/tpu-env"] = "TOPOLOGY: '4x4x8'\nNODE_ID: 'big'\n";
  FakeMetadata server(attrs);
  flags_.metadata_url = server.url();
  auto setup = MakeAgentSetup(flags_);
  ASSERT_TRUE(setup.ok()) << setup.status().ToString();
  // Worker 21 of a 2x2x8 host grid: host (1, 0, 5), in the second cube at (1, 0, 1).
  EXPECT_EQ(setup->options.cube->name, "big-cube-1");
  EXPECT_EQ(setup->options.cube->coord, (Coord{1, 0, 1}));
}

TEST_F(DevicesFlagTest, FlagsThatDisagreeWithTheSourceAreRefused) {
  flags_.environment = Environment("gke-v5p-16-w1.env");
  AgentFlags f = flags_;
  f.generation = "v6e";
  EXPECT_TRUE(StartsWith(Error(f), "--generation: 'v6e' but the GKE environment")) << Error(f);
  f = flags_;
  f.topology = "2x2x4";
  EXPECT_TRUE(StartsWith(Error(f), "--topology: '2x2x4' but the GKE environment")) << Error(f);
  f = flags_;
  f.worker = "0";
  EXPECT_TRUE(StartsWith(Error(f), "--worker: '0' but")) << Error(f);
  f = flags_;
  f.cube = "other";
  EXPECT_TRUE(StartsWith(Error(f), "--cube: 'other' but")) << Error(f);
  f = flags_;
  f.coord = "0,0,0";
  EXPECT_TRUE(StartsWith(Error(f), "--coord: '0,0,0' but")) << Error(f);
  f = flags_;
  f.chips = "8";
  EXPECT_TRUE(StartsWith(Error(f), "--chips: '8' but")) << Error(f);
  f = flags_;
  f.environment->erase("TPU_NAME");
  EXPECT_TRUE(StartsWith(Error(f), "--cube: required: the GKE environment")) << Error(f);
  f.cube = "named-by-flag";
  auto setup = MakeAgentSetup(f);
  ASSERT_TRUE(setup.ok()) << setup.status().ToString();
  EXPECT_EQ(setup->options.cube->name, "named-by-flag");
}

TEST_F(DevicesFlagTest, AutoFallsBackToTheLayoutFlagsAndSaysSo) {
  flags_.generation = "v6e";
  flags_.slice = "slice-000";
  flags_.topology = "4x4";
  flags_.worker = "1";
  auto setup = MakeAgentSetup(flags_);
  ASSERT_TRUE(setup.ok()) << setup.status().ToString();
  EXPECT_FALSE(setup->options.discovered.has_value());
  const auto& log = setup->options.discovery_log;
  ASSERT_EQ(log.size(), 5u);
  EXPECT_EQ(log.back().source, "emulated");
  EXPECT_TRUE(log.back().answered);
  EXPECT_EQ(setup->devices->kind(), "emulated");
}

TEST_F(DevicesFlagTest, ANamedSourceMustAnswer) {
  flags_.generation = "v6e";
  flags_.slice = "slice-000";
  flags_.topology = "4x4";
  AgentFlags f = flags_;
  f.devices = "tpu";
  EXPECT_TRUE(StartsWith(Error(f), "--devices: tpu: no source answered (gke: ")) << Error(f);
  f.devices = "nvidia";
  EXPECT_TRUE(StartsWith(Error(f), "--devices: nvidia: no source answered (nvidia-smi: "))
      << Error(f);
  f.devices = "gpu";
  EXPECT_TRUE(StartsWith(Error(f), "--devices: 'gpu' must be auto")) << Error(f);
  f = flags_;
  f.generation = "";
  EXPECT_TRUE(StartsWith(Error(f), "--devices: auto: no source answered")) << Error(f);
  f = flags_;
  f.metadata_url = "https://metadata/";
  EXPECT_TRUE(StartsWith(Error(f), "--metadata-url: ")) << Error(f);
}

TEST_F(DevicesFlagTest, LocalDevicesMustMatchTheLayout) {
  for (int i = 0; i < 4; ++i) Touch(flags_.dev_root + "/dev/accel" + std::to_string(i));
  AgentFlags f = flags_;
  f.devices = "tpu";
  EXPECT_TRUE(StartsWith(Error(f), "--generation: required: devices found 4 chips")) << Error(f);
  f.generation = "v6e";
  f.slice = "s";
  f.topology = "4x4";
  auto setup = MakeAgentSetup(f);
  ASSERT_TRUE(setup.ok()) << setup.status().ToString();
  EXPECT_EQ(setup->options.discovered->source, "devices");
  EXPECT_EQ(setup->devices->kind(), "devices");
  f.topology = "2x4";  // a single host of 8 chips
  EXPECT_TRUE(StartsWith(Error(f), "--chips: devices found 4 chips")) << Error(f);
}

TEST_F(DevicesFlagTest, AnNvidiaHostReportsItsGpus) {
  InstallNvidiaSmi("nvidia-smi-gb200-nvl72-tray.xml");
  flags_.devices = "nvidia";
  flags_.generation = "v6e";
  flags_.slice = "tray-0";
  flags_.topology = "2x2";
  auto setup = MakeAgentSetup(flags_);
  ASSERT_TRUE(setup.ok()) << setup.status().ToString();
  ASSERT_EQ(setup->options.discovered->gpus.size(), 4u);
  EXPECT_EQ(setup->options.discovered->source, "nvidia-smi");
  EXPECT_NE(setup->options.discovery_log.back().reason.find("4 NVLink-attached"),
            std::string::npos);
  InstallNvidiaSmi("nvidia-smi-gb200-nvl72-tray-in-progress.xml");
  std::string e = Error(flags_);
  EXPECT_TRUE(StartsWith(e, "--devices: nvidia: nvidia-smi: gpus[2].fabric: ")) << e;
  InstallNvidiaSmi("nvidia-smi-hgx-h100-8gpu.xml");
  e = Error(flags_);
  EXPECT_TRUE(StartsWith(e, "--chips: nvidia-smi found 8 GPUs")) << e;
}

// ----- the registration carries what was found -----

TEST(DiscoveredRegistrationTest, TheHeadIsToldWhatWasFound) {
  TempDir dir;
  testing::FakeHead head;
  AgentOptions o = testing::Options(dir, head.port());
  auto facts = FactsFromMetadata(Answers(MetadataSet("v6e-16-multislice-s1-w0")));
  ASSERT_TRUE(facts.ok()) << facts.status().ToString();
  o.discovered = facts->ToWire();
  o.discovery_log = {{"gke", "not set", false}, {"metadata", "v6e-16", true}};
  auto devices = EmulatedDevices::ForSliceWorker(Generation::kV6e, Shape::Of(4, 4), 1);
  ASSERT_TRUE(devices.ok());
  Agent agent(o, std::make_unique<EmulatedDevices>(*devices));
  ASSERT_TRUE(agent.Start().ok());
  ASSERT_TRUE(testing::WaitUntil([&] { return agent.registered(); }));
  agent.Shutdown();
  const auto registrations = head.registrations();
  ASSERT_FALSE(registrations.empty());
  const auto& d = registrations.front().at("discovered");
  EXPECT_EQ(d.at("source"), "metadata");
  EXPECT_EQ(d.at("acceleratorType"), "v6e-16");
  EXPECT_EQ(d.at("topology"), "4x4");
  EXPECT_EQ(d.at("workerId"), 0);
  EXPECT_EQ(d.at("peers").size(), 4u);
  EXPECT_EQ(d.at("megascale").at("MEGASCALE_NUM_SLICES"), "2");
  auto parsed = protocol::ParseRegistration(registrations.front().dump());
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->discovered, o.discovered);
}

}  // namespace
}  // namespace tessera::agent
