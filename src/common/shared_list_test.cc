#include "common/shared_list.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tessera {
namespace {

TEST(SharedList, CopiesShareOneAllocationAndOutliveTheOriginal) {
  std::vector<std::string> built = {"train-1", "train-2"};
  const std::string* const built_at = built.data();
  auto original = std::make_unique<SharedList<std::string>>(std::move(built));
  EXPECT_EQ(original->items().data(), built_at);  // the vector was moved in, not copied
  const SharedList<std::string> copy = *original;
  EXPECT_EQ(&copy.items(), &original->items());  // shared, not copied
  original.reset();
  ASSERT_EQ(copy.size(), 2u);
  EXPECT_EQ(copy[0], "train-1");
  EXPECT_EQ(copy[1], "train-2");
  EXPECT_EQ(std::vector<std::string>(copy.begin(), copy.end()),
            (std::vector<std::string>{"train-1", "train-2"}));
}

TEST(SharedList, EmptyDefaultAndClearedAreTheSame) {
  const SharedList<int> none;
  const SharedList<int> empty(std::vector<int>{});
  EXPECT_TRUE(none.empty());
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(none.begin(), none.end());
  EXPECT_TRUE(none == empty);
  SharedList<int> list = {1, 2, 3};
  const SharedList<int> kept = list;
  list.clear();
  EXPECT_TRUE(list.empty());
  EXPECT_TRUE(list == none);
  EXPECT_EQ(kept.size(), 3u) << "clearing one copy leaves the others their list";
}

TEST(SharedList, ComparesByContent) {
  const SharedList<int> a = {1, 2};
  const SharedList<int> b(std::vector<int>{1, 2});
  EXPECT_TRUE(a == b);
  EXPECT_FALSE(a == SharedList<int>({1}));
  EXPECT_FALSE(a == SharedList<int>());
  int sum = 0;
  for (int v : a) sum += v;
  EXPECT_EQ(sum, 3);
}

}  // namespace
}  // namespace tessera
