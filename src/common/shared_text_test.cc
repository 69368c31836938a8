#include "common/shared_text.h"

#include <gtest/gtest.h>

#include <memory>
#include <sstream>
#include <string>
#include <utility>

namespace tessera {
namespace {

TEST(SharedText, CopiesShareOneAllocationAndOutliveTheOriginal) {
  std::string built = "needs 64 chips; queue q1 (nominal 32 chips): over quota by 32 chips";
  auto original = std::make_unique<SharedText>(built);
  const SharedText copy = *original;
  EXPECT_EQ(copy.view().data(), original->view().data());  // shared, not copied
  EXPECT_NE(copy.view().data(), built.data());             // but not the string it came from
  built.assign(built.size(), 'x');
  original.reset();
  EXPECT_EQ(copy, "needs 64 chips; queue q1 (nominal 32 chips): over quota by 32 chips");
  EXPECT_EQ(copy.size(), built.size());
}

TEST(SharedText, EmptyAndDefaultAreTheSame) {
  const SharedText none;
  const SharedText empty("");
  EXPECT_TRUE(none.empty());
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(none, empty);
  EXPECT_EQ(none, "");
  EXPECT_EQ(none.str(), "");
}

TEST(SharedText, ComparesPrintsAndConvertsByContent) {
  const std::string with_nul("a\0b", 3);
  const SharedText t(with_nul);
  EXPECT_EQ(t.size(), 3u);
  EXPECT_EQ(t.str(), with_nul);
  EXPECT_EQ(t, SharedText(std::string("a\0b", 3)));
  EXPECT_FALSE(t == SharedText("a"));
  EXPECT_FALSE(t == "a");  // a literal stops at its NUL
  std::ostringstream out;
  out << SharedText("over quota");
  EXPECT_EQ(out.str(), "over quota");
  SharedText moved("moved");
  const SharedText to = std::move(moved);
  EXPECT_EQ(to, "moved");
  EXPECT_EQ(std::string(to), "moved");
}

TEST(SharedText, ConcatJoinsItsPiecesEmptyOnesIncluded) {
  const std::string count = "12";
  EXPECT_EQ(SharedText::Concat({"StrictFIFO: waiting behind ", count, "", " workload(s)"}),
            "StrictFIFO: waiting behind 12 workload(s)");
  EXPECT_EQ(SharedText::Concat({"", ""}).size(), 0u);
  EXPECT_TRUE(SharedText::Concat({}).empty());
  const SharedText one = SharedText::Concat({"only"});
  EXPECT_EQ(one, "only");
  EXPECT_EQ(one.size(), 4u);
}

}  // namespace
}  // namespace tessera
