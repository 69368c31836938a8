#include "agent/discovery.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "agent/launcher.h"
#include "agent/nvidia_smi.h"
#include "common/text.h"
#include "net/http_client.h"

extern char** environ;

namespace tessera::agent {
namespace {

std::vector<std::string> SplitList(std::string_view text, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(sep, start);
    if (end == std::string_view::npos) end = text.size();
    out.push_back(Trim(text.substr(start, end - start)));
    start = end + 1;
  }
  return out;
}

// Prefixes an error of a source's checks with the source, keeping its code.
Status InSource(const std::string& source, const Status& status) {
  return Status(status.code(), source + ": " + status.message());
}

Status CheckMegascale(const std::map<std::string, std::string>& megascale,
                      const std::string& prefix) {
  std::optional<int64_t> slices;
  if (auto it = megascale.find("MEGASCALE_NUM_SLICES"); it != megascale.end()) {
    slices = ParseInt(it->second);
    if (!slices || *slices < 1 || *slices > 100000) {
      return InvalidArgument(prefix + "MEGASCALE_NUM_SLICES: " + Quote(it->second) +
                             " must be an integer >= 1 (the slices of the multi-slice job)");
    }
  }
  if (auto it = megascale.find("MEGASCALE_SLICE_ID"); it != megascale.end()) {
    auto id = ParseInt(it->second);
    if (!id || *id < 0 || (slices && *id >= *slices)) {
      return InvalidArgument(
          prefix + "MEGASCALE_SLICE_ID: " + Quote(it->second) + " must be an integer in 0.." +
          (slices ? std::to_string(*slices - 1) : std::string("N-1")) +
          (slices ? " (MEGASCALE_NUM_SLICES is " + std::to_string(*slices) + ")" : std::string()));
    }
  }
  return Status::Ok();
}

}  // namespace

Result<DevicesMode> ParseDevicesMode(std::string_view text) {
  if (text == "auto") return DevicesMode::kAuto;
  if (text == "emulated") return DevicesMode::kEmulated;
  if (text == "tpu") return DevicesMode::kTpu;
  if (text == "nvidia") return DevicesMode::kNvidia;
  return InvalidArgument("--devices: " + Quote(text) +
                         " must be auto (ask every source), emulated (the layout flags), tpu or "
                         "nvidia");
}

protocol::Discovered HostFacts::ToWire() const {
  protocol::Discovered d;
  d.source = source;
  d.accelerator_type = accelerator_type;
  if (slice) d.topology = slice->shape().ToString();
  d.slice_name = slice_name;
  if (worker_id >= 0) d.worker_id = worker_id;
  d.peers = peers;
  d.megascale = megascale;
  d.gpus = gpus;
  return d;
}

Result<std::map<std::string, std::string>> ParseTpuEnv(std::string_view text) {
  std::map<std::string, std::string> out;
  size_t line_no = 0;
  for (const std::string& raw : SplitList(text, '\n')) {
    ++line_no;
    const std::string line = Trim(raw);
    if (line.empty()) continue;
    const std::string where = "tpu-env line " + std::to_string(line_no) + ": ";
    const size_t colon = line.find(':');
    if (colon == std::string::npos || colon == 0) {
      return InvalidArgument(where + Quote(line) + " is not KEY: 'value'");
    }
    const std::string key = Trim(std::string_view(line).substr(0, colon));
    for (char c : key) {
      if (!std::isupper(static_cast<unsigned char>(c)) &&
          !std::isdigit(static_cast<unsigned char>(c)) && c != '_') {
        return InvalidArgument(where + "key " + Quote(key) +
                               " is not an upper-case name (KEY: 'value')");
      }
    }
    std::string value = Trim(std::string_view(line).substr(colon + 1));
    if (!value.empty() && (value.front() == '\'' || value.front() == '"')) {
      if (value.size() < 2 || value.back() != value.front()) {
        return InvalidArgument(where + Quote(line) + ": the value's quote is not closed");
      }
      value = value.substr(1, value.size() - 2);
    } else if (value.find_first_of(" \t'\"") != std::string::npos) {
      return InvalidArgument(where + Quote(line) + " is not KEY: 'value'");
    }
    if (!out.emplace(key, value).second) {
      return InvalidArgument(where + key + " is given twice");
    }
  }
  return out;
}

