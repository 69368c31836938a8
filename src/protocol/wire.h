// The agent <-> head wire protocol (docs/agent-protocol.md): the message types and their JSON,
// used by both sides. The agent writes registrations and heartbeats and reads assignment
// snapshots and register replies; the head reads registrations and heartbeats and writes
// snapshots and register replies. Every message has one encoder and one decoder here, so the
// two sides cannot disagree on a field.
//
// Pure values and codecs, no I/O. Decoding never throws, whatever the input: malformed input
// is an InvalidArgument whose message starts with the field path ("slice.worker: ...",
// "workers[2].state: ...") and says what would be valid. Encoding never throws either
// (invalid UTF-8 in a string is replaced).
//
// Host names: ONE rule for both sides, NormalizeHostName. The head registers a host under the
// normalised name (ParseRegistration applies it), and the agent applies it to its own name
// before it registers, so both use the same name in URLs (/api/v1/agents/<name>/...).
//
// Ownership: values. Thread-safety: values; every function is safe to call from any thread.
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "topology/topology.h"

namespace tessera::protocol {

// ----- names -----

// The host-name rule. Lower-cases ASCII letters, then accepts a DNS-1123 subdomain: labels of
// [a-z0-9-], each 1..63 characters and starting and ending with a letter or digit, joined by
// '.', 253 characters in all ("Node-1.Example.COM" -> "node-1.example.com"). Returns the
// normalised name, or InvalidArgument starting with "name: " that says what is wrong and that
// `tessera agent --name` chooses another name. Nothing else is changed: no trimming, no
// trailing-dot removal.
Result<std::string> NormalizeHostName(std::string_view reported);

// True for names safe as one path segment: 1..253 of [A-Za-z0-9._-], not "." or "..". Job,
// slice, cube and block names.
bool IsSafeName(std::string_view name);

// ----- assignments (head -> agent) -----

// The uid of a workload (the job's metadata.uid): >= 1, never reused by a head, not even
// after the job is deleted and another of the same name created. Below 2^53 so every JSON
// reader holds it exactly.
constexpr uint64_t kMaxUid = (uint64_t{1} << 53) - 1;

// Identifies one worker on a host: an assignment is started at most once per key. The uid
// tells a job from an earlier one of the same name, so an exit the agent remembers of a
// deleted job is never taken for the new one's.
struct WorkerKey {
  std::string job;
  int attempt = 0;
  int rank = 0;
  uint64_t uid = 0;  // 1..kMaxUid on the wire
  friend auto operator<=>(const WorkerKey&, const WorkerKey&) = default;
  std::string ToString() const;  // "job/attempt/rank@uid"
};

// What kind of workload an assignment belongs to: it decides what the agent does with the
// worker when it is fenced (docs/agent-protocol.md "Fencing"). kUnknown: a head that does not
// send "kind" (the agent then looks at the environment: TESSERA_SERVICE marks a replica).
enum class WorkloadKind { kUnknown, kTrainJob, kService };
const char* WorkloadKindName(WorkloadKind kind);  // "TrainJob", "Service", "" for kUnknown

// The head's term: grows with every head start (and every election won), never reused. Below
// 2^53 like a uid. 0 = a head that sends no term (older than fencing).
constexpr uint64_t kMaxTerm = kMaxUid;

// A serving replica leader's TLS material (docs/serving.md "TLS to replicas"): a server
// certificate the head signed with the cluster CA for the leader's host address, its key, and
// the CA. Secret: it travels only in the assignment to the host that runs the leader (over the
// agent's mutually authenticated channel) and is never logged, described or stored.
struct WorkerTls {
  std::string cert_pem;
  std::string key_pem;
  std::string ca_pem;
  friend bool operator==(const WorkerTls&, const WorkerTls&) = default;
};

struct Assignment {
  WorkerKey key;
  int worker = 0;  // TPU worker id inside the slice (informational for the agent)
  std::vector<std::string> command;
  std::map<std::string, std::string> env;
  std::string working_dir;  // absolute, or "" for the agent's current directory
  int64_t grace_ms = 10'000;
  WorkloadKind kind = WorkloadKind::kUnknown;  // "kind"; written only when known
  // "tls": {"cert", "key", "ca"} (PEM), a replica leader's; written only when set.
  std::optional<WorkerTls> tls = std::nullopt;
  // "nice": the CPU niceness (0..19) the agent gives the worker's process group; 0 = normal.
  // A Service group starts at its role's startupNice and gets 0 once Ready (docs/serving.md
  // "Start-up priority"); the agent applies a change to a running worker. Written when > 0.
  int nice = 0;
  friend bool operator==(const Assignment&, const Assignment&) = default;
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
  uint64_t uid = 0;  // the job's uid: only its workers are stopped this way
  friend bool operator==(const StopRequest&, const StopRequest&) = default;
};

struct AssignmentSnapshot {
  int64_t revision = 0;
  uint64_t term = 0;  // "term" of the head that wrote it; 0 when absent (an older head)
  std::vector<ParsedAssignment> assignments;
  std::vector<StopRequest> stop;
  // Entries whose key could not even be read, and malformed "stop" entries (ignored, logged).
  std::vector<std::string> unreadable;
};

// Parses {"revision": N, "assignments": [...], "stop": [...]}. InvalidArgument if the document
// itself is malformed (not an object, no integer revision, assignments not a list); a "stop"
// that is not a list, or a malformed entry of it, is only reported in `unreadable`. Every
// assignment and stop entry carries its job's "uid" (1..kMaxUid); "graceMs" is 0..86400000.
// Optional "term" (0..kMaxTerm; a bad one refuses the document: a snapshot whose term cannot be
// read cannot be fenced) and per assignment "kind" ("TrainJob" or "Service"; another value is
// that assignment's error).
Result<AssignmentSnapshot> ParseAssignmentSnapshot(std::string_view json);
// The head's snapshot (watch stream line and heartbeat reply) from typed values. "stop" is
// written only when `stop` is not empty, "term" only when > 0.
std::string AssignmentSnapshotJson(int64_t revision, const std::vector<Assignment>& assignments,
                                   const std::vector<StopRequest>& stop = {}, uint64_t term = 0);

// ----- registration (agent -> head) -----

// One accelerator chip of a host.
struct Device {
  int index = 0;  // 0..chips-1 on this host
  Coord coords;   // chip coordinates in the slice (2D: z == 0) or in the cube
  friend bool operator==(const Device&, const Device&) = default;
};

struct SliceMembership {
  std::string name;      // IsSafeName
  std::string topology;  // "4x4": a shape the generation offers
  int worker = 0;        // 0..hosts of the topology - 1
  friend bool operator==(const SliceMembership&, const SliceMembership&) = default;
};
struct CubeMembership {
  std::string name;   // IsSafeName
  std::string block;  // IsSafeName
  Coord coord;        // host-grid coordinate in the cube's 2x2x4 hosts: x, y in 0..1, z in 0..3
  friend bool operator==(const CubeMembership&, const CubeMembership&) = default;
};

// What the agent discovered of its host (docs/discovery.md), sent in a registration as
// "discovered". The head keeps and shows it; placement does not read it yet.
struct GpuFabric {           // one GPU's NVLink fabric, as `nvidia-smi -q -x` reports it
  std::string cluster_uuid;  // "clusterUuid"
  std::string clique_id;     // "cliqueId"
  std::string state;         // "Completed", "In Progress", ...
  std::string status;        // "Success", ...
  friend bool operator==(const GpuFabric&, const GpuFabric&) = default;
};
struct DiscoveredGpu {
  std::string uuid;                 // "GPU-..."
  int64_t memory_mib = 0;           // total framebuffer memory
  std::optional<GpuFabric> fabric;  // absent: the GPU has no NVLink fabric (state N/A)
  friend bool operator==(const DiscoveredGpu&, const DiscoveredGpu&) = default;
};
struct Discovered {
  // Which source answered: "gke" (TPU_* environment), "metadata" (the GCE metadata server),
  // "devices" (/dev/accel*, /dev/vfio) or "nvidia-smi".
  std::string source;
  std::string accelerator_type;  // "v5p-16"; "" when the source does not say
  std::string topology;          // "2x2x2"; ""
  std::string slice_name;        // ""
  std::optional<int> worker_id;
  std::vector<std::string> peers;                // the slice's workers, by worker id
  std::map<std::string, std::string> megascale;  // MEGASCALE_* (multi-slice), as given
  std::vector<DiscoveredGpu> gpus;
  friend bool operator==(const Discovered&, const Discovered&) = default;
};
// The sources "discovered.source" may name.
bool IsDiscoverySource(std::string_view source);
// The "discovered" object of a registration, as JSON text (what the head keeps and shows).
std::string DiscoveredJson(const Discovered& discovered);

struct Registration {
  std::string name;  // NormalizeHostName
  Generation generation = Generation::kV6e;
  int chips = 0;                         // > 0
  std::string address = "127.0.0.1";     // where the head reaches the host
  uint16_t agent_port = 0;               // the agent's log server; 0 = none
  std::optional<SliceMembership> slice;  // 2D generations: set exactly when rank 2
  std::optional<CubeMembership> cube;    // 3D generations: set exactly when rank 3
  std::map<std::string, std::string> labels;
  std::vector<Device> devices;  // empty, or one per chip
  // The host's credential (protocol/credential.h): proves on re-registration, heartbeats and
  // assignment reads that the caller is the agent that first registered this host name.
  std::string credential;
  // "fenceMs": how long the agent runs training workers without reaching a head (1000..
  // 86400000); 0 (absent) = an agent that does not fence, so the head has nothing to wait for.
  int64_t fence_ms = 0;
  // What the agent discovered of its host; absent for an emulated host (and older agents).
  std::optional<Discovered> discovered;
  friend bool operator==(const Registration&, const Registration&) = default;
};
std::string RegistrationJson(const Registration& registration);

// The head's decoder of RegistrationJson. Required: "name" (NormalizeHostName: the result
// holds the normalised name), "generation" (a known generation or alias; kept as the enum),
// "slice" {"name", "topology", "worker" in 0..hosts-1} for 2D generations or "cube" {"name",
// "coord": [x, y, z] with x, y in 0..1 and z in 0..3} for 3D ones (the other one must be
// absent), "chips" (integer in 1..4096). Optional: "address" (1..253 printable characters, no
// spaces; default "127.0.0.1"), "agentPort" (1..65535; absent = 0, no log server),
// "cube.block" (default "block-00"), "labels" (object of strings: keys 1..253 and values at
// most 1024 characters, no control characters), "devices" (one {"index" in 0..chips-1,
// distinct, "coords":
// [x, y, z] integers >= 0} per chip), "discovered" {"source" (required: IsDiscoverySource),
// "acceleratorType", "topology" (a shape: AxB or AxBxC), "sliceName", "workerId" (0..100000),
// "peers" (strings), "megascale" (object of strings, keys MEGASCALE_*), "gpus" [{"uuid"
// (required), "memoryMiB", "fabric" {"clusterUuid", "cliqueId", "state", "status"}}], all
// strings printable, at most 4096 peers and 1024 GPUs}. Required last: "credential"
// (IsValidCredential: 32..128 lower-case hex digits). Fields are checked in that order, so the
// first error is about who and where the host is. Unknown fields are ignored. InvalidArgument
// naming the first bad field otherwise.
Result<Registration> ParseRegistration(std::string_view json);

struct RegisterReply {
  std::string host;  // the name the head registered: NormalizeHostName of the request's name
  int64_t heartbeat_interval_ms = 1000;
  int64_t lease_ms = 5000;
  friend bool operator==(const RegisterReply&, const RegisterReply&) = default;
};
std::string RegisterReplyJson(const RegisterReply& reply);
// Lenient on "host" (a missing one is ""); heartbeatIntervalMs and leaseMs, when present,
// must be integers > 0.
Result<RegisterReply> ParseRegisterReply(std::string_view json);

// ----- heartbeat (agent -> head) -----

enum class WorkerState { kRunning, kExited };

struct WorkerReport {
  WorkerKey key;
  int64_t pid = 0;
  WorkerState state = WorkerState::kRunning;
  // Meaningful only when kExited (not sent otherwise): a death by signal N is signal N and
  // exit code 128 + N.
  int exit_code = 0;
  int signal = 0;
  int64_t started_at_ms = 0;
  int64_t finished_at_ms = 0;
  std::string error;  // why it never started (exit code 127), else ""
  friend bool operator==(const WorkerReport&, const WorkerReport&) = default;
};

// One line a worker wrote to its progress file.
struct ProgressRecord {
  std::string type;  // "progress", "checkpoint", "restore" or "alive"
  int64_t step = 0;
  double seconds = 0;   // checkpoint save or restore time; 0 for the other types
  int64_t time_ms = 0;  // when the worker wrote it, ms since the Unix epoch
  friend bool operator==(const ProgressRecord&, const ProgressRecord&) = default;
};

struct ProgressReport {
  WorkerKey key;
  ProgressRecord record;
  friend bool operator==(const ProgressReport&, const ProgressReport&) = default;
};

struct Usage {
  double cpu_percent = 0;  // of one core; 200 = two cores busy
  int64_t memory_bytes = 0;
  friend bool operator==(const Usage&, const Usage&) = default;
};

// An assignment (or a whole snapshot) the agent refused, or training workers it stopped when
// fenced: so the head can see it (an event on the host). docs/agent-protocol.md "Fencing".
struct Refusal {
  uint64_t term = 0;  // the term of the refused snapshot (0 for a fence stop)
  std::string job;    // "" when the whole snapshot was refused
  uint64_t uid = 0;
  int attempt = 0;
  std::string reason;  // at most 1024 characters
  friend bool operator==(const Refusal&, const Refusal&) = default;
};

struct Heartbeat {
  // The newest assignment revision the agent has applied; -1 = none yet (or not reported).
  int64_t revision = -1;
  // The highest head term the agent has seen (0: none, or an agent older than fencing). A head
  // whose own term is lower has been replaced.
  uint64_t term = 0;
  std::vector<Refusal> refused;  // "refused", at most 64 entries
  std::vector<WorkerReport> workers;
  std::vector<ProgressReport> progress;
  Usage usage;
  friend bool operator==(const Heartbeat&, const Heartbeat&) = default;
};
std::string HeartbeatJson(const Heartbeat& heartbeat);

// The head's decoder of HeartbeatJson. Every field is optional (an empty object is a
// heartbeat with nothing to report): "revision" (integer >= -1; default -1), "workers" (list
// of {"job" IsSafeName, "uid" in 1..kMaxUid, "attempt" >= 0, "rank" >= 0, "pid" >= 0, each
// worker at most once, "state" "Running" or
// "Exited", "startedAtMs" >= 0, and when Exited "exitCode" 0..255, "signal" 0..127,
// "finishedAtMs" >= 0; optional "error" string}), "progress" (list of {"job", "uid",
// "attempt", "rank" as above, "type" one of progress/checkpoint/restore/alive, "step" >= 0,
// "timeMs" >= 0, optional "seconds" in 0..1e7}), "usage" {"cpuPercent" in 0..1e6,
// "memoryBytes" >= 0}, "term" (0..kMaxTerm), "refused" (at most 64 of {"term", optional
// "job" (IsSafeName) with "uid" and "attempt", "reason" a string of at most 1024}). Numbers
// that must be integers must be JSON integers. InvalidArgument naming the first bad field
// ("workers[1].state: ...") otherwise: one bad entry refuses the whole heartbeat.
Result<Heartbeat> ParseHeartbeat(std::string_view json);

}  // namespace tessera::protocol
