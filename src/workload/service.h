// Service: the typed resource of a served model. A Service has roles (one by default, named
// "server"); a role runs replicas; a replica is a group of processes, one per host of one
// whole slice of the role's shape, worker 0 the leader (LeaderWorkerSet's group). This file
// holds what the user asked (spec), where each replica is in its life (status, with phase
// enums; persisted), and the head-only memory the lifecycle needs (load samples, autoscaler
// state). The rules are in service_lifecycle.h; the API's documents are codecs of these
// structs (codec/service_json.h). Nothing here knows HTTP, JSON or the store.
//
// Thread-safety: values.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "topology/topology.h"
#include "workload/autoscaler.h"
#include "workload/secret_ref.h"
#include "workload/train_job.h"

namespace tessera {

struct ReadinessSpec {
  std::string path = "/healthz";       // HTTP GET on the leader's port; 2xx is ready
  int64_t startup_grace_ms = 900'000;  // failed probes do not count until the first success
                                       // or this long after the group started (15 min)
  int64_t period_ms = 10'000;          // one probe every period
  int64_t timeout_ms = 30'000;         // a probe without an answer this long has failed
  friend bool operator==(const ReadinessSpec&, const ReadinessSpec&) = default;
};

// Counted in replica groups (whole slices).
struct RolloutSpec {
  int max_surge = 1;        // groups above the desired count during a rolling update
  int max_unavailable = 0;  // groups below the desired count that may be unready meanwhile
  friend bool operator==(const RolloutSpec&, const RolloutSpec&) = default;
};

// Prefill/decode disaggregation (docs/serving.md "Prefill and decode roles"): a role is a
// prefill role (runs prompts, keeps their KV for decode to pull), a decode role (takes the
// router's requests, has long prompts prefilled by a prefill replica) or neither.
enum class KvRole { kNone, kPrefill, kDecode };
const char* KvRoleName(KvRole role);  // "", "prefill", "decode"

// How decode hands prompts to prefill (spec.kvTransfer); a copy sits in both disaggregated
// roles, so a change rolls both.
struct KvTransferSpec {
  int threshold_tokens = 8;    // prompts longer than this (uncached tokens) go to prefill
  int64_t timeout_ms = 5'000;  // a handoff (prefill call and KV pull) longer: local prefill
  int64_t hold_ms = 10'000;    // an unpulled KV blob is freed after this long
  friend bool operator==(const KvTransferSpec&, const KvTransferSpec&) = default;
};

struct ServiceRoleSpec {
  std::string name = "server";
  Generation accelerator = Generation::kV6e;
  Shape topology;  // of one replica: one whole slice
  std::vector<std::string> command;
  std::map<std::string, std::string> env;
  SecretEnv secret_env;  // env entries from Secrets of the Service's namespace (secret_ref.h)
  std::string working_dir;
  int port = 8000;   // the process's HTTP port on a real cluster
  int replicas = 1;  // without autoscaling; `tessera scale` changes it
  std::optional<AutoscalerConfig> autoscaling;
  int max_ongoing_requests = 5;  // per replica, enforced by the router
  ReadinessSpec readiness;
  RolloutSpec rollout;
  // CPU niceness (0..19) of a group's processes until it is first Ready, then 0: a group
  // starting (import, model build) on hosts it shares with serving groups yields the CPU to
  // them (docs/serving.md "Start-up priority"). 0 = off. Applies without a rollout.
  int startup_nice = 10;
  int64_t grace_ms = 10'000;  // SIGTERM to SIGKILL when a group is stopped
  KvRole kv_role = KvRole::kNone;
  KvTransferSpec kv_transfer;  // meaningful when kv_role is not kNone
  // warmStart.preload: the modules each agent keeps imported in a warm interpreter for this
  // role's next group on that host (WarmStartEnv; docs/serving.md "Warm start"). Empty: cold.
  std::vector<std::string> warm_preload;