Result<std::vector<std::string>> ParseWorkerEndpoints(std::string_view text) {
  std::vector<std::string> ips;
  const std::string trimmed = Trim(text);
  if (trimmed.empty()) return ips;
  size_t n = 0;
  for (const std::string& entry : SplitList(trimmed, ',')) {
    std::vector<std::string> fields = SplitList(entry, ':');
    if (fields.size() < 3 || fields[2].empty()) {
      return InvalidArgument("worker-network-endpoints: entry " + std::to_string(n) + " " +
                             Quote(entry) + " is not ID:WORKER_NUMBER:IP");
    }
    ips.push_back(fields[2]);
    ++n;
  }
  return ips;
}

Result<HostFacts> ResolveTpuClaims(const TpuClaims& c) {
  HostFacts f;
  f.source = c.source;
  f.accelerator_type = c.accelerator_type;
  if (c.accelerator_type.empty()) {
    return InvalidArgument(c.accelerator_field + ": required, e.g. v6e-16 or v5p-32");
  }
  auto accel = ParseAccelerator(c.accelerator_type);
  if (!accel.ok()) {
    return InvalidArgument(c.accelerator_field + ": " + Quote(c.accelerator_type) +
                           " is not a TPU type tessera knows: " + accel.status().message());
  }
  if (accel->chips == 0) {
    return InvalidArgument(c.accelerator_field + ": " + Quote(c.accelerator_type) +
                           " has no size; a TPU VM's type is <generation>-<count>, e.g. v5p-16");
  }
  const GenerationInfo& info = Info(accel->generation);
  if (!c.topology.empty()) {
    auto shape = ParseShape(c.topology);
    if (!shape.ok()) return InvalidArgument(c.topology_field + ": " + shape.status().message());
    if (shape->chips() != accel->chips) {
      return InvalidArgument(
          c.topology_field + ": " + Quote(c.topology) + " is " + std::to_string(shape->chips()) +
          " chips but " + c.accelerator_field + " " + Quote(c.accelerator_type) + " is " +
          std::to_string(accel->chips) + " chips (" + std::string(info.name) + " counts " +
          (info.cores_per_chip == 1
               ? std::string("chips")
               : std::to_string(info.cores_per_chip) + " TensorCores per chip") +
          "); the two must describe the same slice");
    }
  }
  auto slice = ResolveAccelerator(c.accelerator_type, c.topology);
  if (!slice.ok()) {
    const std::string& message = slice.status().message();
    const bool about_topology = message.rfind("topology:", 0) == 0;
    const size_t colon = message.find(':');
    return InvalidArgument((about_topology ? c.topology_field : c.accelerator_field) +
                           message.substr(colon));
  }
  f.slice = *slice;
  f.chips = slice->chips_per_host();

  if (c.worker_id.empty()) {
    return InvalidArgument(c.worker_field + ": required: which worker of the " +
                           c.accelerator_type + " slice this host is (0.." +
                           std::to_string(slice->hosts() - 1) + ")");
  }
  auto worker = ParseInt(c.worker_id);
  if (!worker || *worker < 0 || *worker >= slice->hosts()) {
    return InvalidArgument(c.worker_field + ": " + Quote(c.worker_id) + " must be 0.." +
                           std::to_string(slice->hosts() - 1) + " (a " + c.accelerator_type +
                           " slice of " + slice->shape().ToString() + " has " +
                           std::to_string(slice->hosts()) + " hosts)");
  }
  f.worker_id = static_cast<int>(*worker);
  if (!c.peers.empty() && c.peers.size() != static_cast<size_t>(slice->hosts())) {
    return InvalidArgument(c.peers_field + ": " + std::to_string(c.peers.size()) +
                           " workers, but a " + c.accelerator_type + " slice of " +
                           slice->shape().ToString() + " has " + std::to_string(slice->hosts()) +
                           " hosts");
  }
  for (size_t i = 0; i < c.peers.size(); ++i) {
    if (c.peers[i].empty()) {
      return InvalidArgument(c.peers_field + ": entry " + std::to_string(i) + " is empty");
    }
  }
  f.peers = c.peers;
  f.slice_name = c.slice_name;
  f.megascale = c.megascale;
  TESSERA_RETURN_IF_ERROR(CheckMegascale(c.megascale, c.source == "gke" ? "" : "tpu-env "));
  f.instance_id = c.instance_id;
  return f;
}

