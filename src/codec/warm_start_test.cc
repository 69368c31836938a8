// spec.warmStart: parsed into the workers' TESSERA_WARM_PRELOAD, every wrong input refused
// with the field at fault.
#include "codec/warm_start.h"

#include <gtest/gtest.h>

#include "codec/manifest.h"

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

}  // namespace
}  // namespace tessera::codec
