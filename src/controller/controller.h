// Controller: the head's model of the cluster and the decisions it takes.
//
// It owns the in-memory state (hosts, jobs, the inventory derived from hosts), persists every
// change that must survive a restart to the Store, and decides: which pending TrainJob is
// placed next, which workers each host
// must run (its assignments), when a job has succeeded or failed, and when a host is lost.
// The HTTP layer (api/head.h) calls it; agents reach it through their heartbeats.
//
// Admission: with no ClusterQueue defined, pending jobs are placed first come, first served
// through the SlicePlanner. Once a ClusterQueue exists, every scheduling pass runs one
// Admitter cycle (admission/admission.h) over a snapshot of the jobs and applies it: admissions
// are placed, preemption victims and start-guard evictions get their workers stopped (SIGTERM,
// then SIGKILL after the grace period, by the agents) and go back to Pending with their place in
// line; chips stay held until the agents confirm the workers are gone, and an admission placed
// on such chips starts after that. docs/admission.md "In the head".
//
// Persisted: Host, TrainJob, ClusterQueue, LocalQueue and PriorityClass documents, Events. Not
// persisted: heartbeats (in memory only, so 1,000 agents at 1 Hz cost no disk writes); after a
// restart every host gets a fresh lease.
//
// Thread-safety: every public method locks one mutex; call from any thread. Listeners are
// called with the lock held and must not call back into the controller.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "admission/admission.h"
#include "api/manifest.h"
#include "common/clock.h"
#include "common/rng.h"
#include "inventory/inventory.h"
#include "placement/planner.h"
#include "store/store.h"
#include "workload/recovery.h"

namespace tessera::controller {

using Json = nlohmann::json;

struct ControllerOptions {
  int64_t heartbeat_interval_ms = 1000;  // told to agents at registration
  int64_t lease_ms = 5000;               // a host that has not heartbeated for this long is lost
  PlannerOptions planner = PlannerOptions::Tessera();
  uint64_t seed = 1;             // ports for each attempt are drawn from this
  int port_range_start = 20000;  // MASTER_PORT and the JAX port come from
  int port_range_size = 20000;   // [start, start + size)
  size_t max_events = 2000;      // older events are deleted
  // Admission (used once a ClusterQueue exists): start guard and fair sharing. The planner
  // options are the ones above.
  StartGuardOptions start_guard;
  int64_t preemption_grace_ms = 30'000;  // a preemption victim's SIGTERM to SIGKILL
  FairSharing fair_sharing = FairSharing::kEnabled;
};

// Errors carry the HTTP status the API should answer with.
struct ApiError {
  int http_status;
  std::string message;
  std::string field;
};

template <typename T>
using ApiResult = std::variant<T, ApiError>;

class Controller {
 public:
  Controller(store::Store& store, const Clock& clock, ControllerOptions options);

  // Loads hosts, jobs and events from the store (after a restart). Every known host gets a
  // fresh lease from now, so its agent has time to reconnect and running workers are adopted.
  Status Load();

  // --- users ---
  // Validates and stores a TrainJob document. 400/422 with the field on bad input, 409 when
  // the name is taken.
  ApiResult<Json> CreateJob(const Json& doc);
  ApiResult<Json> GetJob(const std::string& name) const;
  // POST /api/v1/apply: dispatches on kind. TrainJob: CreateJob. ClusterQueue, LocalQueue,
  // PriorityClass: create (201) or replace (200) the object; 422 naming the field on bad input.
  ApiResult<Json> Apply(const Json& doc);
  // Lists with status: ClusterQueues carry nominal, used, borrowed, lendable, pending and
  // admitted (chips and workloads) from the latest admission cycle.
  Json ListClusterQueues() const;
  Json ListLocalQueues() const;
  Json ListPriorityClasses() const;
  // DELETE /api/v1/{clusterqueues,localqueues,priorityclasses}/{name}; kind is "ClusterQueue",
  // "LocalQueue" or "PriorityClass" (controller_queues.cc). 404 when missing. 409 naming what
  // still uses it: a ClusterQueue with admitted jobs or LocalQueues pointing at it; a
  // LocalQueue with admitted jobs (its pending jobs then wait with LocalQueueNotFound); a
  // PriorityClass named by unfinished jobs. docs/admission.md "Deleting".
  ApiResult<Json> DeleteQueueObject(const std::string& kind, const std::string& name);
  Json ListJobs() const;
  // Stops every worker of the job, then (once agents confirm the workers are gone) releases its
  // chips and removes it. 404 when there is no such job; a second delete while stopping is OK.
  ApiResult<Json> DeleteJob(const std::string& name);
  Json ListHosts() const;
  Json ListEvents() const;
  // Where to read a worker's log: the agent's address and port, and the path on the agent.
  struct LogLocation {
    std::string address;
    int port = 0;
    std::string path;  // "/logs/<job>/<attempt>/<rank>"
    bool running = false;
  };
  ApiResult<LogLocation> LocateLog(const std::string& job, int rank) const;

