// ParseTrainJob (manifest.h): a TrainJob document decoded into its TrainJobSpec, every wrong
// field refused with a message naming it. The document reader is manifest_document.cc, the
// field readers manifest_fields.cc, the queue kinds queue_manifest.cc.
#include "codec/manifest.h"

#include <set>

#include "codec/in_memory_checkpoint.h"
#include "codec/manifest_fields.h"
#include "codec/secret_manifest.h"
#include "codec/warm_start.h"

namespace tessera::codec {
namespace {

constexpr int kMaxSlices = 4096;
constexpr int kMaxGpuHosts = 4096;

// spec.gpu: {system, hosts, domain: required | preferred | segment, segment: K}.
Result<GpuJobSpec> ParseGpuJobSpec(const Json& g) {
  TESSERA_RETURN_IF_ERROR(RequireObject(g, "spec.gpu"));
  TESSERA_RETURN_IF_ERROR(OnlyKnownFields(g, "spec.gpu", {"system", "hosts", "domain", "segment"}));
  GpuJobSpec gpu;
  auto system = GetString(g, "system", "spec.gpu", false);
  if (!system.ok()) return system.status();
  if (system->empty())
    return InvalidArgument("spec.gpu.system: required; valid: " + ValidGpuSystemsText());
  auto parsed = ParseGpuSystem(*system);
  if (!parsed.ok()) return InvalidArgument("spec.gpu.system: " + parsed.status().message());
  gpu.system = *parsed;
  if (!Has(g, "hosts"))
    return InvalidArgument("spec.gpu.hosts: required: how many whole hosts (one worker each)");
  auto hosts = GetInt(g, "hosts", "spec.gpu", 1, 1, kMaxGpuHosts);
  if (!hosts.ok()) return hosts.status();
  gpu.hosts = static_cast<int>(*hosts);
  auto domain_field = GetString(g, "domain", "spec.gpu", false);
  if (!domain_field.ok()) return domain_field.status();
  const bool has_segment = Has(g, "segment");
  const std::string domain = domain_field->empty() && !has_segment ? "required" : *domain_field;
  if (domain.empty() || domain == "segment") {
    if (!has_segment)
      return InvalidArgument("spec.gpu.segment: required with domain: segment (hosts per segment)");
    auto k = GetInt(g, "segment", "spec.gpu", 1, 1, kMaxGpuHosts);
    if (!k.ok()) return k.status();
    if (gpu.hosts % *k != 0)
      return InvalidArgument("spec.gpu.segment: " + std::to_string(*k) + " does not divide " +
                             "spec.gpu.hosts " + std::to_string(gpu.hosts) +
                             "; use a segment size that divides it");
    gpu.rule = {DomainRule::kSegment, static_cast<int>(*k)};
    return gpu;
  }
  if (has_segment)
    return InvalidArgument(
        "spec.gpu.segment: only with domain: segment (or without domain); "
        "domain is '" +
        domain + "'");
  if (domain == "required") {
    gpu.rule = {DomainRule::kRequired, 0};
  } else if (domain == "preferred") {
    gpu.rule = {DomainRule::kPreferred, 0};
  } else {
    return InvalidArgument("spec.gpu.domain: '" + domain +
                           "' is unknown; valid: required, preferred, segment (with segment: K)");
  }
  return gpu;
}

}  // namespace

Result<TrainJobSpec> ParseTrainJob(const Json& doc) {
  TESSERA_RETURN_IF_ERROR(RequireObject(doc, "body"));
  TESSERA_RETURN_IF_ERROR(
      OnlyKnownFields(doc, "document", {"apiVersion", "kind", "metadata", "spec", "status"}));
  auto api_version = GetString(doc, "apiVersion", "document", true);
  if (!api_version.ok()) return InvalidArgument("apiVersion: required; use tessera/v1");
  if (*api_version != kApiVersion)
    return InvalidArgument("apiVersion: '" + *api_version + "' is not served; use tessera/v1");
  auto kind = GetString(doc, "kind", "document", true);
  if (!kind.ok()) return InvalidArgument("kind: required; valid: TrainJob");
  if (*kind != "TrainJob")
    return InvalidArgument("kind: '" + *kind + "' is unknown here; valid: TrainJob");

  TrainJobSpec spec;
  if (!doc.contains("metadata")) return InvalidArgument("metadata: required (metadata.name)");
  const Json& meta = doc["metadata"];
  TESSERA_RETURN_IF_ERROR(RequireObject(meta, "metadata"));
  TESSERA_RETURN_IF_ERROR(
      OnlyKnownFields(meta, "metadata", {"name", "namespace", "queue", "labels"}));
  auto metadata = GetWorkloadMetadata(meta);
  if (!metadata.ok()) return metadata.status();
  spec.name = metadata->name;
  spec.queue = metadata->queue;
  spec.labels = metadata->labels;

  if (!doc.contains("spec")) return InvalidArgument("spec: required");
  const Json& s = doc["spec"];
  TESSERA_RETURN_IF_ERROR(RequireObject(s, "spec"));
  TESSERA_RETURN_IF_ERROR(OnlyKnownFields(
      s, "spec",
      {"accelerator", "topology", "slices", "priority", "failurePolicy", "progress", "checkpoint",
       "template", "warmStart", "expectedDuration", "reservation", "gpu"}));
  if (Has(s, "gpu")) {
    for (const char* tpu : {"accelerator", "topology", "slices", "reservation"})
      if (Has(s, tpu))
        return InvalidArgument(std::string("spec.") + tpu + ": a GPU job (spec.gpu) takes no " +
                               tpu + "; remove it");
    auto gpu = ParseGpuJobSpec(s["gpu"]);
    if (!gpu.ok()) return gpu.status();
    spec.gpu = *gpu;
  } else {
    auto topo = GetSliceTopology(s, "spec");
    if (!topo.ok()) return topo.status();
    spec.accelerator = topo->generation();
    spec.topology = topo->shape();
  }

  if (s.contains("slices")) {
    const Json& sl = s["slices"];
    if (sl.is_object()) {
      TESSERA_RETURN_IF_ERROR(OnlyKnownFields(sl, "spec.slices", {"min", "max"}));
      auto mn = GetInt(sl, "min", "spec.slices", 1, 1, kMaxSlices);
      if (!mn.ok()) return mn.status();
      auto mx = GetInt(sl, "max", "spec.slices", *mn, 1, kMaxSlices);
      if (!mx.ok()) return mx.status();
      if (*mx < *mn)
        return InvalidArgument("spec.slices.max: " + std::to_string(*mx) +
                               " is below spec.slices.min " + std::to_string(*mn));
      spec.min_slices = static_cast<int>(*mn);
      spec.max_slices = static_cast<int>(*mx);
    } else {
      auto n = GetInt(s, "slices", "spec", 1, 1, kMaxSlices);
      if (!n.ok()) return n.status();
      spec.min_slices = spec.max_slices = static_cast<int>(*n);
    }
  }
  auto prio = GetString(s, "priority", "spec", false);
  if (!prio.ok()) return prio.status();
  spec.priority = *prio;
  auto reservation = GetName(s, "reservation", "spec", false);
  if (!reservation.ok()) return reservation.status();
  spec.reservation = reservation->empty() ? "" : ObjectKey(metadata->namespace_name, *reservation);

  if (s.contains("failurePolicy")) {
    const Json& fp = s["failurePolicy"];
    TESSERA_RETURN_IF_ERROR(RequireObject(fp, "spec.failurePolicy"));
    TESSERA_RETURN_IF_ERROR(OnlyKnownFields(
        fp, "spec.failurePolicy", {"maxFailures", "onHostLoss", "growBackInterval", "mtbf"}));
    auto mf = GetInt(fp, "maxFailures", "spec.failurePolicy", 0, -1, 1'000'000);
    if (!mf.ok()) return mf.status();
    spec.max_failures = static_cast<int>(*mf);
    auto hl = GetString(fp, "onHostLoss", "spec.failurePolicy", false);
    if (!hl.ok()) return hl.status();
    if (*hl == "" || *hl == "fail")
      spec.on_host_loss = HostLossPolicy::kFail;
    else if (*hl == "pause")
      spec.on_host_loss = HostLossPolicy::kPause;
    else if (*hl == "resize")
      spec.on_host_loss = HostLossPolicy::kResize;
    else
      return InvalidArgument("spec.failurePolicy.onHostLoss: '" + *hl +
                             "' is unknown; valid: fail, pause, resize");
    if (fp.contains("growBackInterval")) {
      auto ms = ParseDurationMs("spec.failurePolicy.growBackInterval", fp["growBackInterval"]);
      if (!ms.ok()) return ms.status();
      if (*ms < 100)
        return InvalidArgument("spec.failurePolicy.growBackInterval: must be at least 100ms");
      spec.grow_back_interval_ms = *ms;
    }
    if (fp.contains("mtbf")) {
      auto ms = ParseDurationMs("spec.failurePolicy.mtbf", fp["mtbf"]);
      if (!ms.ok()) return ms.status();
      if (*ms <= 0) return InvalidArgument("spec.failurePolicy.mtbf: must be positive, e.g. 24h");
      spec.mtbf_ms = *ms;
    }
  }
  if (s.contains("progress")) {
    const Json& pr = s["progress"];
    TESSERA_RETURN_IF_ERROR(RequireObject(pr, "spec.progress"));
    TESSERA_RETURN_IF_ERROR(OnlyKnownFields(pr, "spec.progress", {"hangTimeout"}));
    if (pr.contains("hangTimeout")) {
      auto ms = ParseDurationMs("spec.progress.hangTimeout", pr["hangTimeout"]);
      if (!ms.ok()) return ms.status();
      spec.hang_timeout_ms = *ms;
    }
  }
  if (s.contains("expectedDuration")) {
    auto ms =
        ParsePositiveDurationMs("spec.expectedDuration", s["expectedDuration"], "6h", "if unknown");
    if (!ms.ok()) return ms.status();
    spec.expected_duration_ms = *ms;
  }
  if (s.contains("checkpoint")) {
    const Json& ck = s["checkpoint"];
    TESSERA_RETURN_IF_ERROR(RequireObject(ck, "spec.checkpoint"));
    TESSERA_RETURN_IF_ERROR(OnlyKnownFields(ck, "spec.checkpoint", {"dir", "inMemory"}));
    auto dir = GetString(ck, "dir", "spec.checkpoint", false);
    if (!dir.ok()) return dir.status();
    spec.checkpoint_dir = *dir;
  }
  if (!s.contains("template")) return InvalidArgument("spec.template: required (a command)");
  const Json& t = s["template"];
  TESSERA_RETURN_IF_ERROR(RequireObject(t, "spec.template"));
  TESSERA_RETURN_IF_ERROR(OnlyKnownFields(
      t, "spec.template", {"command", "env", "workingDir", "terminationGracePeriod"}));
  if (!t.contains("command") || !t["command"].is_array() || t["command"].empty())
    return InvalidArgument(
        "spec.template.command: required, a non-empty list such as [python3, train.py]");
  for (size_t i = 0; i < t["command"].size(); ++i) {
    const Json& c = t["command"][i];
    const std::string field = "spec.template.command[" + std::to_string(i) + "]";
    if (!c.is_string() && !c.is_number()) return InvalidArgument(field + ": must be a string");
    std::string arg = c.is_string() ? c.get<std::string>() : c.dump();
    // A NUL would end the argument early at exec; newlines and tabs are ordinary arguments.
    TESSERA_RETURN_IF_ERROR(CheckText(field, arg, ControlChars::kTabAndNewline));
    spec.command.push_back(std::move(arg));
  }
  auto env = GetEnv(t, "env", "spec.template");  // secret_manifest.h
  if (!env.ok()) return env.status();
  for (const std::string& k : env->Names()) {
    if (k.rfind("TPU_", 0) == 0 || k.rfind("MEGASCALE_", 0) == 0 || k == "RANK" ||
        k == "WORLD_SIZE" || k == "MASTER_ADDR" || k == "MASTER_PORT" ||
        k.rfind("TESSERA_", 0) == 0 ||
        (spec.gpu && (k == "CUDA_VISIBLE_DEVICES" || k == "LOCAL_RANK" || k == "NODE_RANK")))
      return InvalidArgument("spec.template.env." + k +
                             ": set by tessera for every attempt; remove it from the spec");
  }
  spec.env = std::move(env->plain);
  spec.secret_env = std::move(env->secrets);
  TESSERA_RETURN_IF_ERROR(ParseWarmStart(s, spec.env));  // warm_start.h
  if (s.contains("checkpoint"))  // in_memory_checkpoint.h: TESSERA_PEER_CKPT_*
    TESSERA_RETURN_IF_ERROR(
        ParseInMemoryCheckpoint(s["checkpoint"], spec.checkpoint_dir, spec.env));
  auto wd = GetString(t, "workingDir", "spec.template", false);
  if (!wd.ok()) return wd.status();
  spec.working_dir = *wd;
  if (t.contains("terminationGracePeriod")) {
    auto ms = ParseDurationMs("spec.template.terminationGracePeriod", t["terminationGracePeriod"]);
    if (!ms.ok()) return ms.status();
    spec.grace_ms = *ms;
  }
  return spec;
}

}  // namespace tessera::codec
