// The prefill/decode part of the Service manifest: two roles on their own shapes and scaling
// signals, the stored round trip, the environment their processes get, and each wrong input
// naming its field (spec.roles[i].disaggregation, spec.kvTransfer.threshold/timeout/hold,
// autoscaling targets).
#include <gtest/gtest.h>

#include <functional>

#include "codec/manifest.h"
#include "codec/service_json.h"
#include "codec/service_manifest.h"

namespace tessera::codec {
namespace {

// The GKE layout: a 2x2x2 prefill sub-slice beside a 2x2x2 decode sub-slice (v5p cubes).
constexpr const char* kDisagg = R"(
apiVersion: tessera/v1
kind: Service
metadata: {name: llm}
spec:
  kvTransfer: {threshold: 16, timeout: 2s, hold: 20s}
  roles:
  - name: decode
    disaggregation: decode
    accelerator: v5p
    topology: 2x2x2
    command: [python3, examples/serve/server.py, --mode, decode]
    autoscaling: {minReplicas: 1, maxReplicas: 4, targetOngoingRequests: 8}
  - name: prefill
    disaggregation: prefill
    accelerator: v5p
    topology: 2x2x2
    command: [python3, examples/serve/server.py, --mode, prefill]
    autoscaling: {minReplicas: 1, maxReplicas: 3, targetQueuedPromptTokens: 4096}
)";

Json Doc() {
  auto doc = ParseDocument(kDisagg);
  EXPECT_TRUE(doc.ok()) << doc.status().ToString();
  return doc.ok() ? *doc : Json();
}

std::string ErrorAfter(const std::function<void(Json&)>& edit) {
  Json doc = Doc();
  edit(doc);
  auto spec = ParseService(doc);
  if (spec.ok()) return "(accepted)";
  EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument);
  return spec.status().message();
}

bool StartsWith(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

TEST(ServiceDisaggTest, TwoRolesEachWithItsShapeAndSignal) {
  auto spec = ParseService(Doc());
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  ASSERT_TRUE(spec->Disaggregated());
  const ServiceRoleSpec* decode = spec->KvRoleOf(KvRole::kDecode);
  const ServiceRoleSpec* prefill = spec->KvRoleOf(KvRole::kPrefill);
  ASSERT_NE(decode, nullptr);
  ASSERT_NE(prefill, nullptr);
  EXPECT_EQ(decode->name, "decode");
  EXPECT_EQ(prefill->name, "prefill");
  EXPECT_EQ(spec->FrontRole(), decode);  // the router sends requests to decode
  EXPECT_EQ(prefill->topology, Shape::Of(2, 2, 2));
  EXPECT_EQ(prefill->accelerator, Generation::kV5p);
  EXPECT_EQ(decode->autoscaling->signal, AutoscaleSignal::kOngoingRequests);
  EXPECT_EQ(decode->autoscaling->target_ongoing_requests, 8);
  EXPECT_EQ(prefill->autoscaling->signal, AutoscaleSignal::kQueuedPromptTokens);
  EXPECT_EQ(prefill->autoscaling->target_queued_prompt_tokens, 4096);
  EXPECT_EQ(prefill->autoscaling->max_replicas, 3);
  const KvTransferSpec want{16, 2'000, 20'000};
  EXPECT_EQ(decode->kv_transfer, want);
  EXPECT_EQ(prefill->kv_transfer, want);
  // What the processes get (examples/serve reads these as its --mode and --kv-* defaults).
  const auto env = KvRoleEnv(*decode);
  EXPECT_EQ(env.at("TESSERA_KV_ROLE"), "decode");
  EXPECT_EQ(env.at("TESSERA_KV_THRESHOLD"), "16");
  EXPECT_EQ(env.at("TESSERA_KV_TIMEOUT_MS"), "2000");
  EXPECT_EQ(env.at("TESSERA_KV_HOLD_MS"), "20000");
  EXPECT_EQ(KvRoleEnv(*prefill).at("TESSERA_KV_ROLE"), "prefill");
}

TEST(ServiceDisaggTest, DefaultsWithoutKvTransferAndColocatedServicesUnchanged) {
  Json doc = Doc();
  doc["spec"].erase("kvTransfer");
  auto spec = ParseService(doc);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->KvRoleOf(KvRole::kDecode)->kv_transfer, KvTransferSpec{});
  EXPECT_EQ(KvTransferSpec{}.threshold_tokens, 8);
  // A Service without the field: no disaggregation, the first role in front, no extra env.
  for (Json& r : doc["spec"]["roles"]) r.erase("disaggregation");
  doc["spec"]["roles"][1]["autoscaling"].erase("targetQueuedPromptTokens");
  auto plain = ParseService(doc);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_FALSE(plain->Disaggregated());
  EXPECT_EQ(plain->FrontRole()->name, "decode");  // the first role
  EXPECT_TRUE(KvRoleEnv(plain->roles[1]).empty());
  EXPECT_EQ(plain->roles[1].autoscaling->signal, AutoscaleSignal::kOngoingRequests);
}

