// Controller: GPU jobs (spec.gpu; docs/runtime.md "GPU jobs"). Hosts that registered GPUs form
// NVLink placement domains (placement/gpu_domains.h, from what their agents discovered); a
// pending GPU job is planned on the domains of its system by the GPU domain planner
// (placement/gpu_planner.h), first come first served among GPU jobs, its hosts reserved in the
// inventory as a TPU job's are; its workers get the GPU environment (workload/
// gpu_worker_env.h), with an IMEX channel recorded on the placement when it spans hosts of one
// clique. With ClusterQueues, GPU jobs are admitted by an admission cycle per GPU system (quotas
// in GPUs of the system, cohorts, preemption, reasons: admission.h, Snapshot::gpu) instead.
#include <algorithm>
#include <iterator>
#include <set>

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
  if (!cluster_queues_.empty()) return Status::Ok();  // ScheduleGpuThroughQueues admits them
  return ServeInArrivalOrder(WaitingGpu, [&](TrainJob& job) -> Result<LineTry> {
    const GpuJobSpec& want = *job.spec.gpu;
    LineTry t;
    GpuFleetView v = GpuFleetLocked(want.system, /*empty=*/false);
    GpuPlacement p = PlanGpu(v.fleet, {want.gpus(), want.rule}, GpuPolicy::kTessera);
    if (p.placed) {
      auto admitted = AdmitGpu(job, v, p);
      if (!admitted.ok()) return admitted.status();
      if (*admitted) {
        t.placed = true;
        return t;
      }
    }
    t.reason = v.fleet.hosts.empty() ? "NoGpuHosts" : GpuPendingReason(p.reason);
    t.message = v.fleet.hosts.empty() ? "no host with " + std::string(GpuSystemName(want.system)) +
                                            " GPUs has registered"
                                      : p.message;
    if (p.not_ready_skipped > 0)
      t.message += "; " + std::to_string(p.not_ready_skipped) +
                   " free hosts are not NVLink-attached (get hosts -o wide says why)";
    // A job that does not fit even the empty fleet (its hosts went, or never came) does not
    // hold up the line.
    t.holds_line = p.reason != GpuNoFit::kNeverFits && p.reason != GpuNoFit::kInvalidRequest &&
                   PlanGpu(GpuFleetLocked(want.system, /*empty=*/true).fleet,
                           {want.gpus(), want.rule}, GpuPolicy::kTessera)
                       .placed;
    return t;
  });
}

Status Controller::ScheduleGpuThroughQueues() {
  std::set<GpuSystem> systems;
  for (const auto& [name, job] : jobs_)
    if (job.spec.gpu && !job.status.deleting &&
        (job.status.phase == JobPhase::kPending || job.HoldsChips()))
      systems.insert(job.spec.gpu->system);
  // A system without GPU jobs keeps no usage rows.
  for (auto it = gpu_usage_.begin(); it != gpu_usage_.end();)
    it = systems.count(it->first) ? std::next(it) : gpu_usage_.erase(it);
  if (systems.empty()) return Status::Ok();
  std::vector<PriorityClass> classes;
  for (const auto& [name, o] : priority_classes_)
    classes.push_back(std::get<PriorityClass>(o.spec));
  const int64_t now = NowMs();
  for (GpuSystem system : systems)
    TESSERA_RETURN_IF_ERROR(ScheduleGpuSystemThroughQueues(system, classes, now));
  return Status::Ok();
}

