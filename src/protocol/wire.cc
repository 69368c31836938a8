#include "protocol/wire.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "common/json_limits.h"
#include "protocol/credential.h"

namespace tessera::protocol {
namespace {

using nlohmann::json;

constexpr int64_t kNoMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMaxAttempt = 1'000'000'000;
constexpr int64_t kMaxChips = 4096;
constexpr int64_t kMaxGraceMs = 86'400'000;  // a day
constexpr double kMaxSeconds = 1e7;          // a checkpoint save or restore: 115 days
constexpr double kMaxCpuPercent = 1e6;       // 10,000 busy cores
constexpr size_t kMaxLabelKey = 253, kMaxLabelValue = 1024, kMaxAddress = 253;
constexpr char kDefaultBlock[] = "block-00";
constexpr int64_t kMinFenceMs = 1000, kMaxFenceMs = 86'400'000;
constexpr size_t kMaxRefusals = 64, kMaxReason = 1024;

// Encoders replace invalid UTF-8 instead of throwing.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json CoordJson(const Coord& c) { return json::array({c.x, c.y, c.z}); }

bool IsInt(const json& j) { return j.is_number_integer(); }

// A value as it may appear in an error message: short, and printable whatever it holds.
std::string Shown(const json& j) {
  std::string text = Dump(j);
  if (text.size() > 40) text = text.substr(0, 40) + "...";
  return text;
}

// Text quoted for an error message: non-printable bytes escaped, long text cut.
std::string Quoted(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "'";
  for (size_t i = 0; i < text.size() && i < 64; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c >= 0x7f || c == '\\') {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (text.size() > 64) out += "...";
  return out + "'";
}

// No control characters (bytes below 0x20, and 0x7f); UTF-8 beyond ASCII is allowed.
bool Printable(std::string_view text) {
  return std::none_of(text.begin(), text.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u < 0x20 || u == 0x7f;
  });
}

// The value of an integer JSON number, if it fits int64.
std::optional<int64_t> AsInt(const json& j) {
  if (j.is_number_unsigned()) {
    const uint64_t u = j.get<uint64_t>();
    if (u > static_cast<uint64_t>(kNoMax)) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (j.is_number_integer()) return j.get<int64_t>();
  return std::nullopt;
}

std::string RangeText(int64_t min, int64_t max) {
  if (max == kNoMax) return "an integer >= " + std::to_string(min);
  return "an integer in " + std::to_string(min) + ".." + std::to_string(max);
}

enum class Presence { kRequired, kOptional };

// The member `key` of object `o`, or null when it is absent or JSON null (both mean "not
// given").
const json* Member(const json& o, const char* key) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return nullptr;
  return &*it;
}

// Reads the integer `key` of `o` into `out` when it is given; `path` names it in errors.
template <typename T>
Status ReadInt(const json& o, const char* key, const std::string& path, int64_t min, int64_t max,
               Presence presence, T& out) {
  const json* v = Member(o, key);
  if (v == nullptr) {
    if (presence == Presence::kOptional) return Status::Ok();
    return InvalidArgument(path + ": required, " + RangeText(min, max));
  }
  std::optional<int64_t> value = AsInt(*v);
  if (!value || *value < min || *value > max) {
    return InvalidArgument(path + ": must be " + RangeText(min, max) + ", got " + Shown(*v));
  }
  out = static_cast<T>(*value);
  return Status::Ok();
}

Status ReadString(const json& o, const char* key, const std::string& path, Presence presence,
                  std::string& out) {
  const json* v = Member(o, key);
  if (v == nullptr) {
    if (presence == Presence::kOptional) return Status::Ok();
    return InvalidArgument(path + ": required, a string");
  }
  if (!v->is_string()) return InvalidArgument(path + ": must be a string, got " + Shown(*v));
  out = v->get<std::string>();
  return Status::Ok();
}

// A name of [A-Za-z0-9._-] (a path segment), required.
Status ReadSafeName(const json& o, const char* key, const std::string& path, Presence presence,
                    std::string& out) {
  TESSERA_RETURN_IF_ERROR(ReadString(o, key, path, presence, out));
  if (Member(o, key) != nullptr && !IsSafeName(out)) {
    return InvalidArgument(path + ": " + Quoted(out) +
                           " must be 1..253 characters of [A-Za-z0-9._-], not '.' or '..'");
  }
  return Status::Ok();
}

// A finite number in 0..max.
Status ReadNumber(const json& o, const char* key, const std::string& path, double max,
                  Presence presence, double& out) {
  const std::string want = "a number in 0.." + Dump(json(max));
  const json* v = Member(o, key);
  if (v == nullptr) {
    if (presence == Presence::kOptional) return Status::Ok();
    return InvalidArgument(path + ": required, " + want);
  }
  if (!v->is_number() || !std::isfinite(v->get<double>()) || v->get<double>() < 0 ||
      v->get<double>() > max) {
    return InvalidArgument(path + ": must be " + want + ", got " + Shown(*v));
  }
  out = v->get<double>();
  return Status::Ok();
}

// [x, y, z], three integers, each in min..max[i].
Status ReadCoord(const json& o, const char* key, const std::string& path,
                 const std::array<int, 3>& max, Coord& out) {
  const std::string want = "[x, y, z], integers with x in 0.." + std::to_string(max[0]) +
                           ", y in 0.." + std::to_string(max[1]) + ", z in 0.." +
                           std::to_string(max[2]);
  const json* v = Member(o, key);
  if (v == nullptr) return InvalidArgument(path + ": required, " + want);
  if (!v->is_array() || v->size() != 3) {
    return InvalidArgument(path + ": must be " + want + ", got " + Shown(*v));
  }
  int* parts[3] = {&out.x, &out.y, &out.z};
  for (size_t i = 0; i < 3; ++i) {
    std::optional<int64_t> value = AsInt((*v)[i]);
    if (!value || *value < 0 || *value > max[i]) {
      return InvalidArgument(path + ": must be " + want + ", got " + Shown(*v));
    }
    *parts[i] = static_cast<int>(*value);
  }
  return Status::Ok();
}

// The object member `key` of `o`, or null when not given; InvalidArgument when not an object.
Result<const json*> ReadObject(const json& o, const char* key, const std::string& path) {
  const json* v = Member(o, key);
  if (v != nullptr && !v->is_object()) {
    return InvalidArgument(path + ": must be an object, got " + Shown(*v));
  }
  return v;
}

Result<const json*> ReadList(const json& o, const char* key, const std::string& path) {
  const json* v = Member(o, key);
  if (v != nullptr && !v->is_array()) {
    return InvalidArgument(path + ": must be a list, got " + Shown(*v));
  }
  return v;
}

std::string Item(const std::string& list, size_t i) { return list + "[" + std::to_string(i) + "]"; }

// job, uid, attempt and rank of one heartbeat entry at `path`.
Status ReadKey(const json& o, const std::string& path, WorkerKey& key) {
  TESSERA_RETURN_IF_ERROR(ReadSafeName(o, "job", path + ".job", Presence::kRequired, key.job));
  TESSERA_RETURN_IF_ERROR(ReadInt(o, "uid", path + ".uid", 1, static_cast<int64_t>(kMaxUid),
                                  Presence::kRequired, key.uid));
  TESSERA_RETURN_IF_ERROR(
      ReadInt(o, "attempt", path + ".attempt", 0, kMaxAttempt, Presence::kRequired, key.attempt));
  return ReadInt(o, "rank", path + ".rank", 0, kMaxAttempt, Presence::kRequired, key.rank);
}

// The uid of an assignment or stop entry, 1..kMaxUid; nullopt when it is not one.
std::optional<uint64_t> UidOf(const json& o) {
  auto uid = o.find("uid");
  if (uid == o.end()) return std::nullopt;
  std::optional<int64_t> value = AsInt(*uid);
  if (!value || *value < 1 || static_cast<uint64_t>(*value) > kMaxUid) return std::nullopt;
  return static_cast<uint64_t>(*value);
}

// ----- assignment snapshots (the agent's side: lenient per entry) -----

// Reads the key fields of one assignment; "" or the reason they are unreadable.
std::string ParseKey(const json& a, WorkerKey& key) {
  if (!a.is_object()) return "assignment: not an object";
  auto job = a.find("job");
  if (job == a.end() || !job->is_string() || !IsSafeName(job->get<std::string>())) {
    return "job: must be a name of [A-Za-z0-9._-]";
  }
  key.job = job->get<std::string>();
  std::optional<uint64_t> uid = UidOf(a);
  if (!uid)
    return "uid: must be an integer in 1.." + std::to_string(kMaxUid) + " (job " + key.job + ")";
  key.uid = *uid;
  auto attempt = a.find("attempt");
  if (attempt == a.end() || !IsInt(*attempt) || attempt->get<int64_t>() < 0 ||
      attempt->get<int64_t>() > kMaxAttempt) {
    return "attempt: must be an integer >= 0";
  }
  key.attempt = attempt->get<int>();
  auto rank = a.find("rank");
  if (rank == a.end() || !IsInt(*rank) || rank->get<int64_t>() < 0 ||
      rank->get<int64_t>() > kMaxAttempt) {
    return "rank: must be an integer >= 0";
  }
  key.rank = rank->get<int>();
  return "";
}

// Reads the rest; "" or what is wrong.
std::string ParseBody(const json& a, Assignment& out) {
  if (auto w = a.find("worker"); w != a.end() && !w->is_null()) {
    std::optional<int64_t> worker = AsInt(*w);
    if (!worker || *worker < 0 || *worker > kMaxAttempt) return "worker: must be an integer >= 0";
    out.worker = static_cast<int>(*worker);
  }
  auto command = a.find("command");
  if (command == a.end() || !command->is_array() || command->empty()) {
    return "command: must be a non-empty list of strings";
  }
  for (const json& arg : *command) {
    if (!arg.is_string()) return "command: must be a non-empty list of strings";
    out.command.push_back(arg.get<std::string>());
  }
  if (out.command[0].empty()) return "command: the program name is empty";
  if (auto env = a.find("env"); env != a.end() && !env->is_null()) {
    if (!env->is_object()) return "env: must be an object of strings";
    for (const auto& [name, value] : env->items()) {
      if (!value.is_string()) return "env." + name + ": must be a string";
      if (name.empty() || name.find('=') != std::string::npos) {
        return "env: bad variable name '" + name + "'";
      }
      out.env[name] = value.get<std::string>();
    }
  }
  if (auto dir = a.find("workingDir"); dir != a.end() && !dir->is_null()) {
    if (!dir->is_string()) return "workingDir: must be a string";
    out.working_dir = dir->get<std::string>();
    if (!out.working_dir.empty() && out.working_dir[0] != '/') {
      return "workingDir: must be an absolute path";
    }
  }
  if (auto grace = a.find("graceMs"); grace != a.end() && !grace->is_null()) {
    std::optional<int64_t> value = AsInt(*grace);
    if (!value || *value < 0 || *value > kMaxGraceMs) {
      return "graceMs: must be an integer in 0.." + std::to_string(kMaxGraceMs);
    }
    out.grace_ms = *value;
  }
  if (auto kind = a.find("kind"); kind != a.end() && !kind->is_null()) {
    const std::string name = kind->is_string() ? kind->get<std::string>() : "";
    if (name == "TrainJob") {
      out.kind = WorkloadKind::kTrainJob;
    } else if (name == "Service") {
      out.kind = WorkloadKind::kService;
    } else {
      return "kind: must be \"TrainJob\" or \"Service\", got " + Shown(*kind);
    }
  }
  return "";
}

// Reads one entry of "stop"; "" or what is wrong with it.
std::string ParseStop(const json& s, StopRequest& out) {
  if (!s.is_object()) return "stop[]: not an object";
  auto job = s.find("job");
  if (job == s.end() || !job->is_string() || !IsSafeName(job->get<std::string>())) {
    return "stop[].job: must be a name of [A-Za-z0-9._-]";
  }
  out.job = job->get<std::string>();
  std::optional<uint64_t> uid = UidOf(s);
  if (!uid) {
    return "stop[].uid: must be an integer in 1.." + std::to_string(kMaxUid) + " (job " + out.job +
           ")";
  }
  out.uid = *uid;
  auto attempt = s.find("attempt");
  if (attempt == s.end() || !IsInt(*attempt) || attempt->get<int64_t>() < 0 ||
      attempt->get<int64_t>() > kMaxAttempt) {
    return "stop[].attempt: must be an integer >= 0 (job " + out.job + ")";
  }
  out.attempt = attempt->get<int>();
  auto grace = s.find("graceMs");
  if (grace == s.end() || !IsInt(*grace) || grace->get<int64_t>() < 0 ||
      grace->get<int64_t>() > kMaxGraceMs) {
    return "stop[].graceMs: must be an integer 0..86400000 (job " + out.job + ")";
  }
  out.grace_ms = grace->get<int64_t>();
  return "";
}

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

// ----- heartbeat -----

const char* StateName(WorkerState s) { return s == WorkerState::kRunning ? "Running" : "Exited"; }

bool HasSeconds(const std::string& type) { return type == "checkpoint" || type == "restore"; }

Status ReadWorker(const json& w, const std::string& path, WorkerReport& out) {
  if (!w.is_object()) return InvalidArgument(path + ": must be an object, got " + Shown(w));
  TESSERA_RETURN_IF_ERROR(ReadKey(w, path, out.key));
  TESSERA_RETURN_IF_ERROR(ReadInt(w, "pid", path + ".pid", 0, std::numeric_limits<int32_t>::max(),
                                  Presence::kRequired, out.pid));
  std::string state;
  TESSERA_RETURN_IF_ERROR(ReadString(w, "state", path + ".state", Presence::kRequired, state));
  if (state == "Running") {
    out.state = WorkerState::kRunning;
  } else if (state == "Exited") {
    out.state = WorkerState::kExited;
  } else {
    return InvalidArgument(path + ".state: must be \"Running\" or \"Exited\", got " +
                           Quoted(state));
  }
  TESSERA_RETURN_IF_ERROR(ReadInt(w, "startedAtMs", path + ".startedAtMs", 0, kNoMax,
                                  Presence::kRequired, out.started_at_ms));
  if (out.state == WorkerState::kExited) {
    TESSERA_RETURN_IF_ERROR(
        ReadInt(w, "exitCode", path + ".exitCode", 0, 255, Presence::kRequired, out.exit_code));
    TESSERA_RETURN_IF_ERROR(
        ReadInt(w, "signal", path + ".signal", 0, 127, Presence::kRequired, out.signal));
    TESSERA_RETURN_IF_ERROR(ReadInt(w, "finishedAtMs", path + ".finishedAtMs", 0, kNoMax,
                                    Presence::kRequired, out.finished_at_ms));
  }
  return ReadString(w, "error", path + ".error", Presence::kOptional, out.error);
}

Status ReadProgress(const json& p, const std::string& path, ProgressReport& out) {
  if (!p.is_object()) return InvalidArgument(path + ": must be an object, got " + Shown(p));
  TESSERA_RETURN_IF_ERROR(ReadKey(p, path, out.key));
  ProgressRecord& r = out.record;
  TESSERA_RETURN_IF_ERROR(ReadString(p, "type", path + ".type", Presence::kRequired, r.type));
  if (r.type != "progress" && r.type != "checkpoint" && r.type != "restore" && r.type != "alive") {
    return InvalidArgument(path + ".type: must be progress, checkpoint, restore or alive, got " +
                           Quoted(r.type));
  }
  TESSERA_RETURN_IF_ERROR(
      ReadInt(p, "step", path + ".step", 0, kNoMax, Presence::kRequired, r.step));
  TESSERA_RETURN_IF_ERROR(
      ReadInt(p, "timeMs", path + ".timeMs", 0, kNoMax, Presence::kRequired, r.time_ms));
  double seconds = 0;
  TESSERA_RETURN_IF_ERROR(
      ReadNumber(p, "seconds", path + ".seconds", kMaxSeconds, Presence::kOptional, seconds));
  // Only checkpoint and restore records carry seconds (HeartbeatJson writes no other).
  if (HasSeconds(r.type)) r.seconds = seconds;
  return Status::Ok();
}

}  // namespace

// ----- names -----

Result<std::string> NormalizeHostName(std::string_view reported) {
  static const std::string kRule =
      "a host name is a DNS-1123 subdomain: labels of a-z, 0-9 and '-' (1..63 characters, "
      "starting and ending with a letter or digit) joined by '.', at most 253 characters; "
      "start the agent with --name NAME to give the host such a name";
  if (reported.empty()) return InvalidArgument("name: required; " + kRule);
  const std::string shown = Quoted(reported);
  if (reported.size() > 253) {
    return InvalidArgument("name: " + shown + " is " + std::to_string(reported.size()) +
                           " characters, more than 253; " + kRule);
  }
  std::string name(reported);
  for (char& c : name) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  size_t start = 0;
  while (true) {
    size_t end = name.find('.', start);
    if (end == std::string::npos) end = name.size();
    const std::string_view label = std::string_view(name).substr(start, end - start);
    if (label.empty()) {
      return InvalidArgument("name: " + shown +
                             " has an empty label (a leading, trailing or doubled '.'); " + kRule);
    }
    if (label.size() > 63) {
      return InvalidArgument("name: " + shown + " has a label of " + std::to_string(label.size()) +
                             " characters, more than 63; " + kRule);
    }
    for (char c : label) {
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) {
        return InvalidArgument("name: " + shown + " contains " + Quoted(std::string_view(&c, 1)) +
                               "; " + kRule);
      }
    }
    if (label.front() == '-' || label.back() == '-') {
      return InvalidArgument("name: " + shown + " has a label that starts or ends with '-'; " +
                             kRule);
    }
    if (end == name.size()) break;
    start = end + 1;
  }
  return name;
}

