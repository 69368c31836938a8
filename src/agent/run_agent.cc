// `tessera agent`: its flags (AgentFlags -> MakeAgentSetup) and RunAgent, which runs an Agent
// until SIGTERM/SIGINT or until it gives up. Declared in agent.h.
#include <signal.h>
#include <unistd.h>

#include <cctype>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string_view>

#include "agent/agent.h"
#include "common/text.h"
#include "ha/head_list.h"

namespace tessera::agent {
namespace {

// All of `text` as an integer; nullopt when it is not one.
Result<Coord> ParseCoord(const std::string& text) {
  Coord c;
  int* parts[3] = {&c.x, &c.y, &c.z};
  size_t start = 0;
  for (int i = 0; i < 3; ++i) {
    size_t end = text.find(',', start);
    if ((i < 2) != (end != std::string::npos)) {
      return InvalidArgument("--coord: '" + text + "' must be x,y,z (three integers)");
    }
    if (end == std::string::npos) end = text.size();
    auto v = ParseInt(std::string_view(text).substr(start, end - start));
    if (!v || *v < 0 || *v > 1000) {
      return InvalidArgument("--coord: '" + text + "' must be x,y,z (three integers >= 0)");
    }
    *parts[i] = static_cast<int>(*v);
    start = end + 1;
  }
  return c;
}

// One --head URL: https://HOST:PORT (verified against --ca-file) or http://HOST:PORT (a head
// started with --plain-http). Sets options.head_tls for an https head.
Status ParseOneHead(const std::string& head, const std::string& ca_file, AgentOptions& options,
                    std::string& host_out, uint16_t& port_out) {
  if (head.find("://") == std::string::npos) {
    return InvalidArgument("--head: '" + head +
                           "' must start with https:// (or http:// for a head "
                           "started with --plain-http)");
  }
  Result<net::ClientOptions> parsed = net::ClientOptionsForUrl(head, ca_file, "--head");
  if (!parsed.ok()) return parsed.status();
  host_out = parsed->host;
  port_out = parsed->port;
  if (parsed->tls) options.head_tls = parsed->tls;
  return Status::Ok();
}

// One head, or several of an HA control plane: "https://a:1,https://b:2" (docs/ha.md).
Status ParseHead(const std::string& head, const std::string& ca_file, AgentOptions& options) {
  const std::vector<std::string> heads = ha::SplitHeadList(head);
  if (heads.empty()) {
    return InvalidArgument(
        "--head: required, e.g. https://127.0.0.1:7600 (or several heads, comma-separated)");
  }
  TESSERA_RETURN_IF_ERROR(
      ParseOneHead(heads[0], ca_file, options, options.head_host, options.head_port));
  const bool tls = options.head_tls.has_value();
  for (size_t i = 1; i < heads.size(); ++i) {
    std::pair<std::string, uint16_t> more;
    TESSERA_RETURN_IF_ERROR(ParseOneHead(heads[i], ca_file, options, more.first, more.second));
    if (heads[i].starts_with("https://") != tls) {
      return InvalidArgument("--head: '" + heads[i] +
                             "' does not speak what the first head does; every head of a "
                             "control plane is https, or every one http");
    }
    options.more_heads.push_back(std::move(more));
  }
  return Status::Ok();
}

// The python/ directory of the checkout that holds the running binary (build/<preset>/bin/
// tessera), found by walking up from it; "" if there is none.
std::string FindSdkDir() {
  std::error_code ec;
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  for (auto dir = exe.parent_path(); !dir.empty(); dir = dir.parent_path()) {
    if (std::filesystem::exists(dir / "python" / "tessera" / "_warm.py", ec)) {
      return (dir / "python").string();
    }
    if (dir == dir.root_path()) break;
  }
  return "";
}

Status ParseWarmFlags(const AgentFlags& flags, WarmPoolOptions& warm) {
  if (flags.warm_python.empty()) {
    if (!flags.warm_preload.empty()) {
      return InvalidArgument("--warm-preload: needs --warm-python (the interpreter to keep warm)");
    }
    // Jobs may still ask for warm interpreters (spec.warmStart): they need the SDK.
    warm.sdk_dir = flags.warm_sdk_dir.empty() ? FindSdkDir() : flags.warm_sdk_dir;
    if (!warm.sdk_dir.empty() && !std::filesystem::exists(warm.sdk_dir + "/tessera/_warm.py"))
      warm.sdk_dir.clear();
    if (!warm.sdk_dir.empty())
      warm.sdk_dir = std::filesystem::absolute(warm.sdk_dir).lexically_normal().string();
    return Status::Ok();
  }
  const char* path = std::getenv("PATH");
  if (FindExecutable(flags.warm_python, path != nullptr ? path : "/usr/bin:/bin").empty()) {
    return InvalidArgument("--warm-python: '" + flags.warm_python + "' is not an executable file");
  }
  warm.python = flags.warm_python;
  std::stringstream modules(flags.warm_preload);
  for (std::string module; std::getline(modules, module, ',');) {
    if (module.empty()) continue;
    for (char c : module) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.') {
        return InvalidArgument("--warm-preload: '" + module + "' is not a module name");
      }
    }
    warm.preload.push_back(module);
  }
  auto size = ParseInt(flags.warm_pool);
  if (!size || *size < 0 || *size > 16) {
    return InvalidArgument("--warm-pool: '" + flags.warm_pool + "' must be 0..16");
  }
  warm.size = static_cast<int>(*size);
  auto delay = ParseInt(flags.warm_refill_delay_ms);
  if (!delay || *delay < 0 || *delay > 3'600'000) {
    return InvalidArgument("--warm-refill-delay-ms: '" + flags.warm_refill_delay_ms +
                           "' must be 0..3600000");
  }
  warm.refill_delay = std::chrono::milliseconds(*delay);
  warm.sdk_dir = flags.warm_sdk_dir.empty() ? FindSdkDir() : flags.warm_sdk_dir;
  if (warm.sdk_dir.empty() || !std::filesystem::exists(warm.sdk_dir + "/tessera/_warm.py")) {
    return InvalidArgument("--warm-sdk-dir: '" + warm.sdk_dir +
                           "' holds no tessera/_warm.py; give the repository's python/ directory");
  }
  warm.sdk_dir = std::filesystem::absolute(warm.sdk_dir).lexically_normal().string();
  while (warm.sdk_dir.size() > 1 && warm.sdk_dir.back() == '/') warm.sdk_dir.pop_back();
  return Status::Ok();
}