Result<HostFacts> FactsFromGkeEnvironment(const std::map<std::string, std::string>& env) {
  auto get = [&](const char* key) -> std::string {
    auto it = env.find(key);
    return it == env.end() ? "" : it->second;
  };
  if (get("TPU_ACCELERATOR_TYPE").empty() && get("TPU_WORKER_ID").empty()) {
    return NotFound("TPU_ACCELERATOR_TYPE and TPU_WORKER_ID are not set (not a GKE TPU pod)");
  }
  TpuClaims c;
  c.source = "gke";
  c.accelerator_type = get("TPU_ACCELERATOR_TYPE");
  c.accelerator_field = "TPU_ACCELERATOR_TYPE";
  c.topology = get("TPU_TOPOLOGY");
  c.topology_field = "TPU_TOPOLOGY";
  c.worker_id = get("TPU_WORKER_ID");
  c.worker_field = "TPU_WORKER_ID";
  c.slice_name = get("TPU_NAME");
  c.peers_field = "TPU_WORKER_HOSTNAMES";
  if (const std::string hosts = get("TPU_WORKER_HOSTNAMES"); !Trim(hosts).empty()) {
    c.peers = SplitList(hosts, ',');
  }
  for (const auto& [key, value] : env) {
    if (key.rfind("MEGASCALE_", 0) == 0) c.megascale[key] = value;
  }
  return ResolveTpuClaims(c);
}

Result<HostFacts> FactsFromMetadata(const MetadataAnswers& a) {
  if (!a.accelerator_type) {
    return NotFound("instance/attributes/accelerator-type is not set (not a Cloud TPU VM)");
  }
  TpuClaims c;
  c.source = "metadata";
  c.accelerator_type = Trim(*a.accelerator_type);
  c.accelerator_field = "accelerator-type";
  c.worker_field = "agent-worker-number";
  c.peers_field = "worker-network-endpoints";
  c.topology_field = "tpu-env TOPOLOGY";
  if (!a.agent_worker_number) {
    return InvalidArgument("agent-worker-number: missing, but accelerator-type is " +
                           Quote(c.accelerator_type) +
                           "; every worker of a Cloud TPU slice has one");
  }
  c.worker_id = Trim(*a.agent_worker_number);
  std::map<std::string, std::string> env;
  if (a.tpu_env) {
    auto parsed = ParseTpuEnv(*a.tpu_env);
    if (!parsed.ok()) return parsed.status();
    env = std::move(*parsed);
  }
  auto get = [&](const char* key) -> std::string {
    auto it = env.find(key);
    return it == env.end() ? "" : it->second;
  };
  c.topology = get("TOPOLOGY");
  if (const std::string worker = get("WORKER_ID"); !worker.empty() && worker != c.worker_id) {
    return InvalidArgument("tpu-env WORKER_ID: " + Quote(worker) + " but agent-worker-number is " +
                           Quote(c.worker_id) + "; the metadata server contradicts itself");
  }
  c.slice_name = get("NODE_ID");
  for (const auto& [key, value] : env) {
    if (key.rfind("MEGASCALE_", 0) == 0) c.megascale[key] = value;
  }
  if (a.worker_network_endpoints) {
    auto peers = ParseWorkerEndpoints(*a.worker_network_endpoints);
    if (!peers.ok()) return peers.status();
    c.peers = std::move(*peers);
  }
  if (a.instance_id) c.instance_id = Trim(*a.instance_id);
  // The type is checked (a known one, with a size) before tpu-env's copy is compared to it.
  auto facts = ResolveTpuClaims(c);
  if (!facts.ok()) return facts;
  if (const std::string type = get("ACCELERATOR_TYPE");
      !type.empty() && type != c.accelerator_type) {
    return InvalidArgument("tpu-env ACCELERATOR_TYPE: " + Quote(type) +
                           " but accelerator-type is " + Quote(c.accelerator_type));
  }
  return facts;
}