TEST(ServiceDisaggTest, StoredDocumentRoundTrips) {
  auto spec = ParseService(Doc());
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  Service svc;
  svc.spec = *spec;
  svc.uid = 3;
  auto back = ServiceFromJson(ServiceJson(svc));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->spec.roles.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(back->spec.roles[i].kv_role, spec->roles[i].kv_role);
    EXPECT_EQ(back->spec.roles[i].kv_transfer, spec->roles[i].kv_transfer);
    EXPECT_EQ(back->spec.roles[i].autoscaling->signal, spec->roles[i].autoscaling->signal);
    EXPECT_TRUE(back->spec.roles[i].SameTemplate(spec->roles[i]));
  }
  EXPECT_EQ(back->spec.roles[1].autoscaling->target_queued_prompt_tokens, 4096);
}

TEST(ServiceDisaggTest, AKvTransferChangeOrARoleKindChangeRollsTheRole) {
  auto spec = ParseService(Doc());
  ASSERT_TRUE(spec.ok());
  ServiceRoleSpec changed = spec->roles[0];
  changed.kv_transfer.timeout_ms = 9'000;
  EXPECT_FALSE(changed.SameTemplate(spec->roles[0]));
  changed = spec->roles[0];
  changed.kv_role = KvRole::kNone;
  EXPECT_FALSE(changed.SameTemplate(spec->roles[0]));
}

