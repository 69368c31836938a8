// Controller: the head's driver. It owns the in-memory model of the cluster: hosts, the three
// workload kinds (TrainJobs, Services, SliceReservations), the admission objects
// (ClusterQueue, LocalQueue, PriorityClass) and the event log. It feeds every input (a user
// request, an agent's heartbeat, a readiness probe, a tick of the clock) to the kind's pure
// lifecycle (workload/train_lifecycle.h, service_lifecycle.h, reservation.h) and applies the
// effects it returns: one atomic store write per step (the object's document and its events
// together), then chips released, hosts told their assignments changed, watchers told, a
// scheduling pass (first come first served, EASY backfill, or one admission cycle over every
// kind's workloads). The rules live in the lifecycles, admission and the planner; this is
// plumbing.
//
// Its callers are the HTTP layer (api/head.cc), which decodes requests and agent messages, and
// tests. It speaks no HTTP: every call answers a Status or Result<T> whose code says what
// happened (or a typed answer, such as whether an agent's credential matches), and the HTTP
// layer alone maps them to HTTP statuses (api/status_http.h):
//   kInvalidArgument     the input is wrong; the message starts with the field ("spec.x: ...")
//   kNotFound            no such object (or host)
//   kAlreadyExists       the name is taken (by this kind, another kind, or another agent)
//   kFailedPrecondition  the object's state refuses it now (in use, being deleted)
//   kUnavailable         a store write failed; memory is as it was, nothing was emitted
// Documents are decoded and validated by the codecs (codec/), which the store's documents
// share; the controller adds the checks that need the cluster (fits, names, PriorityClasses).
//
// Workload kinds are plug-ins (workload_kind.h): the core below iterates the registered kinds
// and names none; TrainJob, Service and SliceReservation are registered in builtin_kinds.cc.
//
// Where things are:
//   controller.cc         Load, Tick, watchers and the commit path (the core)
//   kinds.cc              the registry of kinds, their KindContext, routing by kind name
//                         (Apply, DryRunApply, Get, Delete)
//   scheduling.cc         the pass: each kind's part, then one admission cycle over all kinds
//   host_registry.cc      agents: registration, credentials, heartbeats, the inventory
//   leases.cc             host leases: a host silent for longer than lease_ms is lost
//   quiet_beats.cc        heartbeats of idle and steadily running hosts answered without the
//                         lock; the lock (Hold) applies the running ones' reports first
//   assignments.cc        what each host must run (every kind's entries)
//   fencing.cc            terms in assignments and agents' refusals (docs/ha.md)
//   controller_queues.cc  ClusterQueue, LocalQueue, PriorityClass objects
//   event_log.{h,cc}      events, staged into the same store write as the change they record
//   builtin_kinds.cc      the three built-in kinds, routing to their parts:
//   jobs.cc, job_driver.cc, job_scheduling.cc, easy_scheduling.cc   TrainJobs (RunStep: step,
//                         commit, apply)
//   status_writes.cc      the jobs' status writes of a pass, many to a commit
//   services.cc, service_admission.cc   Services; their replica groups in the admission cycle
//   reservations.cc, reservation_services.cc, reservation_health.cc   SliceReservations, the
//                         workloads inside them, their lost hosts and users
//
// Errors: every store write is checked. A failed write leaves memory as it was, emits nothing,
// and fails the request with kUnavailable (the cause in the message); a failure in a tick is
// retried on the next tick.
//
// Persisted: Host, TrainJob, Service, SliceReservation, ClusterQueue, LocalQueue and
// PriorityClass documents, Events, and the uid high-water mark (kUidCounterKind). Not
// persisted: heartbeats (in memory only, so 1,000 agents at 1 Hz cost no disk writes); after a
// restart every host gets a fresh lease.
//
// Thread-safety: every public method locks one mutex (Hold; QuietHeartbeat only a small one of
// its own); call from any thread. Listeners are called with the lock held and must not call back
// into the controller.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "admission/admission.h"
#include "codec/resource_json.h"
#include "codec/secret_manifest.h"
#include "common/clock.h"
#include "common/rng.h"
#include "controller/easy_state.h"
#include "controller/event_log.h"
#include "controller/workload_kind.h"
#include "inventory/host_spec.h"
#include "inventory/inventory.h"
#include "inventory/slice_claims.h"
#include "placement/gpu_domains.h"
#include "placement/planner.h"
#include "protocol/wire.h"
#include "store/store.h"
#include "workload/effects_applier.h"
#include "workload/reservation.h"
#include "workload/service_lifecycle.h"
#include "workload/train_lifecycle.h"
#include "workload/worker_env.h"

namespace tessera::controller {

using Json = nlohmann::json;

// What a replica leader's certificate is for (ControllerOptions::replica_tls): the group, its
// incarnation, and the host and address its endpoint names.
struct ReplicaCertRequest {
  std::string service;
  uint64_t uid = 0;
  std::string role;
  int replica = 0;
  int incarnation = 0;
  std::string host;
  std::string address;
};

struct ControllerOptions {
  int64_t heartbeat_interval_ms = 1000;  // told to agents at registration
  int64_t lease_ms = 5000;               // a host that has not heartbeated for this long is lost
  // A running job's progress is written to the store at most this often (TrainLifecycleOptions).
  // Reads show it live; the stored copy, and watchers, see it at this pace. Each write is the
  // job's whole document: on etcd, 1,000 jobs at 1 s are a raft round of 100 documents several
  // times a second, and every version stays in etcd's history until it is compacted
  // (`tessera head --progress-write-interval-ms`: 1 s with SQLite, 10 s with etcd).
  int64_t progress_write_interval_ms = 1000;
  // A gap longer than this between two lease checks means the head itself stalled (its lock held
  // by a slow store write, or the process not scheduled on a loaded machine): heartbeats sent
  // meanwhile may still wait for the lock, so the part of the gap beyond this is not counted as
  // any host's silence (leases.cc). 0: every gap counts (tests that jump a fake clock). The
  // head sets max(lease_ms / 4, 4 ticks).
  int64_t lease_stall_ms = 0;
  // An admission cycle that finds what would help each waiting workload (docs/admission.md,
  // "In the head") comes at most this often, and at most once per ten times its own run time;
  // the cycles between give reasons only and carry each workload's last list over.
  int64_t what_helps_interval_ms = 0;
  PlannerOptions planner = PlannerOptions::Tessera();
  // Ports for each attempt are drawn from this. The head gives a seed of its own per start
  // (api::HeadOptions::port_seed), so that two heads on one machine hand out different ports;
  // tests keep this fixed one, so their runs repeat.
  uint64_t seed = 1;
  // MASTER_PORT, the JAX port and the ports of a Service's processes on hosts that share an
  // address come from [start, start + size): below Linux's default ephemeral range (32768 and
  // up), where the kernel takes the local port of every outgoing connection, so a port drawn
  // here is not one a client socket on the machine already holds.
  int port_range_start = 20000;
  int port_range_size = 12768;
  // Whether `port` is taken on `address` now, by anything on this machine: a drawn port it says
  // is taken is drawn again (ports.cc). The head gives a bind probe (net/port_probe.h), which
  // sees another cluster's workers where hosts share the head's machine; unset (tests): none.
  // Called with the controller's lock held, so it must answer at once.
  std::function<bool(const std::string& address, int port)> port_taken;
  size_t max_events = 2000;  // older events are deleted
  // A TrainJob already decoded from exactly this stored document (its name and version), or
  // nullopt: Load then parses the document. An HA standby's typed copy (ha/job_cache.h), so that
  // a new leader over 100,000 stored jobs does not parse them all before it serves. Unset: Load
  // parses every document.
  std::function<std::optional<TrainJob>(const store::Object&)> decoded_job;
  // Admission (used once a ClusterQueue exists): start guard and fair sharing. The planner
  // options are the ones above.
  StartGuardOptions start_guard;
  int64_t preemption_grace_ms = 30'000;               // a preemption victim's SIGTERM to SIGKILL
  FairSharing fair_sharing = FairSharing::kDisabled;  // `tessera head --fair-sharing`
  // Fencing (docs/ha.md "Fencing"). The head's term, sent in every assignment snapshot: the
  // elected leader's term, or for a single head the one it took at start (head_term.h). 0 =
  // none sent (agents then refuse nothing from this head on term grounds).
  uint64_t term = 0;
  // Added to a lost host's fence deadline (its agent's fence time since it was last heard of):
  // the agent's fence check and the kill of its workers take a moment.
  int64_t fence_margin_ms = 1000;
  // `tessera head --backfill easy [--defrag]`: while no ClusterQueue exists, EASY backfill
  // (reservations from spec.expectedDuration) instead of first come, first served, and with
  // `defrag` also defragmentation by checkpoint-and-move (easy_scheduling.cc). Off by default.
  bool backfill_easy = false;
  bool defrag = false;
  // `--help-factor/--help-quantile/--help-window` (with --backfill easy): a large job gets a
  // reservation or moves only once it has waited past the help threshold from the recent small
  // jobs' waits, as in the simulator (admission/help_threshold.h). factor 0: off, helped at once.
  HelpThresholdOptions help_threshold;
  // TLS to Service replicas (docs/serving.md "TLS to replicas"): the certificate a replica
  // leader serves with, asked for where its assignment is built and sent only in it. The head
  // gives an issuer that signs with the cluster CA and caches (api/replica_certs.h); it is called
  // with the controller's lock held. Set: leaders get "tls" and endpoints say "https"; unset
  // (tests, `--plain-http`, `--replicas-plain-http`): neither. nullopt from it: that leader
  // gets none this time (the issuer logs why).
  std::function<std::optional<protocol::WorkerTls>(const ReplicaCertRequest&)> replica_tls;
};

// Where the controller keeps the next workload uid (a high-water mark, written with every job
// it creates), so that a uid is never given twice.
inline constexpr char kUidCounterKind[] = "UidCounter";
inline constexpr char kUidCounterName[] = "workloads";
// The member of a stored Host document that holds its agent's credential hash (never in the
// API's Host documents).
inline constexpr char kCredentialHashField[] = "agentCredentialSha256";
// The member of a stored Host document that holds the fence time its agent registered with.
inline constexpr char kAgentFenceField[] = "agentFenceMs";

class Controller {
 public:
  Controller(store::Store& store, const Clock& clock, ControllerOptions options);
  ~Controller();