Status Controller::ScheduleGpuSystemThroughQueues(GpuSystem system,
                                                  const std::vector<PriorityClass>& classes,
                                                  int64_t now) {
  Snapshot snap;
  for (const auto& [name, o] : cluster_queues_)
    snap.cluster_queues.push_back(std::get<ClusterQueueSpec>(o.spec));
  for (const auto& [name, o] : local_queues_)
    snap.local_queues.push_back(std::get<LocalQueueSpec>(o.spec));
  // The system's GPU jobs as workloads, as AddJobWorkloads offers TPU jobs: a job whose workers
  // are being stopped holds its hosts until the agents confirm, but they count as free here
  // (an admission placed on them waits); a restarting job keeps its hosts and is no workload.
  std::map<uint64_t, std::string> by_uid;
  std::set<uint64_t> stopping;
  for (const auto& [name, job] : jobs_) {
    const TrainJobStatus& st = job.status;
    if (!job.spec.gpu || job.spec.gpu->system != system || st.deleting) continue;
    if (jobs_missing_secrets_.count(name)) continue;  // waits with SecretNotFound (secrets.cc)
    if (st.stopping && st.phase != JobPhase::kRestarting) stopping.insert(job.uid);
    const std::optional<WorkloadState> state = AdmissionStateOf(st);
    if (!state) continue;
    Workload w;
    w.id = WorkloadId(job.uid);
    w.name = job.name();
    w.local_queue = LocalQueueKeyOf(job.name(), job.spec.queue);
    if (!job.spec.priority.empty()) {
      auto priority = ResolvePriority(classes, job.spec.priority);
      if (priority.ok()) w.priority = *priority;
    }
    w.gpu = GpuWorkloadRequest{system, GpuRequest{job.spec.gpu->gpus(), job.spec.gpu->rule}};
    w.creation_order = static_cast<int64_t>(job.uid);
    w.state = *state;
    w.admitted_at_ms = st.start_ms;
    if (st.last_checkpoint_ms > 0 && st.last_checkpoint_ms >= st.start_ms)
      w.last_checkpoint_ms = st.last_checkpoint_ms;
    w.start_guard = st.start_guard;
    snap.workloads.push_back(std::move(w));
    by_uid[job.uid] = name;
  }
  // The fleet: free hosts from the inventory; a host held by one of these workloads is theirs
  // (so preemption may free it); a host a stopping GPU job holds counts as free; anything else
  // (a TPU job, a reservation, a restarting job) is taken.
  const GpuFleetView view = GpuFleetLocked(system, /*empty=*/false);
  GpuSnapshot g;
  g.fleet = view.fleet;
  g.holders.assign(g.fleet.hosts.size(), WorkloadId());
  for (size_t h = 0; h < g.fleet.hosts.size(); ++h) {
    auto id = host_ids_.find(view.host_names[h]);
    if (id == host_ids_.end()) continue;
    const Host& ih = inventory_.host(id->second);
    if (!ih.owner.valid()) continue;
    const uint64_t owner = ih.owner.value();
    if (stopping.count(owner)) {
      if (ih.health == Health::kHealthy) g.fleet.hosts[h].free_gpus = g.fleet.gpus_per_host();
    } else if (by_uid.count(owner)) {
      g.holders[h] = WorkloadId(owner);
    }
  }
  snap.gpu = std::move(g);
  auto cycle = admitter_.Run(snap, now);
  if (!cycle.ok()) {
    for (const auto& [uid, name] : by_uid)
      if (jobs_.at(name).status.phase == JobPhase::kPending)
        TESSERA_RETURN_IF_ERROR(RunStep(
            name,
            [&](TrainJob& j) {
              return train_.SetPending(j, "AdmissionError", cycle.status().message(), 0, {});
            },
            StatusWrite::kBatched));
    return Status::Ok();
  }
  std::map<std::string, ClusterQueueUsage>& usage = gpu_usage_[system];
  usage.clear();
  for (const ClusterQueueUsage& u : cycle->usage) usage[u.name] = u;
  derived_stale_ = true;  // ClusterQueue status shows these rows
  auto name_of = [&](WorkloadId id) -> const std::string* {
    auto it = by_uid.find(id.value());
    return it == by_uid.end() ? nullptr : &it->second;
  };
  for (const Eviction& e : cycle->evictions)
    if (const std::string* name = name_of(e.workload)) TESSERA_RETURN_IF_ERROR(EvictJob(*name, e));
  std::set<uint64_t> admitted;
  for (const Admission& a : cycle->admissions) {
    const std::string* name = name_of(a.workload);
    if (name == nullptr || !jobs_.count(*name)) continue;
    admitted.insert(a.workload.value());
    TrainJob& job = jobs_.at(*name);
    // Hosts still held (by workers being stopped): start once they are released.
    std::set<std::string> holders;
    for (int h : a.gpu_placement.hosts) {
      auto id = host_ids_.find(view.host_names[h]);
      if (id == host_ids_.end()) continue;
      const OwnerId o = inventory_.host(id->second).owner;
      if (!o.valid()) continue;
      for (const auto& [other_name, other] : jobs_)
        if (other.uid == o.value()) holders.insert(other_name);
    }
    if (holders.empty()) {
      auto placed = AdmitGpu(job, view, a.gpu_placement);
      if (!placed.ok()) return placed.status();
      if (*placed) continue;
    }
    std::string names;
    for (const auto& n : holders) names += (names.empty() ? "" : ", ") + n;
    const std::string message = "admitted to " + a.cluster_queue + "; starts once the workers of " +
                                (names.empty() ? std::string("the preempted jobs") : names) +
                                " have stopped";
    TESSERA_RETURN_IF_ERROR(RunStep(
        *name,
        [&](TrainJob& j) { return train_.SetPending(j, "WaitingForPreemption", message, 0, {}); },
        StatusWrite::kBatched));
  }
  for (const PendingStatus& p : cycle->pending) {
    if (admitted.count(p.workload.value())) continue;
    if (const std::string* name = name_of(p.workload))
      TESSERA_RETURN_IF_ERROR(SetJobPending(*name, p));
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
