// ScenarioSim: the simulator of scripted scenarios of user requests and agents' reports, for
// TrainJobs and Services together. It plays the head's part over simulated hosts and a
// simulated clock with the head's pure core: TrainLifecycle and ServiceLifecycle, the
// SlicePlanner, and the one effects applier (workload/effects_applier.h) over a simulated store
// (its commits always succeed; it keeps the events). It follows the head's rules of when a
// report counts (the current attempt or incarnation, from the host it was placed on), when a
// host is lost (no heartbeat for more than the lease), when a stop is confirmed (a heartbeat
// that no longer runs the workload), and the order of a scheduling pass without ClusterQueues
// (Services' restarts and groups by uid, then jobs first come, first served).
//
// The head-vs-simulator differential test (controller/controller_sim_differential_test.cc)
// feeds the same seeded scenarios to the head's controller and to this simulator and compares
// their records. Not covered: ClusterQueues, SliceReservations, easy backfill, rolling updates,
// autoscaling, agents' fencing, hosts that come back.
//
// Pure: no I/O, no wall clock (time arrives through AdvanceTo), no threads. Thread-safety: none.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "inventory/inventory.h"
#include "placement/planner.h"
#include "sim/sim_effects.h"
#include "workload/service_lifecycle.h"
#include "workload/train_lifecycle.h"

namespace tessera::sim {

// A worker of a job or a process of a replica group, as an agent's assignments name it.
struct ScenarioWorker {
  std::string workload;  // the job's name, or ReplicaWorkloadName(service, role, replica)
  uint64_t uid = 0;      // the job's or the service's
  int attempt = 0;       // the job's attempt, or the group's incarnation
  int rank = 0;          // the worker's rank, or the process's worker index
  friend auto operator<=>(const ScenarioWorker&, const ScenarioWorker&) = default;
};

// One agent's heartbeat: the assignments revision it has applied, its workers (running, or
// exited with a code) and progress lines.
struct ScenarioReport {
  struct Worker {
    ScenarioWorker key;
    bool exited = false;
    int exit_code = 0;
  };
  struct Progress {
    ScenarioWorker key;
    ProgressInput input;
  };
  int64_t revision = 0;
  std::vector<Worker> workers;
  std::vector<Progress> progress;
};

// A replica group whose leader is due a readiness probe.
struct ScenarioProbe {
  std::string service, role;
  int replica = 0;
  int incarnation = 0;
};

// An event for people, as the head records it: the object ("trainjob/NAME", "service/NAME").
struct ScenarioEvent {
  std::string object;
  JobEvent event;
};

struct ScenarioSimOptions {
  int64_t lease_ms = 5000;  // the head's lease; also the hang verdicts' alive timeout
};

class ScenarioSim {
 public:
  // `inventory`: the cluster; `host_names[id]`: the name of each host id.
  ScenarioSim(Inventory inventory, std::vector<std::string> host_names,
              ScenarioSimOptions options = {});

  // The simulated clock, in the lifecycle's milliseconds. Hosts are heard of first at `now_ms`.
  void Start(int64_t now_ms);
  void AdvanceTo(int64_t now_ms) { now_ = now_ms; }

  // Users (each runs a scheduling pass after it, as the head does).
  Status CreateJob(TrainJobSpec spec, std::string spec_document);
  Status CreateService(ServiceSpec spec);
  Status DeleteJob(const std::string& name);
  Status DeleteService(const std::string& name);
  Status ScaleService(const std::string& name, const std::string& role, int replicas);

  // Agents: what a host runs now, its heartbeat (a pass follows one that asked for it), and
  // readiness probe results.
  std::vector<ScenarioWorker> Assignments(const std::string& host) const;
  int64_t assignment_revision() const { return assignment_revision_; }
  Status Heartbeat(const std::string& host, const ScenarioReport& report);
  std::vector<ScenarioProbe> DueProbes() const;
  Status Readiness(const ScenarioProbe& probe, bool ready, const std::string& message);

  // Timers: lost hosts, the lifecycles' ticks, a scheduling pass.
  Status Tick();

  // The records.
  const std::map<std::string, TrainJob>& jobs() const { return jobs_; }
  const std::map<std::string, Service>& services() const { return services_; }
  const std::vector<ScenarioEvent>& events() const { return events_; }

 private:
  class View;
  template <typename Object>
  class Sink;

  Status RunJobStep(const std::string& name, const std::function<Effects(TrainJob&)>& step);
  Status RunServiceStep(const std::string& name,
                        const std::function<ServiceEffects(Service&)>& step);
  Status Schedule();
  Status ScheduleServices();
  Status ScheduleJobs();
  PlanResult PlanLargest(const Inventory& inventory, const TrainJob& job, int lo, int hi) const;
  Status ExpireLeases();

  Inventory inventory_;
  std::vector<std::string> host_names_;
  std::map<std::string, HostId> host_ids_;
  const ScenarioSimOptions options_;
  const SlicePlanner planner_;
  const TrainLifecycle train_;
  const ServiceLifecycle services_life_;
  int64_t now_ = 0;
  uint64_t next_uid_ = 1;
  int64_t assignment_revision_ = 1;
  int next_port_ = 20000;  // ports are the driver's to draw; records leave them out
  bool schedule_requested_ = false;
  std::map<std::string, int64_t> last_heartbeat_ms_;
  std::set<std::string> lost_;
  std::map<std::string, TrainJob> jobs_;
  std::map<std::string, Service> services_;
  std::vector<ScenarioEvent> events_;
};

}  // namespace tessera::sim