  // --- agents ---
  ApiResult<Json> RegisterHost(const Json& body);
  // Records worker states and progress; returns {"revision", "assignments"}.
  ApiResult<Json> Heartbeat(const std::string& host, const Json& body);
  // {"revision": N, "assignments": [...]}: the workers `host` must run now.
  ApiResult<Json> Assignments(const std::string& host) const;

  // Expires leases and schedules pending jobs. The head's loop calls it every ~100 ms and after
  // every change.
  void Tick();

  // Called (with the lock held) after every change: kind is "TrainJob", "Host" or "Event";
  // type is ADDED, MODIFIED or DELETED.
  using ChangeListener =
      std::function<void(const std::string& kind, const std::string& type, const Json& object)>;
  void SetChangeListener(ChangeListener listener);
  // Called (with the lock held) when the assignments of some hosts may have changed.
  using AssignmentListener = std::function<void(const std::set<std::string>& hosts)>;
  void SetAssignmentListener(AssignmentListener listener);

  // For the dashboard and tests: a copy of the derived inventory.
  Inventory InventorySnapshot() const;

 private:
  struct WorkerStatus {
    std::string host;
    int slice = 0;
    int worker = 0;
    std::string state = "Pending";  // Pending, Running, Succeeded, Failed
    int exit_code = 0;
    int signal = 0;
    int pid = 0;
  };
  struct Job {
    api::TrainJobSpec spec;
    Json spec_json;  // as the user wrote it
    uint64_t seq = 0;
    int64_t created_ms = 0;
    int64_t version = 0;  // store resource version
    std::string phase = "Pending";
    std::string reason, message;
    int attempt = -1;
    std::vector<std::vector<std::string>> placement;  // [slice][worker] host name
    std::vector<std::string> slice_names;
    int master_port = 0, jax_port = 0;
    std::map<int, WorkerStatus> workers;  // by rank
    bool stopping = false;                // workers are being stopped; chips held until confirmed
    bool deleting = false;
    int64_t stop_revision = 0;          // assignments revision that no longer lists this job
    std::set<std::string> unconfirmed;  // hosts that may still run a worker of this job
    int64_t start_ms = 0, finish_ms = 0;
    int64_t last_step = -1;
    int64_t last_checkpoint_ms = 0;  // when a worker last reported a checkpoint; 0: never
    // Admission: why it waits, its place in line, which running jobs would let it in.
    std::string pending_reason;
    int queue_position = 0;
    Json would_help = Json::array();
    StartGuardState start_guard;
    bool deactivated = false;
    int preemptions = 0;
    // Recovery (docs/elastic.md). attempts.back() is the current or last attempt.
    std::vector<AttemptRecord> attempts;
    int failures = 0;
    // After the workers of a restarted attempt are stopped, the job is placed again with a
    // size in [restart_min, restart_max] (0: the spec's range).
    int restart_min = 0, restart_max = 0;
    bool fast_stop = false;             // the attempt is broken: SIGKILL, no grace
    int64_t stop_grace_ms = -1;         // a stop's SIGTERM to SIGKILL; -1: the job's own
    std::map<int, RankProgress> ranks;  // current attempt, by rank (not persisted)
    int64_t progress_epoch_ms = 0;      // hang timers count from here at the earliest
    int64_t first_progress_ms = 0;      // the attempt's first step reached the head; 0: none yet
    std::vector<std::pair<int64_t, double>> checkpoints;  // (time ms, save s), the last 64
    int64_t last_checkpoint_step = -1;
    int grow_target = 0;           // grow back to this many slices ...
    int64_t grow_after_step = -1;  // ... at the first checkpoint after this step
    int64_t next_grow_check_ms = 0;
    int64_t pending_since_ms = 0, admitted_ms = 0;
    std::vector<std::pair<int64_t, int64_t>> progress;  // (time ms, step) samples, the last 240
    bool progress_dirty = false;                        // progress not yet persisted
    int64_t persisted_ms = 0;
    int slices() const { return static_cast<int>(placement.size()); }
    bool holds_chips() const {
      return phase == "Starting" || phase == "Running" || phase == "Restarting" || stopping;
    }
  };
  struct HostRec {
    std::string name;
    std::string address;
    int agent_port = 0;
    Generation generation = Generation::kV6e;
    int chips = 4;
    std::string slice, topology, cube, block;
    int worker = -1;
    Coord coord;
    Json labels = Json::object();
    int64_t registered_ms = 0;
    int64_t last_heartbeat_ms = 0;
    bool lost = false;
    Json usage = Json::object();
    int64_t version = 0;
  };