  // The fields that shape a replica's processes: a change to any of them is a new generation
  // and rolls the replicas. replicas, autoscaling, maxOngoingRequests, readiness, rollout and
  // warmStart and startupNice change without a rollout (warmStart: groups started from then on
  // use it).
  bool SameTemplate(const ServiceRoleSpec& other) const;
};

struct ServiceSpec {
  std::string name;
  std::string queue;  // LocalQueue (metadata.queue, as TrainJob)
  std::map<std::string, std::string> labels;
  std::string priority;  // PriorityClass (spec.priority, as TrainJob)
  // SliceReservation (spec.reservation, as TrainJob): every replica group is placed only on
  // its free hosts, never through admission; empty: none.
  std::string reservation;
  std::vector<ServiceRoleSpec> roles;
  const ServiceRoleSpec* Role(std::string_view name) const;
  // The role of that kind, or nullptr (a valid spec has both or neither).
  const ServiceRoleSpec* KvRoleOf(KvRole kind) const;
  bool Disaggregated() const { return KvRoleOf(KvRole::kDecode) != nullptr; }
  // The role the router sends requests to: the decode role when disaggregated, else the first.
  const ServiceRoleSpec* FrontRole() const;
};

// The environment a disaggregated role's processes get on top of the serving contract:
// TESSERA_KV_ROLE (prefill | decode), TESSERA_KV_THRESHOLD (tokens), TESSERA_KV_TIMEOUT_MS,
// TESSERA_KV_HOLD_MS (examples/serve reads them as the defaults of its --mode and --kv-*
// flags). Empty for other roles.
std::map<std::string, std::string> KvRoleEnv(const ServiceRoleSpec& role);

// TESSERA_WARM_PRELOAD (the comma list of warm_preload) for a role with warmStart, as a
// TrainJob's workers get it: the agent then starts the group's processes in warm interpreters
// when it has them (src/agent/job_warm_pools.h). Empty for a role without warmStart.
std::map<std::string, std::string> WarmStartEnv(const ServiceRoleSpec& role);

// Pending (nothing placed yet) -> Progressing (replicas starting or a rollout under way) ->
// Ready (every role has its desired replicas ready at the current generation); Degraded when
// some replica is unready or being recreated; Deleting once deleted.
enum class ServicePhase { kPending, kProgressing, kReady, kDegraded, kDeleting };
const char* ServicePhaseName(ServicePhase phase);
Result<ServicePhase> ParseServicePhase(std::string_view name);

// A replica group: Pending (waiting for a slice, with the planner's reason) -> Starting
// (processes assigned; readiness not yet seen) -> Ready <-> Unready; Recreating (a process
// died: every process is stopped, then the group starts again on its slice after a backoff);
// Terminating (scaled down, replaced by a rollout or deleted: stopped, then its slice freed).
enum class ReplicaPhase { kPending, kStarting, kReady, kUnready, kRecreating, kTerminating };
const char* ReplicaPhaseName(ReplicaPhase phase);
Result<ReplicaPhase> ParseReplicaPhase(std::string_view name);

enum class ProcessPhase { kPending, kRunning, kExited };
const char* ProcessPhaseName(ProcessPhase phase);
Result<ProcessPhase> ParseProcessPhase(std::string_view name);

// One process of a replica group: worker w of the slice, on `host`.
struct ServiceProcess {
  std::string host;
  std::string address;  // where peers and the router reach the host
  int port = 0;         // PORT
  ProcessPhase phase = ProcessPhase::kPending;
  int64_t pid = 0;
  int exit_code = 0;
  int signal = 0;
};

// What happens when every process of a stopping group is confirmed gone.
enum class AfterStop {
  kRestart,  // Recreating: start again on the same slice after the backoff
  kRequeue,  // a host was lost: free the slice, back to Pending for a new one
  kRemove,   // Terminating: free the slice and forget the replica
};

struct ReplicaStatus {
  int replica = 0;     // index inside the role; kept across recreations
  int generation = 0;  // the role template generation it runs
  ReplicaPhase phase = ReplicaPhase::kPending;
  std::string reason = "Pending";
  std::string message = "waiting for a slice";
  int restarts = 0;
  // Placement (owner 0: holds no chips). The owner id is the inventory owner of its slice.
  uint64_t owner = 0;
  std::string slice;
  std::vector<ServiceProcess> processes;  // by worker index; [0] is the leader
  int incarnation = 0;                    // +1 at every start: reports of older ones are stale
  int master_port = 0;                    // torch.distributed rendezvous, fresh every start
  int64_t started_ms = 0;                 // the current incarnation was assigned
  int64_t ready_since_ms = 0;             // 0: not ready now
  bool ready_once = false;                // this incarnation has passed a probe
  int64_t last_probe_ms = 0;
  int64_t backoff_ms = 0;     // the last recreation's wait; doubles, reset after 10 min ready
  int64_t restart_at_ms = 0;  // Recreating: start again no earlier than this
  bool stopping = false;      // processes withdrawn; waiting for hosts to confirm
  AfterStop after_stop = AfterStop::kRestart;
  std::set<std::string> unconfirmed;  // hosts that may still run a process being stopped
  bool placed() const { return owner != 0; }
  bool Assigned() const {
    return placed() && !stopping &&
           (phase == ReplicaPhase::kStarting || phase == ReplicaPhase::kReady ||
            phase == ReplicaPhase::kUnready);
  }
  bool OnHost(const std::string& host) const;
  const ServiceProcess* leader() const { return processes.empty() ? nullptr : &processes[0]; }
};

struct RoleStatus {
  std::string name;
  int generation = 1;        // +1 when the role's template changes (a rolling update)
  int desired_replicas = 0;  // spec replicas, or the autoscaler's decision
  int next_replica = 0;      // the index the next new replica gets
  AutoscalerDecision autoscaler;
  int64_t autoscaler_at_ms = 0;         // when `autoscaler` was decided; 0: never
  std::vector<ReplicaStatus> replicas;  // by replica index
  int ReadyReplicas() const;
};

struct ServiceStatus {
  ServicePhase phase = ServicePhase::kPending;
  std::string reason = "Pending";
  std::string message = "waiting for the scheduler";
  std::vector<RoleStatus> roles;  // in spec order; a role removed from the spec stays until empty
  bool deleting = false;
  RoleStatus* Role(std::string_view name);
  const RoleStatus* Role(std::string_view name) const;
};

// The router's last load report of a role, kept as it came (counters since the router started)
// so the dashboard can chart request rate and latency from successive reads.
struct RouterTraffic {
  int64_t at_ms = 0;  // the head's clock when the report arrived
  double ongoing_requests = 0;
  int queued = 0;
  std::map<int, int> in_flight;     // replica -> requests in flight
  uint64_t requests = 0;            // requests relayed to the end by a replica
  int64_t refused = -1;             // left unserved (queue full, cancelled queued); -1: not said
  double latency_sum_s = 0;         // their summed duration, request header to last byte
  double queued_prompt_tokens = 0;  // a prefill role's signal: prompt tokens not yet prefilled
  uint64_t ttft_count = 0;          // streams' time to first token at the router: count, sum
  double ttft_sum_s = 0;            // (of the requests this role prefilled)
  uint64_t output_tokens = 0;       // streamed output tokens this role decoded
  uint64_t tpot_count = 0;          // streams of 2+ tokens: time per output token, count, sum
  double tpot_sum_s = 0;
  // A decode role's pairing and handoff counts (pairedSameSlice, pairedOtherSlice,
  // noPrefillReplica, prefilledRemote, prefilledLocal, fallbacks, fallback_<reason>).
  std::map<std::string, uint64_t> disagg;
  std::vector<double> latency_bounds;        // histogram upper bounds (s), increasing
  std::vector<uint64_t> latency_cumulative;  // one per bound, then +Inf (the total)
};

// In memory only: the router's load reports of each role (the look-back window).
struct ServiceRuntime {
  int64_t version = 0;        // store resource version
  int64_t stop_revision = 0;  // assignments revision of the last change: hosts confirm after it
  std::map<std::string, std::vector<LoadSample>> load;  // by role
  std::map<std::string, RouterTraffic> traffic;         // by role: the last report
  // Groups of a rolling update's new generation that have taken over from the old ones: the
  // router routed to them (ServiceLifecycle's rollout rule); by role and replica index.
  std::set<std::pair<std::string, int>> took_traffic;
  // The head's time of the first router report that listed such a group after it turned Ready.
  std::map<std::pair<std::string, int>, int64_t> routed_since;
};

// A replica the router may send requests to: the leader of a group that has processes.
struct Endpoint {
  std::string role;
  int replica = 0;
  int generation = 0;
  std::string address;
  int port = 0;
  bool ready = false;
};

struct Service {
  uint64_t uid = 0;  // creation order
  int64_t created_ms = 0;
  ServiceSpec spec;
  ServiceStatus status;
  ServiceRuntime runtime;
  const std::string& name() const { return spec.name; }
  // Every replica with a placed leader, ready or not, in role then replica order.
  std::vector<Endpoint> Endpoints() const;
  bool OnHost(const std::string& host) const;
  // Replica groups that hold chips (for admission and the inventory).
  int PlacedReplicas() const;
};

// The workload name of a replica group's processes in agent assignments and reports:
// "<service>.<role>.<replica>", where <service> is the Service's key (common/object_key.h:
// "NAME", or "NS.NAME" outside the namespace default). Names hold no '.', so it never collides
// with a TrainJob's key (one '.' at most); the attempt is the group's incarnation, the rank its
// worker index.
std::string ReplicaWorkloadName(const std::string& service, const std::string& role, int replica);
struct ReplicaRef {
  std::string service;
  std::string role;
  int replica = 0;
};
// The inverse; nullopt when `name` is not a replica workload name (e.g. a TrainJob).
std::optional<ReplicaRef> ParseReplicaWorkloadName(std::string_view name);

}  // namespace tessera
