// The pure part of `tessera up` (cluster_command.cc): the agents' fence time under --ha, the
// demo job that fits the cluster it started, and the summary it prints. No I/O: cli_core_test.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::cli {

// The --fence-ms each agent gets: the flag when given; under --ha without it, the election lease
// plus 5 s (docs/ha.md "A local HA cluster": a fence not above the lease would stop training
// workers before a standby can take over); otherwise "" (the agent's own default, 15 s).
std::string AgentFenceMs(bool ha, int64_t election_lease_ms, const std::string& fence_ms);

// The cluster `up` started, as the demo job and the summary need it.
struct UpCluster {
  std::string generation;  // canonical name ("v6e", "7x")
  bool three_d = false;
  std::string topology;  // 2D: each slice's shape
  int slices = 0;        // 2D
  int cubes = 0;         // 3D
  int hosts = 0;
  std::string gpu_system;  // `up --gpu`: the GPU system its hosts emulate; "" for TPU hosts
  int gpu_domains = 0;     // `up --gpu`: NVLink domains
};

// A TrainJob that can run on `c`: examples/train/job.yaml when it fits (v6e, 4x4, two slices or
// more), else `demo_path`, whose text DemoJobYaml gives: the example's script and steps on the
// cluster's generation, one slice of its shape (2D; two when it has two) or a 2x2x2 (3D).
bool ExampleJobFits(const UpCluster& c);
std::string DemoJobYaml(const UpCluster& c);

// What `up` prints once every host is Ready. `head_urls`: one, or every head under --ha with
// `leader_url` the one that leads now; `router_url`: the serving router's ("https://127.0.0.1:P");
// `demo_job`: the file the "Try:" line applies.
std::string UpSummary(const UpCluster& c, const std::vector<std::string>& head_urls,
                      const std::string& leader_url, const std::string& router_url,
                      const std::string& dir, const std::string& demo_job);

}  // namespace tessera::cli