// The host's generation, place and chips from the layout flags (--generation, --slice/
// --topology/--worker or --cube/--block/--coord, --chips): an emulated host, or one whose
// discovery gave no slice.
Status ApplyLayoutFlags(const AgentFlags& flags, AgentSetup& setup) {
  AgentOptions& o = setup.options;
  if (flags.generation.empty()) return InvalidArgument("--generation: required, e.g. v6e or 7x");
  auto generation = ParseGeneration(flags.generation);
  if (!generation.ok()) return InvalidArgument("--generation: " + generation.status().message());
  o.generation = std::string(GenerationName(*generation));
  const int rank = Info(*generation).rank;

  const bool has_slice = !flags.slice.empty() || !flags.topology.empty() || !flags.worker.empty();
  const bool has_cube = !flags.cube.empty() || !flags.block.empty() || !flags.coord.empty();
  if (has_slice && has_cube) {
    return InvalidArgument(
        "--cube: give either --slice/--topology/--worker or --cube/--block/--coord, not both");
  }
  if (rank == 2) {
    if (has_cube) {
      return InvalidArgument("--cube: " + o.generation +
                             " has fixed 2D slices; use --slice, --topology and --worker");
    }
    if (flags.slice.empty()) return InvalidArgument("--slice: required for " + o.generation);
    if (!IsSafeName(flags.slice)) {
      return InvalidArgument("--slice: '" + flags.slice + "' must be of [A-Za-z0-9._-]");
    }
    if (flags.topology.empty()) return InvalidArgument("--topology: required, e.g. 4x4");
    auto shape = ParseShape(flags.topology);
    if (!shape.ok()) return InvalidArgument("--topology: " + shape.status().message());
    auto worker = ParseInt(flags.worker.empty() ? "0" : flags.worker);
    if (!worker || *worker < 0 || *worker > 100000) {
      return InvalidArgument("--worker: '" + flags.worker + "' must be an integer >= 0");
    }
    auto devices = EmulatedDevices::ForSliceWorker(*generation, *shape, static_cast<int>(*worker));
    if (!devices.ok()) return InvalidArgument("--" + devices.status().message());
    o.slice = SliceMembership{flags.slice, shape->ToString(), static_cast<int>(*worker)};
    setup.devices = std::make_unique<EmulatedDevices>(*devices);
  } else {
    if (has_slice) {
      return InvalidArgument("--slice: " + o.generation +
                             " is built from cubes; use --cube, --block and --coord");
    }
    if (flags.cube.empty()) return InvalidArgument("--cube: required for " + o.generation);
    if (!IsSafeName(flags.cube)) {
      return InvalidArgument("--cube: '" + flags.cube + "' must be of [A-Za-z0-9._-]");
    }
    if (flags.block.empty()) return InvalidArgument("--block: required for " + o.generation);
    if (!IsSafeName(flags.block)) {
      return InvalidArgument("--block: '" + flags.block + "' must be of [A-Za-z0-9._-]");
    }
    if (flags.coord.empty()) return InvalidArgument("--coord: required, e.g. 0,1,3");
    auto coord = ParseCoord(flags.coord);
    if (!coord.ok()) return coord.status();
    auto devices = EmulatedDevices::ForCubeHost(*coord);
    if (!devices.ok()) return InvalidArgument("--" + devices.status().message());
    o.cube = CubeMembership{flags.cube, flags.block, *coord};
    setup.devices = std::make_unique<EmulatedDevices>(*devices);
  }
  const int host_chips = static_cast<EmulatedDevices*>(setup.devices.get())->chips();
  if (!flags.chips.empty()) {
    auto chips = ParseInt(flags.chips);
    if (!chips || *chips != host_chips) {
      return InvalidArgument("--chips: '" + flags.chips + "' does not match this host: it has " +
                             std::to_string(host_chips) + " chips");
    }
  }

  return Status::Ok();
}

