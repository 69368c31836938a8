// ServiceLifecycle: every rule of a Service's life, as pure steps `(service, input, now) ->
// effects`, beside TrainLifecycle and in its style. Each step changes the service in place and
// returns the ServiceEffects the driver applies (the head's controller, or the simulator):
// persist or remove the document, free the slices of replica groups, tell hosts their
// assignments changed, emit events, run a scheduling pass. No I/O, no clock, no threads.
//
// The rules (docs/serving.md):
//   - A replica is a group on one whole slice, placed all or nothing by the driver's planner
//     (Place); one that cannot be placed is Pending with the planner's reason (SetPending).
//   - Any process of a group exits: the whole group is stopped and started again on its slice
//     (LeaderWorkerSet's RecreateGroupOnPodRestart) after a backoff of 1 s doubling to 5 min,
//     back to 1 s once the group had been ready for 10 min. A lost host sends the group back
//     to Pending for a new slice.
//   - Readiness: the leader's probe results (Readiness). Failed probes do not count during the
//     start-up grace; a group never ready by its end is recreated. After that a failed probe
//     makes the replica Unready at once (it leaves the ready endpoints); a ready replica with
//     no probe result for period + timeout is Unready too.
//   - A template change (Apply) is a new generation, rolled one group at a time: a new group is
//     added while at most max_surge groups are above the desired count, and an old one stopped
//     when at least desired - max_unavailable groups stay ready; the next step waits until the
//     new group is ready and has taken traffic: a load report of the role's router, received
//     after it turned Ready, lists it with requests in flight (or the role had none to take,
//     or it has been listed for a report period, kRoutedForMs).
//     A role no router reports on does not wait; one whose reports stopped waits at most
//     traffic_wait_ms. Scaling (Scale, the autoscaler in Tick) adds or stops groups at once.
//   - Stopping a group withdraws its assignments and waits for each host that may still run a
//     process to confirm (ConfirmStopped; lost hosts are skipped), then frees or reuses its
//     slice (AfterStop).
//
// Thread-safety: the lifecycle is immutable after construction; steps on different services
// may run concurrently.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "workload/service.h"
#include "workload/train_lifecycle.h"
#include "workload/worker_env.h"

namespace tessera {

// Effects (train_lifecycle.h) plus the inventory owners whose chips to free: a Service frees
// replica groups one by one, never all at once (`release_chips` is not used).
struct ServiceEffects : Effects {
  std::vector<uint64_t> release_owners;
  void Merge(ServiceEffects other);
};

// Where a group starts: its slice reserved by the driver under `owner`, ports drawn by it.
struct GroupPlacement {
  uint64_t owner = 0;  // inventory owner id of the slice (unique per placement)
  std::string slice;
  std::vector<WorkerHost> hosts;  // worker order; hosts[0] runs the leader
  int master_port = 0;
  std::vector<int> ports;  // PORT of each worker
};

// A group started again on its slice: fresh ports.
struct GroupPorts {
  int master_port = 0;
  std::vector<int> ports;
};

struct ServiceLifecycleOptions {
  int64_t backoff_initial_ms = 1000;
  int64_t backoff_max_ms = 300'000;
  int64_t backoff_reset_after_ms = 600'000;  // ready this long: the next backoff is 1 s again
  // A rolling update's new group, Ready, takes over from an old one once the router reported
  // it (TookTraffic), or at the latest this long after it turned Ready (a router that stopped
  // reporting must not hold the update).
  int64_t traffic_wait_ms = 10'000;
};

// A group the driver must act on.
struct ReplicaKey {
  std::string role;
  int replica = 0;
  friend bool operator==(const ReplicaKey&, const ReplicaKey&) = default;
};

class ServiceLifecycle {
 public:
  explicit ServiceLifecycle(ServiceLifecycleOptions options = {}) : options_(options) {}

  // A new service accepted at `now`: its roles with their desired replicas, each Pending.
  static Service Create(ServiceSpec spec, uint64_t uid, int64_t now);