  // An admission resource as applied: the document and its store version.
  struct QueueObject {
    Json doc;
    int64_t version = 0;
  };

  Json JobJson(const Job& job) const;
  Json QueueObjectJson(const std::string& kind, const QueueObject& object) const;
  ApiResult<Json> ApplyQueueObject(const std::string& kind, const Json& doc);
  Status LoadQueueObjects(const std::string& kind);
  Json HostJson(const HostRec& host) const;
  Status PersistJob(Job& job, bool create = false);
  Status PersistHost(HostRec& host);
  void Emit(const std::string& kind, const std::string& type, const Json& object);
  void Event(const std::string& type, const std::string& reason, const std::string& object,
             const std::string& message);
  void RebuildInventory();
  void RefreshInventory();  // rebuilds when inventory_dirty_
  void ReserveJob(const Job& job);
  void Schedule();
  void ScheduleFirstComeFirstServed();
  void ScheduleThroughQueues();
  void Requeue(Job& job, const Eviction& eviction);
  void SetPending(Job& job, const std::string& reason, const std::string& message, int position,
                  Json would_help);
  bool Admit(Job& job, const PlanResult& plan);
  // The size range a pending job may be placed with now: a restart's, else the spec's.
  std::pair<int, int> SizeRange(const Job& job) const;
  // Plans the largest size in [lo, hi] on `inventory`; the plan for `lo` when none fits.
  PlanResult PlanLargest(const Inventory& inventory, const Job& job, int lo, int hi) const;
  // A failure of the current attempt: records it, then restarts within the failure budget
  // (stopping every worker first) or fails the job with its attempt history.
  void FailAttempt(Job& job, FailureKind kind, std::vector<int> ranks, int64_t failure_ms,
                   const std::string& message);
  void EndAttempt(Job& job, const std::string& end_reason);
  void RecordProgress(Job& job, const Json& record);
  void CheckHangs(int64_t now);
  void CheckGrowBack(Job& job, int64_t now);
  void BeginGrowBack(Job& job);
  Json AttemptsJson(const Job& job) const;
  Json RecoveryJson(const Job& job) const;
  void StopJob(Job& job, const std::string& phase, const std::string& reason,
               const std::string& message);
  void ConfirmStopped(Job& job, const std::string& host, const Json& workers);
  // Withdraws the job's assignments and lists the hosts that must confirm its workers are gone.
  void BeginStopping(Job& job);
  void FinishStopping(Job& job);
  Json AssignmentsLocked(const std::string& host) const;
  void NotifyHosts(const Job& job);

  store::Store& store_;
  const Clock& clock_;
  ControllerOptions options_;
  SlicePlanner planner_;
  Admitter admitter_;  // built once: its planner tables cost milliseconds
  mutable std::mutex mu_;
  Rng rng_;
  std::map<std::string, HostRec> hosts_;
  std::map<std::string, Job> jobs_;
  uint64_t next_seq_ = 1;
  uint64_t next_event_ = 1;
  std::vector<Json> events_;
  std::map<std::string, QueueObject> cluster_queues_, local_queues_, priority_classes_;
  std::map<std::string, ClusterQueueUsage> usage_;  // from the latest admission cycle
  bool scheduling_ = false;  // Schedule() is running; a nested call asks for another pass
  bool schedule_again_ = false;
  int64_t assignment_revision_ = 1;
  // Derived from hosts_: rebuilt when membership changes.
  Inventory inventory_;
  std::map<std::string, HostId> host_ids_;
  std::map<uint32_t, std::string> host_names_;
  std::vector<std::string> slice_names_;  // inventory SliceId -> name
  bool inventory_ready_ = false;
  bool inventory_dirty_ = false;  // host membership changed since the last rebuild
  ChangeListener on_change_;
  AssignmentListener on_assignments_;
};

}  // namespace tessera::controller