  // Loads hosts, jobs, queue objects and events from the store (after a restart). Every known
  // host gets a fresh lease from now, so its agent has time to reconnect and running workers
  // are adopted.
  Status Load();

  // --- workload kinds (workload_kind.h) ---
  // TrainJob, Service and SliceReservation are registered at construction (builtin_kinds.cc);
  // another kind registers before Load. kAlreadyExists when its name is taken (by a kind or an
  // admission object's kind).
  Status RegisterKind(std::unique_ptr<WorkloadKind> kind);
  // Any registered kind's object by name; kNotFound for an unknown kind or name.
  Result<Json> Get(const std::string& kind, const std::string& name) const;
  // Stops and removes any registered kind's object (WorkloadKind::Delete).
  Result<Json> Delete(const std::string& kind, const std::string& name, bool force = false);

  // --- users ---
  // Validates and stores a TrainJob document. kInvalidArgument naming the field on bad input
  // (also for a job this cluster could never run or an unknown PriorityClass), kAlreadyExists
  // when the name is taken, kUnavailable when the store fails.
  Result<Json> CreateJob(const Json& doc);
  Result<Json> GetJob(const std::string& name) const;
  // Every job, typed, by uid (a restarted head's metrics seed from it without the JSON).
  std::vector<TrainJob> CopyJobs() const;
  // Calls `visit` with every job, by name, under the controller's lock, none copied: what a new
  // leader's metrics seed walks (a copy of 100,000 jobs took it a second, issue 35). `visit`
  // must not call the controller.
  void VisitJobs(const std::function<void(const TrainJob&)>& visit) const;
  // POST /api/v1/apply: dispatches on kind to the registered kind's Apply (TrainJob:
  // CreateJob; Service: ApplyService; SliceReservation: ApplyReservation). ClusterQueue,
  // LocalQueue, PriorityClass: create or replace the object, the answer's "created" saying
  // which; kInvalidArgument naming the field on bad input (kind: the kinds there are).
  Result<Json> Apply(const Json& doc);
  // POST /api/v1/apply?dryRun=true (kinds.cc): the checks Apply makes, nothing stored; answers
  // {kind, metadata.name, created (whether Apply would create it), dryRun: true}, or Apply's
  // refusal. A Service gets ApplyService's checks (each role fits this cluster, its
  // PriorityClass exists).
  Result<Json> DryRunApply(const Json& doc);
  // Lists with status: ClusterQueues carry nominal, used, borrowed, lendable, pending and
  // admitted (chips and workloads) from the latest admission cycle.
  Json ListClusterQueues() const;
  Json ListLocalQueues() const;
  Json ListPriorityClasses() const;
  // DELETE /api/v1/{clusterqueues,localqueues,priorityclasses}/{name}; kind is "ClusterQueue",
  // "LocalQueue" or "PriorityClass" (controller_queues.cc), else kInvalidArgument. kNotFound
  // when missing. kFailedPrecondition naming what still uses it: a ClusterQueue with admitted jobs
  // or LocalQueues pointing at it; a LocalQueue with admitted jobs (its pending jobs then wait with
  // LocalQueueNotFound); a PriorityClass named by unfinished jobs. docs/admission.md "Deleting".
  Result<Json> DeleteQueueObject(const std::string& kind, const std::string& name);
  // Secrets (secrets.cc; docs/security.md "Secrets"): Apply creates or replaces one (kind
  // Secret). Every document these calls answer, the list, the watch stream and the events carry
  // keys and value lengths only (codec::SecretServedJson); the values leave the controller only
  // inside the assignments of hosts that run a worker of a workload naming them. GetSecret:
  // kNotFound when missing. DeleteSecret: kNotFound; kFailedPrecondition naming the TrainJobs
  // and Services holding chips whose workers use it (pending ones then wait with
  // SecretNotFound). Applying a Secret without a key such a running workload uses is
  // kFailedPrecondition too. Keys are ObjectKeys (common/object_key.h).
  Result<Json> GetSecret(const std::string& key) const;
  Json ListSecrets() const;
  Result<Json> DeleteSecret(const std::string& key);
  Json ListJobs() const;
  // Stops every worker of the job, then (once agents confirm the workers are gone) releases its
  // chips and removes it. kNotFound when there is no such job; a second delete while stopping
  // is OK.
  Result<Json> DeleteJob(const std::string& name);
  Json ListHosts() const;
  // For tests: Internal naming the first job whose place in the index of unsettled jobs is
  // wrong: one that is not settled missing, or an entry that is no job. With `exact`, a settled
  // job in it is wrong too (so it is after a load and after each tick, which drops the jobs
  // that settled without a step, such as by a flush of their last progress).
  Status CheckJobIndex(bool exact) const;
  Json ListEvents() const;
  // For list-then-watch without a gap: the list of `kind` (a registered workload kind, "Host",
  // "Event", "ClusterQueue", "LocalQueue" or "PriorityClass"; the document the List* call
  // above returns) and how many changes the change listener had been given when it was taken, read
  // together under the lock. The listener's calls numbered after `changes` (counting from 1)
  // are exactly the changes the list does not show. nullopt for another kind.
  struct VersionedList {
    Json list;
    uint64_t changes = 0;
  };
  std::optional<VersionedList> ListWithVersion(const std::string& kind) const;
  // One page of the list of `kind` (Kubernetes' limit and continue; api/list_pages.h): at most
  // `limit` items (0: all) of `namespace_name` ("" every one) after list position `after`
  // (ListPosition; "" from the start), in position order, with the change count as in
  // ListWithVersion. TrainJobs and Hosts are paged under the lock: it is held for a scan of the
  // keys and a copy of the page's objects only, not of the whole list. Other kinds (bounded by
  // their nature: events are a ring) are copied whole as ListWithVersion does and cut after the
  // lock. kInvalidArgument (field "continue") for a TrainJob position that is not a uid;
  // kNotFound for a kind with no list.
  struct PageRequest {
    std::string after;
    size_t limit = 0;
    std::string namespace_name;
  };
  struct VersionedPage {
    Json list;               // the kind's list document with this page's items
    uint64_t changes = 0;    // as VersionedList
    std::string last;        // the position of the page's last item if more follow, else ""
    uint64_t remaining = 0;  // the items after this page
  };
  Result<VersionedPage> ListPage(const std::string& kind, const PageRequest& request) const;
  // Where to read a worker's log: the agent's address and port, and the path on the agent.
  // kNotFound when the job or its host is gone, or the host's agent serves no logs;
  // kInvalidArgument (field "worker") for a rank the job does not have.
  struct LogLocation {
    std::string host;  // the host's name: its log server's certificate names it (api/host_certs.h)
    std::string address;
    int port = 0;
    std::string path;   // "/logs/<job>/<uid>/<attempt>/<rank>"
    std::string token;  // the bearer token that host's log server takes (LogTokenFromHash)
    bool running = false;
  };
  Result<LogLocation> LocateLog(const std::string& job, int rank) const;

