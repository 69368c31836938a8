// WorkloadKind: one kind of workload as the controller drives it. TrainJob, Service and
// SliceReservation implement it (builtin_kinds.cc) and a kind of your own does too: the
// controller's core (loading, ticks, the scheduling pass and its admission cycle, heartbeats,
// lost hosts, assignments, the inventory's owners, ports, apply/get/list/delete, watches)
// iterates the registered kinds and names none of them.
//
// A kind owns its objects: their typed state, their store documents (its Load reads them back),
// and the steps that change them (a pure lifecycle's, whose effects it commits through the
// KindContext). The controller asks it, in the order the kinds were registered:
//   objects     Apply (create or update from a document), DryRun, Get, CopyList, Delete
//   timers      Tick
//   scheduling  its part of every pass (Schedule), then, once a ClusterQueue exists, the
//               admission cycle: the workloads it offers (Offer), and the cycle's decisions for
//               them (Admitted, Evicted, Waiting, or CycleFailed for a cycle that could not run)
//   hosts       what it holds after the inventory is rebuilt (ReserveHosts), who holds a host
//               (OwnerOf), who must leave it before it is deleted (HostUsers), what it must run
//               (AppendAssignments), what its agent reports (TakeHeartbeat), its loss (HostLost),
//               and the ports its workers listen on (AddHeldPorts)
//
// Every call is made with the controller's lock held, from any thread: a kind must not call the
// Controller's public methods, only its KindContext. A failed store write leaves the kind's
// objects as they were and is returned (kUnavailable); the controller retries what a tick
// failed at on the next tick.
//
// Adding a kind: a class that implements this (a file or folder of its own) and one line in
// RegisterBuiltinKinds (builtin_kinds.cc), or Controller::RegisterKind before Load.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "admission/admission.h"
#include "common/status.h"
#include "inventory/inventory.h"
#include "placement/planner.h"
#include "protocol/wire.h"
#include "store/store.h"
#include "workload/train_lifecycle.h"

namespace tessera::controller {

using Json = nlohmann::json;

// What a kind may use of the controller: the store (through one commit path that records its
// events), the clock, the inventory and the hosts, the agents' assignment revision, watchers and
// the scheduling pass. Valid for the controller's life.
class KindContext {
 public:
  virtual ~KindContext() = default;

  virtual int64_t NowMs() const = 0;
  // Every stored document of `kind` (for Load).
  virtual Result<std::vector<store::Object>> ListStored(const std::string& kind) = 0;
  // Writes `batch` plus `events` (recorded against `object`, "kind/name") atomically;
  // watchers hear of the events at the next Announce. kUnavailable when the store fails.
  virtual Result<int64_t> Commit(store::WriteBatch& batch, const std::string& object,
                                 const std::vector<JobEvent>& events) = 0;
  // Tells watchers of a committed change (type ADDED, MODIFIED or DELETED) and of the events
  // committed with it.
  virtual void Announce(const std::string& kind, const std::string& type, const Json& object) = 0;

  // Workload uids: never given twice. NextUid is the one the next new object takes;
  // StageUidTaken puts the advanced high-water mark into a batch, and after that batch
  // committed, UidTaken advances it.
  virtual uint64_t NextUid() const = 0;
  virtual void StageUidTaken(store::WriteBatch& batch) const = 0;
  virtual void UidTaken() = 0;
  // A uid read back from the store (Load): the next one given is above it.
  virtual void UidSeen(uint64_t uid) = 0;

  // The cluster: the live inventory (its hosts reserved under owners), host names and ids, and
  // the planner. Until the first registration the inventory is not ready and nothing is placed.
  virtual bool InventoryReady() const = 0;
  virtual Inventory& inventory() = 0;
  virtual const SlicePlanner& planner() const = 0;
  virtual std::string HostName(HostId id) const = 0;
  virtual std::optional<HostId> HostIdOf(const std::string& host) const = 0;
  virtual std::string HostAddress(const std::string& host) const = 0;  // "" when unknown
  virtual bool HostLost(const std::string& host) const = 0;  // unknown hosts count as lost
  // Who holds the hosts of `plan` in the live inventory now (OwnerOf of each kind).
  virtual std::set<std::string> HoldersOf(const PlanResult& plan) const = 0;

