// The Secret codec (every refusal names its field and never quotes a value; the served document
// never holds a value) and `template.env` with secret references in TrainJobs and Services
// (both forms; stored Services keep the reference through their round trip).
#include "codec/secret_manifest.h"

#include <gtest/gtest.h>

#include "codec/manifest.h"
#include "codec/service_json.h"
#include "codec/service_manifest.h"

namespace tessera::codec {
namespace {

constexpr const char* kValue = "s3cr3t-Value-7f2a";

Json Doc(const std::string& yaml) {
  auto doc = ParseDocument(yaml);
  EXPECT_TRUE(doc.ok()) << doc.status().ToString();
  return doc.ok() ? *doc : Json();
}

Json SecretDoc(const Json& data) {
  return {{"apiVersion", "tessera/v1"},
          {"kind", "Secret"},
          {"metadata", {{"name", "db"}, {"namespace", "team-a"}}},
          {"data", data}};
}

TEST(SecretManifestTest, ParsesDataAndStringData) {
  Json doc = SecretDoc({{"password", kValue}, {"pin", 1234}});
  doc["stringData"] = {{"user.name", "ann"}};
  auto s = ParseSecret(doc);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->key, "team-a.db");
  EXPECT_EQ(s->data.at("password"), kValue);
  EXPECT_EQ(s->data.at("pin"), "1234");
  EXPECT_EQ(s->data.at("user.name"), "ann");
  // The store's copy reads back the same.
  auto again = ParseSecret(SecretStoredJson(*s));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->data, s->data);
  EXPECT_EQ(again->key, s->key);
}

TEST(SecretManifestTest, ServedDocumentShowsKeysAndLengthsOnly) {
  auto s = ParseSecret(SecretDoc({{"password", kValue}, {"empty", ""}}));
  ASSERT_TRUE(s.ok());
  const Json served = SecretServedJson(*s, 7);
  EXPECT_EQ(served.dump().find(kValue), std::string::npos) << served.dump();
  EXPECT_EQ(served["data"]["password"], "<redacted: 17 bytes>");
  EXPECT_EQ(served["data"]["empty"], "<redacted: 0 bytes>");
  EXPECT_EQ(served["metadata"]["name"], "db");
  EXPECT_EQ(served["metadata"]["namespace"], "team-a");
  EXPECT_EQ(served["metadata"]["resourceVersion"], 7);
  // Applying the served document again is refused: it would store the placeholder.
  Json copied = served;
  copied["metadata"].erase("resourceVersion");
  copied.erase("type");
  auto refused = ParseSecret(copied);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("data.empty: is the placeholder"), std::string::npos)
      << refused.status().message();
}

TEST(SecretManifestTest, RefusalsNameTheFieldAndNeverTheValue) {
  struct Case {
    Json doc;
    std::string starts;
  };
  Json two = SecretDoc({{"a", kValue}});
  two["stringData"] = {{"a", kValue}};
  Json nested = SecretDoc({{"a", {{"x", kValue}}}});
  Json nul = SecretDoc({{"a", std::string("x\0y", 3) + kValue}});
  Json big = SecretDoc({{"a", std::string(kMaxSecretBytes, 'x')}});
  Json unknown = SecretDoc({{"a", kValue}});
  unknown["spec"] = Json::object();
  Json bad_ns = SecretDoc({{"a", kValue}});
  bad_ns["metadata"]["namespace"] = "Team_A";
  const Case cases[] = {
      {SecretDoc({{"pass word", kValue}}), "data.'pass word': a key may contain only"},
      {SecretDoc({{"..", kValue}}), "data.'..': '.' and '..' are not keys"},
      {SecretDoc({{std::string(254, 'k'), kValue}}), "data."},
      {two, "stringData.a: given in both data and stringData"},
      {nested, "data.a: must be a string"},
      {nul, "data.a: holds a NUL byte"},
      {big, "data: 1048577 bytes of keys and values; at most 1048576"},
      {unknown, "document"},
      {bad_ns, "metadata.namespace"},
      {SecretDoc(Json::array()), "data: must be a mapping"},
  };
  for (const Case& c : cases) {
    auto r = ParseSecret(c.doc);
    ASSERT_FALSE(r.ok()) << c.starts;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message().rfind(c.starts, 0), 0u) << r.status().message();
    EXPECT_EQ(r.status().message().find(kValue), std::string::npos) << r.status().message();
  }
}

constexpr const char* kJobMapForm = R"(
apiVersion: tessera/v1
kind: TrainJob
metadata: {name: j, namespace: team-a}
spec:
  accelerator: v6e
  topology: 2x2
  template:
    command: [python3, train.py]
    env:
      STEPS: 10
      DB_PASSWORD: {valueFrom: {secret: db, key: password}}
      TOKEN: {valueFrom: {secretKeyRef: {name: api, key: token}}}
)";