  // --- Services (services.cc; docs/serving.md) ---
  // Apply (create, or a new spec for an existing one: a rolling update when a role's template
  // changed); kInvalidArgument naming the field, kAlreadyExists when a TrainJob has the name,
  // kFailedPrecondition while it is being deleted.
  Result<Json> ApplyService(const Json& doc);
  Result<Json> GetService(const std::string& name) const;
  Json ListServices() const;
  // Stops every replica group, then removes the service. kNotFound when missing.
  Result<Json> DeleteService(const std::string& name);
  // kNotFound when missing; kInvalidArgument naming the field for an unknown or autoscaled role.
  Result<Json> ScaleService(const std::string& name, const std::string& role, int replicas);
  // A router's load report for a role (ongoing = in flight + queued over its replicas), and the
  // whole report, kept as the role's last (served in status.roles[].traffic). kNotFound, or
  // kInvalidArgument (field "role") for a role the service does not have.
  Result<Json> ReportServiceLoad(const std::string& name, const std::string& role,
                                 double ongoing_requests, RouterTraffic traffic = {});
  // Worker `worker` of replica `replica` of `role`, its current incarnation. kInvalidArgument
  // naming "role", "replica" or "worker" for one the service does not have; kNotFound as
  // LocateLog.
  Result<LogLocation> LocateServiceLog(const std::string& name, const std::string& role,
                                       int replica, int worker) const;
  // Readiness: the leaders whose probe is due (period elapsed, or never probed), and their
  // results. The head's prober (api/service_prober.h) calls these from its own thread.
  struct ProbeTarget {
    std::string service, role;
    int replica = 0;
    int incarnation = 0;
    std::string address;
    int port = 0;
    std::string path;
    int64_t timeout_ms = 0;
    bool tls = false;  // the leader serves HTTPS (ControllerOptions::replica_tls)
  };
  std::vector<ProbeTarget> DueProbes() const;
  void ReportReadiness(const ProbeTarget& target, bool ready, const std::string& message);

  // --- SliceReservations (reservations.cc; docs/reservations.md) ---
  // Apply: create ("created": true), or the same document again ("created": false,
  // unchanged); kAlreadyExists for another spec under a taken name; kInvalidArgument naming the
  // field on bad input, for a reservation larger than the cluster (it could never be Ready), or
  // a PriorityClass that does not exist.
  Result<Json> ApplyReservation(const Json& doc);
  Result<Json> GetReservation(const std::string& name) const;
  Json ListReservations() const;
  // kNotFound when missing. In use by workloads (running inside it): kFailedPrecondition naming
  // them, unless `force`, which stops them and releases the hosts once they have stopped.
  Result<Json> DeleteReservation(const std::string& name, bool force);

  // --- agents (messages of protocol/wire.h, decoded by the HTTP layer) ---
  // Registers or re-registers a host; the reply (RegisterReplyJson) names it and gives the
  // heartbeat interval and lease. kInvalidArgument naming the field when its membership is
  // invalid; kFailedPrecondition or kAlreadyExists naming the field when it conflicts with
  // another host; kAlreadyExists (field "credential") when the name is registered with another
  // credential: only the agent that registered a host name may register it again, until an
  // admin deletes the host (DeleteHost).
  Result<Json> RegisterHost(const protocol::Registration& registration);
  // RegisterHost for several at once, in order (a later one is checked against the earlier
  // ones it follows), with one store commit for all that are accepted: the answers, one per
  // registration, in the same order. When the commit fails every accepted one is kUnavailable
  // and nothing of the batch stays.
  std::vector<Result<Json>> RegisterHosts(const std::vector<protocol::Registration>& registrations);
  // Whether `credential` is the one `host` registered with (heartbeats, assignment reads):
  // kNotFound when the host is not registered or was stored without a credential (the agent
  // registers again, docs/agent-protocol.md). The HTTP layer refuses a mismatch (403).
  Result<bool> HostCredentialMatches(const std::string& host, std::string_view credential) const;
  // DELETE /api/v1/hosts/{name} (admin): forgets a host, so that its name may be registered
  // by another agent (a replaced machine). kNotFound when unknown; kFailedPrecondition naming
  // the jobs while it is not Lost and still holds workers of a job that holds chips (delete or
  // finish them first, or wait until the host is Lost).
  Result<Json> DeleteHost(const std::string& host);
  // Records worker states and progress; returns the host's assignment snapshot (kNotFound for
  // a host not registered, kUnavailable when a store write failed). Runs no
  // scheduling pass: one that freed chips asks for one through the pass listener.
  Result<Json> Heartbeat(const std::string& host, const protocol::Heartbeat& heartbeat);
  // A quiet or steady heartbeat answered without the controller's lock (quiet_beats.cc): one
  // that reports no refusals and the same running workers as the host's last full heartbeat
  // (none for an idle host), from a host that is not Lost, while nothing it would be answered
  // with has changed since. Its lease and usage are taken, its reports (a running job's
  // progress) are applied when the controller's lock is next taken, before anything else, and
  // the answer is the one Heartbeat would give. nullopt when the beat needs Heartbeat, or
  // `credential` is not the one the host registered with. The answer is JSON text. Most of a large
  // fleet is idle or steadily running: its beats then never wait for a tick or a store commit.
  std::optional<std::string> QuietHeartbeat(const std::string& host, std::string_view credential,
                                            const protocol::Heartbeat& heartbeat);
  // A heartbeat of `host` has arrived and waits to be handled (the head's channel worker holds
  // it while a tick holds the lock): the host was heard now. A lease check before the beat is
  // handled counts it, so a beat that waits is not the host's silence (leases.cc). A Lost host
  // stays Lost until its beat is handled. Takes only the small lock; Heartbeat calls it itself.
  void HeartbeatArrived(const std::string& host);
  // {"revision": N, "assignments": [...]}: the workers `host` must run now.
  Result<Json> Assignments(const std::string& host) const;

  // Expires leases, runs the workloads' timers (hang detection, grow-back, progress writes)
  // and schedules pending jobs. The head's loop calls it every ~100 ms and after every change.
  // Returns the first store error of this tick, or of a scheduling pass a request ran since
  // the last tick (the request itself had succeeded); what failed is retried next tick.
  Status Tick();
  // Hosts whose leases expire in one tick, and hosts that came back since the last tick, are
  // written this many to a commit: etcd caps a transaction's operations (--max-txn-ops,
  // docs/ha.md) and size (--max-request-bytes).
  static constexpr size_t kLostHostsPerCommit = 200;
  // A registration batch (RegisterHosts) is written this many bytes of host documents and
  // event messages to a commit (each event counted kRegistrationEventBytes more for its other
  // fields): 1,000 hosts in one commit were a request of 2.1 MB, which etcd refuses by default.
  static constexpr size_t kRegistrationBytesPerCommit = 384 * 1024;
  static constexpr size_t kRegistrationEventBytes = 128;
  // The scheduling pass Tick ends with, without its timers, for callers that drive the
  // controller without the head's loop (tests answer the pass listener with it).
  Status RunPass();