std::string Joined(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ",") + item;
  return out;
}

// A TPU host's layout from the slice a TPU source (gke, metadata) found. Layout flags are
// optional then; each one given must agree with the source. A 2D generation's host is a
// worker of the slice; a 3D one's is a host of the slice's cube (a slice of several cubes is
// cut into cubes named <slice>-cube-<i>).
Status ApplyTpuFacts(const AgentFlags& flags, const HostFacts& facts, AgentSetup& setup) {
  AgentOptions& o = setup.options;
  const SliceTopology& slice = *facts.slice;
  const Generation gen = slice.generation();
  const std::string from = (facts.source == "gke" ? "the GKE environment" : "the metadata server") +
                           std::string(" (accelerator type ") + facts.accelerator_type +
                           ", topology " + slice.shape().ToString() + ", worker " +
                           std::to_string(facts.worker_id) + ")";
  if (!flags.generation.empty()) {
    auto g = ParseGeneration(flags.generation);
    if (!g.ok()) return InvalidArgument("--generation: " + g.status().message());
    if (*g != gen) {
      return InvalidArgument("--generation: '" + flags.generation + "' but " + from + " says " +
                             std::string(GenerationName(gen)) + "; drop the flag or fix it");
    }
  }
  o.generation = std::string(GenerationName(gen));
  if (!flags.topology.empty()) {
    auto shape = ParseShape(flags.topology);
    if (!shape.ok()) return InvalidArgument("--topology: " + shape.status().message());
    if (*shape != slice.shape()) {
      return InvalidArgument("--topology: '" + flags.topology + "' but " + from + " says " +
                             slice.shape().ToString() + "; drop the flag or fix it");
    }
  }
  if (!flags.worker.empty() && flags.worker != std::to_string(facts.worker_id)) {
    return InvalidArgument("--worker: '" + flags.worker + "' but " + from + " says " +
                           std::to_string(facts.worker_id) + "; drop the flag or fix it");
  }
  const bool flat = Info(gen).rank == 2;
  const std::string name_flag = flat ? "--slice" : "--cube";
  const std::string& flag_name = flat ? flags.slice : flags.cube;
  if (flat && (!flags.cube.empty() || !flags.block.empty() || !flags.coord.empty())) {
    return InvalidArgument("--cube: " + o.generation + " has fixed 2D slices, and " + from +
                           " places this host in one");
  }
  if (!flat && !flags.slice.empty()) {
    return InvalidArgument("--slice: " + o.generation +
                           " is built from cubes; name the cube with --cube");
  }
  std::string name = facts.slice_name;
  if (!flag_name.empty()) {
    if (!name.empty() && name != flag_name) {
      return InvalidArgument(name_flag + ": '" + flag_name + "' but " + from +
                             " names the slice '" + name + "'; drop the flag or fix it");
    }
    name = flag_name;
  }
  if (name.empty()) {
    return InvalidArgument(name_flag + ": required: " + from +
                           " names no slice (TPU_NAME, tpu-env NODE_ID); give its name");
  }
  if (!IsSafeName(name)) {
    return InvalidArgument(name_flag + ": the slice name '" + name +
                           "' is not of [A-Za-z0-9._-]; give " + name_flag + " a name that is");
  }
  std::vector<Device> devices;
  if (flat) {
    auto emulated = EmulatedDevices::ForSliceWorker(gen, slice.shape(), facts.worker_id);
    if (!emulated.ok()) return InvalidArgument("--" + emulated.status().message());
    auto list = emulated->Discover();
    if (!list.ok()) return list.status();
    devices = *list;
    o.slice = SliceMembership{name, slice.shape().ToString(), facts.worker_id};
  } else {
    const Coord host = slice.HostCoordOf(facts.worker_id);
    const Coord coord{host.x % 2, host.y % 2, host.z % 4};
    const int cubes_x = (slice.host_grid().x() + 1) / 2, cubes_y = (slice.host_grid().y() + 1) / 2;
    const int cube_index = (host.z / 4) * cubes_x * cubes_y + (host.y / 2) * cubes_x + host.x / 2;
    const std::string cube = slice.cubes() > 1 && flags.cube.empty()
                                 ? name + "-cube-" + std::to_string(cube_index)
                                 : name;
    if (!flags.coord.empty()) {
      auto given = ParseCoord(flags.coord);
      if (!given.ok()) return given.status();
      if (*given != coord) {
        return InvalidArgument("--coord: '" + flags.coord + "' but " + from +
                               " puts this host at " + std::to_string(coord.x) + "," +
                               std::to_string(coord.y) + "," + std::to_string(coord.z) +
                               " of its cube; drop the flag or fix it");
      }
    }
    if (!flags.block.empty() && !IsSafeName(flags.block)) {
      return InvalidArgument("--block: '" + flags.block + "' must be of [A-Za-z0-9._-]");
    }
    auto emulated = EmulatedDevices::ForCubeHost(coord);
    if (!emulated.ok()) return InvalidArgument("--" + emulated.status().message());
    auto list = emulated->Discover();
    if (!list.ok()) return list.status();
    devices = *list;
    o.cube = CubeMembership{cube, flags.block.empty() ? "block-00" : flags.block, coord};
  }
  if (!flags.chips.empty() && flags.chips != std::to_string(devices.size())) {
    return InvalidArgument("--chips: '" + flags.chips + "' but " + from + " gives this host " +
                           std::to_string(devices.size()) + " chips");
  }
  setup.devices = std::make_unique<DiscoveredDevices>(facts.source, std::move(devices));
  return Status::Ok();
}

