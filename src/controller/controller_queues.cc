// Controller: deleting the admission resources (ClusterQueue, LocalQueue, PriorityClass).
// Creating and replacing them is Apply in controller.cc. The rules are in docs/admission.md,
// "Deleting queues and priority classes": a delete that would silently change what running or
// waiting jobs are charged or ranked by is refused with 409 naming those jobs, so an operator
// never loses track of quota or priority by deleting an object.
#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

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

}  // namespace

ApiResult<Json> Controller::DeleteQueueObject(const std::string& kind, const std::string& name) {
  if (kind != kClusterQueue && kind != kLocalQueue && kind != kPriorityClass)
    return ApiError{400, "kind: must be ClusterQueue, LocalQueue or PriorityClass", "kind"};
  const std::string object = Lower(kind) + "/" + name;
  std::lock_guard lock(mu_);
  auto& objects = kind == kClusterQueue ? cluster_queues_
                  : kind == kLocalQueue ? local_queues_
                                        : priority_classes_;
  auto it = objects.find(name);
  if (it == objects.end()) return ApiError{404, Lower(kind) + " '" + name + "' not found", ""};

  // Jobs still charged to a queue: they hold chips (starting, running, restarting, or being
  // stopped) and are not being deleted.
  auto charged = [](const Job& job) { return job.holds_chips() && !job.deleting; };
  auto queue_of = [](const Job& job) {
    return job.spec.queue.empty() ? std::string(kDefaultQueue) : job.spec.queue;
  };
  std::string refusal;
  int pending = 0;
  if (kind == kClusterQueue) {
    // LocalQueues pointing at it: the admission cycle rejects a LocalQueue whose ClusterQueue
    // is missing and then admits nothing at all, so they must go first. Their admitted jobs are
    // named too: they are what the operator has to wait for.
    std::vector<std::string> locals, admitted;
    for (const auto& [local, o] : local_queues_) {
      auto spec = api::ParseLocalQueue(o.doc);
      if (spec.ok() && spec->cluster_queue == name) locals.push_back(local);
    }
    for (const auto& [job_name, job] : jobs_)
      if (charged(job) && std::find(locals.begin(), locals.end(), queue_of(job)) != locals.end())
        admitted.push_back(job_name);
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
      else if (job.phase == "Pending" && !job.deleting)
        ++pending;
    }
    if (!admitted.empty())
      refusal = "it has admitted jobs: " + NameList(admitted) + " (wait for them or delete them)";
  } else {
    // Priorities are resolved by name every cycle: a job whose class is gone would silently
    // drop to priority 0 (and become a preemption victim, or lose its place in line).
    std::vector<std::string> users;
    for (const auto& [job_name, job] : jobs_) {
      const bool finished = job.phase == "Succeeded" || job.phase == "Failed";
      if (job.spec.priority == name && !finished && !job.deleting) users.push_back(job_name);
    }
    if (!users.empty())
      refusal = "unfinished jobs use it: " + NameList(users) + " (wait for them or delete them)";
  }
  if (!refusal.empty()) return ApiError{409, "cannot delete " + object + ": " + refusal, ""};

  Status deleted = store_.Delete(kind, name);
  if (!deleted.ok()) return ApiError{503, "store: " + deleted.message(), ""};
  Json last = QueueObjectJson(kind, it->second);
  objects.erase(it);
  if (kind == kClusterQueue) usage_.erase(name);
  Event("Normal", "Deleted", object,
        pending > 0 ? "deleted; " + std::to_string(pending) +
                          " pending job(s) wait with LocalQueueNotFound until it exists again"
                    : "deleted");
  Emit(kind, "DELETED", last);
  Schedule();
  Json out = {{"kind", kind}, {"name", name}, {"status", "Deleted"}};
  if (kind == kLocalQueue) out["pendingJobs"] = pending;
  return out;
}

}  // namespace tessera::controller
