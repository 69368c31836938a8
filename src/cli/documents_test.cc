#include "cli/documents.h"

#include <gtest/gtest.h>

namespace tessera::cli {
namespace {

TEST(SplitManifests, MultiDocumentYamlInOrderSkippingEmptyOnes) {
  const std::string text =
      "# queues\n---\napiVersion: tessera/v1\nkind: ClusterQueue\n---\n# nothing here\n---\n"
      "apiVersion: tessera/v1\nkind: LocalQueue\n...\n--- {apiVersion: tessera/v1, kind: "
      "PriorityClass}\n";
  auto docs = SplitManifests(text, "q.yaml");
  ASSERT_TRUE(docs.ok()) << docs.status().ToString();
  ASSERT_EQ(docs->size(), 3u);
  EXPECT_EQ((*docs)[0].source, "q.yaml (document 1)");
  EXPECT_NE((*docs)[0].text.find("kind: ClusterQueue"), std::string::npos);
  EXPECT_NE((*docs)[1].text.find("kind: LocalQueue"), std::string::npos);
  EXPECT_EQ((*docs)[1].text.find("PriorityClass"), std::string::npos);
  EXPECT_EQ((*docs)[2].source, "q.yaml (document 3)");
  EXPECT_NE((*docs)[2].text.find("kind: PriorityClass"), std::string::npos);
}

TEST(SplitManifests, MarkersOnlyAtColumnZero) {
  // An indented "---" inside a block scalar is text, and "----" is not a marker.
  const std::string text = "kind: TrainJob\nspec:\n  note: |\n    ---\n    text\n----x: 1\n";
  auto docs = SplitManifests(text, "one.yaml");
  ASSERT_TRUE(docs.ok());
  ASSERT_EQ(docs->size(), 1u);
  EXPECT_EQ((*docs)[0].source, "one.yaml");
  EXPECT_EQ((*docs)[0].text, text);
}

TEST(SplitManifests, JsonListsAndKubernetesLists) {
  auto docs = SplitManifests(R"( [{"kind":"A"}, {"kind":"B"}] )", "l.json");
  ASSERT_TRUE(docs.ok());
  ASSERT_EQ(docs->size(), 2u);
  EXPECT_EQ((*docs)[1].source, "l.json (item 2)");
  EXPECT_EQ((*docs)[1].text, R"({"kind":"B"})");
  docs = SplitManifests(R"({"kind":"List","items":[{"kind":"A"}]})", "k.json");
  ASSERT_TRUE(docs.ok());
  ASSERT_EQ(docs->size(), 1u);
  EXPECT_EQ((*docs)[0].text, R"({"kind":"A"})");
  docs = SplitManifests(R"({"kind":"TrainJob"})", "j.json");  // one document, sent as written
  ASSERT_TRUE(docs.ok());
  ASSERT_EQ(docs->size(), 1u);
  EXPECT_EQ((*docs)[0].text, R"({"kind":"TrainJob"})");
  auto bad = SplitManifests("[1, {}]", "b.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "b.json: item 1 is not a document (an object with apiVersion and kind)");
  EXPECT_FALSE(SplitManifests("[{", "m.json").ok());
  docs = SplitManifests(" \n# only a comment\n", "e.yaml");
  ASSERT_TRUE(docs.ok());
  EXPECT_TRUE(docs->empty());
}

TEST(ParseFlagDuration, UnitsAndRefusals) {
  EXPECT_EQ(*ParseFlagDuration("--timeout", "5m"), 300'000);
  EXPECT_EQ(*ParseFlagDuration("--timeout", "30s"), 30'000);
  EXPECT_EQ(*ParseFlagDuration("--timeout", "2h"), 7'200'000);
  EXPECT_EQ(*ParseFlagDuration("--timeout", "1500ms"), 1'500);
  EXPECT_EQ(*ParseFlagDuration("--timeout", "10"), 10'000);
  EXPECT_EQ(ParseFlagDuration("--timeout", "5 min").status().message(),
            "--timeout: '5 min' is not a duration; write e.g. 30s, 5m, 1h or 1500ms");
  EXPECT_FALSE(ParseFlagDuration("--timeout", "").ok());
  EXPECT_FALSE(ParseFlagDuration("--timeout", "-1s").ok());
  EXPECT_FALSE(ParseFlagDuration("--timeout", "9999999999999s").ok());
  EXPECT_TRUE(IsManifestFileName("a.yml"));
  EXPECT_FALSE(IsManifestFileName("README.md"));
}

}  // namespace
}  // namespace tessera::cli
