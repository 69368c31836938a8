// Assignment snapshots (wire.h): what the head tells an agent to run and to stop. The agent's
// side is lenient per entry: one unreadable assignment is reported and skipped, not fatal.
#include "common/json_limits.h"
#include "protocol/wire.h"
#include "protocol/wire_json.h"

namespace tessera::protocol {

using wire_json::AsInt;
using wire_json::Dump;
using wire_json::IsInt;
using wire_json::json;
using wire_json::kMaxAttempt;
using wire_json::kMaxGraceMs;
using wire_json::kMaxNice;
using wire_json::Presence;
using wire_json::ReadInt;
using wire_json::Shown;
using wire_json::UidOf;

namespace {

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
  if (auto nice = a.find("nice"); nice != a.end() && !nice->is_null()) {
    std::optional<int64_t> value = AsInt(*nice);
    if (!value || *value < 0 || *value > kMaxNice) {
      return "nice: must be an integer in 0.." + std::to_string(kMaxNice);
    }
    out.nice = static_cast<int>(*value);
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
  if (auto tls = a.find("tls"); tls != a.end() && !tls->is_null()) {
    if (!tls->is_object()) return "tls: must be an object {cert, key, ca} of PEM strings";
    WorkerTls out_tls;
    for (auto [field, into] :
         {std::pair{"cert", &out_tls.cert_pem}, std::pair{"key", &out_tls.key_pem},
          std::pair{"ca", &out_tls.ca_pem}}) {
      auto it = tls->find(field);
      if (it == tls->end() || !it->is_string() || it->get<std::string>().empty())
        return std::string("tls.") + field + ": must be a non-empty PEM string";
      *into = it->get<std::string>();
    }
    out.tls = std::move(out_tls);
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

}  // namespace

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
    if (a.nice > 0) entry["nice"] = a.nice;
    if (a.tls)
      entry["tls"] = {{"cert", a.tls->cert_pem}, {"key", a.tls->key_pem}, {"ca", a.tls->ca_pem}};
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

}  // namespace tessera::protocol
