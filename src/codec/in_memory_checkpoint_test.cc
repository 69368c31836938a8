// spec.checkpoint.inMemory: parsed into the workers' TESSERA_PEER_CKPT_* variables, every wrong
// input refused with the field at fault; through ParseTrainJob too.
#include "codec/in_memory_checkpoint.h"

#include <gtest/gtest.h>

#include "codec/manifest.h"

namespace tessera::codec {
namespace {

Status Parse(const std::string& checkpoint_json, std::map<std::string, std::string>& env,
             const std::string& dir = "/ckpt") {
  return ParseInMemoryCheckpoint(nlohmann::json::parse(checkpoint_json), dir, env);
}

TEST(InMemoryCheckpointTest, FieldsBecomeTheWorkersVariables) {
  std::map<std::string, std::string> env{{"A", "1"}};
  ASSERT_TRUE(
      Parse(R"({"inMemory": {"everySteps": 2, "peerCopies": 0, "maxBytesPerHost": "8Gi"}})", env)
          .ok());
  EXPECT_EQ(env.at("TESSERA_PEER_CKPT_EVERY"), "2");
  EXPECT_EQ(env.at("TESSERA_PEER_CKPT_COPIES"), "0");
  EXPECT_EQ(env.at("TESSERA_PEER_CKPT_MAX_BYTES"), std::to_string(int64_t{8} << 30));
  EXPECT_EQ(env.at("A"), "1");

  std::map<std::string, std::string> defaults;
  ASSERT_TRUE(Parse(R"({"inMemory": {}})", defaults).ok());
  EXPECT_EQ(defaults.at("TESSERA_PEER_CKPT_EVERY"), "1");
  EXPECT_EQ(defaults.at("TESSERA_PEER_CKPT_COPIES"), "1");
  EXPECT_EQ(defaults.at("TESSERA_PEER_CKPT_MAX_BYTES"), std::to_string(kDefaultPeerCkptMaxBytes));

  std::map<std::string, std::string> none;
  ASSERT_TRUE(Parse(R"({"dir": "/ckpt"})", none).ok());
  EXPECT_TRUE(none.empty());
}

TEST(InMemoryCheckpointTest, ByteQuantities) {
  const std::pair<const char*, int64_t> cases[] = {{"1000", 1000},
                                                   {"\"1000\"", 1000},
                                                   {"\"512Mi\"", int64_t{512} << 20},
                                                   {"\"1G\"", 1'000'000'000},
                                                   {"\"2Ki\"", 2048},
                                                   {"\"1Ti\"", int64_t{1} << 40}};
  for (const auto& [text, want] : cases) {
    auto r = ParseByteQuantity("f", nlohmann::json::parse(text));
    ASSERT_TRUE(r.ok()) << text << ": " << r.status().message();
    EXPECT_EQ(*r, want) << text;
  }
}

TEST(InMemoryCheckpointTest, WrongInputsNameTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"inMemory": 1})", "spec.checkpoint.inMemory: must be an object"},
      {R"({"inMemory": {"every": 1}})", "spec.checkpoint.inMemory.every: unknown field"},
      {R"({"inMemory": {"everySteps": 0}})", "spec.checkpoint.inMemory.everySteps: 0 is out"},
      {R"({"inMemory": {"everySteps": "1"}})", "spec.checkpoint.inMemory.everySteps: must be"},
      {R"({"inMemory": {"peerCopies": 4}})", "spec.checkpoint.inMemory.peerCopies: 4 is out"},
      {R"({"inMemory": {"maxBytesPerHost": 0}})", "maxBytesPerHost: must be a size"},
      {R"({"inMemory": {"maxBytesPerHost": "8GB"}})", "unknown unit 'GB'"},
      {R"({"inMemory": {"maxBytesPerHost": "lots"}})", "maxBytesPerHost: 'lots'"},
      {R"({"inMemory": {"maxBytesPerHost": "99999999999Ti"}})", "too large"},
      {R"({"inMemory": {"maxBytesPerHost": -5}})", "must be a size"},
  };
  for (const auto& [doc, message] : cases) {
    std::map<std::string, std::string> env;
    Status s = Parse(doc, env);
    ASSERT_FALSE(s.ok()) << doc;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << doc;
    EXPECT_NE(s.message().find(message), std::string::npos) << doc << " -> " << s.message();
    EXPECT_TRUE(env.empty()) << doc;
  }
  std::map<std::string, std::string> env;
  Status s = Parse(R"({"inMemory": {}})", env, "");
  EXPECT_NE(s.message().find("needs spec.checkpoint.dir"), std::string::npos) << s.message();
}

TEST(InMemoryCheckpointTest, ThroughTheTrainJobParser) {
  auto doc = nlohmann::json::parse(R"({
    "apiVersion": "tessera/v1", "kind": "TrainJob", "metadata": {"name": "j"},
    "spec": {"accelerator": "v6e", "topology": "4x4",
             "checkpoint": {"dir": "/ckpt", "inMemory": {"everySteps": 1}},
             "template": {"command": ["python3", "train.py"]}}})");
  auto spec = ParseTrainJob(doc);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->env.at("TESSERA_PEER_CKPT_EVERY"), "1");

  doc["spec"]["checkpoint"]["inMemory"] = {{"peerCopies", "one"}};
  auto bad = ParseTrainJob(doc);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("spec.checkpoint.inMemory.peerCopies"), std::string::npos);
}

}  // namespace
}  // namespace tessera::codec