Result<HostFacts> FactsFromLocalDevices(const LocalDeviceListing& listing) {
  HostFacts f;
  f.source = "devices";
  if (!listing.accel_files.empty()) {
    f.device_paths = listing.accel_files;
    f.chips = static_cast<int>(listing.accel_files.size());
    return f;
  }
  std::vector<std::string> other_vendors;
  for (const auto& [group, vendors] : listing.vfio_vendors) {
    for (const std::string& vendor : vendors) {
      if (vendor == kGoogleVendor) {
        f.device_paths.push_back("/dev/vfio/" + group);
        ++f.chips;
      } else {
        other_vendors.push_back(group + ":" + vendor);
      }
    }
  }
  if (f.chips > 0) return f;
  std::string why = "no /dev/accel* device files";
  if (!listing.accel_dirs.empty()) {
    why += " (ignored the director" + std::string(listing.accel_dirs.size() > 1 ? "ies" : "y") +
           " " + listing.accel_dirs.front() + ": an NVIDIA driver's, not a TPU chip)";
  }
  why += " and no /dev/vfio group of vendor " + std::string(kGoogleVendor);
  if (!other_vendors.empty()) {
    why += " (groups seen, group:vendor: ";
    for (size_t i = 0; i < other_vendors.size(); ++i) why += (i ? ", " : "") + other_vendors[i];
    why += ")";
  }
  return NotFound(why);
}

bool NvlinkAttached(const protocol::DiscoveredGpu& gpu) {
  return gpu.fabric && gpu.fabric->state == "Completed" && gpu.fabric->status == "Success";
}

Result<HostFacts> FactsFromGpus(std::vector<protocol::DiscoveredGpu> gpus) {
  if (gpus.empty()) return NotFound("nvidia-smi lists no GPU");
  for (size_t i = 0; i < gpus.size(); ++i) {
    const auto& g = gpus[i];
    if (g.fabric && !NvlinkAttached(g)) {
      return InvalidArgument("gpus[" + std::to_string(i) + "].fabric: GPU " + g.uuid +
                             " has fabric state " + Quote(g.fabric->state) + ", status " +
                             Quote(g.fabric->status) +
                             ": its NVLink domain is not ready (want Completed, Success); start "
                             "the agent once the fabric manager and IMEX have finished");
    }
  }
  HostFacts f;
  f.source = "nvidia-smi";
  f.chips = static_cast<int>(gpus.size());
  f.gpus = std::move(gpus);
  return f;
}

Result<HttpUrl> ParseHttpUrl(std::string_view url) {
  const std::string_view prefix = "http://";
  if (url.substr(0, prefix.size()) != prefix) {
    return InvalidArgument("--metadata-url: " + Quote(url) +
                           " must start with http:// (the metadata server speaks plain HTTP)");
  }
  std::string_view rest = url.substr(prefix.size());
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  HttpUrl out;
  if (slash != std::string_view::npos) out.path = std::string(rest.substr(slash));
  while (!out.path.empty() && out.path.back() == '/') out.path.pop_back();
  const size_t colon = authority.rfind(':');
  if (colon != std::string_view::npos && authority.find(']', colon) == std::string_view::npos) {
    auto port = ParseInt(authority.substr(colon + 1));
    if (!port || *port < 1 || *port > 65535) {
      return InvalidArgument("--metadata-url: " + Quote(url) + " has no valid port (1..65535)");
    }
    out.port = static_cast<uint16_t>(*port);
    authority = authority.substr(0, colon);
  }
  if (authority.size() > 2 && authority.front() == '[' && authority.back() == ']') {
    authority = authority.substr(1, authority.size() - 2);
  }
  if (authority.empty()) return InvalidArgument("--metadata-url: " + Quote(url) + " has no host");
  out.host = std::string(authority);
  return out;
}

