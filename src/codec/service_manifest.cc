#include "codec/service_manifest.h"

#include <set>
#include <utility>

#include "codec/manifest.h"
#include "codec/manifest_fields.h"
#include "codec/secret_manifest.h"
#include "codec/service_disagg_manifest.h"
#include "codec/warm_start.h"

namespace tessera::codec {
namespace {

constexpr int kMaxReplicas = 4096;

// Fields users bring from other systems, with the name tessera uses.
std::string Hint(const std::string& key) {
  if (key == "queueName") return "; the queue is metadata.queue, as in TrainJob";
  if (key == "priorityClassName") return "; the priority class is spec.priority, as in TrainJob";
  if (key == "reservation")
    return "; a Service names its SliceReservation once, as spec.reservation, for all its roles";
  if (key == "warmStart")
    return "; with spec.roles, each role has its own warmStart (spec.roles[i].warmStart)";
  if (key == "slices" || key == "numSlices")
    return "; a replica is one whole slice, so a role's number of slices is its replicas (or "
           "autoscaling)";
  return "";
}

// OnlyKnownFields, with the hints above for an unknown field users often bring.
Status OnlyKnownServiceFields(const Json& obj, const std::string& path,
                              const std::set<std::string>& allowed) {
  Status known = OnlyKnownFields(obj, path, allowed);
  if (known.ok()) return known;
  for (auto it = obj.begin(); it != obj.end(); ++it)
    if (!allowed.count(it.key())) return InvalidArgument(known.message() + Hint(it.key()));
  return known;
}

// A duration; negative ones get their own message (ParseDurationMs only says how to write one).
Result<int64_t> GetDuration(const Json& obj, const std::string& key, const std::string& path,
                            int64_t fallback) {
  if (!Has(obj, key)) return fallback;
  const Json& v = obj[key];
  const std::string field = path + "." + key;
  if ((v.is_number() && v.get<double>() < 0) ||
      (v.is_string() && !v.get<std::string>().empty() && v.get<std::string>()[0] == '-'))
    return InvalidArgument(field + ": must not be negative; write a duration like 30s or 10m");
  return ParseDurationMs(field, v);
}

Result<ReadinessSpec> ParseReadiness(const Json& rd, const std::string& path) {
  ReadinessSpec out;
  TESSERA_RETURN_IF_ERROR(RequireObject(rd, path));
  TESSERA_RETURN_IF_ERROR(
      OnlyKnownServiceFields(rd, path, {"path", "startupGrace", "period", "timeout"}));
  auto p = GetString(rd, "path", path, false);
  if (!p.ok()) return p.status();
  if (!p->empty()) {
    if ((*p)[0] != '/')
      return InvalidArgument(path + ".path: '" + *p + "' must start with '/', e.g. /healthz");
    out.path = *p;
  }
  auto grace = GetDuration(rd, "startupGrace", path, out.startup_grace_ms);
  if (!grace.ok()) return grace.status();
  out.startup_grace_ms = *grace;
  auto period = GetDuration(rd, "period", path, out.period_ms);
  if (!period.ok()) return period.status();
  if (*period <= 0) return InvalidArgument(path + ".period: must be positive, e.g. 10s");
  out.period_ms = *period;
  auto timeout = GetDuration(rd, "timeout", path, out.timeout_ms);
  if (!timeout.ok()) return timeout.status();
  if (*timeout <= 0) return InvalidArgument(path + ".timeout: must be positive, e.g. 30s");
  out.timeout_ms = *timeout;
  return out;
}

Result<AutoscalerConfig> ParseAutoscaling(const Json& as, const std::string& path) {
  AutoscalerConfig c;
  TESSERA_RETURN_IF_ERROR(RequireObject(as, path));
  TESSERA_RETURN_IF_ERROR(OnlyKnownServiceFields(
      as, path,
      {"minReplicas", "maxReplicas", "initialReplicas", "targetOngoingRequests", "upscaleDelay",
       "downscaleDelay", "lookback", "targetTTFTMs", "targetTPOTMs",
       "targetQueuedPromptTokens"}));  // service_disagg_manifest.cc
  auto mn = GetInt(as, "minReplicas", path, 1, 0, kMaxReplicas);
  if (!mn.ok()) return mn.status();
  if (!Has(as, "maxReplicas"))
    return InvalidArgument(path + ".maxReplicas: required (the most replicas to scale to)");
  auto mx = GetInt(as, "maxReplicas", path, 1, 1, kMaxReplicas);
  if (!mx.ok()) return mx.status();
  if (*mn > *mx)
    return InvalidArgument(path + ".minReplicas: " + std::to_string(*mn) +
                           " is above maxReplicas " + std::to_string(*mx) +
                           "; make minReplicas <= maxReplicas");
  c.min_replicas = static_cast<int>(*mn);
  c.max_replicas = static_cast<int>(*mx);
  if (Has(as, "initialReplicas")) {
    auto initial = GetInt(as, "initialReplicas", path, *mn, 0, kMaxReplicas);
    if (!initial.ok()) return initial.status();
    if (*initial < *mn || *initial > *mx)
      return InvalidArgument(path + ".initialReplicas: " + std::to_string(*initial) +
                             " is outside [minReplicas " + std::to_string(*mn) + ", maxReplicas " +
                             std::to_string(*mx) + "]; start the role within its bounds");
    c.initial_replicas = static_cast<int>(*initial);
  }
  if (Has(as, "targetOngoingRequests")) {
    const Json& t = as["targetOngoingRequests"];
    if (!t.is_number() || t.get<double>() <= 0)
      return InvalidArgument(path +
                             ".targetOngoingRequests: must be a positive number (default: half "
                             "of maxOngoingRequests)");
    c.target_ongoing_requests = t.get<double>();
  }
  // The SLO signal's targets: the router's mean TTFT and time per output token over the
  // look-back, in milliseconds (omitted: the autoscaler's defaults, 2000 and 50).
  for (const auto& [field, target] :
       {std::pair<const char*, double*>{"targetTTFTMs", &c.target_ttft_ms},
        std::pair<const char*, double*>{"targetTPOTMs", &c.target_tpot_ms}}) {
    if (!Has(as, field)) continue;
    const Json& t = as[field];
    if (!t.is_number() || !(t.get<double>() > 0))
      return InvalidArgument(path + "." + field +
                             ": must be a positive number of milliseconds, e.g. 2000 (omit it "
                             "for the default: 2000 for TTFT, 50 for TPOT)");
    *target = t.get<double>();
  }
  auto up = GetDuration(as, "upscaleDelay", path, c.upscale_delay_ms);
  if (!up.ok()) return up.status();
  c.upscale_delay_ms = *up;
  auto down = GetDuration(as, "downscaleDelay", path, c.downscale_delay_ms);
  if (!down.ok()) return down.status();
  c.downscale_delay_ms = *down;
  auto lookback = GetDuration(as, "lookback", path, c.lookback_ms);
  if (!lookback.ok()) return lookback.status();
  if (*lookback <= 0) return InvalidArgument(path + ".lookback: must be positive, e.g. 60s");
  c.lookback_ms = *lookback;
  return c;
}

Result<ServiceRoleSpec> ParseRole(const Json& r, const std::string& path, bool named) {
  ServiceRoleSpec role;
  TESSERA_RETURN_IF_ERROR(RequireObject(r, path));
  std::set<std::string> fields = {"accelerator", "topology",
                                  "command",     "env",
                                  "workingDir",  "terminationGracePeriod",
                                  "port",        "replicas",
                                  "autoscaling", "maxOngoingRequests",
                                  "readiness",   "rollout",
                                  "warmStart",   "startupNice"};
  if (named)
    fields.insert({"name", "disaggregation"});  // disaggregation: service_disagg_manifest.cc
  else
    fields.insert({"priority", "roles", "reservation"});  // spec itself: checked by the caller
  TESSERA_RETURN_IF_ERROR(OnlyKnownServiceFields(r, path, fields));
  if (named) {
    auto name = GetString(r, "name", path, true);
    if (!name.ok()) return name.status();
    TESSERA_RETURN_IF_ERROR(ValidateName(path + ".name", *name));
    role.name = *name;
  }
  auto topo = GetSliceTopology(r, path);
  if (!topo.ok()) return topo.status();
  role.accelerator = topo->generation();
  role.topology = topo->shape();

  if (!Has(r, "command") || !r["command"].is_array() || r["command"].empty())
    return InvalidArgument(path +
                           ".command: required, a non-empty list such as [python3, server.py]");
  for (size_t i = 0; i < r["command"].size(); ++i) {
    const Json& c = r["command"][i];
    if (!c.is_string() && !c.is_number())
      return InvalidArgument(path + ".command[" + std::to_string(i) + "]: must be a string");
    role.command.push_back(c.is_string() ? c.get<std::string>() : c.dump());
  }
  auto env = GetEnv(r, "env", path);  // secret_manifest.h
  if (!env.ok()) return env.status();
  for (const std::string& k : env->Names())
    if (k.rfind("TPU_", 0) == 0 || k.rfind("MEGASCALE_", 0) == 0 || k == "RANK" ||
        k == "WORLD_SIZE" || k == "MASTER_ADDR" || k == "MASTER_PORT" || k == "PORT" ||
        k.rfind("TESSERA_", 0) == 0)
      return InvalidArgument(path + ".env." + k +
                             ": set by tessera for every replica group; remove it from the spec");
  role.env = std::move(env->plain);
  role.secret_env = std::move(env->secrets);
  auto wd = GetString(r, "workingDir", path, false);
  if (!wd.ok()) return wd.status();
  role.working_dir = *wd;
  auto warm = ParseWarmPreload(r, path);  // warm_start.h; TESSERA_WARM_PRELOAD at assignment
  if (!warm.ok()) return warm.status();
  role.warm_preload = std::move(*warm);
  auto grace = GetDuration(r, "terminationGracePeriod", path, role.grace_ms);
  if (!grace.ok()) return grace.status();
  role.grace_ms = *grace;
  auto port = GetInt(r, "port", path, role.port, 1, 65535);
  if (!port.ok()) return port.status();
  role.port = static_cast<int>(*port);

  if (Has(r, "replicas") && Has(r, "autoscaling"))
    return InvalidArgument(path + ".replicas: set replicas or autoscaling, not both");
  auto replicas = GetInt(r, "replicas", path, 1, 0, kMaxReplicas);
  if (!replicas.ok()) return replicas.status();
  role.replicas = static_cast<int>(*replicas);
  if (Has(r, "autoscaling")) {
    auto as = ParseAutoscaling(r["autoscaling"], path + ".autoscaling");
    if (!as.ok()) return as.status();
    role.autoscaling = *as;
    role.replicas = AutoscaleInitialReplicas(*as);
  }
  auto max_ongoing = GetInt(r, "maxOngoingRequests", path, role.max_ongoing_requests, 1, 1'000'000);
  if (!max_ongoing.ok()) return max_ongoing.status();
  role.max_ongoing_requests = static_cast<int>(*max_ongoing);
  auto startup_nice = GetInt(r, "startupNice", path, role.startup_nice, 0, 19);
  if (!startup_nice.ok()) return startup_nice.status();
  role.startup_nice = static_cast<int>(*startup_nice);
  if (Has(r, "readiness")) {
    auto rd = ParseReadiness(r["readiness"], path + ".readiness");
    if (!rd.ok()) return rd.status();
    role.readiness = *rd;
  }
  if (Has(r, "rollout")) {
    const std::string rp = path + ".rollout";
    const Json& ro = r["rollout"];
    TESSERA_RETURN_IF_ERROR(RequireObject(ro, rp));
    TESSERA_RETURN_IF_ERROR(OnlyKnownServiceFields(ro, rp, {"maxSurge", "maxUnavailable"}));
    auto surge = GetInt(ro, "maxSurge", rp, role.rollout.max_surge, 0, kMaxReplicas);
    if (!surge.ok()) return surge.status();
    auto unavailable =
        GetInt(ro, "maxUnavailable", rp, role.rollout.max_unavailable, 0, kMaxReplicas);
    if (!unavailable.ok()) return unavailable.status();
    if (*surge == 0 && *unavailable == 0)
      return InvalidArgument(rp +
                             ".maxSurge: maxSurge and maxUnavailable are both 0, so a rolling "
                             "update could never start; allow 1 of either");
    role.rollout = {static_cast<int>(*surge), static_cast<int>(*unavailable)};
  }
  return role;
}

}  // namespace

Result<ServiceSpec> ParseService(const Json& doc) {
  TESSERA_RETURN_IF_ERROR(RequireObject(doc, "body"));
  auto kind = DocumentKind(doc);
  if (!kind.ok()) return kind.status();
  if (*kind != kServiceKind) return InvalidArgument("kind: expected Service, got " + *kind);
  TESSERA_RETURN_IF_ERROR(OnlyKnownServiceFields(
      doc, "document", {"apiVersion", "kind", "metadata", "spec", "status"}));
  ServiceSpec spec;
  if (!Has(doc, "metadata")) return InvalidArgument("metadata: required (metadata.name)");
  const Json& meta = doc["metadata"];
  TESSERA_RETURN_IF_ERROR(RequireObject(meta, "metadata"));
  TESSERA_RETURN_IF_ERROR(
      OnlyKnownServiceFields(meta, "metadata", {"name", "namespace", "queue", "labels"}));
  auto metadata = GetWorkloadMetadata(meta);
  if (!metadata.ok()) return metadata.status();
  spec.name = std::move(metadata->name);
  spec.queue = std::move(metadata->queue);
  spec.labels = std::move(metadata->labels);

  if (!Has(doc, "spec")) return InvalidArgument("spec: required");
  const Json& s = doc["spec"];
  TESSERA_RETURN_IF_ERROR(RequireObject(s, "spec"));
  auto priority = GetString(s, "priority", "spec", false);
  if (!priority.ok()) return priority.status();
  spec.priority = *priority;
  // Every replica group of every role runs inside this SliceReservation (docs/reservations.md).
  auto reservation = GetName(s, "reservation", "spec", false);
  if (!reservation.ok()) return reservation.status();
  spec.reservation = reservation->empty() ? "" : ObjectKey(metadata->namespace_name, *reservation);
  if (Has(s, "roles")) {
    TESSERA_RETURN_IF_ERROR(
        OnlyKnownServiceFields(s, "spec", {"priority", "reservation", "roles", "kvTransfer"}));
    const Json& roles = s["roles"];
    if (!roles.is_array() || roles.empty())
      return InvalidArgument(
          "spec.roles: must be a non-empty list of roles (name, accelerator, "
          "topology, command, ...)");
    std::set<std::string> seen;
    for (size_t i = 0; i < roles.size(); ++i) {
      const std::string path = "spec.roles[" + std::to_string(i) + "]";
      auto role = ParseRole(roles[i], path, /*named=*/true);
      if (!role.ok()) return role.status();
      if (!seen.insert(role->name).second)
        return InvalidArgument(path + ".name: '" + role->name +
                               "' is the name of an earlier role; role names must be unique");
      spec.roles.push_back(std::move(*role));
    }
  } else {
    auto role = ParseRole(s, "spec", /*named=*/false);
    if (!role.ok()) return role.status();
    spec.roles.push_back(std::move(*role));
  }
  TESSERA_RETURN_IF_ERROR(ParseDisaggregation(s, spec));
  return spec;
}

}  // namespace tessera::codec
