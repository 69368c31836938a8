// Controller: assignments, what each host must run now. A host's snapshot lists one entry per
// worker of every placed, not stopping job with a worker there (command, environment from
// workload/worker_env.h, grace), under a revision that grows with every change. Withdrawn
// attempts whose workers must die faster (or slower) than their own grace get a "stop" entry.
// docs/agent-protocol.md.
#include <algorithm>

#include "controller/controller.h"
#include "workload/worker_env.h"

namespace tessera::controller {

void Controller::NotifyHosts(const std::set<std::string>& hosts) {
  if (on_assignments_ && !hosts.empty()) on_assignments_(hosts);
}

Result<Json> Controller::Assignments(const std::string& host) const {
  std::lock_guard lock(mu_);
  if (!hosts_.count(host)) return NotFound("host '" + host + "' is not registered; register first");
  return AssignmentsLocked(host);
}

Json Controller::AssignmentsLocked(const std::string& host) const {
  std::vector<protocol::Assignment> out;
  std::vector<const TrainJob*> jobs;
  for (const auto& [name, job] : jobs_)
    if (job.Assigned() && job.OnHost(host)) jobs.push_back(&job);
  std::sort(jobs.begin(), jobs.end(),
            [](const TrainJob* a, const TrainJob* b) { return a->uid < b->uid; });
  for (const TrainJob* job : jobs) {
    const TrainJobStatus& st = job->status;
    AttemptLayout layout;
    layout.job = job->name();
    layout.attempt = st.attempt;
    auto topology = SliceTopology::Make(job->spec.accelerator, job->spec.topology);
    if (!topology.ok()) continue;  // validated at creation: cannot happen
    layout.topology = *topology;
    for (const auto& slice : st.placement) {
      layout.slices.emplace_back();
      for (const auto& hn : slice) {
        auto h = hosts_.find(hn);
        layout.slices.back().push_back(
            {hn, h == hosts_.end() ? "127.0.0.1" : h->second.spec.address});
      }
    }
    layout.slice_names = st.slice_names;
    layout.master_port = st.master_port;
    layout.jax_port = st.jax_port;
    layout.checkpoint_dir = job->spec.checkpoint_dir;
    for (const WorkerEnv& e : ComputeWorkerEnv(layout)) {
      if (e.host != host) continue;
      std::map<std::string, std::string> env = job->spec.env;
      for (const auto& [k, v] : e.env) env[k] = v;
      // With TESSERA_ATTEMPT, what the SDK's checkpoint fence orders attempts by: a later job
      // over the same checkpoint directory is newer than every attempt of an earlier one.
      env["TESSERA_JOB_UID"] = std::to_string(job->uid);
      out.push_back({{job->name(), st.attempt, e.rank, job->uid},
                     e.worker,
                     job->spec.command,
                     std::move(env),
                     job->spec.working_dir,
                     job->spec.grace_ms,
                     protocol::WorkloadKind::kTrainJob});
    }
  }
  // Workers of a broken attempt are killed at once, preemption victims get the preemption's
  // grace instead of their own (docs/agent-protocol.md "stop").
  std::vector<protocol::StopRequest> stop;
  for (const auto& [name, job] : jobs_) {
    const int64_t grace = job.status.fast_stop ? 0 : job.status.stop_grace_ms;
    if (!job.status.stopping || job.status.attempt < 0 || grace < 0 || !job.OnHost(host)) continue;
    stop.push_back({name, job.status.attempt, grace, job.uid});
  }
  AppendServiceAssignments(host, out, stop);  // services.cc
  return Json::parse(protocol::AssignmentSnapshotJson(assignment_revision_, out, stop, term_));
}

}  // namespace tessera::controller