// Discovers the host (DiscoverHost) and takes its layout from what answered; see
// MakeAgentSetup.
Status ApplyDiscovery(const AgentFlags& flags, DevicesMode mode, AgentSetup& setup) {
  AgentOptions& o = setup.options;
  DiscoveryOptions d;
  d.mode = mode;
  d.environment = flags.environment ? *flags.environment : ProcessEnvironment();
  auto url = ParseHttpUrl(flags.metadata_url);
  if (!url.ok()) return url.status();
  d.metadata.url = flags.metadata_url;
  if (flags.dev_root.empty()) return InvalidArgument("--dev-root: must not be empty (default /)");
  d.dev_root = flags.dev_root;
  if (flags.nvidia_smi.empty()) {
    return InvalidArgument("--nvidia-smi: must not be empty (default nvidia-smi from PATH)");
  }
  d.nvidia_smi = flags.nvidia_smi;
  auto facts = DiscoverHost(d, o.discovery_log);
  if (!facts.ok()) {
    const bool none = facts.status().code() == StatusCode::kNotFound;
    if (none && mode == DevicesMode::kAuto && !flags.generation.empty()) {
      o.discovery_log.push_back(
          {"emulated", "no source answered; the layout flags give the host", true});
      return ApplyLayoutFlags(flags, setup);
    }
    return InvalidArgument(
        "--devices: " + flags.devices + ": " + facts.status().message() +
        (none && mode == DevicesMode::kAuto
             ? "; give the layout flags (--generation and --slice/--topology/--worker or "
               "--cube/--block/--coord), or --devices emulated"
             : ""));
  }
  o.discovered = facts->ToWire();
  std::string what = std::to_string(facts->chips) + " chips";
  if (facts->slice) {
    what = facts->accelerator_type + " " + facts->slice->shape().ToString() + " worker " +
           std::to_string(facts->worker_id) + ", " + what + " on this host";
  }
  if (!facts->device_paths.empty()) what += " (" + Joined(facts->device_paths) + ")";
  if (!facts->gpus.empty()) {
    int attached = 0;
    for (const auto& g : facts->gpus) attached += NvlinkAttached(g) ? 1 : 0;
    what = std::to_string(facts->gpus.size()) + " GPUs, " + std::to_string(attached) +
           " NVLink-attached";
  }
  o.discovery_log.push_back({facts->source, what, true});
  if (facts->slice) return ApplyTpuFacts(flags, *facts, setup);

  // devices and nvidia-smi count chips or GPUs; the layout flags place the host.
  if (flags.generation.empty()) {
    return InvalidArgument("--generation: required: " + facts->source + " found " + what +
                           " but not which generation or slice; give --generation and the "
                           "slice or cube flags");
  }
  TESSERA_RETURN_IF_ERROR(ApplyLayoutFlags(flags, setup));
  auto layout = setup.devices->Discover();
  if (!layout.ok()) return layout.status();
  if (static_cast<int>(layout->size()) != facts->chips) {
    return InvalidArgument(
        "--chips: " + facts->source + " found " + what + " but the layout flags give this host " +
        std::to_string(layout->size()) + "; fix --generation and --topology (or the cube flags)");
  }
  setup.devices = std::make_unique<DiscoveredDevices>(facts->source, std::move(*layout));
  return Status::Ok();
}
}  // namespace