  // Called (with the lock held) after every change: kind is "TrainJob", "Host", "Event" or a
  // queue kind; type is ADDED, MODIFIED or DELETED. Calls are counted (ListWithVersion).
  using ChangeListener =
      std::function<void(const std::string& kind, const std::string& type, const Json& object)>;
  void SetChangeListener(ChangeListener listener);
  // Called (with the lock held) when the assignments of some hosts may have changed.
  using AssignmentListener = std::function<void(const std::set<std::string>& hosts)>;
  void SetAssignmentListener(AssignmentListener listener);
  // Called (with the lock held) when a change that ran no scheduling pass itself (a
  // heartbeat that freed chips or requeued a job) wants one soon: the head's loop runs Tick.
  using PassListener = std::function<void()>;
  void SetPassListener(PassListener listener);

  // For the dashboard and tests: a copy of the derived inventory.
  Inventory InventorySnapshot() const;

  // --- fencing (fencing.cc; docs/ha.md "Fencing") ---
  // The term written into every snapshot from now on (an election won again). A term lower
  // than the current one is ignored: a term only grows.
  void SetTerm(uint64_t term);
  uint64_t term() const;
  // The highest term any agent reported having seen; above term() means a newer head exists
  // and this one has been replaced (an election driver steps down on it).
  uint64_t newest_agent_term() const;

 private:
  struct RegisteredHost {
    HostSpec spec;
    HostStatus status;
    int64_t version = 0;
    // protocol::CredentialHash of the credential its agent registered with; "" for a host
    // stored before credentials existed (its next registration sets it).
    std::string credential_hash;
    int64_t fence_ms = 0;  // the agent's fence time (Registration::fence_ms); 0: it does not fence
    // Its place in a fixed slice (ClaimOf): what its agent discovered of a TPU slice, or its
    // declared 2D slice; none for a host of a cube tessera carves.
    std::optional<SliceClaim> claim;
    // The refusals its last heartbeat reported (fencing.cc): an agent whose heartbeat timed out
    // sends them again, and each becomes one event, not one per delivery.
    std::set<std::string> last_refusals;
    // Controller::stalled_ms_ at its last heartbeat: the head's stalls since then are
    // stalled_ms_ minus this, and do not count as the host's silence (leases.cc).
    int64_t stalled_ms_at_heartbeat = 0;
  };
  // An admission resource as applied: the document, its typed spec and its store version.
  using QueueSpec = std::variant<ClusterQueueSpec, LocalQueueSpec, PriorityClass>;
  struct QueueObject {
    Json doc;
    QueueSpec spec;
    int64_t version = 0;
  };
  class View;  // the ClusterView the lifecycle asks (controller.cc)
  // The head's side of the effects applier (workload/effects_applier.h) that every kind's sink
  // shares: chips released in the live inventory, the assignment revision, agents told, another
  // pass asked for. A kind's sink adds Commit and Announce (job_driver.cc, services.cc).
  template <typename Object>
  class HeadSinkBase : public EffectsSink<Object> {
   public:
    explicit HeadSinkBase(Controller& c) : c_(c) {}
    void Release(uint64_t owner) override {
      if (c_.inventory_ready_) c_.inventory_.Release(OwnerId(owner));
    }
    int64_t BumpAssignments() override { return ++c_.assignment_revision_; }
    void NotifyHosts(const std::set<std::string>& hosts) override { c_.NotifyHosts(hosts); }
    void Schedule() override { c_.schedule_requested_ = true; }

   protected:
    Controller& c_;
  };

  // --- workload kinds (kinds.cc, builtin_kinds.cc) ---
  class Context;  // the KindContext every kind is given
  class TrainJobKind;
  class ServiceKind;
  class ReservationKind;
  void RegisterBuiltinKinds();
  void AddKind(std::unique_ptr<WorkloadKind> kind);       // RegisterKind, its name checked
  WorkloadKind* FindKind(const std::string& name) const;  // nullptr when not registered
  // "kind: 'X' is not one this head knows; known: ..." (kInvalidArgument, field "kind").
  Status UnknownKind(const std::string& kind) const;

  // --- TrainJobs (jobs.cc, job_admission.cc, job_reports.cc): the TrainJob kind's parts ---
  Result<Json> CreateJobLocked(const Json& doc);
  Result<Json> GetJobLocked(const std::string& name) const;
  Result<Json> DeleteJobLocked(const std::string& name);
  Status LoadJobs();
  Status TickJobs(int64_t now);
  // Without ClusterQueues: first come, first served, or EASY backfill (easy_scheduling.cc).
  Status ScheduleJobs();
  // With ClusterQueues: every job outside a reservation is one workload of the cycle, by uid.
  std::map<uint64_t, std::string> AddJobWorkloads(Snapshot& snap,
                                                  const std::vector<PriorityClass>& classes);
  Status AdmitJob(const std::string& name, const Admission& admission);
  Status EvictJob(const std::string& name, const Eviction& eviction);
  Status SetJobPending(const std::string& name, const PendingStatus& pending);
  // Progress lines, worker states and stop confirmations of a heartbeat from `host`.
  void JobReports(const std::string& host, const protocol::Heartbeat& beat, int64_t now,
                  Status& failed);
  Status JobsHostLost(const std::string& host, int64_t last_heard_ms, const std::string& why,
                      int64_t now);
  void IndexJobHostsLocked(const TrainJob& job);
  // Keeps `name` in unsettled_jobs_ exactly when it is a job that is not Settled (job_driver.cc):
  // called after each change of a job (RunStep, CreateJob, LoadJobs) and before its erasure.
  void IndexUnsettledLocked(const std::string& name);
  // The jobs a pass or a tick may act on (every job but the settled ones), in name order.
  template <typename Fn>
  void ForEachUnsettledJob(Fn&& fn) {
    for (const auto& [name, job] : unsettled_jobs_) fn(name, *job);
  }
  // What a job is to the admission cycle (pending, deactivated, admitted, running), or nullopt
  // for one it does not see (finished, or stopping after it finished). Shared by the TPU cycle
  // (job_scheduling.cc) and the GPU cycles (gpu_jobs.cc).
  static std::optional<WorkloadState> AdmissionStateOf(const TrainJobStatus& st);
  // The jobs with a worker on `host` (from jobs_by_host_, pruned as it is read), in name order.
  std::vector<const TrainJob*> JobsOnHostLocked(const std::string& host) const;
  void AppendJobAssignments(const std::string& host, std::vector<protocol::Assignment>& out,
                            std::vector<protocol::StopRequest>& stop) const;
  // The slices and hosts of a placed TPU job's attempt, for its workers' environment.
  Result<AttemptLayout> TpuLayoutLocked(const TrainJob& job) const;
  std::string JobOwnerOf(uint64_t owner) const;  // "" when no job is `owner`
  void AddJobPorts(std::set<int>& held) const;

