// Registration (wire.h): an agent's host, slice, cube and devices as it registers, and the
// head's reply.
#include <set>

#include "common/json_limits.h"
#include "protocol/credential.h"
#include "protocol/wire.h"
#include "protocol/wire_json.h"

namespace tessera::protocol {

using wire_json::CoordJson;
using wire_json::Dump;
using wire_json::Item;
using wire_json::json;
using wire_json::kDefaultBlock;
using wire_json::kMaxAddress;
using wire_json::kMaxChips;
using wire_json::kMaxFenceMs;
using wire_json::kMaxLabelKey;
using wire_json::kMaxLabelValue;
using wire_json::kMinFenceMs;
using wire_json::kNoMax;
using wire_json::Member;
using wire_json::Presence;
using wire_json::Printable;
using wire_json::Quoted;
using wire_json::ReadCoord;
using wire_json::ReadInt;
using wire_json::ReadList;
using wire_json::ReadObject;
using wire_json::ReadSafeName;
using wire_json::ReadString;
using wire_json::Shown;

namespace {

// ----- registration -----

Status ReadSlice(const json& j, Generation generation, Registration& r) {
  const std::string gen(GenerationName(generation));
  auto slice = ReadObject(j, "slice", "slice");
  if (!slice.ok()) return slice.status();
  if (*slice == nullptr) {
    return InvalidArgument("slice: required: a " + gen +
                           " host must say which slice it belongs to, {\"name\": ..., "
                           "\"topology\": ..., \"worker\": ...}");
  }
  if (Member(j, "cube") != nullptr) {
    return InvalidArgument("cube: " + gen + " hosts belong to fixed slices; send only \"slice\"");
  }
  const json& s = **slice;
  SliceMembership m;
  TESSERA_RETURN_IF_ERROR(ReadSafeName(s, "name", "slice.name", Presence::kRequired, m.name));
  TESSERA_RETURN_IF_ERROR(
      ReadString(s, "topology", "slice.topology", Presence::kRequired, m.topology));
  auto shape = ParseShape(m.topology);
  if (!shape.ok()) return InvalidArgument("slice.topology: " + shape.status().message());
  auto topology = SliceTopology::Make(generation, *shape);
  if (!topology.ok()) return InvalidArgument("slice.topology: " + topology.status().message());
  m.topology = topology->shape().ToString();
  TESSERA_RETURN_IF_ERROR(ReadInt(s, "worker", "slice.worker", 0, topology->hosts() - 1,
                                  Presence::kRequired, m.worker));
  r.slice = std::move(m);
  return Status::Ok();
}

Status ReadCube(const json& j, Generation generation, Registration& r) {
  const std::string gen(GenerationName(generation));
  auto cube = ReadObject(j, "cube", "cube");
  if (!cube.ok()) return cube.status();
  if (*cube == nullptr) {
    return InvalidArgument("cube: required: a " + gen +
                           " host must say which cube it belongs to, {\"name\": ..., \"block\": "
                           "..., \"coord\": [x, y, z]}");
  }
  if (Member(j, "slice") != nullptr) {
    return InvalidArgument("slice: " + gen + " hosts belong to cubes; send only \"cube\"");
  }
  const json& c = **cube;
  CubeMembership m;
  m.block = kDefaultBlock;
  TESSERA_RETURN_IF_ERROR(ReadSafeName(c, "name", "cube.name", Presence::kRequired, m.name));
  TESSERA_RETURN_IF_ERROR(ReadSafeName(c, "block", "cube.block", Presence::kOptional, m.block));
  TESSERA_RETURN_IF_ERROR(ReadCoord(c, "coord", "cube.coord", {1, 1, 3}, m.coord));
  r.cube = std::move(m);
  return Status::Ok();
}

Status ReadDevices(const json& j, Registration& r) {
  auto devices = ReadList(j, "devices", "devices");
  if (!devices.ok()) return devices.status();
  if (*devices == nullptr || (*devices)->empty()) return Status::Ok();
  if ((*devices)->size() != static_cast<size_t>(r.chips)) {
    return InvalidArgument("devices: " + std::to_string((*devices)->size()) + " entries for " +
                           std::to_string(r.chips) + " chips; send one per chip, or none");
  }
  std::set<int> seen;
  for (size_t i = 0; i < (*devices)->size(); ++i) {
    const json& d = (**devices)[i];
    const std::string path = Item("devices", i);
    if (!d.is_object()) {
      return InvalidArgument(path + ": must be an object {\"index\": ..., \"coords\": [x, y, z]}");
    }
    Device device;
    TESSERA_RETURN_IF_ERROR(
        ReadInt(d, "index", path + ".index", 0, r.chips - 1, Presence::kRequired, device.index));
    if (!seen.insert(device.index).second) {
      return InvalidArgument(path + ".index: " + std::to_string(device.index) +
                             " is given twice; each chip has its own index");
    }
    constexpr int kMaxCoord = 1'000'000;
    TESSERA_RETURN_IF_ERROR(
        ReadCoord(d, "coords", path + ".coords", {kMaxCoord, kMaxCoord, kMaxCoord}, device.coords));
    r.devices.push_back(device);
  }
  return Status::Ok();
}

// ----- discovered -----

constexpr size_t kMaxDiscoveredText = 253;
constexpr size_t kMaxPeers = 4096;
constexpr size_t kMaxGpus = 1024;

// A string of at most kMaxDiscoveredText characters, none of them control characters.
Status ReadText(const json& o, const char* key, const std::string& path, Presence presence,
                std::string& out) {
  TESSERA_RETURN_IF_ERROR(ReadString(o, key, path, presence, out));
  if (Member(o, key) == nullptr) return Status::Ok();
  if (out.size() > kMaxDiscoveredText || !Printable(out)) {
    return InvalidArgument(path + ": " + Quoted(out) + " must be at most " +
                           std::to_string(kMaxDiscoveredText) +
                           " characters, none of them control characters");
  }
  return Status::Ok();
}

Status ReadGpus(const json& d, Discovered& out) {
  auto gpus = ReadList(d, "gpus", "discovered.gpus");
  if (!gpus.ok()) return gpus.status();
  if (*gpus == nullptr) return Status::Ok();
  if ((*gpus)->size() > kMaxGpus) {
    return InvalidArgument("discovered.gpus: " + std::to_string((*gpus)->size()) +
                           " entries; at most " + std::to_string(kMaxGpus));
  }
  for (size_t i = 0; i < (*gpus)->size(); ++i) {
    const json& g = (**gpus)[i];
    const std::string path = Item("discovered.gpus", i);
    if (!g.is_object()) {
      return InvalidArgument(path + ": must be an object {\"uuid\": ..., \"memoryMiB\": ...}");
    }
    DiscoveredGpu gpu;
    TESSERA_RETURN_IF_ERROR(ReadText(g, "uuid", path + ".uuid", Presence::kRequired, gpu.uuid));
    if (gpu.uuid.empty()) return InvalidArgument(path + ".uuid: must not be empty");
    TESSERA_RETURN_IF_ERROR(ReadInt(g, "memoryMiB", path + ".memoryMiB", 0, int64_t{1} << 30,
                                    Presence::kOptional, gpu.memory_mib));
    auto fabric = ReadObject(g, "fabric", path + ".fabric");
    if (!fabric.ok()) return fabric.status();
    if (*fabric != nullptr) {
      const json& f = **fabric;
      const std::string fp = path + ".fabric";
      GpuFabric gf;
      TESSERA_RETURN_IF_ERROR(
          ReadText(f, "clusterUuid", fp + ".clusterUuid", Presence::kOptional, gf.cluster_uuid));
      TESSERA_RETURN_IF_ERROR(
          ReadText(f, "cliqueId", fp + ".cliqueId", Presence::kOptional, gf.clique_id));
      TESSERA_RETURN_IF_ERROR(ReadText(f, "state", fp + ".state", Presence::kRequired, gf.state));
      TESSERA_RETURN_IF_ERROR(
          ReadText(f, "status", fp + ".status", Presence::kRequired, gf.status));
      gpu.fabric = std::move(gf);
    }
    out.gpus.push_back(std::move(gpu));
  }
  return Status::Ok();
}

Status ReadDiscovered(const json& j, Registration& r) {
  auto discovered = ReadObject(j, "discovered", "discovered");
  if (!discovered.ok()) return discovered.status();
  if (*discovered == nullptr) return Status::Ok();
  const json& d = **discovered;
  Discovered out;
  TESSERA_RETURN_IF_ERROR(
      ReadString(d, "source", "discovered.source", Presence::kRequired, out.source));
  if (!IsDiscoverySource(out.source)) {
    return InvalidArgument("discovered.source: " + Quoted(out.source) +
                           " must be gke, metadata, devices or nvidia-smi");
  }
  TESSERA_RETURN_IF_ERROR(ReadText(d, "acceleratorType", "discovered.acceleratorType",
                                   Presence::kOptional, out.accelerator_type));
  TESSERA_RETURN_IF_ERROR(
      ReadText(d, "topology", "discovered.topology", Presence::kOptional, out.topology));
  if (!out.topology.empty()) {
    auto shape = ParseShape(out.topology);
    if (!shape.ok()) return InvalidArgument("discovered.topology: " + shape.status().message());
  }
  TESSERA_RETURN_IF_ERROR(
      ReadText(d, "sliceName", "discovered.sliceName", Presence::kOptional, out.slice_name));
  if (Member(d, "workerId") != nullptr) {
    int worker = 0;
    TESSERA_RETURN_IF_ERROR(
        ReadInt(d, "workerId", "discovered.workerId", 0, 100000, Presence::kRequired, worker));
    out.worker_id = worker;
  }
  auto peers = ReadList(d, "peers", "discovered.peers");
  if (!peers.ok()) return peers.status();
  if (*peers != nullptr) {
    if ((*peers)->size() > kMaxPeers) {
      return InvalidArgument("discovered.peers: " + std::to_string((*peers)->size()) +
                             " entries; at most " + std::to_string(kMaxPeers));
    }
    for (size_t i = 0; i < (*peers)->size(); ++i) {
      const json& p = (**peers)[i];
      const std::string path = Item("discovered.peers", i);
      if (!p.is_string() || p.get<std::string>().empty() ||
          p.get<std::string>().size() > kMaxDiscoveredText || !Printable(p.get<std::string>())) {
        return InvalidArgument(path + ": must be a host name or IP address (1.." +
                               std::to_string(kMaxDiscoveredText) + " printable characters), got " +
                               Shown(p));
      }
      out.peers.push_back(p.get<std::string>());
    }
  }
  auto megascale = ReadObject(d, "megascale", "discovered.megascale");
  if (!megascale.ok()) return megascale.status();
  if (*megascale != nullptr) {
    for (const auto& [key, value] : (*megascale)->items()) {
      if (key.rfind("MEGASCALE_", 0) != 0 || key.size() > kMaxDiscoveredText || !Printable(key)) {
        return InvalidArgument("discovered.megascale: key " + Quoted(key) +
                               " must start with MEGASCALE_");
      }
      const std::string path = "discovered.megascale." + key;
      if (!value.is_string()) {
        return InvalidArgument(path + ": must be a string, got " + Shown(value));
      }
      const std::string text = value.get<std::string>();
      if (text.size() > kMaxDiscoveredText || !Printable(text)) {
        return InvalidArgument(path + ": " + Quoted(text) + " must be at most " +
                               std::to_string(kMaxDiscoveredText) +
                               " characters, none of them control characters");
      }
      out.megascale[key] = text;
    }
  }
  TESSERA_RETURN_IF_ERROR(ReadGpus(d, out));
  r.discovered = std::move(out);
  return Status::Ok();
}

json DiscoveredObject(const Discovered& d) {
  json j = {{"source", d.source}};
  if (!d.accelerator_type.empty()) j["acceleratorType"] = d.accelerator_type;
  if (!d.topology.empty()) j["topology"] = d.topology;
  if (!d.slice_name.empty()) j["sliceName"] = d.slice_name;
  if (d.worker_id) j["workerId"] = *d.worker_id;
  if (!d.peers.empty()) j["peers"] = d.peers;
  if (!d.megascale.empty()) j["megascale"] = d.megascale;
  if (!d.gpus.empty()) {
    json gpus = json::array();
    for (const DiscoveredGpu& g : d.gpus) {
      json gj = {{"uuid", g.uuid}, {"memoryMiB", g.memory_mib}};
      if (g.fabric) {
        gj["fabric"] = {{"clusterUuid", g.fabric->cluster_uuid},
                        {"cliqueId", g.fabric->clique_id},
                        {"state", g.fabric->state},
                        {"status", g.fabric->status}};
      }
      gpus.push_back(std::move(gj));
    }
    j["gpus"] = std::move(gpus);
  }
  return j;
}

}  // namespace

std::string DiscoveredJson(const Discovered& discovered) {
  return Dump(DiscoveredObject(discovered));
}

bool IsDiscoverySource(std::string_view source) {
  return source == "gke" || source == "metadata" || source == "devices" || source == "nvidia-smi";
}

// ----- registration -----

std::string RegistrationJson(const Registration& r) {
  json devices = json::array();
  for (const Device& d : r.devices) {
    devices.push_back({{"index", d.index}, {"coords", CoordJson(d.coords)}});
  }
  json j = {{"name", r.name},     {"generation", std::string(GenerationName(r.generation))},
            {"chips", r.chips},   {"address", r.address},
            {"labels", r.labels}, {"devices", std::move(devices)}};
  if (r.agent_port != 0) j["agentPort"] = r.agent_port;  // 0: no log server
  if (r.fence_ms != 0) j["fenceMs"] = r.fence_ms;        // 0: the agent does not fence
  j["credential"] = r.credential;
  if (r.discovered) j["discovered"] = DiscoveredObject(*r.discovered);
  if (r.slice) {
    j["slice"] = {
        {"name", r.slice->name}, {"topology", r.slice->topology}, {"worker", r.slice->worker}};
  }
  if (r.cube) {
    j["cube"] = {
        {"name", r.cube->name}, {"block", r.cube->block}, {"coord", CoordJson(r.cube->coord)}};
  }
  return Dump(j);
}

Result<Registration> ParseRegistration(std::string_view text) {
  auto parsed = ParseJson(text, "registration");  // bounded: nesting, repeated keys
  if (!parsed.ok()) return parsed.status();
  json j = std::move(*parsed);
  if (!j.is_object()) {
    return InvalidArgument(
        "registration: must be a JSON object {\"name\": ..., \"generation\": ..., \"chips\": "
        "..., ...} (docs/agent-protocol.md)");
  }
  Registration r;
  std::string name;
  TESSERA_RETURN_IF_ERROR(ReadString(j, "name", "name", Presence::kRequired, name));
  auto normalized = NormalizeHostName(name);
  if (!normalized.ok()) return normalized.status();
  r.name = std::move(*normalized);

  std::string generation;
  TESSERA_RETURN_IF_ERROR(
      ReadString(j, "generation", "generation", Presence::kRequired, generation));
  auto g = ParseGeneration(generation);
  if (!g.ok()) return InvalidArgument("generation: " + g.status().message());
  r.generation = *g;

  if (Info(r.generation).rank == 2) {
    TESSERA_RETURN_IF_ERROR(ReadSlice(j, r.generation, r));
  } else {
    TESSERA_RETURN_IF_ERROR(ReadCube(j, r.generation, r));
  }

  TESSERA_RETURN_IF_ERROR(ReadInt(j, "chips", "chips", 1, kMaxChips, Presence::kRequired, r.chips));
  TESSERA_RETURN_IF_ERROR(ReadString(j, "address", "address", Presence::kOptional, r.address));
  if (r.address.empty() || r.address.size() > kMaxAddress || !Printable(r.address) ||
      r.address.find(' ') != std::string::npos) {
    return InvalidArgument("address: " + Quoted(r.address) +
                           " must be a host name or IP address the head reaches the host at (1.." +
                           std::to_string(kMaxAddress) + " printable characters, no spaces)");
  }
  TESSERA_RETURN_IF_ERROR(
      ReadInt(j, "agentPort", "agentPort", 1, 65535, Presence::kOptional, r.agent_port));
  TESSERA_RETURN_IF_ERROR(
      ReadInt(j, "fenceMs", "fenceMs", kMinFenceMs, kMaxFenceMs, Presence::kOptional, r.fence_ms));

  auto labels = ReadObject(j, "labels", "labels");
  if (!labels.ok()) return labels.status();
  if (*labels != nullptr) {
    for (const auto& [key, value] : (*labels)->items()) {
      if (key.empty() || key.size() > kMaxLabelKey || !Printable(key)) {
        return InvalidArgument("labels: key " + Quoted(key) + " must be 1.." +
                               std::to_string(kMaxLabelKey) + " printable characters");
      }
      const std::string path = "labels." + key;
      if (!value.is_string()) {
        return InvalidArgument(path + ": must be a string, got " + Shown(value));
      }
      const std::string label = value.get<std::string>();
      if (label.size() > kMaxLabelValue || !Printable(label)) {
        return InvalidArgument(path + ": " + Quoted(label) + " must be at most " +
                               std::to_string(kMaxLabelValue) +
                               " characters, none of them control characters");
      }
      r.labels[key] = label;
    }
  }
  TESSERA_RETURN_IF_ERROR(ReadDevices(j, r));
  TESSERA_RETURN_IF_ERROR(ReadDiscovered(j, r));
  TESSERA_RETURN_IF_ERROR(
      ReadString(j, "credential", "credential", Presence::kRequired, r.credential));
  if (!IsValidCredential(r.credential)) {
    return InvalidArgument(
        "credential: must be 32..128 lower-case hex digits (the host credential the agent keeps "
        "in its state directory; docs/agent-protocol.md \"Host identity\")");
  }
  return r;
}

std::string RegisterReplyJson(const RegisterReply& reply) {
  return Dump({{"host", reply.host},
               {"heartbeatIntervalMs", reply.heartbeat_interval_ms},
               {"leaseMs", reply.lease_ms}});
}

Result<RegisterReply> ParseRegisterReply(std::string_view text) {
  auto parsed = ParseJson(text, "register reply");  // bounded: nesting, repeated keys
  if (!parsed.ok()) return parsed.status();
  json j = std::move(*parsed);
  if (!j.is_object()) return InvalidArgument("register reply: not a JSON object");
  RegisterReply reply;
  if (auto h = j.find("host"); h != j.end() && h->is_string()) reply.host = h->get<std::string>();
  TESSERA_RETURN_IF_ERROR(ReadInt(j, "heartbeatIntervalMs", "heartbeatIntervalMs", 1, kNoMax,
                                  Presence::kOptional, reply.heartbeat_interval_ms));
  TESSERA_RETURN_IF_ERROR(
      ReadInt(j, "leaseMs", "leaseMs", 1, kNoMax, Presence::kOptional, reply.lease_ms));
  return reply;
}

}  // namespace tessera::protocol
