// `tessera agent`: runs the host agent until SIGTERM or SIGINT (src/agent/agent.h).
#include "agent/agent.h"
#include "cli/commands.h"

namespace tessera::cli {

void AddAgentCommand(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("agent", "Run the host agent: register, launch workers, relay progress");
  auto flags = std::make_shared<agent::AgentFlags>();
  // Every value is taken as text and checked by MakeAgentSetup, so each error names its flag
  // and exits with status 2 like the other commands.
  cmd->add_option("--head", flags->head,
                  "the head's address, https://HOST:PORT (http:// with --plain-http); several "
                  "heads of an HA control plane comma-separated");
  cmd->add_option("--join-token-file", flags->join_token_file, "file holding the join token");
  cmd->add_option("--ca-file", flags->ca_file,
                  "the cluster CA (ca.crt in the head's state directory) that an https:// head's "
                  "certificate must be signed by");
  cmd->add_option("--name", flags->name, "host name (default: the machine's hostname)");
  cmd->add_option("--state-dir", flags->state_dir,
                  "where logs and progress files live (default: tessera-state/agent-NAME)");
  cmd->add_option("--port", flags->port, "port of the agent's log server (0 = any free port)");
  cmd->add_option("--address", flags->address, "address the head reaches this host at");
  cmd->add_option("--bind", flags->bind, "address the agent's log server listens on")
      ->capture_default_str();
  cmd->add_option("--generation", flags->generation,
                  "accelerator generation: v5e, v6e (2D); v4, v5p, 7x (3D)");
  cmd->add_option("--devices", flags->devices,
                  "where the host's accelerators come from: auto (the GKE environment, the GCE "
                  "metadata server, /dev, nvidia-smi; the layout flags when none answers), "
                  "emulated (the layout flags), tpu or nvidia (that source must answer); "
                  "docs/discovery.md (default auto)");
  cmd->add_option(
      "--metadata-url", flags->metadata_url,
      "the GCE metadata server (default " + std::string(agent::kDefaultMetadataUrl) + ")");
  cmd->add_option("--dev-root", flags->dev_root,
                  "where /dev and /sys are read for local TPU devices (default /)");
  cmd->add_option("--nvidia-smi", flags->nvidia_smi,
                  "the nvidia-smi to run (default nvidia-smi from PATH)");
  cmd->add_option("--chips", flags->chips, "chips on this host (default: from the topology)");
  cmd->add_option("--slice", flags->slice, "2D: the fixed slice this host belongs to");
  cmd->add_option("--topology", flags->topology, "2D: the slice's shape, e.g. 4x4");
  cmd->add_option("--worker", flags->worker, "2D: this host's worker id in the slice");
  cmd->add_option("--cube", flags->cube, "3D: the cube this host belongs to");
  cmd->add_option("--block", flags->block, "3D: the block holding the cube");
  cmd->add_option("--coord", flags->coord, "3D: host-grid coordinate in the cube, x,y,z");
  cmd->add_option("--label", flags->labels, "host label key=value (repeatable)");
  cmd->add_option("--warm-python", flags->warm_python,
                  "keep pre-started interpreters of this Python for workers run with it "
                  "(warm pool; off when empty)");
  cmd->add_option("--warm-preload", flags->warm_preload,
                  "modules the warm interpreters import ahead of time, comma list (e.g. torch)");
  cmd->add_option("--warm-pool", flags->warm_pool, "warm interpreters kept ready (default 1)");
  cmd->add_option("--warm-refill-delay-ms", flags->warm_refill_delay_ms,
                  "wait this long after a warm interpreter is used before starting its "
                  "replacement, so its imports do not compete with the new worker (default 0)");
  cmd->add_option("--fence-ms", flags->fence_ms,
                  "stop training workers once no head has answered for this long; serving "
                  "replicas keep running (docs/ha.md \"Fencing\"; default 15000, 0 = never)");
  cmd->add_option("--warm-sdk-dir", flags->warm_sdk_dir,
                  "directory holding the tessera Python package (default: the python/ directory "
                  "of the checkout holding this binary)");
  cmd->callback([flags] {
    auto setup = agent::MakeAgentSetup(*flags);
    if (!setup.ok()) throw CommandError(setup.status().message());
    Status status = agent::RunAgent(std::move(*setup));
    if (!status.ok()) throw CommandError(status.message(), 1);
  });
}

}  // namespace tessera::cli