  // --- the driver (controller.cc) ---
  using Step = std::function<Effects(TrainJob&)>;
  // How RunStep writes a step whose one effect is the job's document (status_writes.cc):
  // kNow, a commit of its own; kBatched (a status the pass derives: a pending reason, queue
  // position or what would help; progress a tick flushes), with the other jobs' such writes,
  // many to a commit, by FlushStatusWrites.
  enum class StatusWrite { kNow, kBatched };
  // Runs `step` on the job and applies its effects. On a store failure the job is restored,
  // nothing is emitted, and the error is returned (kUnavailable with the cause).
  Status RunStep(std::string job, const Step& step, StatusWrite status_write = StatusWrite::kNow);
  // Commits the statuses RunStep left unsaved (kBatched), at most kStatusWritesPerFlush
  // (status_writes.cc) in commits of at most kStatusWritesPerCommit jobs; the rest wait for the
  // next flush (each tick's). On a failed commit its jobs stay unsaved and the error is
  // returned; nothing already stored is touched.
  Status FlushStatusWrites();
  // Writes `batch` plus `events` (for `object`) atomically and adds the events to the log;
  // watchers hear of them at the next AnnounceEvents, after the change they record.
  Result<int64_t> CommitWithEvents(store::WriteBatch& batch, const std::string& object,
                                   const std::vector<JobEvent>& events);
  // The same for events of several objects (object, event).
  Result<int64_t> CommitWithEvents(store::WriteBatch& batch,
                                   const std::vector<std::pair<std::string, JobEvent>>& events);
  void AnnounceEvents();
  Status RecordEvent(const std::string& object, bool warning, const std::string& reason,
                     const std::string& message);
  void Emit(const std::string& kind, const std::string& type, const Json& object);
  Json JobJson(const TrainJob& job) const;
  // The List* documents, with the lock held (the public calls lock and call these).
  Json ListHostsLocked() const;
  Json ListQueueObjectsLocked(const std::string& kind) const;
  // The two lists that grow largest, every job with its attempts and the event log, are copied
  // under the lock and serialized after it is released: the JSON of hundreds of jobs takes tens
  // of milliseconds to build, and every agent's heartbeat waits for this lock meanwhile.
  struct JobsCopy {
    std::vector<TrainJob> jobs;  // by uid
    int64_t now_ms = 0;
  };
  JobsCopy CopyJobsLocked() const;
  static Json JobListJson(const JobsCopy& copy);
  static Json EventListJson(const std::deque<Event>& events);
  TrainJob* FindJob(const std::string& name);
  int64_t NowMs() const { return clock_.NowMs(); }

  // --- hosts (host_registry.cc, leases.cc) ---
  // `rosters`: every slice's roster (SliceRostersLocked) when the caller has them; otherwise
  // the host's own is computed.
  Json HostJsonLocked(const RegisteredHost& host,
                      const std::map<std::string, SliceRoster>* rosters = nullptr) const;
  // Writes the host (and deletes `replaced`, a Lost host whose worker id it takes) atomically.
  Status PersistHost(RegisteredHost& host, const std::vector<JobEvent>& events,
                     const std::string& replaced = "");
  // The host's stored document: what HostJsonLocked shows plus its credential's hash and fence.
  std::string StoredHostJsonLocked(const RegisteredHost& host) const;
  // --- fixed slices (host_registry.cc, inventory/slice_claims.h) ---
  // The host's claim: the discovered accelerator type, topology and worker id (slice: the
  // discovered slice name, else its membership's name) when its agent discovered a TPU slice;
  // a 2D host's declared slice otherwise; none for a cube host.
  static std::optional<SliceClaim> ClaimOf(const HostSpec& spec);
  // Registered claims of one slice, or of every slice when `slice` is empty.
  std::vector<ClaimHolder> ClaimHoldersLocked(const std::string& slice) const;
  // hosts_[host.spec.name] = host, and host_groups_ with it; EraseHostLocked removes both.
  void PutHostLocked(RegisteredHost host);
  void EraseHostLocked(const std::string& name);
  std::map<std::string, SliceRoster> SliceRostersLocked() const;
  // For a job that waits: the incomplete fixed slices of its shape, which would fit it once
  // their workers are all registered and live ("; slice tpu-a (v5p-16 2x2x2) would fit but is
  // not placeable: worker 1 missing"), appended to `message`.
  std::string WithPartialSlices(const TrainJob& job, std::string message) const;
  void RebuildInventory();
  // Rebuilds when inventory_dirty_; reports stored placements that overlap as events. What
  // checks a new object against the cluster (NewJobRefusalLocked) calls this: it needs every
  // registered host.
  Status RefreshInventory();
  // The scheduling pass's refresh. While hosts only join (a fleet registering: no host deleted,
  // replaced or moved since the last rebuild), a rebuild waits until kPacedBuildSpacing times
  // the last one's duration has passed since it ended, so rebuilding takes at most 1/20 of the
  // head's time however many hosts join, and a joining host waits at most that long (about
  // 1 s at 10,000 hosts; never more than kMaxPacedBuildWaitMs) to be placeable. Any other
  // change of membership rebuilds at once, so nothing is placed on a host that left. Under a
  // fake clock a rebuild takes 0 ms: at once.
  Status RefreshInventoryPaced();
  // A pass would rebuild the inventory now (RefreshInventoryPaced).
  bool InventoryBuildDueLocked() const;
  static constexpr int64_t kPacedBuildSpacing = 20;
  static constexpr int64_t kMaxPacedBuildWaitMs = 2000;
  // What an apply checks before it stores anything, and all a dry run checks (jobs.cc,
  // services.cc): the name, the fit on this cluster, the PriorityClass. OK when none fails.
  Status NewJobRefusalLocked(const TrainJobSpec& spec);
  Status ServiceRefusalLocked(const ServiceSpec& spec, const Json& doc);
  Status ReportInventoryConflicts();
  void ReserveJob(const TrainJob& job);
  std::string OwnerOf(const std::string& host) const;
  // Emits MODIFIED for each host whose owner and each ClusterQueue whose status differ from what
  // was last emitted (shown_host_owner_, shown_queue_status_); with announce false it only
  // records them (Load). Runs only after a change was emitted and only with a change listener.
  void EmitDerivedChangesLocked(bool announce);
  Status ExpireLeases(int64_t now);
  // Marks `names` (at most kLostHostsPerCommit) Lost with one commit (their documents and
  // HostLost events), then tells every kind.
  Status LoseHosts(const std::vector<std::string>& names, int64_t now);
  // The host was heard from at `now`: its lease starts again.
  void RenewLease(RegisteredHost& host, int64_t now) const;
  // A lost host heartbeats again: Ready at once in memory (placeable, its beat answered); its
  // document and HostRecovered event wait in recovered_unwritten_ for the next lease check.
  Status HostRecovered(RegisteredHost& host);
  // Writes the hosts of recovered_unwritten_ still registered and not lost again, a chunk of
  // kLostHostsPerCommit to a commit, then emits them; those not written stay for the next call.
  Status WriteRecoveredHosts();

  // --- scheduling (scheduling.cc) ---
  // Runs passes while a step asks for one (at most 4).
  Status Schedule();
  // After a request's own change succeeded: a failed pass is reported by the next Tick.
  void ScheduleAfterRequest();
  // Asks the loop for a pass (the pass listener) if a step of this request set
  // schedule_requested_ or the inventory changed; the flags stay set for that pass.
  void RequestPass();
  Status ScheduleFirstComeFirstServed();
  // What trying to place one job of a first-come, first-served line gave.
  struct LineTry {
    bool placed = false;
    std::string reason, message;  // when not placed
    bool holds_line = true;       // false: it can never fit, so it does not hold up the line
  };
  // The line both first-come, first-served paths share (TPU jobs here, GPU jobs in
  // gpu_jobs.cc): the jobs `waiting` picks, in uid order; each is tried with `try_place` until
  // one does not fit and holds the line, and the rest wait behind it ("Queued"). Every job
  // left waiting gets its reason and place in line.
  Status ServeInArrivalOrder(const std::function<bool(const TrainJob&)>& waiting,
                             const std::function<Result<LineTry>(TrainJob&)>& try_place);
  Status ScheduleThroughQueues();
  // A cycle without what would help: each waiting workload gets the list the last cycle with it
  // found, while its reason is the same, without the workloads no longer running.
  void CarryWhatHelps(const Snapshot& snap, AdmissionCycle& cycle) const;
  Status ScheduleEasy();  // easy_scheduling.cc