TEST(ServiceDisaggTest, EachWrongInputNamesItsField) {
  auto roles = [](Json& d) -> Json& { return d["spec"]["roles"]; };
  EXPECT_TRUE(StartsWith(ErrorAfter([&](Json& d) { roles(d)[0].erase("disaggregation"); }),
                         "spec.roles[1].disaggregation: only one of the two roles is declared "
                         "disaggregated; add a role with disaggregation: decode"));
  EXPECT_TRUE(StartsWith(ErrorAfter([&](Json& d) {
                           roles(d)[1].erase("disaggregation");
                           roles(d)[1]["autoscaling"] = {{"maxReplicas", 2}};
                         }),
                         "spec.roles[0].disaggregation: only one of the two roles"));
  EXPECT_TRUE(StartsWith(ErrorAfter([&](Json& d) { roles(d)[1]["disaggregation"] = "decode"; }),
                         "spec.roles[1].disaggregation: roles[0] is already the decode role"));
  EXPECT_TRUE(StartsWith(ErrorAfter([&](Json& d) { roles(d)[0]["disaggregation"] = "both"; }),
                         "spec.roles[0].disaggregation: must be prefill or decode"));
  EXPECT_TRUE(StartsWith(ErrorAfter([](Json& d) { d["spec"]["kvTransfer"]["threshold"] = -1; }),
                         "spec.kvTransfer.threshold: must be 0 or more"));
  EXPECT_TRUE(StartsWith(ErrorAfter([](Json& d) { d["spec"]["kvTransfer"]["threshold"] = "x"; }),
                         "spec.kvTransfer.threshold"));
  EXPECT_EQ(ErrorAfter([](Json& d) { d["spec"]["kvTransfer"]["threshold"] = 0; }), "(accepted)");
  for (const char* zero : {"0s", "0"}) {
    EXPECT_TRUE(StartsWith(ErrorAfter([&](Json& d) { d["spec"]["kvTransfer"]["timeout"] = zero; }),
                           "spec.kvTransfer.timeout: must be more than 0"))
        << zero;
    EXPECT_TRUE(StartsWith(ErrorAfter([&](Json& d) { d["spec"]["kvTransfer"]["hold"] = zero; }),
                           "spec.kvTransfer.hold: must be more than 0"))
        << zero;
  }
  EXPECT_TRUE(StartsWith(ErrorAfter([](Json& d) { d["spec"]["kvTransfer"]["timeout"] = 0; }),
                         "spec.kvTransfer.timeout: must be more than 0"));
  EXPECT_TRUE(StartsWith(ErrorAfter([](Json& d) { d["spec"]["kvTransfer"]["timeout"] = "-1s"; }),
                         "spec.kvTransfer.timeout: must be more than 0"));
  EXPECT_TRUE(StartsWith(ErrorAfter([](Json& d) { d["spec"]["kvTransfer"]["retries"] = 1; }),
                         "spec.kvTransfer"));
  EXPECT_TRUE(StartsWith(ErrorAfter([&](Json& d) {
                           for (Json& r : roles(d)) r.erase("disaggregation");
                           roles(d)[1]["autoscaling"].erase("targetQueuedPromptTokens");
                         }),
                         "spec.kvTransfer: set only for a Service with a prefill and a decode"));
  EXPECT_TRUE(StartsWith(
      ErrorAfter([&](Json& d) { roles(d)[1]["autoscaling"]["targetOngoingRequests"] = 2; }),
      "spec.roles[1].autoscaling.targetOngoingRequests: a prefill role scales on the prompt "
      "tokens"));
  EXPECT_TRUE(StartsWith(
      ErrorAfter([&](Json& d) { roles(d)[0]["autoscaling"]["targetQueuedPromptTokens"] = 10; }),
      "spec.roles[0].autoscaling.targetQueuedPromptTokens: only a prefill role"));
  EXPECT_TRUE(StartsWith(
      ErrorAfter([&](Json& d) { roles(d)[1]["autoscaling"]["targetQueuedPromptTokens"] = 0; }),
      "spec.roles[1].autoscaling.targetQueuedPromptTokens: must be a positive number"));
}

TEST(ServiceDisaggTest, TheRouterReportCarriesQueuedPromptTokens) {
  auto t = RouterTrafficFromJson({{"ongoingRequests", 1}, {"queuedPromptTokens", 900}});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->queued_prompt_tokens, 900);
  EXPECT_EQ(RouterTrafficJson(*t)["queuedPromptTokens"], 900);
  auto bad = RouterTrafficFromJson({{"ongoingRequests", 1}, {"queuedPromptTokens", -1}});
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(StartsWith(bad.status().message(), "queuedPromptTokens: "));
}

TEST(ServiceDisaggTest, TheRouterReportCarriesTtftOutputTokensAndTpotPerRole) {
  auto t = RouterTrafficFromJson({{"ongoingRequests", 0},
                                  {"ttftCount", 4},
                                  {"ttftSecondsSum", 0.8},
                                  {"outputTokens", 48},
                                  {"tpotCount", 4},
                                  {"tpotSecondsSum", 0.12},
                                  {"disagg", {{"prefilledRemote", 4}, {"fallbacks", 1}}}});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->output_tokens, 48u);
  EXPECT_EQ(t->tpot_count, 4u);
  const Json j = RouterTrafficJson(*t);
  EXPECT_EQ(j["ttftCount"], 4);
  EXPECT_EQ(j["outputTokens"], 48);
  EXPECT_EQ(j["tpotCount"], 4);
  EXPECT_DOUBLE_EQ(j["tpotSecondsSum"].get<double>(), 0.12);
  EXPECT_EQ(j["disagg"]["prefilledRemote"], 4);
  EXPECT_EQ(j["disagg"]["fallbacks"], 1);
  for (const char* field : {"outputTokens", "tpotCount", "tpotSecondsSum"}) {
    auto bad = RouterTrafficFromJson({{"ongoingRequests", 0}, {field, -1}});
    ASSERT_FALSE(bad.ok()) << field;
    EXPECT_TRUE(StartsWith(bad.status().message(), std::string(field) + ": ")) << field;
  }
}

}  // namespace
}  // namespace tessera::codec
