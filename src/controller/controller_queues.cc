// Controller: the admission resources (ClusterQueue, LocalQueue, PriorityClass): apply (create
// or replace), list with status, delete. Each is parsed once when applied or loaded; the
// scheduling pass reads the typed specs. Deleting follows docs/admission.md,
// "Deleting queues and priority classes": a delete that would silently change what running or
// waiting jobs are charged or ranked by is refused (kFailedPrecondition) naming those jobs, so an
// operator never loses track of quota or priority by deleting an object.
#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "admission/settings.h"
#include "codec/manifest.h"
#include "controller/controller.h"

namespace tessera::controller {
namespace {

// The same names controller.cc uses for the documents and the store.
constexpr const char* kClusterQueue = "ClusterQueue";
constexpr const char* kLocalQueue = "LocalQueue";
constexpr const char* kPriorityClass = "PriorityClass";
// A job that names no queue is in the LocalQueue called "default" (controller.cc).
constexpr const char* kDefaultQueue = "default";

// "a, b, c" for the first ten names, then "and N more".
std::string NameList(const std::vector<std::string>& names) {
  std::string out;
  const size_t shown = std::min<size_t>(names.size(), 10);
  for (size_t i = 0; i < shown; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > shown) out += " and " + std::to_string(names.size() - shown) + " more";
  return out;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Parses an admission document of `kind` into its typed spec and name.
Result<std::pair<std::string, std::variant<ClusterQueueSpec, LocalQueueSpec, PriorityClass>>>
ParseQueueObject(const std::string& kind, const Json& doc) {
  if (kind == kClusterQueue) {
    auto r = codec::ParseClusterQueue(doc);
    if (!r.ok()) return r.status();
    return std::pair{r->name, std::variant<ClusterQueueSpec, LocalQueueSpec, PriorityClass>(*r)};
  }
  if (kind == kLocalQueue) {
    auto r = codec::ParseLocalQueue(doc);
    if (!r.ok()) return r.status();
    return std::pair{r->name, std::variant<ClusterQueueSpec, LocalQueueSpec, PriorityClass>(*r)};
  }
  auto r = codec::ParsePriorityClass(doc);
  if (!r.ok()) return r.status();
  return std::pair{r->name, std::variant<ClusterQueueSpec, LocalQueueSpec, PriorityClass>(*r)};
}

// Settings of `spec` that cannot take effect (admission/settings.h), among `all`.
Json SettingWarnings(const ClusterQueueSpec& spec, const std::vector<ClusterQueueSpec>& all,
                     FairSharing fair) {
  Json out = Json::array();
  for (const SettingWarning& w : IneffectiveSettings(spec, all, fair))
    out.push_back({{"field", w.field}, {"message", w.message}});
  return out;
}

}  // namespace

std::map<std::string, Controller::QueueObject>& Controller::QueueObjects(const std::string& kind) {
  return kind == kClusterQueue ? cluster_queues_
         : kind == kLocalQueue ? local_queues_
                               : priority_classes_;
}

Result<Json> Controller::ApplyQueueObject(const std::string& kind, const Json& doc) {
  auto parsed = ParseQueueObject(kind, doc);
  if (!parsed.ok()) return parsed.status();
  const std::string name = parsed->first;
  Json stored = doc;
  stored.erase("status");
  auto lock = Hold();
  auto& objects = QueueObjects(kind);
  const bool created = !objects.count(name);
  store::WriteBatch batch;
  batch.Put(kind, name, stored.dump());
  std::vector<JobEvent> events = {
      JobEvent{false, created ? "Created" : "Configured", created ? "created" : "replaced"}};
  if (kind == kClusterQueue) {
    // Settings that cannot take effect are accepted with a warning (a Warning event, the
    // answer's `warnings` and the status): docs/admission.md.
    std::vector<ClusterQueueSpec> all;
    for (const auto& [n, o] : cluster_queues_)
      if (n != name) all.push_back(std::get<ClusterQueueSpec>(o.spec));
    all.push_back(std::get<ClusterQueueSpec>(parsed->second));
    for (const SettingWarning& w : IneffectiveSettings(std::get<ClusterQueueSpec>(parsed->second),
                                                       all, options_.fair_sharing))
      events.push_back(JobEvent{true, "IneffectiveSetting", w.field + ": " + w.message});
  }
  auto r = CommitWithEvents(batch, Lower(kind) + "/" + name, events);
  if (!r.ok()) return Unavailable(r.status().message());
  QueueObject& o = objects[name];
  o = QueueObject{stored, std::move(parsed->second), *r};
  Json out = QueueObjectJson(kind, o);
  Emit(kind, created ? "ADDED" : "MODIFIED", out);
  AnnounceEvents();
  ScheduleAfterRequest();
  out["status"] = QueueObjectJson(kind, o)["status"];  // after the pass it triggered
  out["created"] = created;
  if (kind == kClusterQueue) out["warnings"] = out["status"]["warnings"];
  return out;
}

Status Controller::LoadQueueObjects(const std::string& kind) {
  auto objects = store_.List(kind);
  if (!objects.ok()) return objects.status();
  auto& into = QueueObjects(kind);
  for (const auto& obj : *objects) {
    Json j = Json::parse(obj.body, nullptr, false);
    if (j.is_discarded()) return Internal("stored " + kind + " " + obj.name + " is not JSON");
    auto parsed = ParseQueueObject(kind, j);
    if (!parsed.ok())
      return Internal("stored " + kind + " " + obj.name + ": " + parsed.status().message());
    into[obj.name] = QueueObject{j, std::move(parsed->second), obj.resource_version};
  }
  return Status::Ok();
}

Json Controller::QueueObjectJson(const std::string& kind, const QueueObject& o) const {
  Json out = o.doc;
  out["metadata"]["resourceVersion"] = o.version;
  if (kind == kClusterQueue) {
    const std::string name = o.doc["metadata"].value("name", "");
    ClusterQueueUsage u;
    if (auto it = usage_.find(name); it != usage_.end()) u = it->second;
    int64_t nominal = u.nominal_chips;
    if (!usage_.count(name)) {
      // No cycle yet (no hosts): the nominal quota of the first listed generation.
      for (const ResourceQuota& q : std::get<ClusterQueueSpec>(o.spec).quotas)
        if (!q.gpu_system) {
          nominal = q.nominal_chips;
          break;
        }
    }
    out["status"] = {{"nominalChips", nominal},
                     {"usedChips", u.used_chips},
                     {"borrowedChips", u.borrowed_chips},
                     {"lendableChips", u.lendable_chips},
                     {"pendingWorkloads", u.pending_workloads},
                     {"admittedWorkloads", u.admitted_workloads},
                     {"share", u.share}};
    // GPU quotas: per GPU system with GPU jobs, from its latest cycle (gpu_jobs.cc).
    Json gpus = Json::array();
    for (const auto& [system, rows] : gpu_usage_) {
      auto row = rows.find(name);
      if (row == rows.end()) continue;
      const ClusterQueueUsage& g = row->second;
      gpus.push_back({{"gpuSystem", std::string(GpuSystemName(system))},
                      {"nominalGpus", g.nominal_chips},
                      {"usedGpus", g.used_chips},
                      {"borrowedGpus", g.borrowed_chips},
                      {"lendableGpus", g.lendable_chips},
                      {"pendingWorkloads", g.pending_workloads},
                      {"admittedWorkloads", g.admitted_workloads}});
    }
    out["status"]["gpus"] = gpus;
    std::vector<ClusterQueueSpec> all;
    for (const auto& [n, other] : cluster_queues_)
      all.push_back(std::get<ClusterQueueSpec>(other.spec));
    out["status"]["warnings"] =
        SettingWarnings(std::get<ClusterQueueSpec>(o.spec), all, options_.fair_sharing);
  }
  return out;
}

Json Controller::ListQueueObjectsLocked(const std::string& kind) const {
  const auto& objects = kind == kClusterQueue ? cluster_queues_
                        : kind == kLocalQueue ? local_queues_
                                              : priority_classes_;
  Json items = Json::array();
  for (const auto& [name, o] : objects) items.push_back(QueueObjectJson(kind, o));
  return {{"kind", kind + "List"}, {"items", items}};
}

Json Controller::ListClusterQueues() const {
  auto lock = Hold();
  return ListQueueObjectsLocked(kClusterQueue);
}

Json Controller::ListLocalQueues() const {
  auto lock = Hold();
  return ListQueueObjectsLocked(kLocalQueue);
}

Json Controller::ListPriorityClasses() const {
  auto lock = Hold();
  return ListQueueObjectsLocked(kPriorityClass);
}

Result<Json> Controller::DeleteQueueObject(const std::string& kind, const std::string& name) {
  if (kind != kClusterQueue && kind != kLocalQueue && kind != kPriorityClass)
    return InvalidArgument("kind: must be ClusterQueue, LocalQueue or PriorityClass");
  const std::string object = Lower(kind) + "/" + name;
  auto lock = Hold();
  auto& objects = QueueObjects(kind);
  auto it = objects.find(name);
  if (it == objects.end()) return NotFound(Lower(kind) + " '" + name + "' not found");

  // Jobs still charged to a queue: they hold chips (starting, running, restarting, or being
  // stopped) and are not being deleted.
  auto charged = [](const TrainJob& job) { return job.HoldsChips() && !job.status.deleting; };
  auto queue_of = [](const TrainJob& job) {
    return job.spec.queue.empty() ? std::string(kDefaultQueue) : job.spec.queue;
  };
  auto service_queue = [](const Service& svc) {
    return svc.spec.queue.empty() ? std::string(kDefaultQueue) : svc.spec.queue;
  };
  std::string refusal;
  int pending = 0;
  if (kind == kClusterQueue) {
    // LocalQueues pointing at it: the admission cycle rejects a LocalQueue whose ClusterQueue
    // is missing and then admits nothing at all, so they must go first. Their admitted jobs are
    // named too: they are what the operator has to wait for.
    std::vector<std::string> locals, admitted;
    for (const auto& [local, o] : local_queues_)
      if (std::get<LocalQueueSpec>(o.spec).cluster_queue == name) locals.push_back(local);
    for (const auto& [job_name, job] : jobs_)
      if (charged(job) && std::find(locals.begin(), locals.end(), queue_of(job)) != locals.end())
        admitted.push_back(job_name);
    for (const auto& [svc_name, svc] : services_)  // replica groups are charged too
      if (svc.PlacedReplicas() > 0 && !svc.status.deleting &&
          std::find(locals.begin(), locals.end(), service_queue(svc)) != locals.end())
        admitted.push_back("service/" + svc_name);
    if (!admitted.empty())
      refusal = "it has admitted jobs: " + NameList(admitted) + " (wait for them or delete them)";
    if (!locals.empty())
      refusal += std::string(refusal.empty() ? "" : "; ") +
                 "localqueues point at it: " + NameList(locals) + " (delete them first)";
  } else if (kind == kLocalQueue) {
    // Admitted jobs are charged to the ClusterQueue through their LocalQueue: without it their
    // chips would stop counting against any quota. Pending jobs may stay: they wait with
    // LocalQueueNotFound until a LocalQueue of that name exists again.
    std::vector<std::string> admitted;
    for (const auto& [job_name, job] : jobs_) {
      if (queue_of(job) != name) continue;
      if (charged(job))
        admitted.push_back(job_name);
      else if (job.status.phase == JobPhase::kPending && !job.status.deleting)
        ++pending;
    }
    for (const auto& [svc_name, svc] : services_)
      if (service_queue(svc) == name && svc.PlacedReplicas() > 0 && !svc.status.deleting)
        admitted.push_back("service/" + svc_name);
    if (!admitted.empty())
      refusal = "it has admitted jobs: " + NameList(admitted) + " (wait for them or delete them)";
  } else {
    // Priorities are resolved by name every cycle: a job whose class is gone would silently
    // drop to priority 0 (and become a preemption victim, or lose its place in line).
    std::vector<std::string> users;
    for (const auto& [job_name, job] : jobs_) {
      if (job.spec.priority == name && !Finished(job.status.phase) && !job.status.deleting)
        users.push_back(job_name);
    }
    for (const auto& [svc_name, svc] : services_)
      if (svc.spec.priority == name && !svc.status.deleting) users.push_back("service/" + svc_name);
    if (!users.empty())
      refusal = "unfinished jobs use it: " + NameList(users) + " (wait for them or delete them)";
  }
  if (!refusal.empty()) return FailedPrecondition("cannot delete " + object + ": " + refusal);

  store::WriteBatch batch;
  batch.Delete(kind, name);
  auto deleted = CommitWithEvents(
      batch, object,
      {JobEvent{false, "Deleted",
                pending > 0 ? "deleted; " + std::to_string(pending) +
                                  " pending job(s) wait with LocalQueueNotFound until it exists "
                                  "again"
                            : "deleted"}});
  if (!deleted.ok()) return Unavailable(deleted.status().message());
  Json last = QueueObjectJson(kind, it->second);
  objects.erase(it);
  if (kind == kClusterQueue) usage_.erase(name);
  Emit(kind, "DELETED", last);
  AnnounceEvents();
  ScheduleAfterRequest();
  Json out = {{"kind", kind}, {"name", name}, {"status", "Deleted"}};
  if (kind == kLocalQueue) out["pendingJobs"] = pending;
  return out;
}

}  // namespace tessera::controller