  // --- GPU jobs (gpu_jobs.cc) ---
  // The NVLink domains of the hosts that registered GPUs, by host name.
  std::vector<GpuHostDomain> GpuDomainsLocked() const;
  // A host's status.gpu (system, domain, nvlinkReady, reason); null for a host without GPUs.
  Json HostGpuJsonLocked(const HostSpec& spec) const;
  // The fleet of `system`'s hosts: free GPUs from the inventory, or all free when `empty`.
  GpuFleetView GpuFleetLocked(GpuSystem system, bool empty) const;
  // Why a GPU job is refused at creation (ClusterQueues, never fits); OK for other jobs.
  Status GpuJobRefusalLocked(const TrainJobSpec& spec) const;
  // Without ClusterQueues: pending GPU jobs, first come first served, through the GPU domain
  // planner. With them: nothing (ScheduleGpuThroughQueues admits them).
  Status ScheduleGpuJobs();
  // With ClusterQueues: one admission cycle per GPU system with GPU jobs (admission.h,
  // Snapshot::gpu): quotas in GPUs, cohorts, preemption, reasons; usage into gpu_usage_.
  Status ScheduleGpuThroughQueues();
  // One system's cycle: its fleet with each host's holder, and the GPU jobs as workloads.
  Status ScheduleGpuSystemThroughQueues(GpuSystem system, const std::vector<PriorityClass>& classes,
                                        int64_t now);
  Result<bool> AdmitGpu(TrainJob& job, const GpuFleetView& view, const GpuPlacement& plan);
  // The workers' environment of a placed GPU job, in rank order.
  std::vector<WorkerEnv> GpuWorkerEnvLocked(const TrainJob& job) const;
  // Reserves the plan's hosts and places the job's next attempt. False when the plan no
  // longer applies (nothing changed).
  Result<bool> Admit(TrainJob& job, const PlanResult& plan);
  // Plans the largest size in [lo, hi] on `inventory`; the plan for `lo` when none fits.
  PlanResult PlanLargest(const Inventory& inventory, const TrainJob& job, int lo, int hi) const;

  // --- fencing (fencing.cc) ---
  // A heartbeat's term and refusals: events on the host, and newest_agent_term_.
  void FenceReports(const std::string& host, const protocol::Heartbeat& beat, Status& failed);

  // --- quiet heartbeats (quiet_beats.cc) ---
  // What a quiet beat of one host is checked against and answered with, and the lease and
  // usage quiet beats took since the last merge into hosts_. Kept under quiet_mu_.
  struct QuietHost {
    std::string credential_hash;
    Json answer;       // AssignmentsLocked when it was remembered
    std::string text;  // answer.dump() at `revision`; "" until a quiet beat needs it
    // The workers the host reported running then, each Running (none for an idle host): a
    // beat that reports exactly these is steady.
    std::vector<protocol::WorkerReport> workers;
    int64_t revision = 0;  // assignment_revision_ then (its "revision")
    uint64_t term = 0;     // term_ then
    bool heard = false;    // a quiet beat came since the last merge
    int64_t last_heartbeat_ms = 0;
    int64_t stalled_ms_at_heartbeat = 0;
    double cpu_percent = 0, memory_bytes = 0;
  };
  // The quiet beat without the credential check (Heartbeat's callers made it).
  std::optional<std::string> TakeQuietBeat(const std::string& host,
                                           const std::string* credential_hash,
                                           const protocol::Heartbeat& beat);
  // After a full heartbeat that left the host quiet: its next quiet beats need no lock.
  void RememberQuietLocked(const std::string& host, const RegisteredHost& h,
                           const protocol::Heartbeat& beat, const Json& answer);
  // The host's quiet beats go through Heartbeat again (it left, was lost or replaced, or its
  // assignments moved).
  void ForgetQuietLocked(const std::string& host);
  // Every host remembered with running workers (their answers read what changed: a Secret).
  void ForgetRunningQuietLocked();
  // A steady beat answered from memory, its reports not yet applied.
  struct SteadyBeat {
    std::string host;
    protocol::Heartbeat beat;
    int64_t now = 0;  // when it came
  };
  // At most this many steady beats wait for a merge; beyond, beats take the full path.
  static constexpr size_t kMaxSteadyBeats = 20'000;
  // The controller's lock, as every call takes it (but Heartbeat and Tick, which fail on it): the
  // steady beats answered since it was last held are applied first, so what the call reads or
  // changes comes after the reports they made, as it would had they waited for the lock. A
  // failure to apply them is the next tick's error (deferred_error_).
  std::unique_lock<std::mutex> Hold() const;
  // Quiet beats' leases and usage into hosts_ (before leases are checked), then
  // ApplySteadyBeatsLocked.
  Status MergeQuietBeatsLocked();
  // The steady beats' reports, in the order they came (a full heartbeat starts with it, so a
  // host's exit comes after its last progress lines). A beat whose step failed (a store write)
  // is applied again, with the beats after it, at the next merge; the error is returned.
  Status ApplySteadyBeatsLocked();
  // What a heartbeat reports, applied: each kind's workers and progress, and its fencing.
  void ApplyReportsLocked(const std::string& host, const protocol::Heartbeat& beat, int64_t now,
                          Status& failed);
  // The host with what quiet beats took since the last merge (a read: listing, watching).
  HostStatus QuietStatusLocked(const RegisteredHost& h) const;

  // --- assignments (assignments.cc) ---
  Json AssignmentsLocked(const std::string& host) const;
  void NotifyHosts(const std::set<std::string>& hosts);

  // --- Services (services.cc) ---
  Result<Json> ApplyServiceLocked(const Json& doc);
  Result<Json> GetServiceLocked(const std::string& name) const;
  Result<Json> DeleteServiceLocked(const std::string& name);
  void AddServicePorts(std::set<int>& held) const;
  using ServiceStep = std::function<ServiceEffects(Service&)>;
  // RunStep for a service; `store_uid_counter`: the step took next_uid_ as a group's owner id,
  // so the counter goes into the same write.
  Status RunServiceStep(const std::string& name, const ServiceStep& step,
                        bool store_uid_counter = false);
  Service* FindService(const std::string& name);
  Json ListServicesLocked() const;
  // --- ports (ports.cc) ---
  // The ports the live workloads of this head hold: TrainJobs' and Service groups' MASTER_PORT
  // and JAX port, Service processes' PORT.
  std::set<int> PortsHeldLocked() const;
  // `count` consecutive ports from the range for a worker listening on `address`: none in
  // `held` (the drawn ones are added to it), none options_.port_taken says is taken.
  int DrawPorts(const std::string& address, int count, std::set<int>& held);
  // A new attempt's MASTER_PORT (the JAX port is the one above), not its previous attempt's.
  int TrainJobMasterPort(const TrainJob& job, const std::string& address);
  // A Service group's MASTER_PORT and each process's PORT (the role's port unless hosts share
  // an address).
  GroupPorts ServiceGroupPorts(const std::vector<WorkerHost>& hosts, int role_port);
  // Restarts groups whose backoff is over and, while no ClusterQueue exists, places waiting
  // groups first come first served, one slice each (with queues the admission cycle does).
  Status ScheduleServices();
  // Reserves the plan's slice under a fresh owner id and places the group (Place). False when
  // the plan no longer applies (nothing changed).
  Result<bool> PlaceGroup(const std::string& service, const ReplicaKey& key,
                          const PlanResult& plan);
  void ReserveServiceGroups();                       // after an inventory rebuild
  std::string ServiceOwnerOf(uint64_t owner) const;  // "" when no group holds `owner`
  // What Service endpoints say their leaders speak: "https" with a replica_tls issuer.
  const char* EndpointScheme() const { return options_.replica_tls ? "https" : "http"; }
  void AppendServiceAssignments(const std::string& host, std::vector<protocol::Assignment>& out,
                                std::vector<protocol::StopRequest>& stop) const;
  // Process reports and stop confirmations of a heartbeat; the first store error in `failed`.
  void ServiceReports(const std::string& host, const protocol::Heartbeat& beat, int64_t now,
                      Status& failed);
  Status ServicesHostLost(const std::string& host, const std::string& why);
  Status TickServices(int64_t now);
  Status LoadServices();

