#include "codec/service_disagg_manifest.h"

#include <string>

#include "codec/manifest.h"
#include "codec/manifest_fields.h"

namespace tessera::codec {
namespace {

using Json = nlohmann::json;

constexpr int kMaxThresholdTokens = 1'000'000;

// A duration that must be more than 0: a handoff without a timeout could hold a request (or
// its KV on the prefill side) forever.
Result<int64_t> PositiveDuration(const Json& obj, const std::string& key, const std::string& path,
                                 int64_t fallback, const char* example) {
  if (!Has(obj, key)) return fallback;
  const std::string field = path + "." + key;
  const Json& v = obj[key];
  if ((v.is_number() && v.get<double>() <= 0) ||
      (v.is_string() && !v.get<std::string>().empty() && v.get<std::string>()[0] == '-'))
    return InvalidArgument(field + ": must be more than 0, e.g. " + example +
                           " (without a timeout a stalled handoff would hold its request or its "
                           "KV forever)");
  auto ms = ParseDurationMs(field, v);
  if (!ms.ok()) return ms.status();
  if (*ms <= 0)
    return InvalidArgument(field + ": must be more than 0, e.g. " + example +
                           " (without a timeout a stalled handoff would hold its request or its "
                           "KV forever)");
  return *ms;
}

Result<KvTransferSpec> ParseKvTransfer(const Json& kt, const std::string& path) {
  KvTransferSpec out;
  TESSERA_RETURN_IF_ERROR(RequireObject(kt, path));
  TESSERA_RETURN_IF_ERROR(OnlyKnownFields(kt, path, {"threshold", "timeout", "hold"}));
  if (Has(kt, "threshold")) {
    const Json& t = kt["threshold"];
    if (t.is_number_integer() && t.get<int64_t>() < 0)
      return InvalidArgument(path +
                             ".threshold: must be 0 or more (prompt tokens above which "
                             "decode asks a prefill replica; default 8), got " +
                             std::to_string(t.get<int64_t>()));
    auto threshold = GetInt(kt, "threshold", path, out.threshold_tokens, 0, kMaxThresholdTokens);
    if (!threshold.ok()) return threshold.status();
    out.threshold_tokens = static_cast<int>(*threshold);
  }
  auto timeout = PositiveDuration(kt, "timeout", path, out.timeout_ms, "5s");
  if (!timeout.ok()) return timeout.status();
  out.timeout_ms = *timeout;
  auto hold = PositiveDuration(kt, "hold", path, out.hold_ms, "10s");
  if (!hold.ok()) return hold.status();
  out.hold_ms = *hold;
  return out;
}

Result<KvRole> ParseKvRoleField(const Json& role, const std::string& path) {
  if (!Has(role, "disaggregation")) return KvRole::kNone;
  const Json& v = role["disaggregation"];
  if (v.is_string() && v.get<std::string>() == "prefill") return KvRole::kPrefill;
  if (v.is_string() && v.get<std::string>() == "decode") return KvRole::kDecode;
  return InvalidArgument(path + ".disaggregation: must be prefill or decode, got " + v.dump());
}

// A prefill role scales on queued prompt tokens, every other role on ongoing requests.
Status ParseSignal(const Json& role, const std::string& path, ServiceRoleSpec& spec) {
  if (!Has(role, "autoscaling") || !spec.autoscaling) return Status::Ok();
  const Json& as = role["autoscaling"];
  const std::string ap = path + ".autoscaling";
  if (spec.kv_role != KvRole::kPrefill) {
    if (Has(as, "targetQueuedPromptTokens"))
      return InvalidArgument(ap +
                             ".targetQueuedPromptTokens: only a prefill role "
                             "(disaggregation: prefill) scales on queued prompt tokens; this role "
                             "scales on targetOngoingRequests");
    return Status::Ok();
  }
  if (Has(as, "targetOngoingRequests"))
    return InvalidArgument(ap +
                           ".targetOngoingRequests: a prefill role scales on the prompt tokens "
                           "waiting for it; set targetQueuedPromptTokens (default 2048) instead");
  spec.autoscaling->signal = AutoscaleSignal::kQueuedPromptTokens;
  if (Has(as, "targetQueuedPromptTokens")) {
    const Json& t = as["targetQueuedPromptTokens"];
    if (!t.is_number() || !(t.get<double>() > 0))
      return InvalidArgument(ap +
                             ".targetQueuedPromptTokens: must be a positive number of tokens "
                             "per replica (default 2048)");
    spec.autoscaling->target_queued_prompt_tokens = t.get<double>();
  }
  return Status::Ok();
}

}  // namespace

Status ParseDisaggregation(const Json& spec_json, ServiceSpec& spec) {
  const bool listed = Has(spec_json, "roles");
  int prefill = -1, decode = -1;
  for (size_t i = 0; i < spec.roles.size(); ++i) {
    const Json& rj = listed ? spec_json["roles"][i] : spec_json;
    const std::string path = listed ? "spec.roles[" + std::to_string(i) + "]" : "spec";
    auto kind = ParseKvRoleField(rj, path);
    if (!kind.ok()) return kind.status();
    ServiceRoleSpec& role = spec.roles[i];
    role.kv_role = *kind;
    int& seen = *kind == KvRole::kPrefill ? prefill : decode;
    if (*kind != KvRole::kNone) {
      if (seen >= 0)
        return InvalidArgument(path + ".disaggregation: roles[" + std::to_string(seen) +
                               "] is already the " + KvRoleName(*kind) +
                               " role; a Service has one prefill and one decode role");
      seen = static_cast<int>(i);
    }
    TESSERA_RETURN_IF_ERROR(ParseSignal(rj, path, role));
  }
  if ((prefill >= 0) != (decode >= 0)) {
    const int declared = prefill >= 0 ? prefill : decode;
    const char* missing = prefill >= 0 ? "decode" : "prefill";
    return InvalidArgument("spec.roles[" + std::to_string(declared) +
                           "].disaggregation: only one of the two roles is declared "
                           "disaggregated; add a role with disaggregation: " +
                           missing + " (or remove this field to serve colocated)");
  }
  if (prefill < 0) {
    if (Has(spec_json, "kvTransfer"))
      return InvalidArgument(
          "spec.kvTransfer: set only for a Service with a prefill and a decode role "
          "(disaggregation: prefill, disaggregation: decode)");
    return Status::Ok();
  }
  KvTransferSpec kt;
  if (Has(spec_json, "kvTransfer")) {
    auto parsed = ParseKvTransfer(spec_json["kvTransfer"], "spec.kvTransfer");
    if (!parsed.ok()) return parsed.status();
    kt = *parsed;
  }
  spec.roles[static_cast<size_t>(prefill)].kv_transfer = kt;
  spec.roles[static_cast<size_t>(decode)].kv_transfer = kt;
  return Status::Ok();
}

void AddDisaggregationJson(const ServiceSpec& spec, Json& spec_json) {
  const ServiceRoleSpec* decode = spec.KvRoleOf(KvRole::kDecode);
  if (decode == nullptr) return;
  const KvTransferSpec& kt = decode->kv_transfer;
  spec_json["kvTransfer"] = {
      {"threshold", kt.threshold_tokens}, {"timeout", Ms(kt.timeout_ms)}, {"hold", Ms(kt.hold_ms)}};
  for (size_t i = 0; i < spec.roles.size() && i < spec_json["roles"].size(); ++i) {
    const ServiceRoleSpec& r = spec.roles[i];
    if (r.kv_role == KvRole::kNone) continue;
    Json& rj = spec_json["roles"][i];
    rj["disaggregation"] = KvRoleName(r.kv_role);
    if (r.autoscaling && r.autoscaling->signal == AutoscaleSignal::kQueuedPromptTokens &&
        rj.contains("autoscaling")) {
      rj["autoscaling"].erase("targetOngoingRequests");
      rj["autoscaling"]["targetQueuedPromptTokens"] = r.autoscaling->target_queued_prompt_tokens;
    }
  }
}

}  // namespace tessera::codec