  // A new spec for the service (same name). Roles whose template changed get a new generation
  // and roll; replica counts change at once; roles gone from the spec are stopped.
  ServiceEffects Apply(Service& service, ServiceSpec spec, const ClusterView& cluster) const;
  // Sets a role's replica count. InvalidArgument when the role is unknown or autoscaled.
  Result<ServiceEffects> Scale(Service& service, const std::string& role, int replicas,
                               const ClusterView& cluster) const;
  // Stops every group, then removes the service.
  ServiceEffects Delete(Service& service, const ClusterView& cluster) const;

  // Groups waiting for a slice, oldest replica first; the driver plans each and calls Place or
  // SetPending.
  static std::vector<ReplicaKey> WaitingForSlice(const Service& service);
  ServiceEffects Place(Service& service, const ReplicaKey& key, const GroupPlacement& placement,
                       int64_t now) const;
  // Persists only when the reason or message changed.
  ServiceEffects SetPending(Service& service, const ReplicaKey& key, const std::string& reason,
                            const std::string& message) const;
  // Admission took the group's slice for a higher priority: stop it, back to Pending.
  ServiceEffects Evict(Service& service, const ReplicaKey& key, const std::string& message,
                       const ClusterView& cluster) const;
  // Groups whose backoff is over and whose processes are gone; the driver draws ports and
  // calls Restart.
  static std::vector<ReplicaKey> DueRestarts(const Service& service, int64_t now);
  ServiceEffects Restart(Service& service, const ReplicaKey& key, const GroupPorts& ports,
                         int64_t now) const;

  // Agents' reports. `incarnation` is the attempt of the process's workload key: reports of an
  // older incarnation are stale and ignored.
  ServiceEffects ProcessRunning(Service& service, const ReplicaKey& key, int incarnation,
                                int worker, int64_t pid) const;
  ServiceEffects ProcessExited(Service& service, const ReplicaKey& key, int incarnation, int worker,
                               int exit_code, int signal, const ClusterView& cluster,
                               int64_t now) const;
  // The leader's readiness probe: ready or not, and why not ("HTTP 503", "connection refused").
  ServiceEffects Readiness(Service& service, const ReplicaKey& key, int incarnation, bool ready,
                           const std::string& message, const ClusterView& cluster,
                           int64_t now) const;
  // `host` runs no process of the group any more (it applied the withdrawal).
  ServiceEffects ConfirmStopped(Service& service, const ReplicaKey& key, const std::string& host,
                                const ClusterView& cluster) const;
  // `host` lost its lease: every group on it goes back to Pending for a new slice.
  ServiceEffects HostLost(Service& service, const std::string& host, const std::string& why,
                          const ClusterView& cluster) const;

  // A load report of a role's router, stamped by the driver with its own clock.
  void Load(Service& service, const std::string& role, const LoadSample& sample) const;
  // Timers: start-up grace, readiness staleness, the autoscaler of each autoscaled role.
  ServiceEffects Tick(Service& service, const ClusterView& cluster, int64_t now) const;

  // A rolling update's new group listed in the router's reports this long has taken over
  // though idle (the router reports every second; short requests may miss its instants).
  static constexpr int64_t kRoutedForMs = 1000;

 private:
  static ServiceEffects Reconcile(Service& service, const ClusterView& cluster);
  // Whether a Ready group of a new generation has taken over (the rollout rule above): in
  // runtime.took_traffic, or seen in the role's last router report with requests in flight (or
  // none in the role), or listed in reports for kRoutedForMs.
  static bool TookTraffic(const Service& service, const std::string& role, const ReplicaStatus& r);
  void Recreate(RoleStatus& role, ReplicaStatus& r, const std::string& reason,
                const std::string& message, const ClusterView& cluster, int64_t now,
                ServiceEffects& e) const;
  static void Terminate(RoleStatus& role, ReplicaStatus& r, const std::string& why,
                        const ClusterView& cluster, ServiceEffects& e);
  static void BeginStop(ReplicaStatus& r, AfterStop after, const ClusterView& cluster,
                        ServiceEffects& e);
  static void FinishStop(ReplicaStatus& r, ServiceEffects& e);
  // Drops removed replicas and empty removed roles; sets the service's phase; removes a deleted
  // service with nothing left.
  static void Settle(Service& service, ServiceEffects& e);

  ServiceLifecycleOptions options_;
};

}  // namespace tessera
