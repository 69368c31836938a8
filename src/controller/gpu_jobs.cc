// Controller: GPU jobs (spec.gpu; docs/runtime.md "GPU jobs"). Hosts that registered GPUs form
// NVLink placement domains (placement/gpu_domains.h, from what their agents discovered); a
// pending GPU job is planned on the domains of its system by the GPU domain planner
// (placement/gpu_planner.h), first come first served among GPU jobs, its hosts reserved in the
// inventory as a TPU job's are; its workers get the GPU environment (workload/
// gpu_worker_env.h), with an IMEX channel recorded on the placement when it spans hosts of one
// clique. Not through ClusterQueues yet: a head with ClusterQueues refuses GPU jobs.
#include <algorithm>

#include "controller/controller.h"
#include "placement/gpu_domains.h"
#include "workload/gpu_worker_env.h"

namespace tessera::controller {
namespace {

bool WaitingGpu(const TrainJob& job) {
  return job.spec.gpu && job.status.phase == JobPhase::kPending && !job.status.deleting &&
         !job.status.stopping;
}

// A job status reason for the planner's answer, in the spelling of the TPU planner's reasons.
std::string GpuPendingReason(GpuNoFit r) {
  switch (r) {
    case GpuNoFit::kInvalidRequest:
      return "InvalidRequest";
    case GpuNoFit::kNeverFits:
      return "NeverFits";
    case GpuNoFit::kNotEnoughHosts:
      return "NotEnoughHosts";
    case GpuNoFit::kNoDomainFits:
      return "NoDomainFits";
    case GpuNoFit::kNone:
      break;
  }
  return "Pending";
}

std::string JsonText(const Json& obj, const char* key) {
  auto it = obj.is_object() ? obj.find(key) : obj.end();
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The GPUs of a host's discovered JSON (protocol::DiscoveredJson).
GpuHostFacts GpuFactsOf(const HostSpec& spec) {
  GpuHostFacts h;
  h.name = spec.name;
  if (auto it = spec.labels.find(kGpuSystemLabel); it != spec.labels.end())
    h.system_label = it->second;
  if (spec.discovered.empty()) return h;
  const Json d = Json::parse(spec.discovered, nullptr, /*allow_exceptions=*/false);
  auto gpus = d.is_object() ? d.find("gpus") : d.end();
  if (gpus == d.end() || !gpus->is_array()) return h;
  for (const Json& g : *gpus) {
    GpuFacts f;
    f.uuid = JsonText(g, "uuid");
    if (auto m = g.find("memoryMiB"); m != g.end() && m->is_number_integer())
      f.memory_mib = m->get<int64_t>();
    if (auto fabric = g.find("fabric"); fabric != g.end() && fabric->is_object()) {
      f.has_fabric = true;
      f.cluster_uuid = JsonText(*fabric, "clusterUuid");
      f.clique_id = JsonText(*fabric, "cliqueId");
      f.state = JsonText(*fabric, "state");
      f.status = JsonText(*fabric, "status");
    }
    h.gpus.push_back(std::move(f));
  }
  return h;
}

}  // namespace

std::vector<GpuHostDomain> Controller::GpuDomainsLocked() const {
  std::vector<GpuHostFacts> facts;
  for (const auto& [name, h] : hosts_) facts.push_back(GpuFactsOf(h.spec));
  return FormGpuDomains(facts);
}

Json Controller::HostGpuJsonLocked(const HostSpec& spec) const {
  std::vector<GpuHostDomain> d = FormGpuDomains({GpuFactsOf(spec)});
  if (d.empty()) return Json();
  const GpuHostDomain& g = d.front();
  Json doc = {{"gpus", GpuFactsOf(spec).gpus.size()},
              {"domain", g.domain},
              {"clique", g.clique},
              {"nvlinkReady", g.nvlink_ready},
              {"reason", g.reason}};
  doc["system"] = g.system ? Json(std::string(GpuSystemName(*g.system))) : Json();
  return doc;
}

GpuFleetView Controller::GpuFleetLocked(GpuSystem system, bool empty) const {
  const std::vector<GpuHostDomain> domains = GpuDomainsLocked();
  std::vector<GpuHostUse> use;
  const int per_host = Info(system).gpus_per_host;
  for (const GpuHostDomain& d : domains) {
    const RegisteredHost& h = hosts_.at(d.host);
    auto id = host_ids_.find(d.host);
    bool free = id != host_ids_.end() && inventory_ready_ && inventory_.host(id->second).usable();
    if (empty) free = id != host_ids_.end();
    use.push_back({free ? per_host : 0, empty || !h.status.lost});
  }
  return MakeGpuFleetView(system, domains, use);
}

Status Controller::GpuJobRefusalLocked(const TrainJobSpec& spec) const {
  if (!spec.gpu) return Status::Ok();
  if (!cluster_queues_.empty())
    return InvalidArgument(
        "spec.gpu: this head admits jobs through ClusterQueues, and GPU jobs do not go through "
        "them yet (quotas in GPUs are not built); run GPU jobs on a head without ClusterQueues");
  // A request the GPU hosts of its system could never hold, even empty, is refused up front;
  // with none registered yet the job waits for them.
  GpuFleetView v = GpuFleetLocked(spec.gpu->system, /*empty=*/true);
  if (v.fleet.hosts.empty()) return Status::Ok();
  // Empty, every host is free: a plan that fails now (too many hosts, or no domain that holds
  // them) fails until other hosts register.
  GpuPlacement p = PlanGpu(v.fleet, {spec.gpu->gpus(), spec.gpu->rule}, GpuPolicy::kTessera);
  if (!p.placed)
    return InvalidArgument("spec.gpu.hosts: " + std::to_string(spec.gpu->hosts) + " " +
                           std::string(GpuSystemName(spec.gpu->system)) +
                           " hosts (domain: " + spec.gpu->rule.ToString() +
                           ") can never fit this cluster: " + p.message);
  return Status::Ok();
}

Status Controller::ScheduleGpuJobs() {
  std::vector<TrainJob*> pending;
  for (auto& [name, job] : jobs_)
    if (WaitingGpu(job) && !jobs_missing_secrets_.count(name)) pending.push_back(&job);
  std::sort(pending.begin(), pending.end(),
            [](TrainJob* a, TrainJob* b) { return a->uid < b->uid; });
  std::string blocked_by;
  int position = 0;
  for (TrainJob* job : pending) {
    ++position;
    const GpuJobSpec& want = *job->spec.gpu;
    std::string reason, message;
    if (!cluster_queues_.empty()) {
      reason = "GpuQueuesUnsupported";
      message =
          "GPU jobs are not admitted through ClusterQueues yet; delete the ClusterQueues or run "
          "it on a head without them";
    } else if (!blocked_by.empty()) {
      reason = "Queued";
      message = "waiting behind trainjob " + blocked_by + " (first come, first served)";
    } else {
      GpuFleetView v = GpuFleetLocked(want.system, /*empty=*/false);
      GpuPlacement p = PlanGpu(v.fleet, {want.gpus(), want.rule}, GpuPolicy::kTessera);
      if (p.placed) {
        auto admitted = AdmitGpu(*job, v, p);
        if (!admitted.ok()) return admitted.status();
        if (*admitted) {
          --position;
          continue;
        }
      }
      reason = v.fleet.hosts.empty() ? "NoGpuHosts" : GpuPendingReason(p.reason);
      message = v.fleet.hosts.empty() ? "no host with " + std::string(GpuSystemName(want.system)) +
                                            " GPUs has registered"
                                      : p.message;
      if (p.not_ready_skipped > 0)
        message += "; " + std::to_string(p.not_ready_skipped) +
                   " free hosts are not NVLink-attached (get hosts -o wide says why)";
      // A job that does not fit even the empty fleet (its hosts went, or never came) does not
      // hold up the line.
      if (p.reason != GpuNoFit::kNeverFits && p.reason != GpuNoFit::kInvalidRequest &&
          PlanGpu(GpuFleetLocked(want.system, /*empty=*/true).fleet, {want.gpus(), want.rule},
                  GpuPolicy::kTessera)
              .placed)
        blocked_by = job->name();
    }
    TESSERA_RETURN_IF_ERROR(RunStep(job->name(), [&](TrainJob& j) {
      return train_.SetPending(j, reason, message, position, {});
    }));
  }
  return Status::Ok();
}

Result<bool> Controller::AdmitGpu(TrainJob& job, const GpuFleetView& view,
                                  const GpuPlacement& plan) {
  std::vector<HostId> ids;
  AttemptPlacement placement;
  GpuAttemptRecord record;
  std::vector<bool> clique;
  const std::vector<GpuHostDomain> domains = GpuDomainsLocked();
  placement.hosts.emplace_back();
  for (int h : plan.hosts) {
    const std::string& name = view.host_names[h];
    auto id = host_ids_.find(name);
    if (id == host_ids_.end()) return false;
    ids.push_back(id->second);
    placement.hosts[0].push_back(name);
    record.domains.push_back(view.domain_names[view.fleet.hosts[h].domain]);
    const auto d = std::find_if(domains.begin(), domains.end(),
                                [&](const GpuHostDomain& g) { return g.host == name; });
    clique.push_back(d != domains.end() && d->clique);
  }
  placement.slice_names.push_back(job.name() + "-gpu");
  if (NeedsImexChannel(record.domains, clique)) {
    std::set<int> in_use;
    for (const auto& [name, other] : jobs_)
      if (other.spec.gpu && other.HoldsChips() && other.status.gpu.imex_channel >= 0)
        in_use.insert(other.status.gpu.imex_channel);
    record.imex_channel = PickImexChannel(in_use);
    if (record.imex_channel < 0) return false;  // every channel taken: wait for one
  }
  if (!inventory_.Reserve(OwnerId(job.uid), ids).ok()) return false;
  const auto chief = hosts_.find(placement.hosts[0][0]);  // rank 0 listens on MASTER_PORT
  placement.master_port =
      TrainJobMasterPort(job, chief == hosts_.end() ? std::string() : chief->second.spec.address);
  placement.jax_port = placement.master_port + 1;
  const int64_t now = NowMs();
  Status placed = RunStep(job.name(), [&](TrainJob& j) {
    Effects e = train_.Place(j, placement, now);
    j.status.gpu = record;
    return e;
  });
  if (!placed.ok()) {
    inventory_.Release(OwnerId(job.uid));  // the job is Pending again, as it was
    return placed;
  }
  return true;
}

std::vector<WorkerEnv> Controller::GpuWorkerEnvLocked(const TrainJob& job) const {
  const TrainJobStatus& st = job.status;
  GpuAttemptLayout layout;
  layout.job = job.name();
  layout.attempt = st.attempt;
  layout.system = job.spec.gpu->system;
  const int per_host = Info(layout.system).gpus_per_host;
  if (!st.placement.empty()) {
    for (size_t i = 0; i < st.placement[0].size(); ++i) {
      const std::string& hn = st.placement[0][i];
      auto h = hosts_.find(hn);
      layout.hosts.push_back({hn, h == hosts_.end() ? "127.0.0.1" : h->second.spec.address,
                              i < st.gpu.domains.size() ? st.gpu.domains[i] : "", per_host});
    }
  }
  layout.master_port = st.master_port;
  layout.imex_channel = st.gpu.imex_channel;
  layout.checkpoint_dir = job.spec.checkpoint_dir;
  return ComputeGpuWorkerEnv(layout);
}

}  // namespace tessera::controller