LocalDeviceListing ListLocalDevices(const std::string& root) {
  namespace fs = std::filesystem;
  LocalDeviceListing out;
  std::error_code ec;
  const fs::path dev = fs::path(root) / "dev";
  for (fs::directory_iterator it(dev, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("accel", 0) != 0) continue;
    std::error_code type_ec;
    if (it->is_directory(type_ec)) {
      out.accel_dirs.push_back("/dev/" + name);
    } else {
      out.accel_files.push_back("/dev/" + name);
    }
  }
  std::sort(out.accel_files.begin(), out.accel_files.end());
  std::sort(out.accel_dirs.begin(), out.accel_dirs.end());
  ec.clear();
  for (fs::directory_iterator it(dev / "vfio", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string group = it->path().filename().string();
    if (group.empty() || !std::all_of(group.begin(), group.end(), ::isdigit)) continue;
    std::vector<std::string>& vendors = out.vfio_vendors[group];
    std::error_code dev_ec;
    const fs::path devices = fs::path(root) / "sys/kernel/iommu_groups" / group / "devices";
    for (fs::directory_iterator d(devices, dev_ec), dend; !dev_ec && d != dend;
         d.increment(dev_ec)) {
      std::ifstream in(d->path() / "vendor");
      std::stringstream text;
      text << in.rdbuf();
      if (in) vendors.push_back(Trim(text.str()));
    }
  }
  return out;
}

Result<MetadataAnswers> FetchMetadata(const MetadataOptions& options) {
  auto url = ParseHttpUrl(options.url);
  if (!url.ok()) return url.status();
  net::ClientOptions client_options;
  client_options.host = url->host;
  client_options.port = url->port;
  client_options.connect_timeout = options.connect_timeout;
  client_options.read_timeout = options.read_timeout;
  client_options.max_response_bytes = 1 << 20;
  net::HttpClient client(client_options);
  const net::Headers headers = {{"Metadata-Flavor", "Google"}};
  auto get = [&](const std::string& what) -> Result<std::optional<std::string>> {
    const std::string target = url->path + "/instance/" + what;
    auto response = client.Request(net::Method::kGet, target, {}, headers);
    if (!response.ok()) {
      return Unavailable(options.url + " did not answer GET " + target + ": " +
                         response.status().message());
    }
    if (response->status == 404) return std::optional<std::string>();
    if (response->status != 200) {
      return Unavailable(options.url + " answered GET " + target + " with " +
                         std::to_string(response->status));
    }
    return std::optional<std::string>(response->body);
  };
  MetadataAnswers a;
  auto accel = get("attributes/accelerator-type");
  if (!accel.ok()) return accel.status();
  a.accelerator_type = *accel;
  if (!a.accelerator_type) return a;  // not a TPU VM: nothing more to ask
  struct Field {
    const char* what;
    std::optional<std::string>* out;
  };
  for (const Field& field :
       {Field{"attributes/agent-worker-number", &a.agent_worker_number},
        Field{"attributes/worker-network-endpoints", &a.worker_network_endpoints},
        Field{"attributes/tpu-env", &a.tpu_env}, Field{"id", &a.instance_id}}) {
    auto answer = get(field.what);
    if (!answer.ok()) return answer.status();
    *field.out = *answer;
  }
  return a;
}

std::map<std::string, std::string> ProcessEnvironment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view entry(*e);
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
  return env;
}

Result<HostFacts> DiscoverHost(const DiscoveryOptions& options, std::vector<SourceNote>& skipped) {
  if (options.mode == DevicesMode::kEmulated) {
    return InvalidArgument("--devices: emulated is not discovery: the layout flags give it");
  }
  struct Source {
    const char* name;
    std::function<Result<HostFacts>()> ask;
  };
  std::vector<Source> sources;
  const bool tpu = options.mode != DevicesMode::kNvidia;
  const bool nvidia = options.mode != DevicesMode::kTpu;
  if (tpu) {
    sources.push_back({"gke", [&] { return FactsFromGkeEnvironment(options.environment); }});
    sources.push_back({"metadata", [&]() -> Result<HostFacts> {
                         auto answers = FetchMetadata(options.metadata);
                         if (!answers.ok()) {
                           if (answers.status().code() == StatusCode::kInvalidArgument)
                             return answers.status();
                           return NotFound(answers.status().message());
                         }
                         return FactsFromMetadata(*answers);
                       }});
    sources.push_back(
        {"devices", [&] { return FactsFromLocalDevices(ListLocalDevices(options.dev_root)); }});
  }
  if (nvidia) {
    sources.push_back({"nvidia-smi", [&]() -> Result<HostFacts> {
                         auto it = options.environment.find("PATH");
                         const std::string path =
                             it == options.environment.end() ? "/usr/bin:/bin" : it->second;
                         auto xml =
                             RunNvidiaSmi(options.nvidia_smi, path, options.nvidia_smi_timeout);
                         if (!xml.ok()) return NotFound(xml.status().message());
                         auto gpus = ParseNvidiaSmiXml(*xml);
                         if (!gpus.ok()) return gpus.status();
                         return FactsFromGpus(std::move(*gpus));
                       }});
  }
  std::string reasons;
  for (const Source& source : sources) {
    Result<HostFacts> facts = source.ask();
    if (facts.ok()) return facts;
    if (facts.status().code() != StatusCode::kNotFound) {
      return InSource(source.name, facts.status());
    }
    skipped.push_back({source.name, facts.status().message()});
    reasons +=
        std::string(reasons.empty() ? "" : "; ") + source.name + ": " + facts.status().message();
  }
  return NotFound("no source answered (" + reasons + ")");
}

}  // namespace tessera::agent
