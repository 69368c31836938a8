#include "agent/protocol.h"

#include <nlohmann/json.hpp>

namespace tessera::agent {
namespace {

using nlohmann::json;

json CoordJson(const Coord& c) { return json::array({c.x, c.y, c.z}); }

bool IsInt(const json& j) { return j.is_number_integer(); }

// Reads the key fields of one assignment; "" or the reason they are unreadable.
std::string ParseKey(const json& a, WorkerKey& key) {
  if (!a.is_object()) return "assignment: not an object";
  auto job = a.find("job");
  if (job == a.end() || !job->is_string() || !IsSafeName(job->get<std::string>())) {
    return "job: must be a name of [A-Za-z0-9._-]";
  }
  key.job = job->get<std::string>();
  auto attempt = a.find("attempt");
  if (attempt == a.end() || !IsInt(*attempt) || attempt->get<int64_t>() < 0 ||
      attempt->get<int64_t>() > 1'000'000'000) {
    return "attempt: must be an integer >= 0";
  }
  key.attempt = attempt->get<int>();
  auto rank = a.find("rank");
  if (rank == a.end() || !IsInt(*rank) || rank->get<int64_t>() < 0 ||
      rank->get<int64_t>() > 1'000'000'000) {
    return "rank: must be an integer >= 0";
  }
  key.rank = rank->get<int>();
  return "";
}

// Reads the rest; "" or what is wrong.
std::string ParseBody(const json& a, Assignment& out) {
  if (auto w = a.find("worker"); w != a.end()) {
    if (!IsInt(*w)) return "worker: must be an integer";
    out.worker = w->get<int>();
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
    if (!IsInt(*grace) || grace->get<int64_t>() < 0) return "graceMs: must be an integer >= 0";
    out.grace_ms = grace->get<int64_t>();
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
  auto attempt = s.find("attempt");
  if (attempt == s.end() || !IsInt(*attempt) || attempt->get<int64_t>() < 0 ||
      attempt->get<int64_t>() > 1'000'000'000) {
    return "stop[].attempt: must be an integer >= 0 (job " + out.job + ")";
  }
  out.attempt = attempt->get<int>();
  auto grace = s.find("graceMs");
  if (grace == s.end() || !IsInt(*grace) || grace->get<int64_t>() < 0 ||
      grace->get<int64_t>() > 86'400'000) {
    return "stop[].graceMs: must be an integer 0..86400000 (job " + out.job + ")";
  }
  out.grace_ms = grace->get<int64_t>();
  return "";
}

const char* StateName(WorkerState s) { return s == WorkerState::kRunning ? "Running" : "Exited"; }

}  // namespace

std::string WorkerKey::ToString() const {
  return job + "/" + std::to_string(attempt) + "/" + std::to_string(rank);
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

Result<AssignmentSnapshot> ParseAssignmentSnapshot(std::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return InvalidArgument("snapshot: not a JSON object");
  AssignmentSnapshot snapshot;
  auto revision = j.find("revision");
  if (revision == j.end() || !IsInt(*revision)) {
    return InvalidArgument("revision: must be an integer");
  }
  snapshot.revision = revision->get<int64_t>();
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
    ParsedAssignment parsed;
    std::string key_error = ParseKey(a, parsed.assignment.key);
    if (!key_error.empty()) {
      snapshot.unreadable.push_back(key_error);
      continue;
    }
    parsed.error = ParseBody(a, parsed.assignment);
    snapshot.assignments.push_back(std::move(parsed));
  }
  return snapshot;
}

std::string AssignmentSnapshotJson(int64_t revision, const std::vector<Assignment>& assignments,
                                   const std::vector<StopRequest>& stop) {
  json list = json::array();
  for (const Assignment& a : assignments) {
    list.push_back({{"job", a.key.job},
                    {"attempt", a.key.attempt},
                    {"rank", a.key.rank},
                    {"worker", a.worker},
                    {"command", a.command},
                    {"env", a.env},
                    {"workingDir", a.working_dir},
                    {"graceMs", a.grace_ms}});
  }
  json j = {{"revision", revision}, {"assignments", std::move(list)}};
  if (!stop.empty()) {
    json entries = json::array();
    for (const StopRequest& s : stop) {
      entries.push_back({{"job", s.job}, {"attempt", s.attempt}, {"graceMs", s.grace_ms}});
    }
    j["stop"] = std::move(entries);
  }
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string RegistrationJson(const Registration& r) {
  json devices = json::array();
  for (const Device& d : r.devices) {
    devices.push_back({{"index", d.index}, {"coords", CoordJson(d.coords)}});
  }
  json j = {{"name", r.name},
            {"generation", r.generation},
            {"chips", r.chips},
            {"address", r.address},
            {"agentPort", r.agent_port},
            {"labels", r.labels},
            {"devices", std::move(devices)}};
  if (r.slice) {
    j["slice"] = {
        {"name", r.slice->name}, {"topology", r.slice->topology}, {"worker", r.slice->worker}};
  }
  if (r.cube) {
    j["cube"] = {
        {"name", r.cube->name}, {"block", r.cube->block}, {"coord", CoordJson(r.cube->coord)}};
  }
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<RegisterReply> ParseRegisterReply(std::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return InvalidArgument("register reply: not a JSON object");
  RegisterReply reply;
  if (auto h = j.find("host"); h != j.end() && h->is_string()) reply.host = h->get<std::string>();
  if (auto i = j.find("heartbeatIntervalMs"); i != j.end()) {
    if (!IsInt(*i) || i->get<int64_t>() <= 0) {
      return InvalidArgument("heartbeatIntervalMs: must be a positive integer");
    }
    reply.heartbeat_interval_ms = i->get<int64_t>();
  }
  if (auto l = j.find("leaseMs"); l != j.end()) {
    if (!IsInt(*l) || l->get<int64_t>() <= 0) {
      return InvalidArgument("leaseMs: must be a positive integer");
    }
    reply.lease_ms = l->get<int64_t>();
  }
  return reply;
}

std::string HeartbeatJson(const Heartbeat& h) {
  json workers = json::array();
  for (const WorkerReport& w : h.workers) {
    json j = {{"job", w.key.job}, {"attempt", w.key.attempt},    {"rank", w.key.rank},
              {"pid", w.pid},     {"state", StateName(w.state)}, {"startedAtMs", w.started_at_ms}};
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
    json j = {{"job", p.key.job},      {"attempt", p.key.attempt}, {"rank", p.key.rank},
              {"type", p.record.type}, {"step", p.record.step},    {"timeMs", p.record.time_ms}};
    if (p.record.type == "checkpoint" || p.record.type == "restore") {
      j["seconds"] = p.record.seconds;
    }
    progress.push_back(std::move(j));
  }
  return json{
      {"revision", h.revision},
      {"workers", std::move(workers)},
      {"progress", std::move(progress)},
      {"usage", {{"cpuPercent", h.usage.cpu_percent}, {"memoryBytes", h.usage.memory_bytes}}}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace tessera::agent