  // --- Services through admission (service_admission.cc; docs/serving.md "Admission") ---
  // With ClusterQueues every replica group is one workload of the scheduling pass's cycle
  // (workload/service_admission.h); these add the groups to the snapshot and apply the
  // cycle's decisions for them.
  struct GroupRef {
    std::string service;
    ReplicaKey key;
  };
  // Adds every group to `snap` (the chips of groups being stopped count as free) and returns
  // the cycle's workload id of each: a running group's inventory owner, or for a pending one
  // an id above every id given so far (unique in this cycle, owning no hosts).
  std::map<uint64_t, GroupRef> AddServiceWorkloads(Snapshot& snap,
                                                   const std::vector<PriorityClass>& classes);
  // Places the admitted group, or (its hosts still held by workers being stopped) has it wait
  // with WaitingForPreemption naming them; it is placed by the first pass after they stopped.
  Status AdmitGroup(const GroupRef& group, const Admission& admission);
  Status EvictGroup(const GroupRef& group, const Eviction& eviction);
  Status SetGroupPending(const GroupRef& group, const std::string& reason,
                         const std::string& message);
  // Who holds the hosts of `plan` in the live inventory: job names and group workload names.
  std::set<std::string> HoldersOf(const PlanResult& plan) const;

  // --- SliceReservations (reservations.cc) ---
  Result<Json> ApplyReservationLocked(const Json& doc);
  Result<Json> GetReservationLocked(const std::string& name) const;
  Result<Json> DeleteReservationLocked(const std::string& name, bool force);
  using ReservationStep = std::function<ReservationEffects(SliceReservation&)>;
  // RunStep for a reservation: step, one write with its events (restored on failure), stop its
  // users, release its hosts, emit, schedule.
  Status RunReservationStep(const std::string& name, const ReservationStep& step);
  Json ReservationJsonLocked(const SliceReservation& r) const;
  Json ListReservationsLocked() const;
  // "trainjob/NAME" of every job inside reservation `name` that holds chips now, then
  // "service/NAME" of every Service with a replica group placed inside it.
  std::vector<std::string> ReservationUsers(const std::string& name) const;
  Status ReservationRefusalLocked(const SliceReservationSpec& spec);
  Status DryRunReservationLocked(const SliceReservationSpec& spec);
  // A job naming an existing reservation it could never fit in: kInvalidArgument naming
  // spec.reservation.
  Status JobInReservationRefusalLocked(const TrainJobSpec& spec);
  Status StopReservationUsers(const std::string& name);
  Status TickReservations(int64_t now);
  Status LoadReservations();
  void ReserveReservations();  // after an inventory rebuild
  // Who uses `host` held by reservation `owner`: the job inside it that runs there, else
  // "slicereservation/NAME"; "" when no reservation is `owner`.
  std::string ReservationOwnerOf(uint64_t owner, const std::string& host) const;
  // Reserves the plan's hosts for the reservation and makes it Ready; nothing when the plan no
  // longer applies.
  Status PlaceReservation(const std::string& name, const PlanResult& plan);
  // Every pass: releases whose users stopped, pending reservations first come first served
  // (without ClusterQueues), then the jobs waiting inside reservations.
  Status ScheduleReservations();
  Status ScheduleReservationUsers();
  int LargestFitInReservation(const TrainJob& job, int lo, int hi) const;
  // Services inside reservations (reservation_services.cc): the hosts of reservation `name`
  // that its users hold (jobs holding chips except `except_job`, placed replica groups), why a
  // workload cannot use it now (false when Ready), the refusal at apply for a Service with a
  // replica group that can never fit, their placement on the free hosts, and stopping them.
  // `with_lost`: also the hosts of its lost slices that it still holds (never plannable).
  std::vector<HostId> ReservationHostsInUse(const std::string& name, uint64_t except_job,
                                            bool with_lost = true) const;
  bool ReservationUnusable(const std::string& name, std::string& reason,
                           std::string& message) const;
  Status ServiceInReservationRefusalLocked(const ServiceSpec& spec, const Json& doc);
  Status ScheduleReservationServices();
  Status StopReservationServices(const std::string& name);
  // With ClusterQueues every reservation is one workload of the cycle.
  std::map<uint64_t, std::string> AddReservationWorkloads(
      Snapshot& snap, const std::vector<PriorityClass>& classes);
  Status AdmitReservation(const std::string& name, const Admission& admission);
  Status EvictReservation(const std::string& name, const Eviction& eviction);
  Status SetReservationPending(const std::string& name, const PendingStatus& pending);
  // Lost hosts and users (reservation_health.cc): status.users written when the set changes
  // (NoteReservationUsers is the hook of RunStep and RunServiceStep; a failed write is retried
  // by the next tick), held slices with a lost or deleted host given up (Rescheduling), their
  // hosts released once no user runs there, and whole free slices re-acquired.
  Status SyncReservationUsers(const std::string& name);
  void NoteReservationUsers(const std::string& name);
  Status ReservationHostsLost(int64_t now);
  Status ScheduleLostSlices();
  std::vector<HostId> ReservationLostHosts(const SliceReservation& r) const;
  void HoldReservationHosts(const SliceReservation& r, std::vector<HostId> ids);
  void ReleaseReservationHosts(const SliceReservation& r, const std::vector<std::string>& hosts);

  // --- secrets (secrets.cc) ---
  struct StoredSecret {
    codec::Secret secret;
    int64_t version = 0;
  };
  Result<Json> ApplySecret(const Json& doc);
  Result<Json> DryRunSecret(const Json& doc) const;
  Status LoadSecrets();
  Json ListSecretsLocked() const;
  // Why a workload `workload_key` (its namespace is the Secrets') cannot get `refs`: the first
  // missing Secret or key, with the fix; "" when each resolves.
  std::string MissingSecretReason(const std::string& workload_key, const SecretEnv& refs) const;
  // Adds the values of `refs` to `env` (assignments only); a reference that no longer resolves
  // is left out (DeleteSecret and ApplySecret refuse that while a workload holds chips).
  void AddSecretValues(const std::string& workload_key, const SecretEnv& refs,
                       std::map<std::string, std::string>& env) const;
  // The workloads holding chips whose references name Secret `key` (and, when `keys` is given,
  // a key not in it): "trainjob/NAME", "service/NAME".
  std::vector<std::string> SecretUsers(const std::string& key,
                                       const std::map<std::string, std::string>* keys) const;
  // Pending TrainJobs whose secret references do not resolve wait with SecretNotFound and are
  // kept out of this pass (job_scheduling.cc, easy_scheduling.cc, reservations.cc).
  Status HoldJobsMissingSecrets();
  // The same for Services' waiting replica groups, by role ("SERVICE/ROLE" in
  // roles_missing_secrets_; services.cc, service_admission.cc, reservation_services.cc).
  Status HoldServiceGroupsMissingSecrets();

  // --- queue objects (controller_queues.cc) ---
  Result<Json> ApplyQueueObject(const std::string& kind, const Json& doc);
  Status LoadQueueObjects(const std::string& kind);
  Json QueueObjectJson(const std::string& kind, const QueueObject& object) const;
  std::map<std::string, QueueObject>& QueueObjects(const std::string& kind);

