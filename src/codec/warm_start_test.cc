// spec.warmStart: parsed into the workers' TESSERA_WARM_PRELOAD (TrainJob) or a Service role's
// preload list (kept through the stored document), every wrong input refused with the field
// at fault.
#include "codec/warm_start.h"

#include <gtest/gtest.h>

#include "codec/manifest.h"
#include "codec/service_json.h"
#include "codec/service_manifest.h"

namespace tessera::codec {
namespace {

Status Parse(const std::string& spec_json, std::map<std::string, std::string>& env) {
  return ParseWarmStart(nlohmann::json::parse(spec_json), env);
}

TEST(WarmStartTest, PreloadBecomesTheWorkersVariable) {
  std::map<std::string, std::string> env{{"A", "1"}};
  ASSERT_TRUE(Parse(R"({"warmStart": {"preload": ["torch", "numpy.linalg"]}})", env).ok());
  EXPECT_EQ(env.at("TESSERA_WARM_PRELOAD"), "torch,numpy.linalg");
  EXPECT_EQ(env.at("A"), "1");
  std::map<std::string, std::string> none;
  ASSERT_TRUE(Parse(R"({"template": {}})", none).ok());
  EXPECT_TRUE(none.empty());
}

TEST(WarmStartTest, WrongInputsNameTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"warmStart": [1]})", "spec.warmStart: must be an object"},
      {R"({"warmStart": {"modules": []}})", "spec.warmStart.modules: unknown field"},
      {R"({"warmStart": {}})", "spec.warmStart.preload: required"},
      {R"({"warmStart": {"preload": []}})", "spec.warmStart.preload: required"},
      {R"({"warmStart": {"preload": [3]}})", "spec.warmStart.preload[0]: must be a module"},
      {R"({"warmStart": {"preload": ["torch", "a b"]}})", "spec.warmStart.preload[1]: 'a b'"},
      {R"({"warmStart": {"preload": ["1x"]}})", "is not a Python module name"},
      {R"({"warmStart": {"preload": ["a..b"]}})", "is not a Python module name"},
      {R"({"warmStart": {"preload": ["torch", "torch"]}})", "'torch' repeated"},
  };
  for (const auto& [doc, message] : cases) {
    std::map<std::string, std::string> env;
    Status s = Parse(doc, env);
    EXPECT_FALSE(s.ok()) << doc;
    EXPECT_NE(s.message().find(message), std::string::npos) << doc << " -> " << s.message();
    EXPECT_TRUE(env.empty()) << doc;
  }
}

TEST(WarmStartTest, AJobDocumentWithWarmStartParses) {
  auto spec = ParseTrainJob(nlohmann::json::parse(R"({
    "apiVersion": "tessera/v1", "kind": "TrainJob", "metadata": {"name": "w"},
    "spec": {"accelerator": "v6e", "topology": "4x4", "warmStart": {"preload": ["torch"]},
             "template": {"command": ["python3", "train.py"], "env": {"X": "1"}}}})"));
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->env.at("TESSERA_WARM_PRELOAD"), "torch");
  EXPECT_EQ(spec->env.at("X"), "1");
}

nlohmann::json ServiceDocument(const nlohmann::json& spec) {
  return {{"apiVersion", "tessera/v1"},
          {"kind", "Service"},
          {"metadata", {{"name", "llm"}}},
          {"spec", spec}};
}

nlohmann::json ServerRole() {
  return {{"accelerator", "v6e"}, {"topology", "4x4"}, {"command", {"python3", "server.py"}}};
}

TEST(WarmStartTest, AServiceTemplateWithWarmStartParsesAndIsStored) {
  nlohmann::json single = ServerRole();
  single["warmStart"] = {{"preload", {"torch", "numpy.linalg"}}};
  auto spec = ParseService(ServiceDocument(single));
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->roles[0].warm_preload, (std::vector<std::string>{"torch", "numpy.linalg"}));
  EXPECT_FALSE(spec->roles[0].env.count("TESSERA_WARM_PRELOAD"));  // set at assignment

  // With spec.roles, per role: the role without it starts cold.
  nlohmann::json prefill = ServerRole(), decode = ServerRole();
  prefill["name"] = "prefill";
  decode["name"] = "decode";
  decode["warmStart"] = {{"preload", {"torch"}}};
  spec = ParseService(ServiceDocument({{"roles", {prefill, decode}}}));
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_TRUE(spec->roles[0].warm_preload.empty());
  EXPECT_EQ(spec->roles[1].warm_preload, (std::vector<std::string>{"torch"}));

  // The stored document (ServiceJson, read back by ServiceFromJson after a head restart).
  Service service;
  service.spec = *spec;
  const nlohmann::json stored = ServiceJson(service);
  EXPECT_FALSE(stored["spec"]["roles"][0].contains("warmStart"));
  EXPECT_EQ(stored["spec"]["roles"][1]["warmStart"]["preload"], nlohmann::json({"torch"}));
  auto back = ServiceFromJson(stored);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->spec.roles[1].warm_preload, (std::vector<std::string>{"torch"}));
  EXPECT_TRUE(back->spec.roles[0].warm_preload.empty());
}

TEST(WarmStartTest, AServiceWarmStartErrorNamesTheRolesField) {
  nlohmann::json single = ServerRole();
  single["warmStart"] = {{"preload", {"torch", 7}}};
  Status s = ParseService(ServiceDocument(single)).status();
  EXPECT_NE(s.message().find("spec.warmStart.preload[1]: must be a module name"), std::string::npos)
      << s.message();

  nlohmann::json role = ServerRole();
  role["name"] = "server";
  role["warmStart"] = {{"modules", {"torch"}}};
  s = ParseService(ServiceDocument({{"roles", {role}}})).status();
  EXPECT_NE(s.message().find("spec.roles[0].warmStart.modules: unknown field (known: preload)"),
            std::string::npos)
      << s.message();
  role["warmStart"] = true;
  s = ParseService(ServiceDocument({{"roles", {role}}})).status();
  EXPECT_NE(s.message().find("spec.roles[0].warmStart: must be an object"), std::string::npos)
      << s.message();

  // warmStart beside spec.roles: unknown there, with where it goes.
  role.erase("warmStart");
  s = ParseService(ServiceDocument({{"roles", {role}}, {"warmStart", {{"preload", {"torch"}}}}}))
          .status();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("spec.roles[i].warmStart"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace tessera::codec