  // Agents: a change to what some hosts must run takes a new assignment revision, and those
  // hosts are told.
  virtual int64_t BumpAssignments() = 0;
  virtual void NotifyHosts(const std::set<std::string>& hosts) = 0;
  // Chips were released or a workload requeued: another scheduling pass follows this one.
  virtual void RequestSchedule() = 0;
  // Whether any ClusterQueue exists (admission decides placements) and the fencing term.
  virtual bool QueuesDefined() const = 0;
  virtual uint64_t term() const = 0;
};

class WorkloadKind {
 public:
  virtual ~WorkloadKind() = default;

  // The kind's name as documents spell it ("TrainJob"): Apply, Get, List and Delete route by it.
  virtual const std::string& name() const = 0;
  // Where its part of a scheduling pass (Schedule, Offer) runs among the kinds': lower first. A
  // kind whose objects set hosts aside for other kinds' workloads runs before them.
  virtual int pass_order() const { return 100; }

  // --- objects ---
  virtual Status Load() = 0;  // from KindContext::ListStored, at start
  // Creates, or updates an existing object from, a validated document. kInvalidArgument naming
  // the field; kAlreadyExists; kFailedPrecondition; kUnavailable.
  virtual Result<Json> Apply(const Json& doc) = 0;
  // Apply's checks, nothing stored: the object's name, and whether it exists.
  struct Preview {
    std::string name;
    bool exists = false;
  };
  virtual Result<Preview> DryRun(const Json& doc) = 0;
  virtual Result<Json> Get(const std::string& name) const = 0;
  // The list document ({"items": [...]}); built by the returned function, which the controller
  // calls after it released its lock (so a large list costs the agents' heartbeats nothing), from
  // what the kind copied for it now.
  virtual std::function<Json()> CopyList() const = 0;
  // Stops its workers, then removes it. kNotFound; kFailedPrecondition while in use (`force`:
  // stop its users too).
  virtual Result<Json> Delete(const std::string& name, bool force) = 0;

  // --- timers and scheduling ---
  virtual Status Tick(int64_t now) = 0;
  // Its part of a scheduling pass: without ClusterQueues it places its waiting workloads itself;
  // with them it does what the admission cycle does not (restarts, releases).
  virtual Status Schedule() = 0;

  // --- the admission cycle (with ClusterQueues) ---
  // Adds its workloads to `snapshot` (ids unique among every kind's: uids, or ids at or above
  // KindContext::NextUid for workloads that own no hosts yet); hosts its stopping workloads
  // still hold may be released in snapshot.inventory, to be planned on.
  virtual void Offer(Snapshot& snapshot, const std::vector<PriorityClass>& classes) = 0;
  virtual Status Admitted(const Admission& admission) = 0;
  virtual Status Evicted(const Eviction& eviction) = 0;
  virtual Status Waiting(const PendingStatus& pending) = 0;
  // The cycle could not run (bad queue configuration): its waiting workloads say why.
  virtual Status CycleFailed(const std::string& message) = 0;

  // --- hosts and agents ---
  // After the inventory was rebuilt: reserves the hosts its placed objects hold. Conflicts (a
  // stored placement overlapping another's) are appended to `conflicts`.
  virtual void ReserveHosts(std::vector<std::string>& conflicts) = 0;
  // Who uses `host`, held under `owner`, as the Host document's status.job shows it; "" when
  // `owner` is not this kind's.
  virtual std::string OwnerOf(uint64_t owner, const std::string& host) const = 0;
  // "kind/name" of each object whose workers still run on `host` (a host in use is not deleted).
  virtual std::vector<std::string> HostUsers(const std::string& host) const = 0;
  virtual void AppendAssignments(const std::string& host, std::vector<protocol::Assignment>& out,
                                 std::vector<protocol::StopRequest>& stop) const = 0;
  // Its workers' reports in a heartbeat from `host`; the first store error into `failed`.
  virtual void TakeHeartbeat(const std::string& host, const protocol::Heartbeat& beat, int64_t now,
                             Status& failed) = 0;
  // `host` was lost at `now` (last heard of at `last_heard_ms`; `why` for people).
  virtual Status HostLost(const std::string& host, int64_t last_heard_ms, const std::string& why,
                          int64_t now) = 0;
  virtual void AddHeldPorts(std::set<int>& held) const = 0;

  // Set by the controller at registration.
  void Attach(KindContext& context) { context_ = &context; }

 protected:
  KindContext& context() const { return *context_; }

 private:
  KindContext* context_ = nullptr;
};

}  // namespace tessera::controller
