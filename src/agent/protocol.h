// The agent <-> head wire protocol (docs/agent-protocol.md): message types and their JSON.
//
// Pure values and codecs, no I/O. Parsing never throws: malformed input is an InvalidArgument
// whose message names the field.
//
// Thread-safety: values.
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/devices.h"
#include "agent/progress.h"
#include "common/status.h"

namespace tessera::agent {

// Identifies one worker on a host: an assignment is started at most once per key.
struct WorkerKey {
  std::string job;
  int attempt = 0;
  int rank = 0;
  friend auto operator<=>(const WorkerKey&, const WorkerKey&) = default;
  std::string ToString() const;  // "job/attempt/rank"
};

// True for names safe as one path segment: 1..253 of [A-Za-z0-9._-], not "." or "..".
bool IsSafeName(std::string_view name);

struct Assignment {
  WorkerKey key;
  int worker = 0;  // TPU worker id inside the slice (informational for the agent)
  std::vector<std::string> command;
  std::map<std::string, std::string> env;
  std::string working_dir;  // absolute, or "" for the agent's current directory
  int64_t grace_ms = 10'000;
};

// One assignment as received. When only its key could be read, `error` says what is wrong
// with the rest and the agent reports the worker as failed instead of starting it.
struct ParsedAssignment {
  Assignment assignment;
  std::string error;
};

// How to stop the withdrawn workers of one attempt (the snapshot's optional "stop" list): with
// this grace instead of the graceMs of their assignment. 0 = SIGKILL to the group at once.
struct StopRequest {
  std::string job;
  int attempt = 0;
  int64_t grace_ms = 0;
  friend bool operator==(const StopRequest&, const StopRequest&) = default;
};

struct AssignmentSnapshot {
  int64_t revision = 0;
  std::vector<ParsedAssignment> assignments;
  std::vector<StopRequest> stop;
  // Entries whose key could not even be read, and malformed "stop" entries (ignored, logged).
  std::vector<std::string> unreadable;
};

// Parses {"revision": N, "assignments": [...], "stop": [...]}. InvalidArgument if the document
// itself is malformed (not an object, no integer revision, assignments not a list); a "stop"
// that is not a list, or a malformed entry of it, is only reported in `unreadable`.
Result<AssignmentSnapshot> ParseAssignmentSnapshot(std::string_view json);
std::string AssignmentSnapshotJson(int64_t revision, const std::vector<Assignment>& assignments,
                                   const std::vector<StopRequest>& stop = {});

struct SliceMembership {
  std::string name;
  std::string topology;
  int worker = 0;
};
struct CubeMembership {
  std::string name;
  std::string block;
  Coord coord;
};

struct Registration {
  std::string name;
  std::string generation;
  int chips = 0;
  std::string address;
  uint16_t agent_port = 0;
  std::optional<SliceMembership> slice;  // 2D generations
  std::optional<CubeMembership> cube;    // 3D generations
  std::map<std::string, std::string> labels;
  std::vector<Device> devices;
};
std::string RegistrationJson(const Registration& registration);

struct RegisterReply {
  std::string host;
  int64_t heartbeat_interval_ms = 1000;
  int64_t lease_ms = 5000;
};
Result<RegisterReply> ParseRegisterReply(std::string_view json);

enum class WorkerState { kRunning, kExited };

struct WorkerReport {
  WorkerKey key;
  int64_t pid = 0;
  WorkerState state = WorkerState::kRunning;
  int exit_code = 0;
  int signal = 0;
  int64_t started_at_ms = 0;
  int64_t finished_at_ms = 0;
  std::string error;  // why it never started (exit code 127), else ""
};

struct ProgressReport {
  WorkerKey key;
  ProgressRecord record;
};

struct Usage {
  double cpu_percent = 0;  // of one core; 200 = two cores busy
  int64_t memory_bytes = 0;
};

struct Heartbeat {
  int64_t revision = 0;  // the newest assignment revision the agent has applied
  std::vector<WorkerReport> workers;
  std::vector<ProgressReport> progress;
  Usage usage;
};
std::string HeartbeatJson(const Heartbeat& heartbeat);

}  // namespace tessera::agent
