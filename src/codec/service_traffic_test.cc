// The router's load report as the head keeps and serves it (RouterTrafficFromJson,
// RouterTrafficJson, status.roles[].traffic in ServiceJson): the report the router sends
// (src/proxy/head_link.cc) parses whole, each wrong field is named, an older router's report
// (no counters) is still taken, and the served document carries the last report per role.
#include <gtest/gtest.h>

#include "codec/manifest.h"
#include "codec/service_json.h"
#include "codec/service_manifest.h"
#include "workload/service_lifecycle.h"

namespace tessera::codec {
namespace {

using Json = nlohmann::json;

// A report in the shape LoadReportJson writes.
Json Report() {
  return Json::parse(R"({"timeMs": 1764567890123, "role": "server", "ongoingRequests": 3,
    "queued": 1, "perReplica": {"0": 2, "1": 0}, "requests": 40, "latencySecondsSum": 1.5,
    "latencyBuckets": {"upperBounds": [0.01, 0.1, 1], "cumulative": [10, 30, 39, 40]}})");
}

std::string ErrorOf(const Json& report) {
  auto t = RouterTrafficFromJson(report);
  if (t.ok()) return "(accepted)";
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  return t.status().message();
}

TEST(RouterTraffic, TheRoutersReportParsesWhole) {
  auto t = RouterTrafficFromJson(Report());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->ongoing_requests, 3);
  EXPECT_EQ(t->queued, 1);
  EXPECT_EQ(t->in_flight, (std::map<int, int>{{0, 2}, {1, 0}}));
  EXPECT_EQ(t->requests, 40u);
  EXPECT_DOUBLE_EQ(t->latency_sum_s, 1.5);
  EXPECT_EQ(t->latency_bounds, (std::vector<double>{0.01, 0.1, 1}));
  EXPECT_EQ(t->latency_cumulative, (std::vector<uint64_t>{10, 30, 39, 40}));
  EXPECT_EQ(t->at_ms, 0) << "the head stamps it, not the router's timeMs";
  EXPECT_EQ(t->refused, -1) << "not in this report";
  Json with_refused = Report();
  with_refused["refused"] = 7;
  auto r = RouterTrafficFromJson(with_refused);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->refused, 7);
  EXPECT_EQ(RouterTrafficJson(*r)["refused"], 7);
}

TEST(RouterTraffic, AReportWithoutCountersIsTaken) {
  auto t = RouterTrafficFromJson(Json{{"ongoingRequests", 0.5}});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->ongoing_requests, 0.5);
  EXPECT_EQ(t->requests, 0u);
  EXPECT_TRUE(t->latency_bounds.empty());
  EXPECT_FALSE(RouterTrafficJson(*t).contains("latencyBuckets"));
}

TEST(RouterTraffic, EachWrongFieldIsNamed) {
  EXPECT_EQ(ErrorOf(Json::array()), "body: a load report is a JSON object");
  EXPECT_EQ(ErrorOf(Json::object()), "ongoingRequests: required, a number >= 0");
  auto with = [](const char* key, Json value) {
    Json r = Report();
    r[key] = std::move(value);
    return ErrorOf(r);
  };
  EXPECT_EQ(with("ongoingRequests", -1), "ongoingRequests: required, a number >= 0");
  EXPECT_EQ(with("ongoingRequests", "3"), "ongoingRequests: required, a number >= 0");
  EXPECT_EQ(with("queued", -1), "queued: a whole number >= 0");
  EXPECT_EQ(with("queued", 1.5), "queued: a whole number >= 0");
  EXPECT_EQ(with("perReplica", Json::array()).rfind("perReplica: ", 0), 0u);
  EXPECT_EQ(with("perReplica", Json{{"x", 1}}),
            "perReplica.x: keys are replica indexes, values whole numbers >= 0");
  EXPECT_EQ(with("perReplica", Json{{"0", -2}}),
            "perReplica.0: keys are replica indexes, values whole numbers >= 0");
  EXPECT_EQ(with("requests", -4).rfind("requests: a whole number >= 0", 0), 0u);
  EXPECT_EQ(with("refused", 1.5).rfind("refused: a whole number >= 0", 0), 0u);
  EXPECT_EQ(with("latencySecondsSum", "1"), "latencySecondsSum: a number of seconds >= 0");
  EXPECT_EQ(with("latencyBuckets", 3).rfind("latencyBuckets: ", 0), 0u);
  EXPECT_EQ(
      with("latencyBuckets", Json::parse(R"({"upperBounds": [1, 0.5], "cumulative": [1, 2, 3]})")),
      "latencyBuckets.upperBounds: increasing numbers of seconds > 0");
  EXPECT_EQ(with("latencyBuckets", Json::parse(R"({"upperBounds": [1], "cumulative": [1]})")),
            "latencyBuckets.cumulative: one count per upper bound, then the total (2 numbers), "
            "got 1");
  EXPECT_EQ(with("latencyBuckets", Json::parse(R"({"upperBounds": [1], "cumulative": [3, 2]})")),
            "latencyBuckets.cumulative: whole numbers >= 0, never decreasing");
  Json many = Json::array();
  for (int i = 1; i <= 65; ++i) many.push_back(i);
  EXPECT_EQ(with("latencyBuckets", Json{{"upperBounds", many}, {"cumulative", many}})
                .rfind("latencyBuckets: ", 0),
            0u);
}

TEST(RouterTraffic, TheServedServiceCarriesTheLastReportPerRole) {
  auto doc = ParseDocument(R"(
apiVersion: tessera/v1
kind: Service
metadata: {name: echo}
spec: {accelerator: v6e, topology: 2x2, command: [python3, server.py], replicas: 2}
)");
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  auto spec = ParseService(*doc);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  Service svc = ServiceLifecycle::Create(std::move(*spec), 7, 1000);
  EXPECT_FALSE(ServiceJson(svc)["status"]["roles"][0].contains("traffic"))
      << "no report yet: no traffic";
  auto t = RouterTrafficFromJson(Report());
  ASSERT_TRUE(t.ok());
  t->at_ms = 5000;
  svc.runtime.traffic["server"] = *t;
  const Json served = ServiceJson(svc)["status"]["roles"][0]["traffic"];
  Json want = Report();
  want.erase("timeMs");
  want.erase("role");
  want["atMs"] = 5000;
  EXPECT_EQ(served, want);
  // Head memory: a stored document read back has none.
  auto back = ServiceFromJson(ServiceJson(svc));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->runtime.traffic.empty());
}

}  // namespace
}  // namespace tessera::codec
