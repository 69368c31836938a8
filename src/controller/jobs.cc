// Controller: the TrainJob user API. Create validates the document against this cluster and
// stores the job (Pending); everything after that is the lifecycle's (workload/
// train_lifecycle.h), driven by scheduling passes, agents' reports and timers.
#include <algorithm>
#include <optional>
#include <set>

#include "codec/manifest.h"
#include "codec/reservation_manifest.h"
#include "codec/service_manifest.h"
#include "controller/controller.h"
#include "protocol/credential.h"

namespace tessera::controller {
namespace {

// Why the cluster refuses `spec` before storing it: a generation it has no hosts of, a size it
// could never hold even empty, a PriorityClass that does not exist. OK when none applies.
Status JobRefusal(const TrainJobSpec& spec, const Inventory& inventory, bool inventory_ready,
                  const SlicePlanner& planner, const std::set<std::string>& priority_classes) {
  if (inventory_ready && !spec.gpu) {  // a GPU job's refusal is GpuJobRefusalLocked's
    if (spec.accelerator != inventory.generation())
      return InvalidArgument("spec.accelerator: this cluster has " +
                             std::string(GenerationName(inventory.generation())) + " hosts; a " +
                             std::string(GenerationName(spec.accelerator)) +
                             " job can never run here");
    // A request the cluster could never hold, even empty, is refused up front.
    Inventory empty = inventory;
    for (OwnerId owner : inventory.Owners()) empty.Release(owner);
    for (const Host& h : empty.hosts())
      if (Status s = empty.SetHealth(h.id, Health::kHealthy); !s.ok()) return s;
    PlanResult p = planner.Plan(empty, {spec.accelerator, spec.topology, spec.min_slices});
    if (p.reason == NoFit::kNeverFits || p.reason == NoFit::kNotEnoughChips)
      return InvalidArgument("spec.topology: " + std::to_string(spec.min_slices) + " x " +
                             spec.topology.ToString() +
                             " can never fit this cluster: " + p.message);
  }
  if (!spec.priority.empty() && !priority_classes.count(spec.priority)) {
    std::string known;
    for (const auto& name : priority_classes) known += (known.empty() ? "" : ", ") + name;
    return InvalidArgument("spec.priority: PriorityClass '" + spec.priority +
                           "' does not exist; known: " + (known.empty() ? "none" : known));
  }
  return Status::Ok();
}

}  // namespace

Status Controller::NewJobRefusalLocked(const TrainJobSpec& spec) {
  if (Status s = RefreshInventory(); !s.ok()) return s;
  if (jobs_.count(spec.name))
    return AlreadyExists("metadata.name: a TrainJob named '" + spec.name +
                         "' already exists; delete it first or choose another name");
  if (Status refused = JobInReservationRefusalLocked(spec); !refused.ok())
    return refused;                                    // reservations.cc
  TESSERA_RETURN_IF_ERROR(GpuJobRefusalLocked(spec));  // gpu_jobs.cc
  std::set<std::string> classes;
  for (const auto& [n, pc] : priority_classes_) classes.insert(n);
  return JobRefusal(spec, inventory_, inventory_ready_, planner_, classes);
}

Result<Json> Controller::CreateJobLocked(const Json& doc) {
  auto spec = codec::ParseTrainJob(doc);
  if (!spec.ok()) return spec.status();
  if (Status refused = NewJobRefusalLocked(*spec); !refused.ok()) return refused;
  const std::string name = spec->name;
  // Stored and printed in the canonical spelling: "TPU-V6E-16" becomes v6e and 4x4.
  Json spec_doc = doc["spec"];
  if (spec->gpu) {
    spec_doc["gpu"]["system"] = std::string(GpuSystemName(spec->gpu->system));
  } else {
    spec_doc["accelerator"] = std::string(GenerationName(spec->accelerator));
    spec_doc["topology"] = spec->topology.ToString();
  }
  TrainJob job = TrainLifecycle::Create(std::move(*spec), spec_doc.dump(), next_uid_, NowMs());
  store::WriteBatch batch;
  batch.Create(codec::kTrainJobKind, name, JobJson(job).dump());
  // The high-water mark goes with the job: a uid is never given twice, even after this job is
  // deleted and the head restarted.
  batch.Put(kUidCounterKind, kUidCounterName, Json{{"next", next_uid_ + 1}}.dump());
  auto committed =
      CommitWithEvents(batch, "trainjob/" + name, {JobEvent{false, "Created", "accepted"}});
  if (!committed.ok()) {
    if (committed.status().code() == StatusCode::kAlreadyExists)
      return AlreadyExists("metadata.name: '" + name + "' already exists");
    return Unavailable(committed.status().message());
  }
  ++next_uid_;
  job.runtime.version = *committed;
  job.runtime.persisted_ms = NowMs();
  Json out = JobJson(job);
  Emit(codec::kTrainJobKind, "ADDED", out);
  AnnounceEvents();
  job_names_by_uid_[job.uid] = name;
  jobs_[name] = std::move(job);
  IndexUnsettledLocked(name);
  schedule_requested_ = true;
  ScheduleAfterRequest();
  return out;
}

Result<Json> Controller::GetJobLocked(const std::string& name) const {
  auto it = jobs_.find(name);
  if (it == jobs_.end()) return NotFound("trainjob '" + name + "' not found");
  return JobJson(it->second);
}

Controller::JobsCopy Controller::CopyJobsLocked() const {
  JobsCopy copy;
  copy.now_ms = NowMs();
  copy.jobs.reserve(jobs_.size());
  for (const auto& [name, job] : jobs_) copy.jobs.push_back(job);
  std::sort(copy.jobs.begin(), copy.jobs.end(),
            [](const TrainJob& a, const TrainJob& b) { return a.uid < b.uid; });
  return copy;
}

Json Controller::JobListJson(const JobsCopy& copy) {
  Json items = Json::array();
  for (const TrainJob& j : copy.jobs) items.push_back(codec::TrainJobJson(j, copy.now_ms));
  return {{"kind", "TrainJobList"}, {"items", std::move(items)}};
}

Result<Json> Controller::DeleteJobLocked(const std::string& name) {
  if (!jobs_.count(name)) return NotFound("trainjob '" + name + "' not found");
  if (jobs_.at(name).status.deleting) return Json{{"name", name}, {"status", "Terminating"}};
  const View view(*this);
  Status s = RunStep(name, [&](TrainJob& job) { return train_.Delete(job, view, NowMs()); });
  if (!s.ok()) return s;
  ScheduleAfterRequest();
  return Json{{"name", name}, {"status", jobs_.count(name) ? "Terminating" : "Deleted"}};
}

Result<Controller::LogLocation> Controller::LocateLog(const std::string& name, int rank) const {
  auto lock = Hold();
  auto it = jobs_.find(name);
  if (it == jobs_.end()) return NotFound("trainjob '" + name + "' not found");
  const TrainJobStatus& st = it->second.status;
  if (st.attempt < 0)
    return NotFound("trainjob '" + name + "' has not started yet (" + st.reason + ")");
  auto w = st.workers.find(rank);
  if (w == st.workers.end())
    return InvalidArgument("worker: trainjob '" + name + "' has workers 0.." +
                           std::to_string(st.workers.size() - 1));
  auto h = hosts_.find(w->second.host);
  if (h == hosts_.end()) return NotFound("host " + w->second.host + " is gone");
  LogLocation loc;
  loc.host = w->second.host;
  loc.address = h->second.spec.address;
  loc.port = h->second.spec.agent_port;
  if (loc.port == 0)
    return NotFound("host " + w->second.host +
                    " serves no logs: its agent registered without an agentPort");
  loc.token = protocol::LogTokenFromHash(h->second.credential_hash);
  loc.path = "/logs/" + name + "/" + std::to_string(it->second.uid) + "/" +
             std::to_string(st.attempt) + "/" + std::to_string(rank);
  loc.running = MayRun(w->second.phase);
  return loc;
}

Json Controller::EventListJson(const std::deque<Event>& events) {
  Json items = Json::array();
  for (const Event& e : events) items.push_back(codec::EventJson(e));
  return {{"kind", "EventList"}, {"items", std::move(items)}};
}

}  // namespace tessera::controller
