// ParseService on the contract's manifest and on each kind of wrong input (the field each error
// must name), and the stored document's round trip through ServiceJson / ServiceFromJson.
#include "codec/service_manifest.h"

#include <gtest/gtest.h>

#include <functional>

#include "codec/manifest.h"
#include "codec/service_json.h"
#include "workload/service_lifecycle.h"

namespace tessera::codec {
namespace {

constexpr const char* kContract = R"(
apiVersion: tessera/v1
kind: Service
metadata: {name: llm, queue: default}
spec:
  priority: serving
  roles:
  - name: server
    accelerator: v6e
    topology: 4x4
    command: ["python3", "examples/serve/server.py", "--layers", "2"]
    env: {KEY: value}
    port: 8000
    autoscaling: {minReplicas: 0, maxReplicas: 4, targetOngoingRequests: 2,
                  upscaleDelay: 30s, downscaleDelay: 600s, lookback: 30s}
    maxOngoingRequests: 5
    readiness: {path: /healthz, startupGrace: 15m, period: 10s, timeout: 30s}
    rollout: {maxSurge: 1, maxUnavailable: 0}
)";

constexpr const char* kShort = R"(
apiVersion: tessera/v1
kind: Service
metadata: {name: echo}
spec:
  accelerator: v6e
  topology: 2x2
  command: [python3, server.py]
  replicas: 2
)";

Json Doc(const char* text) {
  auto doc = ParseDocument(text);
  EXPECT_TRUE(doc.ok()) << doc.status().ToString();
  return doc.ok() ? *doc : Json();
}

// The message of the error ParseService gives after `edit` of the contract's document.
std::string ErrorAfter(const std::function<void(Json&)>& edit, const char* base = kContract) {
  Json doc = Doc(base);
  edit(doc);
  auto spec = ParseService(doc);
  if (spec.ok()) return "(accepted)";
  EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument);
  return spec.status().message();
}

