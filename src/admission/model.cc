#include "admission/model.h"

#include <cmath>
#include <set>

#include "common/object_key.h"

namespace tessera {

const char* QueueingStrategyName(QueueingStrategy s) {
  return s == QueueingStrategy::kStrictFIFO ? "StrictFIFO" : "BestEffortFIFO";
}

const char* WithinClusterQueueName(WithinClusterQueue p) {
  switch (p) {
    case WithinClusterQueue::kNever:
      return "Never";
    case WithinClusterQueue::kLowerPriority:
      return "LowerPriority";
    case WithinClusterQueue::kLowerOrNewerEqualPriority:
      return "LowerOrNewerEqualPriority";
  }
  return "Unknown";
}

const char* ReclaimWithinCohortName(ReclaimWithinCohort p) {
  switch (p) {
    case ReclaimWithinCohort::kNever:
      return "Never";
    case ReclaimWithinCohort::kLowerPriority:
      return "LowerPriority";
    case ReclaimWithinCohort::kAny:
      return "Any";
  }
  return "Unknown";
}

const char* BorrowWithinCohortPolicyName(BorrowWithinCohortPolicy p) {
  return p == BorrowWithinCohortPolicy::kNever ? "Never" : "LowerPriority";
}

const char* WorkloadStateName(WorkloadState s) {
  switch (s) {
    case WorkloadState::kPending:
      return "Pending";
    case WorkloadState::kAdmitted:
      return "Admitted";
    case WorkloadState::kRunning:
      return "Running";
    case WorkloadState::kDeactivated:
      return "Deactivated";
  }
  return "Unknown";
}

namespace {

// What is wrong with `name` as a name ("" when nothing is): the checks allocate nothing, as a
// cycle validates every workload's queue key.
std::string_view NameProblem(std::string_view name) {
  if (name.empty()) return "must not be empty";
  if (name.size() > 63) return "is longer than 63 characters";
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  for (char c : name)
    if (!alnum(c) && c != '-') return "may hold only lowercase letters, digits and '-'";
  if (!alnum(name.front()) || !alnum(name.back()))
    return "must start and end with a letter or digit";
  return {};
}

Status NameError(std::string_view field, std::string_view name, std::string_view problem) {
  if (name.empty()) return InvalidArgument(std::string(field) + ": " + std::string(problem));
  return InvalidArgument(std::string(field) + ": '" + std::string(name) + "' " +
                         std::string(problem));
}

}  // namespace

Status ValidateName(std::string_view field, std::string_view name) {
  const std::string_view problem = NameProblem(name);
  return problem.empty() ? Status::Ok() : NameError(field, name, problem);
}

// A LocalQueue's key (common/object_key.h): its name, or NAMESPACE.NAME outside "default".
Status ValidateKey(std::string_view field, std::string_view key) {
  const size_t dot = key.find(kObjectKeySeparator);
  if (dot != key.npos) {
    const std::string_view ns = key.substr(0, dot);
    if (const std::string_view problem = NameProblem(ns); !problem.empty())
      return NameError(std::string(field) + " (namespace)", ns, problem);
  }
  return ValidateName(field, dot == key.npos ? key : key.substr(dot + 1));
}

Status Validate(const ClusterQueueSpec& spec) {
  TESSERA_RETURN_IF_ERROR(ValidateName("name", spec.name));
  if (!spec.cohort.empty()) TESSERA_RETURN_IF_ERROR(ValidateName("cohort", spec.cohort));
  std::set<Generation> seen;
  std::set<GpuSystem> seen_gpu;
  for (size_t i = 0; i < spec.quotas.size(); ++i) {
    const ResourceQuota& q = spec.quotas[i];
    const std::string f = "quotas[" + std::to_string(i) + "]";
    if (q.gpu_system && !seen_gpu.insert(*q.gpu_system).second)
      return InvalidArgument(f + ".gpuSystem: " + std::string(GpuSystemName(*q.gpu_system)) +
                             " is listed twice; give one nvidia.com/gpu quota per GPU system");
    if (!q.gpu_system && !seen.insert(q.generation).second)
      return InvalidArgument(f + ".generation: " + std::string(GenerationName(q.generation)) +
                             " is listed twice; give one quota per generation");
    if (q.nominal_chips < 0)
      return InvalidArgument(f + ".nominalQuota: must be >= 0, got " +
                             std::to_string(q.nominal_chips));
    if (q.borrowing_limit_chips) {
      if (*q.borrowing_limit_chips < 0)
        return InvalidArgument(f + ".borrowingLimit: must be >= 0, got " +
                               std::to_string(*q.borrowing_limit_chips));
      if (spec.cohort.empty())
        return InvalidArgument(f + ".borrowingLimit: needs a cohort to borrow from");
    }
    if (q.lending_limit_chips) {
      if (*q.lending_limit_chips < 0 || *q.lending_limit_chips > q.nominal_chips)
        return InvalidArgument(
            f + ".lendingLimit: must be in [0, nominalQuota=" + std::to_string(q.nominal_chips) +
            "], got " + std::to_string(*q.lending_limit_chips));
      if (spec.cohort.empty())
        return InvalidArgument(f + ".lendingLimit: needs a cohort to lend to");
    }
  }
  const BorrowWithinCohort& b = spec.preemption.borrow_within_cohort;
  if (b.max_priority_threshold && b.policy == BorrowWithinCohortPolicy::kNever)
    return InvalidArgument(
        "preemption.borrowWithinCohort.maxPriorityThreshold: only meaningful with policy "
        "LowerPriority");
  if (!std::isfinite(spec.fair_sharing_weight) || spec.fair_sharing_weight <= 0)
    return InvalidArgument("fairSharing.weight: must be a finite number > 0, got " +
                           std::to_string(spec.fair_sharing_weight));
  return Status::Ok();
}

Status Validate(const LocalQueueSpec& spec) {
  TESSERA_RETURN_IF_ERROR(ValidateKey("name", spec.name));
  return ValidateName("clusterQueue", spec.cluster_queue);
}

Status Validate(const PriorityClass& spec) {
  TESSERA_RETURN_IF_ERROR(ValidateName("name", spec.name));
  constexpr int32_t kLimit = 1'000'000'000;
  if (spec.value < -kLimit || spec.value > kLimit)
    return InvalidArgument("value: must be in [-1000000000, 1000000000], got " +
                           std::to_string(spec.value));
  return Status::Ok();
}

Status Validate(const Workload& w) { return Validate(w, KnownValid{}); }

Status Validate(const Workload& w, KnownValid known) {
  if (!w.id.valid()) return InvalidArgument("id: must be set");
  if (w.name.empty()) return InvalidArgument("name: must not be empty");
  if (!known.queue) TESSERA_RETURN_IF_ERROR(ValidateKey("queue", w.local_queue));
  if (w.gpu) {
    const int per_host = Info(w.gpu->system).gpus_per_host;
    if (w.gpu->request.gpus < per_host || w.gpu->request.gpus % per_host != 0)
      return InvalidArgument("gpu.gpus: " + std::to_string(w.gpu->request.gpus) +
                             " is not a whole number of " +
                             std::string(GpuSystemName(w.gpu->system)) + " hosts (" +
                             std::to_string(per_host) + " GPUs each); ask for whole hosts");
  } else if (w.request.num_slices < 1)
    return InvalidArgument("slices: must be at least 1, got " +
                           std::to_string(w.request.num_slices));
  if (!w.gpu && !known.shape) {
    Status shape = ValidateShape(w.request.generation, w.request.shape);
    if (!shape.ok()) return InvalidArgument("topology: " + shape.message());
  }
  if (w.creation_order < 0)
    return InvalidArgument("creationOrder: must be >= 0, got " + std::to_string(w.creation_order));
  if (w.start_guard.retries < 0)
    return InvalidArgument("startGuard.retries: must be >= 0, got " +
                           std::to_string(w.start_guard.retries));
  return Status::Ok();
}

Result<int32_t> ResolvePriority(const std::vector<PriorityClass>& classes, std::string_view name) {
  std::string known;
  for (const PriorityClass& c : classes) {
    if (c.name == name) return c.value;
    known += (known.empty() ? "" : ", ") + c.name;
  }
  return NotFound("priority: class '" + std::string(name) +
                  "' does not exist; known: " + (known.empty() ? "none" : known));
}

}  // namespace tessera