  store::Store& store_;
  const Clock& clock_;
  ControllerOptions options_;
  SlicePlanner planner_;
  Admitter admitter_;  // built once: its planner tables cost milliseconds
  TrainLifecycle train_;
  ServiceLifecycle services_life_;
  mutable std::mutex mu_;
  Rng rng_;
  std::map<std::string, RegisteredHost> hosts_;
  // The hosts of each slice and cube, so a registration checks the hosts it could conflict
  // with rather than every host: "claim:SLICE" (ClaimOf's slice), "slice:NAME" (a declared 2D
  // slice), "cube:NAME" -> host names. Kept with hosts_ by PutHostLocked and EraseHostLocked.
  std::map<std::string, std::set<std::string>> host_groups_;
  // Quiet hosts by name (QuietHost). quiet_mu_ is taken after mu_ when both are held, and
  // alone by QuietHeartbeat.
  mutable std::mutex quiet_mu_;
  std::unordered_map<std::string, QuietHost> quiet_;
  std::vector<SteadyBeat> steady_;  // under quiet_mu_, in the order they came
  // Heartbeats arrived and not yet handled (HeartbeatArrived), under quiet_mu_: host -> when it
  // arrived and stalled_ms_ then. Taken into the hosts' leases at each lease check.
  std::unordered_map<std::string, std::pair<int64_t, int64_t>> arrived_;
  // Hosts a heartbeat brought back since the last lease check, not yet written (leases.cc):
  // one commit each, under the lock, made a fleet's recovery after a stall a second stall.
  std::set<std::string> recovered_unwritten_;
  // Leases (leases.cc): when they were last checked, and the head's own stalls in total.
  int64_t last_lease_check_ms_ = -1;
  std::atomic<int64_t> stalled_ms_{0};  // read by quiet beats without mu_
  std::map<std::string, TrainJob> jobs_;
  // The jobs of jobs_ that are not settled (finished, neither stopping nor being deleted,
  // nothing left to flush or fence: IsSettled), by name, pointing into jobs_: what the
  // scheduling walks and the tick go through instead of every stored job (issue 35: 100,000
  // stored jobs, 90,000 of them finished, walked six times a tick). Kept by
  // IndexUnsettledLocked; the names point at jobs_'s own keys.
  std::map<std::string_view, TrainJob*> unsettled_jobs_;
  // Jobs whose status changed in memory and is not yet in the store (RunStep's kBatched):
  // written by FlushStatusWrites, or with the job's next write of its own.
  std::set<std::string> unsaved_status_;
  // The name FlushStatusWrites wrote last: the next flush starts after it, wrapping, so jobs
  // whose status changes every tick (1,000 running jobs' steps, over a flush's budget) do not
  // keep the ones after them in name order unwritten.
  std::string flushed_last_;
  // Host -> names of the jobs whose workers were placed on it, so a host's assignments read
  // its own jobs, not every job (one heartbeat each second per host). A superset: RunStep and
  // LoadJobs add a job's hosts (IndexJobHostsLocked); names of jobs gone or placed elsewhere
  // are dropped when read (AppendJobAssignments).
  mutable std::map<std::string, std::set<std::string>> jobs_by_host_;
  // uid -> name of every job in jobs_ (an inventory owner is a job's uid: JobOwnerOf).
  std::map<uint64_t, std::string> job_names_by_uid_;
  std::map<std::string, Service> services_;
  std::map<std::string, SliceReservation> reservations_;
  uint64_t next_uid_ = 1;  // never reused: persisted as kUidCounterKind (Load)
  EventLog events_;
  std::vector<Json> unannounced_;  // committed events not yet emitted
  std::map<std::string, QueueObject> cluster_queues_, local_queues_, priority_classes_;
  std::map<std::string, StoredSecret> secrets_;              // by key (secrets.cc)
  std::set<std::string, std::less<>> jobs_missing_secrets_;  // this pass's (HoldJobsMissingSecrets)
  std::set<std::string> roles_missing_secrets_;              // "SERVICE/ROLE", this pass's
  std::map<std::string, ClusterQueueUsage> usage_;           // from the latest admission cycle
  // What would help costs more than the rest of a cycle at fleet scale (issue 35: at 100,000
  // waiting, about half as much again): a cycle finds it only when help_due_ms_ has come, set
  // after each such cycle so that these take at most a tenth of the head's time (and come at
  // most every options_.what_helps_interval_ms); the cycles between give reasons only and carry
  // the last lists over (CarryWhatHelps). With a small queue (a cycle of a millisecond or
  // less) that is every cycle.
  int64_t help_due_ms_ = 0;
  struct CarriedHelp {
    PendingReason reason;
    SharedList<Blocker> would_help;
  };
  std::unordered_map<uint64_t, CarriedHelp> carried_help_;  // by workload id, non-empty lists
  // From the latest GPU admission cycles: per GPU system, per ClusterQueue (in GPUs).
  std::map<GpuSystem, std::map<std::string, ClusterQueueUsage>> gpu_usage_;
  bool schedule_requested_ = false;  // a step released chips or requeued a job
  Status deferred_error_;            // a request's scheduling pass failed; Tick reports it
  // Written under mu_; read by quiet beats without it.
  std::atomic<int64_t> assignment_revision_{1};
  // The revision whose changed hosts have all been told (NotifyHosts, after it forgot them as
  // quiet): a host still quiet has nothing to run up to it. Behind assignment_revision_ only
  // between a change and its NotifyHosts, under mu_.
  std::atomic<int64_t> notified_revision_{1};
  std::atomic<uint64_t> term_{0};   // options_.term, then SetTerm
  uint64_t newest_agent_term_ = 0;  // the highest term an agent reported
  // Derived from hosts_: rebuilt when membership changes.
  Inventory inventory_;
  std::map<std::string, HostId> host_ids_;
  std::map<uint32_t, std::string> host_names_;
  std::vector<std::string> slice_names_;  // inventory SliceId -> name
  bool inventory_ready_ = false;
  bool inventory_dirty_ = false;     // host membership changed since the last rebuild
  bool inventory_grew_only_ = true;  // and only by hosts joining (RefreshInventoryPaced)
  int64_t next_paced_build_ms_ = 0;  // a paced rebuild waits until then
  int64_t last_build_end_ms_ = 0;    // when the last rebuild ended
  std::vector<std::string> inventory_conflicts_;  // jobs whose stored hosts were taken
  ChangeListener on_change_;
  uint64_t changes_emitted_ = 0;  // calls of on_change_ so far
  // Derived fields a watcher sees change without a commit of their own: a host's status.job
  // (its owner) and a ClusterQueue's status (usage and counts from the admission cycle). The
  // values last emitted, by name; EmitDerivedChangesLocked emits MODIFIED for those that moved.
  std::map<std::string, std::string> shown_host_owner_;
  // Outside SliceReservations, hosts' owners move only with the inventory: a rebuild
  // (inventory_builds_) or a Reserve or Release (Inventory::ownership_changes). The pair the
  // owners were last compared at, so a change that moved no chips (a worker's progress) costs
  // no walk over every host.
  uint64_t inventory_builds_ = 0;
  std::pair<uint64_t, uint64_t> shown_ownership_{~uint64_t{0}, ~uint64_t{0}};
  // Per inventory host: its owner id when the owners were last compared (in build
  // shown_ownership_.first); a walk then compares only the hosts whose id moved.
  std::vector<uint64_t> shown_owner_ids_;
  std::map<std::string, Json> shown_queue_status_;
  // A change was emitted, or an admission cycle set usage_, since the last
  // EmitDerivedChangesLocked: the derived fields may have moved.
  bool derived_stale_ = false;
  AssignmentListener on_assignments_;
  PassListener on_pass_wanted_;
  EasyHeadState easy_;  // ScheduleEasy's holds and moved-work account
  // The registered kinds, in registration order (loads, ticks, heartbeats, assignments, lost
  // hosts), and the same ordered by pass_order() (the scheduling pass and its cycle).
  std::unique_ptr<Context> context_;
  std::vector<std::unique_ptr<WorkloadKind>> kinds_;
  std::vector<WorkloadKind*> pass_order_;
};

// What the lifecycle may ask of the cluster, answered from the registry and the inventory.
class Controller::View : public ClusterView {
 public:
  explicit View(const Controller& c) : c_(c) {}
  bool HostLost(const std::string& host) const override;
  int LargestFitWithoutJob(const TrainJob& job, int lo, int hi) const override;
  int64_t FencedAtMs(const std::string& host) const override;  // fencing.cc

 private:
  const Controller& c_;
};

// Where an item of a list of `kind` stands in the list order pages follow (Controller::ListPage):
// a TrainJob's uid as 20 digits (creation order; a uid is never reused), an event's name
// ("evt-" and its number), any other object's key (common/object_key.h). Positions compare as
// strings.
std::string ListPosition(const std::string& kind, const Json& item);
std::string UidPosition(uint64_t uid);

}  // namespace tessera::controller