bool StartsWith(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

TEST(ServiceManifestTest, TheContractManifestParses) {
  auto kind = DocumentKind(Doc(kContract));
  ASSERT_TRUE(kind.ok()) << kind.status().ToString();
  EXPECT_EQ(*kind, "Service");
  auto spec = ParseService(Doc(kContract));
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->name, "llm");
  EXPECT_EQ(spec->queue, "default");
  EXPECT_EQ(spec->priority, "serving");
  ASSERT_EQ(spec->roles.size(), 1u);
  const ServiceRoleSpec& r = spec->roles[0];
  EXPECT_EQ(r.name, "server");
  EXPECT_EQ(r.topology, Shape::Of(4, 4));
  EXPECT_EQ(r.command.size(), 4u);
  EXPECT_EQ(r.env.at("KEY"), "value");
  ASSERT_TRUE(r.autoscaling.has_value());
  EXPECT_EQ(r.autoscaling->min_replicas, 0);
  EXPECT_EQ(r.autoscaling->max_replicas, 4);
  EXPECT_EQ(r.autoscaling->downscale_delay_ms, 600'000);
  EXPECT_EQ(r.readiness.startup_grace_ms, 900'000);
  EXPECT_EQ(r.readiness.path, "/healthz");
  EXPECT_EQ(r.rollout.max_surge, 1);
}

TEST(ServiceManifestTest, FieldsUnderSpecMakeOneRoleNamedServerWithDefaults) {
  auto spec = ParseService(Doc(kShort));
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  ASSERT_EQ(spec->roles.size(), 1u);
  const ServiceRoleSpec& r = spec->roles[0];
  EXPECT_EQ(r.name, "server");
  EXPECT_EQ(r.replicas, 2);
  EXPECT_FALSE(r.autoscaling.has_value());
  EXPECT_EQ(r.port, 8000);
  EXPECT_EQ(r.max_ongoing_requests, 5);
  EXPECT_EQ(r.readiness.period_ms, 10'000);
  EXPECT_EQ(r.readiness.timeout_ms, 30'000);
  EXPECT_EQ(r.readiness.startup_grace_ms, 900'000);
  EXPECT_EQ(r.startup_nice, 10);
}

TEST(ServiceManifestTest, StartupNiceIsZeroToNineteenAndRoundTripsWithoutARollout) {
  Json doc = Doc(kShort);
  doc["spec"]["startupNice"] = 0;
  auto off = ParseService(doc);
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_EQ(off->roles[0].startup_nice, 0);
  doc["spec"]["startupNice"] = 19;
  auto low = ParseService(doc);
  ASSERT_TRUE(low.ok()) << low.status().ToString();
  EXPECT_EQ(low->roles[0].startup_nice, 19);
  EXPECT_TRUE(low->roles[0].SameTemplate(off->roles[0]));  // applies without replacing groups
  Service svc = ServiceLifecycle::Create(*low, 3, 1000);
  auto stored = ServiceFromJson(ServiceJson(svc));
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_EQ(stored->spec.roles[0].startup_nice, 19);
  doc["spec"]["startupNice"] = 20;
  auto high = ParseService(doc);
  ASSERT_FALSE(high.ok());
  EXPECT_EQ(high.status().message(),
            "spec.startupNice: 20 is out of range; must be between 0 and 19");
}

TEST(ServiceManifestTest, AcceleratorInRaySpellingOrAsAPodType) {
  Json doc = Doc(kShort);
  doc["spec"]["accelerator"] = "TPU-V6E-8";
  doc["spec"].erase("topology");
  auto spec = ParseService(doc);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->roles[0].accelerator, Generation::kV6e);
  EXPECT_EQ(spec->roles[0].topology, Shape::Of(2, 4));
  EXPECT_EQ(ServiceSpecJson(*spec)["roles"][0]["accelerator"], "v6e");  // stored canonical
  EXPECT_TRUE(StartsWith(ErrorAfter([](Json& d) { d["spec"]["roles"][0].erase("topology"); }),
                         "spec.roles[0].topology: required"));
}

TEST(ServiceManifestTest, AutoscalingWithMaxReplicasAloneGetsTheDefaultsAndSloTargetsParse) {
  Json doc = Doc(kShort);
  doc["spec"].erase("replicas");
  doc["spec"]["autoscaling"] = {{"maxReplicas", 16}};
  auto spec = ParseService(doc);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  AutoscalerConfig expected;
  expected.max_replicas = 16;
  ASSERT_TRUE(spec->roles[0].autoscaling.has_value());
  EXPECT_EQ(*spec->roles[0].autoscaling, expected);
  doc["spec"]["autoscaling"]["targetTTFTMs"] = 2000;
  doc["spec"]["autoscaling"]["targetTPOTMs"] = 50;
  spec = ParseService(doc);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->roles[0].autoscaling->target_ttft_ms, 2000);
  EXPECT_EQ(spec->roles[0].autoscaling->target_tpot_ms, 50);
  // The stored document keeps them, and leaves the default target absent.
  const Json stored = codec::ServiceJson(ServiceLifecycle::Create(*spec, 1, 1000));
  const Json& as = stored["spec"]["roles"][0]["autoscaling"];
  EXPECT_EQ(as["targetTTFTMs"], 2000);
  EXPECT_EQ(as["targetTPOTMs"], 50);
  EXPECT_FALSE(as.contains("targetOngoingRequests"));
}

// initialReplicas starts an autoscaled role above its minimum (Ray Serve's initial_replicas);
// without it the role starts at minReplicas.
TEST(ServiceManifestTest, InitialReplicasStartsTheRoleWithinItsBounds) {
  Json doc = Doc(kContract);
  auto spec = ParseService(doc);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->roles[0].autoscaling->initial_replicas, -1);
  EXPECT_EQ(ServiceLifecycle::Create(*spec, 1, 1000).status.Role("server")->desired_replicas, 0);
  EXPECT_FALSE(codec::ServiceJson(
                   ServiceLifecycle::Create(*spec, 1, 1000))["spec"]["roles"][0]["autoscaling"]
                   .contains("initialReplicas"));

  doc["spec"]["roles"][0]["autoscaling"]["initialReplicas"] = 3;
  spec = ParseService(doc);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  const ServiceRoleSpec& r = spec->roles[0];
  EXPECT_EQ(r.autoscaling->initial_replicas, 3);
  EXPECT_EQ(r.autoscaling->min_replicas, 0);
  EXPECT_EQ(r.replicas, 3);
  const Service s = ServiceLifecycle::Create(*spec, 1, 1000);
  EXPECT_EQ(s.status.Role("server")->desired_replicas, 3);
  EXPECT_EQ(s.status.Role("server")->replicas.size(), 3u);
  EXPECT_EQ(codec::ServiceJson(s)["spec"]["roles"][0]["autoscaling"]["initialReplicas"], 3);
}

TEST(ServiceManifestTest, EachWrongInputNamesItsField) {
  const std::string as = "spec.roles[0].autoscaling.";
  auto role = [](Json& d) -> Json& { return d["spec"]["roles"][0]; };
  EXPECT_TRUE(StartsWith(ErrorAfter([&](Json& d) { role(d)["autoscaling"]["minReplicas"] = 5; }),
                         as + "minReplicas: 5 is above maxReplicas 4"));
  EXPECT_TRUE(StartsWith(ErrorAfter([&](Json& d) { role(d)["topology"] = "4x5"; }),
                         "spec.roles[0].topology: "));
  EXPECT_TRUE(
      StartsWith(ErrorAfter([&](Json& d) { d["spec"]["roles"].push_back(d["spec"]["roles"][0]); }),
                 "spec.roles[1].name: 'server' is the name of an earlier role"));
  EXPECT_TRUE(StartsWith(ErrorAfter([&](Json& d) { role(d)["readiness"]["path"] = "healthz"; }),
                         "spec.roles[0].readiness.path: 'healthz' must start with '/'"));
  EXPECT_TRUE(
      StartsWith(ErrorAfter([&](Json& d) { role(d)["autoscaling"]["targetOngoingRequests"] = 0; }),
                 as + "targetOngoingRequests: must be a positive number"));
  EXPECT_TRUE(StartsWith(ErrorAfter([&](Json& d) { role(d)["autoscaling"]["targetTTFTMs"] = 0; }),
                         as + "targetTTFTMs: must be a positive number of milliseconds"));
  EXPECT_TRUE(
      StartsWith(ErrorAfter([&](Json& d) { role(d)["autoscaling"]["targetTPOTMs"] = "fast"; }),
                 as + "targetTPOTMs: must be a positive number of milliseconds"));
  EXPECT_TRUE(StartsWith(
      ErrorAfter([&](Json& d) { role(d)["autoscaling"]["initialReplicas"] = 5; }),
      as + "initialReplicas: 5 is outside [minReplicas 0, maxReplicas 4]; start the role"));
  EXPECT_TRUE(
      StartsWith(ErrorAfter([&](Json& d) { role(d)["autoscaling"]["initialReplicas"] = "two"; }),
                 as + "initialReplicas: "));
  EXPECT_TRUE(StartsWith(ErrorAfter([&](Json& d) { role(d)["maxOngoingRequests"] = 0; }),
                         "spec.roles[0].maxOngoingRequests: 0 is out of range"));
  EXPECT_TRUE(
      StartsWith(ErrorAfter([&](Json& d) { role(d)["autoscaling"]["upscaleDelay"] = "-5s"; }),
                 as + "upscaleDelay: must not be negative"));
  EXPECT_TRUE(
      StartsWith(ErrorAfter([&](Json& d) { role(d)["autoscaling"]["downscaleDelay"] = -3; }),
                 as + "downscaleDelay: must not be negative"));
  EXPECT_TRUE(StartsWith(ErrorAfter([&](Json& d) { role(d)["replica"] = 2; }),
                         "spec.roles[0].replica: unknown field"));
  EXPECT_TRUE(StartsWith(ErrorAfter([&](Json& d) { role(d)["replicas"] = 2; }),
                         "spec.roles[0].replicas: set replicas or autoscaling, not both"));
  EXPECT_TRUE(StartsWith(ErrorAfter([&](Json& d) { role(d)["readiness"]["period"] = 0; }),
                         "spec.roles[0].readiness.period: must be positive"));
  EXPECT_TRUE(StartsWith(ErrorAfter([&](Json& d) { role(d)["rollout"]["maxSurge"] = 0; }),
                         "spec.roles[0].rollout.maxSurge: maxSurge and maxUnavailable are both 0"));
  EXPECT_TRUE(StartsWith(ErrorAfter([&](Json& d) { role(d)["env"]["PORT"] = "1"; }),
                         "spec.roles[0].env.PORT: set by tessera"));
  EXPECT_TRUE(
      StartsWith(ErrorAfter([&](Json& d) { role(d)["name"] = "Server"; }), "spec.roles[0].name: "));
  // The same field checks as TrainJob's: no number for a name, no control character in env.
  EXPECT_TRUE(StartsWith(ErrorAfter([](Json& d) { d["metadata"]["name"] = 5; }),
                         "metadata.name: must be a string"));
  EXPECT_TRUE(
      StartsWith(ErrorAfter([&](Json& d) { role(d)["env"]["KEY"] = std::string("a\0b", 3); }),
                 "spec.roles[0].env.KEY: "));
  EXPECT_TRUE(StartsWith(ErrorAfter([](Json& d) { d["metadata"]["labels"]["team"] = 7; }),
                         "metadata.labels.team: must be a string"));
  // The names other systems use get a pointer to TrainJob's.
  std::string queue = ErrorAfter([](Json& d) { d["spec"]["queueName"] = "default"; });
  EXPECT_TRUE(StartsWith(queue, "spec.queueName: unknown field")) << queue;
  EXPECT_NE(queue.find("metadata.queue"), std::string::npos) << queue;
  // A replica is one slice: a count of slices points at replicas.
  for (const char* field : {"slices", "numSlices"}) {
    std::string slices = ErrorAfter([&](Json& d) { role(d)[field] = 2; });
    EXPECT_TRUE(StartsWith(slices, std::string("spec.roles[0].") + field + ": unknown field"))
        << slices;
    EXPECT_NE(slices.find("is its replicas"), std::string::npos) << slices;
  }
  EXPECT_TRUE(
      StartsWith(ErrorAfter([](Json& d) { d["spec"]["replicas"] = 0; }, kShort), "(accepted)"));
  EXPECT_TRUE(StartsWith(ErrorAfter([](Json& d) { d["spec"]["replicas"] = -1; }, kShort),
                         "spec.replicas: -1 is out of range"));
  EXPECT_TRUE(StartsWith(ErrorAfter([](Json& d) { d["spec"]["port"] = 0; }, kShort),
                         "spec.port: 0 is out of range"));
  EXPECT_TRUE(StartsWith(ErrorAfter([](Json& d) { d["spec"].erase("command"); }, kShort),
                         "spec.command: required"));
}

TEST(ServiceJsonTest, StoredDocumentRoundTripsWithItsStatus) {
  auto spec = ParseService(Doc(kContract));
  ASSERT_TRUE(spec.ok());
  spec->roles[0].autoscaling->min_replicas = 2;
  Service svc = ServiceLifecycle::Create(*spec, 9, 5000);
  ServiceLifecycle life;
  class NoneLost : public ClusterView {
   public:
    bool HostLost(const std::string&) const override { return false; }
    int LargestFitWithoutJob(const TrainJob&, int, int) const override { return 0; }
  } cluster;
  GroupPlacement p;
  p.owner = 42;
  p.slice = "slice-a";
  p.hosts = {{"h0", "10.0.0.1"}, {"h1", "10.0.0.2"}};
  p.master_port = 21000;
  p.ports = {8000, 8001};
  life.Place(svc, {"server", 0}, p, 6000);
  life.ProcessRunning(svc, {"server", 0}, 1, 0, 500);
  life.ProcessRunning(svc, {"server", 0}, 1, 1, 501);
  life.Readiness(svc, {"server", 0}, 1, true, "", cluster, 7000);
  svc.runtime.version = 3;

  Json doc = ServiceJson(svc);
  EXPECT_EQ(doc["kind"], "Service");
  EXPECT_EQ(doc["status"]["phase"], "Progressing");
  EXPECT_EQ(doc["status"]["roles"][0]["readyReplicas"], 1);
  EXPECT_EQ(doc["status"]["roles"][0]["replicas"][0]["hosts"], Json({"h0", "h1"}));
  EXPECT_EQ(doc["status"]["roles"][0]["replicas"][0]["leader"]["port"], 8000);
  ASSERT_EQ(doc["status"]["endpoints"].size(), 1u);
  EXPECT_EQ(doc["status"]["endpoints"][0]["address"], "10.0.0.1");
  EXPECT_EQ(doc["status"]["endpoints"][0]["ready"], true);

  auto back = ServiceFromJson(Json::parse(doc.dump()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->uid, 9u);
  EXPECT_EQ(back->spec.roles[0].autoscaling->min_replicas, 2);
  EXPECT_EQ(back->spec.roles[0].readiness.startup_grace_ms, 900'000);
  const ReplicaStatus& r = back->status.roles[0].replicas[0];
  EXPECT_EQ(r.owner, 42u);
  EXPECT_EQ(r.phase, ReplicaPhase::kReady);
  EXPECT_EQ(r.incarnation, 1);
  EXPECT_EQ(r.processes[1].port, 8001);
  back->runtime.version = 3;
  EXPECT_EQ(ServiceJson(*back), doc);
}

}  // namespace
}  // namespace tessera::codec