constexpr const char* kJobListForm = R"(
apiVersion: tessera/v1
kind: TrainJob
metadata: {name: j, namespace: team-a}
spec:
  accelerator: v6e
  topology: 2x2
  template:
    command: [python3, train.py]
    env:
    - {name: STEPS, value: "10"}
    - {name: DB_PASSWORD, valueFrom: {secret: db, key: password}}
    - {name: TOKEN, valueFrom: {secretKeyRef: {name: api, key: token}}}
)";

TEST(SecretEnvTest, TrainJobTakesBothFormsAlike) {
  for (const char* text : {kJobMapForm, kJobListForm}) {
    auto spec = ParseTrainJob(Doc(text));
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    EXPECT_EQ(spec->env, (std::map<std::string, std::string>{{"STEPS", "10"}}));
    EXPECT_EQ(spec->secret_env.at("DB_PASSWORD"), (SecretKeyRef{"db", "password"}));
    EXPECT_EQ(spec->secret_env.at("TOKEN"), (SecretKeyRef{"api", "token"}));
  }
}

TEST(SecretEnvTest, RefusalsNameTheEntry) {
  struct Case {
    Json env;
    std::string starts;
  };
  const Case cases[] = {
      {{{"X", {{"valueFrom", {{"secret", "db"}}}}}}, "spec.template.env.X.valueFrom.key: required"},
      {{{"X", {{"valueFrom", {{"key", "k"}}}}}}, "spec.template.env.X.valueFrom.secret: required"},
      {{{"X", {{"valueFrom", {{"secret", "Db"}, {"key", "k"}}}}}},
       "spec.template.env.X.valueFrom.secret:"},
      {{{"X", {{"valueFrom", {{"secret", "db"}, {"key", "a b"}}}}}},
       "spec.template.env.X.valueFrom.key: a key may contain only"},
      {{{"X", {{"valueFrom", {{"configMap", "db"}}}}}}, "spec.template.env.X.valueFrom"},
      {{{"X", {{"value", "v"}}}}, "spec.template.env.X"},
      {{{"RANK", {{"valueFrom", {{"secret", "db"}, {"key", "k"}}}}}},
       "spec.template.env.RANK: set by tessera"},
      {Json::array({{{"name", "X"}}}), "spec.template.env[0]: give value or valueFrom"},
      {Json::array({{{"name", "X"}, {"value", "1"}}, {{"name", "X"}, {"value", "2"}}}),
       "spec.template.env[1].name: X is set twice"},
      {Json::array({{{"value", "1"}}}), "spec.template.env[0].name: required"},
      {"text", "spec.template.env: must be a mapping"},
  };
  for (const Case& c : cases) {
    Json doc = Doc(kJobMapForm);
    doc["spec"]["template"]["env"] = c.env;
    auto r = ParseTrainJob(doc);
    ASSERT_FALSE(r.ok()) << c.starts;
    EXPECT_EQ(r.status().message().rfind(c.starts, 0), 0u) << r.status().message();
  }
}

TEST(SecretEnvTest, ServiceKeepsTheReferenceThroughItsStoredDocument) {
  Json doc = Doc(R"(
apiVersion: tessera/v1
kind: Service
metadata: {name: llm, namespace: team-a}
spec:
  accelerator: v6e
  topology: 2x2
  command: [python3, server.py]
  env:
    MODEL: small
    HF_TOKEN: {valueFrom: {secret: hf, key: token}}
)");
  auto spec = ParseService(doc);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  ASSERT_EQ(spec->roles.size(), 1u);
  EXPECT_EQ(spec->roles[0].secret_env.at("HF_TOKEN"), (SecretKeyRef{"hf", "token"}));
  Service service;
  service.spec = *spec;
  const Json stored = ServiceJson(service);
  EXPECT_EQ(stored["spec"]["roles"][0]["env"]["HF_TOKEN"]["valueFrom"]["secret"], "hf");
  auto back = ServiceFromJson(stored);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->spec.roles[0].secret_env, spec->roles[0].secret_env);
  EXPECT_EQ(back->spec.roles[0].env.at("MODEL"), "small");
  // A new reference is a new template: the replicas roll (and read the Secret again).
  ServiceRoleSpec changed = spec->roles[0];
  changed.secret_env["HF_TOKEN"].key = "token2";
  EXPECT_FALSE(changed.SameTemplate(spec->roles[0]));
}

}  // namespace
}  // namespace tessera::codec