bool IsSafeName(std::string_view name) {
  if (name.empty() || name.size() > 253 || name == "." || name == "..") return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// ----- assignments -----

const char* WorkloadKindName(WorkloadKind kind) {
  switch (kind) {
    case WorkloadKind::kTrainJob:
      return "TrainJob";
    case WorkloadKind::kService:
      return "Service";
    case WorkloadKind::kUnknown:
      break;
  }
  return "";
}

std::string WorkerKey::ToString() const {
  return job + "/" + std::to_string(attempt) + "/" + std::to_string(rank) + "@" +
         std::to_string(uid);
}

Result<AssignmentSnapshot> ParseAssignmentSnapshot(std::string_view text) {
  auto parsed = ParseJson(text, "snapshot");  // bounded: nesting, repeated keys
  if (!parsed.ok()) return parsed.status();
  json j = std::move(*parsed);
  if (!j.is_object()) return InvalidArgument("snapshot: not a JSON object");
  AssignmentSnapshot snapshot;
  auto revision = j.find("revision");
  std::optional<int64_t> value = revision == j.end() ? std::nullopt : AsInt(*revision);
  if (!value) return InvalidArgument("revision: must be an integer");
  snapshot.revision = *value;
  TESSERA_RETURN_IF_ERROR(ReadInt(j, "term", "term", 0, static_cast<int64_t>(kMaxTerm),
                                  Presence::kOptional, snapshot.term));
  if (auto stop = j.find("stop"); stop != j.end() && !stop->is_null()) {
    if (!stop->is_array()) {
      snapshot.unreadable.push_back("stop: must be a list");
    } else {
      for (const json& entry : *stop) {
        StopRequest request;
        std::string error = ParseStop(entry, request);
        if (error.empty()) {
          snapshot.stop.push_back(std::move(request));
        } else {
          snapshot.unreadable.push_back(std::move(error));
        }
      }
    }
  }
  auto list = j.find("assignments");
  if (list == j.end() || list->is_null()) return snapshot;
  if (!list->is_array()) return InvalidArgument("assignments: must be a list");
  for (const json& a : *list) {
    ParsedAssignment item;
    std::string key_error = ParseKey(a, item.assignment.key);
    if (!key_error.empty()) {
      snapshot.unreadable.push_back(key_error);
      continue;
    }
    item.error = ParseBody(a, item.assignment);
    snapshot.assignments.push_back(std::move(item));
  }
  return snapshot;
}

std::string AssignmentSnapshotJson(int64_t revision, const std::vector<Assignment>& assignments,
                                   const std::vector<StopRequest>& stop, uint64_t term) {
  json list = json::array();
  for (const Assignment& a : assignments) {
    json entry = {{"job", a.key.job},
                  {"uid", a.key.uid},
                  {"attempt", a.key.attempt},
                  {"rank", a.key.rank},
                  {"worker", a.worker},
                  {"command", a.command},
                  {"env", a.env},
                  {"workingDir", a.working_dir},
                  {"graceMs", a.grace_ms}};
    if (a.kind != WorkloadKind::kUnknown) entry["kind"] = WorkloadKindName(a.kind);
    list.push_back(std::move(entry));
  }
  json j = {{"revision", revision}, {"assignments", std::move(list)}};
  if (term > 0) j["term"] = term;
  if (!stop.empty()) {
    json entries = json::array();
    for (const StopRequest& s : stop) {
      entries.push_back(
          {{"job", s.job}, {"uid", s.uid}, {"attempt", s.attempt}, {"graceMs", s.grace_ms}});
    }
    j["stop"] = std::move(entries);
  }
  return Dump(j);
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

// ----- heartbeat -----

std::string HeartbeatJson(const Heartbeat& h) {
  json workers = json::array();
  for (const WorkerReport& w : h.workers) {
    json j = {{"job", w.key.job},
              {"uid", w.key.uid},
              {"attempt", w.key.attempt},
              {"rank", w.key.rank},
              {"pid", w.pid},
              {"state", StateName(w.state)},
              {"startedAtMs", w.started_at_ms}};
    if (w.state == WorkerState::kExited) {
      j["exitCode"] = w.exit_code;
      j["signal"] = w.signal;
      j["finishedAtMs"] = w.finished_at_ms;
    }
    if (!w.error.empty()) j["error"] = w.error;
    workers.push_back(std::move(j));
  }
  json progress = json::array();
  for (const ProgressReport& p : h.progress) {
    json j = {{"job", p.key.job},          {"uid", p.key.uid},      {"attempt", p.key.attempt},
              {"rank", p.key.rank},        {"type", p.record.type}, {"step", p.record.step},
              {"timeMs", p.record.time_ms}};
    if (HasSeconds(p.record.type)) j["seconds"] = p.record.seconds;
    progress.push_back(std::move(j));
  }
  json out{{"revision", h.revision},
           {"workers", std::move(workers)},
           {"progress", std::move(progress)},
           {"usage", {{"cpuPercent", h.usage.cpu_percent}, {"memoryBytes", h.usage.memory_bytes}}}};
  if (h.term > 0) out["term"] = h.term;
  if (!h.refused.empty()) {
    json refused = json::array();
    for (const Refusal& r : h.refused) {
      json entry = {{"term", r.term}, {"reason", r.reason}};
      if (!r.job.empty()) {
        entry["job"] = r.job;
        entry["uid"] = r.uid;
        entry["attempt"] = r.attempt;
      }
      refused.push_back(std::move(entry));
    }
    out["refused"] = std::move(refused);
  }
  return Dump(out);
}

Result<Heartbeat> ParseHeartbeat(std::string_view text) {
  auto parsed = ParseJson(text, "heartbeat");  // bounded: nesting, repeated keys
  if (!parsed.ok()) return parsed.status();
  json j = std::move(*parsed);
  if (!j.is_object()) {
    return InvalidArgument(
        "heartbeat: must be a JSON object {\"revision\": ..., \"workers\": [...], \"progress\": "
        "[...], \"usage\": {...}} (docs/agent-protocol.md)");
  }
  Heartbeat h;
  TESSERA_RETURN_IF_ERROR(
      ReadInt(j, "revision", "revision", -1, kNoMax, Presence::kOptional, h.revision));
  auto workers = ReadList(j, "workers", "workers");
  if (!workers.ok()) return workers.status();
  if (*workers != nullptr) {
    std::set<WorkerKey> seen;
    for (size_t i = 0; i < (*workers)->size(); ++i) {
      WorkerReport report;
      const std::string path = Item("workers", i);
      TESSERA_RETURN_IF_ERROR(ReadWorker((**workers)[i], path, report));
      if (!seen.insert(report.key).second) {
        return InvalidArgument(path + ": worker " + report.key.ToString() +
                               " is reported twice; report each worker once");
      }
      h.workers.push_back(std::move(report));
    }
  }
  auto progress = ReadList(j, "progress", "progress");
  if (!progress.ok()) return progress.status();
  if (*progress != nullptr) {
    for (size_t i = 0; i < (*progress)->size(); ++i) {
      ProgressReport report;
      TESSERA_RETURN_IF_ERROR(ReadProgress((**progress)[i], Item("progress", i), report));
      h.progress.push_back(std::move(report));
    }
  }
  auto usage = ReadObject(j, "usage", "usage");
  if (!usage.ok()) return usage.status();
  if (*usage != nullptr) {
    TESSERA_RETURN_IF_ERROR(ReadNumber(**usage, "cpuPercent", "usage.cpuPercent", kMaxCpuPercent,
                                       Presence::kOptional, h.usage.cpu_percent));
    TESSERA_RETURN_IF_ERROR(ReadInt(**usage, "memoryBytes", "usage.memoryBytes", 0, kNoMax,
                                    Presence::kOptional, h.usage.memory_bytes));
  }
  TESSERA_RETURN_IF_ERROR(
      ReadInt(j, "term", "term", 0, static_cast<int64_t>(kMaxTerm), Presence::kOptional, h.term));
  auto refused = ReadList(j, "refused", "refused");
  if (!refused.ok()) return refused.status();
  if (*refused != nullptr) {
    if ((*refused)->size() > kMaxRefusals)
      return InvalidArgument("refused: at most " + std::to_string(kMaxRefusals) +
                             " entries per heartbeat, got " + std::to_string((*refused)->size()));
    for (size_t i = 0; i < (*refused)->size(); ++i) {
      const json& entry = (**refused)[i];
      const std::string path = Item("refused", i);
      if (!entry.is_object()) return InvalidArgument(path + ": must be an object");
      Refusal r;
      TESSERA_RETURN_IF_ERROR(ReadInt(entry, "term", path + ".term", 0,
                                      static_cast<int64_t>(kMaxTerm), Presence::kOptional, r.term));
      TESSERA_RETURN_IF_ERROR(
          ReadSafeName(entry, "job", path + ".job", Presence::kOptional, r.job));
      if (!r.job.empty()) {
        std::optional<uint64_t> uid = UidOf(entry);
        if (!uid)
          return InvalidArgument(path + ".uid: must be an integer in 1.." +
                                 std::to_string(kMaxUid));
        r.uid = *uid;
        TESSERA_RETURN_IF_ERROR(ReadInt(entry, "attempt", path + ".attempt", 0, kMaxAttempt,
                                        Presence::kRequired, r.attempt));
      }
      TESSERA_RETURN_IF_ERROR(
          ReadString(entry, "reason", path + ".reason", Presence::kRequired, r.reason));
      if (r.reason.size() > kMaxReason || !Printable(r.reason))
        return InvalidArgument(path + ".reason: must be at most " + std::to_string(kMaxReason) +
                               " characters, none of them control characters");
      h.refused.push_back(std::move(r));
    }
  }
  return h;
}

}  // namespace tessera::protocol
