// ParseClusterQueue, ParseLocalQueue and ParsePriorityClass (manifest.h): the admission
// resources' documents decoded into the admission model's types and checked by its Validate,
// with errors naming the document field (docs/admission.md).
#include <cmath>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "codec/manifest.h"
#include "codec/manifest_fields.h"
#include "topology/gpu_system.h"

namespace tessera::codec {

namespace {

// The admission model's Validate names fields relative to the resource ("name", "quotas[0]...");
// documents put the name under metadata and the rest under spec.
Status InDocument(const Status& s, const std::string& spec_path) {
  if (s.ok()) return s;
  const std::string& m = s.message();
  if (spec_path.empty()) return s;
  if (m.rfind("name:", 0) == 0) return InvalidArgument("metadata." + m);
  return InvalidArgument(spec_path + "." + m);
}

// Checks apiVersion, kind and metadata and returns metadata.name; with kNamespaced, the key of
// metadata.name in metadata.namespace (common/object_key.h).
enum class Scope { kClusterWide, kNamespaced };
Result<std::string> CheckHeader(const Json& doc, const std::string& kind,
                                const std::set<std::string>& top_level,
                                Scope scope = Scope::kClusterWide) {
  TESSERA_RETURN_IF_ERROR(RequireObject(doc, "body"));
  auto k = DocumentKind(doc);
  if (!k.ok()) return k.status();
  if (*k != kind) return InvalidArgument("kind: expected " + kind + ", got " + *k);
  TESSERA_RETURN_IF_ERROR(OnlyKnownFields(doc, "document", top_level));
  if (!doc.contains("metadata")) return InvalidArgument("metadata: required (metadata.name)");
  const Json& meta = doc["metadata"];
  TESSERA_RETURN_IF_ERROR(RequireObject(meta, "metadata"));
  if (scope == Scope::kNamespaced)
    TESSERA_RETURN_IF_ERROR(OnlyKnownFields(meta, "metadata", {"name", "namespace", "labels"}));
  else
    TESSERA_RETURN_IF_ERROR(OnlyKnownFields(meta, "metadata", {"name", "labels"}));
  auto name = GetName(meta, "name", "metadata", true);
  if (!name.ok()) return name.status();
  std::string key = *name;
  if (scope == Scope::kNamespaced) {
    auto namespace_name = GetNamespace(meta);
    if (!namespace_name.ok()) return namespace_name.status();
    key = ObjectKey(*namespace_name, *name);
  }
  // Labels are kept with the document (and served back): the same rules as a TrainJob's.
  auto labels = GetStringMap(meta, "labels", "metadata", StringMapKind::kLabels);
  if (!labels.ok()) return labels.status();
  return key;
}

template <typename E>
Result<E> GetEnum(const Json& obj, const std::string& key, const std::string& path, E fallback,
                  const std::vector<std::pair<std::string, E>>& values) {
  auto s = GetString(obj, key, path, false);
  if (!s.ok()) return s.status();
  if (s->empty()) return fallback;
  std::string valid;
  for (const auto& [name, v] : values) {
    if (name == *s) return v;
    valid += (valid.empty() ? "" : ", ") + name;
  }
  return InvalidArgument(path + "." + key + ": '" + *s + "' is unknown; valid: " + valid);
}

Result<std::optional<int64_t>> GetOptionalInt(const Json& obj, const std::string& key,
                                              const std::string& path, int64_t lo, int64_t hi) {
  if (!obj.contains(key) || obj[key].is_null()) return std::optional<int64_t>();
  auto v = GetInt(obj, key, path, 0, lo, hi);
  if (!v.ok()) return v.status();
  return std::optional<int64_t>(*v);
}

// A quota's resource and flavor (docs/admission.md "Resources"): `resource: google.com/tpu`
// (the default) counts chips of `generation`; `resource: nvidia.com/gpu` counts GPUs of
// `gpuSystem` (a gpuSystem alone implies it). Errors name the field and the fix.
Result<ResourceQuota> ParseQuotaFlavor(const Json& q, const std::string& path) {
  auto resource = GetString(q, "resource", path, false);
  if (!resource.ok()) return resource.status();
  auto system_name = GetString(q, "gpuSystem", path, false);
  if (!system_name.ok()) return system_name.status();
  auto gen_name = GetString(q, "generation", path, false);
  if (!gen_name.ok()) return gen_name.status();
  const std::string valid_resources =
      std::string("valid: ") + kTpuResource + " (TPU chips of a generation: generation: v6e) and " +
      kGpuResource + " (GPUs of a system: gpuSystem: " + ValidGpuSystemsText() + ")";
  const bool gpu = *resource == kGpuResource || (resource->empty() && !system_name->empty());
  if (!resource->empty() && *resource != kGpuResource && *resource != kTpuResource)
    return InvalidArgument(path + ".resource: '" + *resource + "' is unknown; " + valid_resources);
  ResourceQuota rq;
  if (gpu) {
    if (!gen_name->empty() && ParseGpuSystem(*gen_name).ok())
      return InvalidArgument(path + ".generation: an " + kGpuResource +
                             " quota names its GPU system in gpuSystem; write gpuSystem: " +
                             *gen_name + " instead of generation: " + *gen_name);
    if (!gen_name->empty())
      return InvalidArgument(
          path + ".generation: " + *gen_name + " is a TPU generation, and an " + kGpuResource +
          " quota counts GPUs of a GPU system; write gpuSystem: " + ValidGpuSystemsText() +
          " instead of generation (or resource: " + kTpuResource + " for " + *gen_name + " chips)");
    if (system_name->empty())
      return InvalidArgument(path + ".gpuSystem: required with resource: " + kGpuResource +
                             "; one of " + ValidGpuSystemsText());
    auto system = ParseGpuSystem(*system_name);
    if (!system.ok()) return InvalidArgument(path + ".gpuSystem: " + system.status().message());
    rq.gpu_system = *system;
    return rq;
  }
  if (!system_name->empty())
    return InvalidArgument(path + ".gpuSystem: only with resource: " + kGpuResource + "; a " +
                           kTpuResource + " quota names a generation (generation: v6e)");
  if (gen_name->empty())
    return InvalidArgument(path + ".generation: required (the TPU generation whose chips it " +
                           "counts), or resource: " + kGpuResource +
                           " with gpuSystem: " + ValidGpuSystemsText() + " for GPUs");
  auto gen = ParseGeneration(*gen_name);
  if (!gen.ok()) {
    if (ParseGpuSystem(*gen_name).ok())
      return InvalidArgument(path + ".generation: " + *gen_name + " is a GPU system, not a " +
                             "TPU generation; count its GPUs with resource: " + kGpuResource +
                             ", gpuSystem: " + *gen_name);
    return InvalidArgument(path + ".generation: " + gen.status().message());
  }
  rq.generation = *gen;
  return rq;
}

constexpr int64_t kMaxChips = int64_t{1} << 40;
constexpr double kMinWeight = 0.001;
constexpr double kMaxWeight = 1'000'000;

}  // namespace

Result<ClusterQueueSpec> ParseClusterQueue(const Json& doc) {
  auto name =
      CheckHeader(doc, "ClusterQueue", {"apiVersion", "kind", "metadata", "spec", "status"});
  if (!name.ok()) return name.status();
  ClusterQueueSpec cq;
  cq.name = *name;
  if (!doc.contains("spec")) return InvalidArgument("spec: required (spec.quotas)");
  const Json& s = doc["spec"];
  TESSERA_RETURN_IF_ERROR(RequireObject(s, "spec"));
  TESSERA_RETURN_IF_ERROR(OnlyKnownFields(
      s, "spec", {"cohort", "quotas", "queueingStrategy", "preemption", "fairSharing"}));
  auto cohort = GetString(s, "cohort", "spec", false);
  if (!cohort.ok()) return cohort.status();
  cq.cohort = *cohort;
  if (s.contains("quotas")) {
    const Json& qs = s["quotas"];
    if (!qs.is_array())
      return InvalidArgument(
          "spec.quotas: must be a list such as [{generation: v6e, nominalQuota: 32}] or "
          "[{resource: nvidia.com/gpu, gpuSystem: gb200-nvl72, nominalQuota: 16}]");
    for (size_t i = 0; i < qs.size(); ++i) {
      const std::string path = "spec.quotas[" + std::to_string(i) + "]";
      const Json& q = qs[i];
      TESSERA_RETURN_IF_ERROR(RequireObject(q, path));
      TESSERA_RETURN_IF_ERROR(OnlyKnownFields(q, path,
                                              {"resource", "generation", "gpuSystem",
                                               "nominalQuota", "borrowingLimit", "lendingLimit"}));
      auto rq_or = ParseQuotaFlavor(q, path);
      if (!rq_or.ok()) return rq_or.status();
      ResourceQuota rq = *rq_or;
      if (!q.contains("nominalQuota"))
        return InvalidArgument(path + ".nominalQuota: required (" +
                               (rq.gpu_system ? "GPUs" : "chips") + ")");
      auto nominal = GetInt(q, "nominalQuota", path, 0, 0, kMaxChips);
      if (!nominal.ok()) return nominal.status();
      rq.nominal_chips = *nominal;
      auto borrow = GetOptionalInt(q, "borrowingLimit", path, 0, kMaxChips);
      if (!borrow.ok()) return borrow.status();
      rq.borrowing_limit_chips = *borrow;
      auto lend = GetOptionalInt(q, "lendingLimit", path, 0, kMaxChips);
      if (!lend.ok()) return lend.status();
      rq.lending_limit_chips = *lend;
      cq.quotas.push_back(rq);
    }
  }
  auto strategy =
      GetEnum<QueueingStrategy>(s, "queueingStrategy", "spec", QueueingStrategy::kBestEffortFIFO,
                                {{"StrictFIFO", QueueingStrategy::kStrictFIFO},
                                 {"BestEffortFIFO", QueueingStrategy::kBestEffortFIFO}});
  if (!strategy.ok()) return strategy.status();
  cq.queueing_strategy = *strategy;
  if (s.contains("preemption")) {
    const Json& p = s["preemption"];
    TESSERA_RETURN_IF_ERROR(RequireObject(p, "spec.preemption"));
    TESSERA_RETURN_IF_ERROR(OnlyKnownFields(
        p, "spec.preemption", {"withinClusterQueue", "reclaimWithinCohort", "borrowWithinCohort"}));
    auto within = GetEnum<WithinClusterQueue>(
        p, "withinClusterQueue", "spec.preemption", WithinClusterQueue::kNever,
        {{"Never", WithinClusterQueue::kNever},
         {"LowerPriority", WithinClusterQueue::kLowerPriority},
         {"LowerOrNewerEqualPriority", WithinClusterQueue::kLowerOrNewerEqualPriority}});
    if (!within.ok()) return within.status();
    cq.preemption.within_cluster_queue = *within;
    auto reclaim = GetEnum<ReclaimWithinCohort>(
        p, "reclaimWithinCohort", "spec.preemption", ReclaimWithinCohort::kNever,
        {{"Never", ReclaimWithinCohort::kNever},
         {"LowerPriority", ReclaimWithinCohort::kLowerPriority},
         {"Any", ReclaimWithinCohort::kAny}});
    if (!reclaim.ok()) return reclaim.status();
    cq.preemption.reclaim_within_cohort = *reclaim;
    if (p.contains("borrowWithinCohort")) {
      const std::string path = "spec.preemption.borrowWithinCohort";
      const Json& b = p["borrowWithinCohort"];
      TESSERA_RETURN_IF_ERROR(RequireObject(b, path));
      TESSERA_RETURN_IF_ERROR(OnlyKnownFields(b, path, {"policy", "maxPriorityThreshold"}));
      auto policy = GetEnum<BorrowWithinCohortPolicy>(
          b, "policy", path, BorrowWithinCohortPolicy::kNever,
          {{"Never", BorrowWithinCohortPolicy::kNever},
           {"LowerPriority", BorrowWithinCohortPolicy::kLowerPriority}});
      if (!policy.ok()) return policy.status();
      cq.preemption.borrow_within_cohort.policy = *policy;
      auto threshold =
          GetOptionalInt(b, "maxPriorityThreshold", path, -1'000'000'000, 1'000'000'000);
      if (!threshold.ok()) return threshold.status();
      if (*threshold)
        cq.preemption.borrow_within_cohort.max_priority_threshold =
            static_cast<int32_t>(**threshold);
    }
  }
  if (s.contains("fairSharing")) {
    const Json& f = s["fairSharing"];
    TESSERA_RETURN_IF_ERROR(RequireObject(f, "spec.fairSharing"));
    TESSERA_RETURN_IF_ERROR(OnlyKnownFields(f, "spec.fairSharing", {"weight"}));
    if (f.contains("weight")) {
      const Json& w = f["weight"];
      const std::string range = "must be a number from 0.001 to 1000000 (1 is the default)";
      if (!w.is_number()) return InvalidArgument("spec.fairSharing.weight: " + range);
      const double weight = w.get<double>();
      if (!std::isfinite(weight) || weight < kMinWeight || weight > kMaxWeight)
        return InvalidArgument("spec.fairSharing.weight: " + w.dump() + " is out of range; " +
                               range);
      cq.fair_sharing_weight = weight;
    }
  }
  TESSERA_RETURN_IF_ERROR(InDocument(Validate(cq), "spec"));
  return cq;
}

Result<LocalQueueSpec> ParseLocalQueue(const Json& doc) {
  auto name = CheckHeader(doc, "LocalQueue", {"apiVersion", "kind", "metadata", "spec", "status"},
                          Scope::kNamespaced);
  if (!name.ok()) return name.status();
  LocalQueueSpec lq;
  lq.name = *name;
  if (!doc.contains("spec")) return InvalidArgument("spec: required (spec.clusterQueue)");
  const Json& s = doc["spec"];
  TESSERA_RETURN_IF_ERROR(RequireObject(s, "spec"));
  TESSERA_RETURN_IF_ERROR(OnlyKnownFields(s, "spec", {"clusterQueue"}));
  auto cq = GetString(s, "clusterQueue", "spec", true);
  if (!cq.ok()) return cq.status();
  lq.cluster_queue = *cq;
  TESSERA_RETURN_IF_ERROR(InDocument(Validate(lq), "spec"));
  return lq;
}

Result<PriorityClass> ParsePriorityClass(const Json& doc) {
  auto name =
      CheckHeader(doc, "PriorityClass", {"apiVersion", "kind", "metadata", "value", "description"});
  if (!name.ok()) return name.status();
  PriorityClass pc;
  pc.name = *name;
  if (!doc.contains("value")) return InvalidArgument("value: required (higher runs first)");
  if (!doc["value"].is_number_integer())
    return InvalidArgument("value: must be a whole number in [-1000000000, 1000000000]");
  const int64_t v = doc["value"].is_number_unsigned()
                        ? static_cast<int64_t>(
                              std::min<uint64_t>(doc["value"].get<uint64_t>(), uint64_t{1} << 40))
                        : doc["value"].get<int64_t>();
  if (v < -1'000'000'000 || v > 1'000'000'000)
    return InvalidArgument("value: must be in [-1000000000, 1000000000], got " + std::to_string(v));
  pc.value = static_cast<int32_t>(v);
  if (doc.contains("description")) {
    const Json& d = doc["description"];
    if (!d.is_string()) return InvalidArgument("description: must be a string");
    TESSERA_RETURN_IF_ERROR(
        CheckText("description", d.get<std::string>(), ControlChars::kTabAndNewline));
  }
  TESSERA_RETURN_IF_ERROR(InDocument(Validate(pc), ""));
  return pc;
}

}  // namespace tessera::codec