Result<AgentSetup> MakeAgentSetup(const AgentFlags& flags) {
  AgentSetup setup;
  AgentOptions& o = setup.options;
  TESSERA_RETURN_IF_ERROR(ParseHead(flags.head, flags.ca_file, o));

  if (flags.join_token_file.empty()) {
    return InvalidArgument("--join-token-file: required (a file holding the head's join token)");
  }
  {
    std::ifstream in(flags.join_token_file);
    if (!in) {
      return InvalidArgument("--join-token-file: cannot read " + flags.join_token_file);
    }
    std::stringstream text;
    text << in.rdbuf();
    std::string token = text.str();
    const char* space = " \t\r\n";
    token.erase(0, token.find_first_not_of(space) == std::string::npos
                       ? token.size()
                       : token.find_first_not_of(space));
    token.erase(token.find_last_not_of(space) + 1);
    if (token.empty()) {
      return InvalidArgument("--join-token-file: " + flags.join_token_file + " is empty");
    }
    o.join_token = token;
  }

  // The name the head will register (the protocol's one host-name rule), so that the URLs the
  // agent uses and its default state directory hold that name. An invalid one fails here, at
  // start, rather than as a registration the head refuses.
  std::string name = flags.name;
  if (name.empty()) {
    char buf[256] = {};
    if (::gethostname(buf, sizeof buf - 1) == 0) name = buf;
  }
  auto normalized = protocol::NormalizeHostName(name);
  if (!normalized.ok()) {
    return InvalidArgument(
        "--" + normalized.status().message() +
        (flags.name.empty() ? " (--name defaults to this machine's hostname)" : ""));
  }
  o.name = *normalized;
  o.state_dir = flags.state_dir.empty() ? "tessera-state/agent-" + o.name : flags.state_dir;
  o.state_dir = std::filesystem::absolute(o.state_dir).lexically_normal().string();
  while (o.state_dir.size() > 1 && o.state_dir.back() == '/') o.state_dir.pop_back();

  auto port = ParseInt(flags.port);
  if (!port || *port < 0 || *port > 65535) {
    return InvalidArgument("--port: '" + flags.port + "' must be 0..65535 (0 = any free port)");
  }
  o.port = static_cast<uint16_t>(*port);
  auto fence = ParseInt(flags.fence_ms);
  if (!fence || (*fence != 0 && (*fence < 1000 || *fence > 86'400'000))) {
    return InvalidArgument("--fence-ms: '" + flags.fence_ms +
                           "' must be 1000..86400000 (how long training workers run without a "
                           "head), or 0 to never fence");
  }
  o.fence_ms = *fence;
  if (flags.address.empty()) return InvalidArgument("--address: must not be empty");
  o.address = flags.address;
  if (flags.bind.empty()) return InvalidArgument("--bind: must not be empty, e.g. 127.0.0.1");
  o.listen_address = flags.bind;

  auto mode = ParseDevicesMode(flags.devices);
  if (!mode.ok()) return mode.status();
  if (*mode == DevicesMode::kEmulated) {
    TESSERA_RETURN_IF_ERROR(ApplyLayoutFlags(flags, setup));
  } else {
    TESSERA_RETURN_IF_ERROR(ApplyDiscovery(flags, *mode, setup));
  }

  for (const std::string& label : flags.labels) {
    size_t eq = label.find('=');
    if (eq == std::string::npos || eq == 0) {
      return InvalidArgument("--label: '" + label + "' must be key=value");
    }
    o.labels[label.substr(0, eq)] = label.substr(eq + 1);
  }
  TESSERA_RETURN_IF_ERROR(ParseWarmFlags(flags, o.warm));
  return setup;
}

Status RunAgent(AgentSetup setup) {
  // SIGTERM and SIGINT are taken synchronously by this thread; every thread started from here
  // on inherits the blocked mask (workers get a clean one from the launcher).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  ::pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  Agent agent(std::move(setup.options), std::move(setup.devices));
  Status started = agent.Start();
  if (!started.ok()) return started;
  Status result;
  while (true) {
    timespec tick{0, 200 * 1000 * 1000};
    int sig = ::sigtimedwait(&signals, nullptr, &tick);
    if (sig == SIGTERM || sig == SIGINT) break;
    result = agent.fatal_error();
    if (!result.ok()) break;
  }
  agent.Shutdown();
  return result;
}

}  // namespace tessera::agent
