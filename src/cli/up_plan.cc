#include "cli/up_plan.h"

#include <cstdlib>

namespace tessera::cli {

std::string AgentFenceMs(bool ha, int64_t election_lease_ms, const std::string& fence_ms) {
  if (!fence_ms.empty() || !ha) return fence_ms;
  return std::to_string(election_lease_ms + 5'000);
}

bool ExampleJobFits(const UpCluster& c) {
  return c.gpu_system.empty() && !c.three_d && c.generation == "v6e" && c.topology == "4x4" &&
         c.slices >= 2;
}

std::string DemoJobYaml(const UpCluster& c) {
  const std::string topology = c.three_d ? "2x2x2" : c.topology;
  const int slices = c.three_d ? 1 : (c.slices >= 2 ? 2 : 1);
  return "# A demo TrainJob that fits the cluster `tessera up` started (" + c.generation +
         (c.three_d ? ", " + std::to_string(c.cubes) + " cube(s)"
                    : ", " + std::to_string(c.slices) + " x " + c.topology + " slices") +
         "): examples/train/train.py,\n"
         "# run from the repository's top folder, as examples/train/job.yaml is.\n"
         "apiVersion: tessera/v1\n"
         "kind: TrainJob\n"
         "metadata:\n"
         "  name: train-demo\n"
         "spec:\n"
         "  accelerator: " +
         c.generation +
         "\n"
         "  topology: " +
         topology +
         "\n"
         "  slices: " +
         std::to_string(slices) +
         "\n"
         "  template:\n"
         "    command: [/usr/bin/python3, examples/train/train.py]\n"
         "    env:\n"
         "      STEPS: \"50\"\n";
}

std::string UpSummary(const UpCluster& c, const std::vector<std::string>& head_urls,
                      const std::string& leader_url, const std::string& router_url,
                      const std::string& dir, const std::string& demo_job) {
  std::string out =
      c.gpu_system.empty()
          ? "tessera cluster up: " + std::to_string(c.hosts) + " emulated " + c.generation +
                " hosts (" +
                (c.three_d ? std::to_string(c.cubes) + " cube(s)"
                           : std::to_string(c.slices) + " x " + c.topology + " slices") +
                ")\n"
          : "tessera cluster up: " + std::to_string(c.hosts) + " emulated " + c.gpu_system +
                " hosts (" + std::to_string(c.gpu_domains) + " NVLink domain(s))\n";
  if (head_urls.size() > 1) {
    out += "  heads:  ";
    for (size_t i = 0; i < head_urls.size(); ++i)
      out += (i ? ", " : "") + head_urls[i] + (head_urls[i] == leader_url ? " (leader)" : "");
    out += "\n  API:    " + leader_url + "  (the leader now; the CLI finds whichever leads from " +
           dir + "/head.json)\n";
  } else {
    out += "  API:    " + leader_url + "\n";
  }
  out += "  web:    " + leader_url + "/  (dashboard; paste the admin token)\n";
  out += "  router: " + router_url + "/services/NAME/...  (serving)\n";
  out += "  token:  " + dir + "/admin.token\n";
  if (leader_url.starts_with("https://")) {
    out += "  CA:     " + dir +
           "/ca.crt  (the head's and the router's HTTPS certificates are signed by it: "
           "--ca-file, TESSERA_CA_FILE, curl --cacert; import it into a browser for the "
           "dashboard)\n";
  }
  out += "  state:  " + dir + "  (logs in " + dir + "/logs)\n";
  out += "Try: tessera get hosts; tessera apply -f " + demo_job + "\n";
  return out;
}

}  // namespace tessera::cli
