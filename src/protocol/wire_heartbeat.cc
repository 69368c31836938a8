// Heartbeats (wire.h): the workers an agent runs, their states and progress records
// (checkpoint, restore), and the stop refusals it reports.
#include <limits>
#include <set>

#include "common/json_limits.h"
#include "protocol/wire.h"
#include "protocol/wire_json.h"

namespace tessera::protocol {

using wire_json::Dump;
using wire_json::Item;
using wire_json::json;
using wire_json::kMaxAttempt;
using wire_json::kMaxCpuPercent;
using wire_json::kMaxReason;
using wire_json::kMaxRefusals;
using wire_json::kMaxSeconds;
using wire_json::kNoMax;
using wire_json::Presence;
using wire_json::Printable;
using wire_json::Quoted;
using wire_json::ReadInt;
using wire_json::ReadList;
using wire_json::ReadNumber;
using wire_json::ReadObject;
using wire_json::ReadSafeName;
using wire_json::ReadString;
using wire_json::Shown;
using wire_json::UidOf;

namespace {

// job, uid, attempt and rank of one heartbeat entry at `path`.
Status ReadKey(const json& o, const std::string& path, WorkerKey& key) {
  TESSERA_RETURN_IF_ERROR(ReadSafeName(o, "job", path + ".job", Presence::kRequired, key.job));
  TESSERA_RETURN_IF_ERROR(ReadInt(o, "uid", path + ".uid", 1, static_cast<int64_t>(kMaxUid),
                                  Presence::kRequired, key.uid));
  TESSERA_RETURN_IF_ERROR(
      ReadInt(o, "attempt", path + ".attempt", 0, kMaxAttempt, Presence::kRequired, key.attempt));
  return ReadInt(o, "rank", path + ".rank", 0, kMaxAttempt, Presence::kRequired, key.rank);
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
