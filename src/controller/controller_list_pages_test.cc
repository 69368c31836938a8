// Lists in pages (Controller::ListPage): the pages put together are the whole list, in its
// order; objects present through the whole listing come exactly once while others are added and
// deleted between pages; namespaces, hosts, events, and a position that is not one.
#include <gtest/gtest.h>

#include <set>

#include "controller/controller_test_util.h"

namespace tessera::controller {
namespace {

class ListPagesTest : public ControllerTest {
 protected:
  // Every page of `kind` of `limit` items, and the names seen (in order).
  std::vector<std::string> PageThrough(const std::string& kind, size_t limit,
                                       const std::string& ns = "",
                                       const std::function<void(int)>& between = nullptr) {
    std::vector<std::string> names;
    Controller::PageRequest request{"", limit, ns};
    for (int page = 0; page < 1000; ++page) {
      auto got = c_->ListPage(kind, request);
      if (!got.ok()) {
        ADD_FAILURE() << got.status().ToString();
        break;
      }
      EXPECT_LE(got->list["items"].size(), limit);
      for (const Json& item : got->list["items"])
        names.push_back(item["metadata"]["name"].get<std::string>());
      if (got->last.empty()) {
        EXPECT_EQ(got->remaining, 0u);
        break;
      }
      EXPECT_EQ(got->list["items"].size(), limit) << "a page short of its limit before the end";
      request.after = got->last;
      if (between) between(page);
    }
    return names;
  }
};

TEST_F(ListPagesTest, JobPagesMakeTheWholeListInUidOrder) {
  RegisterTwoSlices();
  // Names out of uid order, so that an order by name would differ.
  for (int i = 0; i < 23; ++i) Ok(c_->CreateJob(JobDoc("j" + std::to_string((i * 7) % 23), 1)));
  std::vector<std::string> whole;
  const Json jobs = c_->ListJobs();
  for (const Json& item : jobs["items"]) whole.push_back(item["metadata"]["name"]);
  ASSERT_EQ(whole.size(), 23u);
  for (size_t limit : {1u, 5u, 22u, 23u, 100u}) EXPECT_EQ(PageThrough("TrainJob", limit), whole);
  auto first = Ok(c_->ListPage("TrainJob", {"", 5, ""}));
  EXPECT_EQ(first.remaining, 18u);
  EXPECT_EQ(first.last, UidPosition(first.list["items"][4]["metadata"]["uid"].get<uint64_t>()));
}

TEST_F(ListPagesTest, JobsAddedAndDeletedBetweenPagesSkipAndRepeatNothing) {
  RegisterTwoSlices();
  for (int i = 0; i < 30; ++i) Ok(c_->CreateJob(JobDoc("keep-" + std::to_string(i), 1)));
  for (int i = 0; i < 10; ++i) Ok(c_->CreateJob(JobDoc("gone-" + std::to_string(i), 1)));
  int added = 0;
  const std::vector<std::string> names = PageThrough("TrainJob", 4, "", [&](int page) {
    Ok(c_->CreateJob(JobDoc("new-" + std::to_string(added++), 1)));
    if (page < 10) Ok(c_->DeleteJob("gone-" + std::to_string(9 - page)));
  });
  std::multiset<std::string> seen(names.begin(), names.end());
  for (int i = 0; i < 30; ++i)
    EXPECT_EQ(seen.count("keep-" + std::to_string(i)), 1u) << "keep-" << i;
  for (const std::string& name : seen) EXPECT_EQ(seen.count(name), 1u) << name << " came twice";
  // Jobs created while paging come after every page already read: each of them is seen.
  for (int i = 0; i < added; ++i) EXPECT_EQ(seen.count("new-" + std::to_string(i)), 1u);
}

TEST_F(ListPagesTest, AJobPageOfOneNamespace) {
  RegisterTwoSlices();
  for (int i = 0; i < 6; ++i) {
    Json doc = JobDoc("x" + std::to_string(i), 1);
    if (i % 2) doc["metadata"]["namespace"] = "team-a";
    Ok(c_->CreateJob(doc));
  }
  EXPECT_EQ(PageThrough("TrainJob", 2, "team-a"), (std::vector<std::string>{"x1", "x3", "x5"}));
  EXPECT_EQ(PageThrough("TrainJob", 2, "default"), (std::vector<std::string>{"x0", "x2", "x4"}));
}

TEST_F(ListPagesTest, HostPagesByName) {
  RegisterTwoSlices();
  std::vector<std::string> whole;
  const Json hosts = c_->ListHosts();
  for (const Json& item : hosts["items"]) whole.push_back(item["metadata"]["name"]);
  ASSERT_EQ(whole.size(), 8u);
  EXPECT_EQ(PageThrough("Host", 3), whole);
  auto first = Ok(c_->ListPage("Host", {"", 3, ""}));
  EXPECT_EQ(first.remaining, 5u);
  EXPECT_EQ(first.last, whole[2]);
}

TEST_F(ListPagesTest, EventPagesInCreationOrder) {
  RegisterTwoSlices();
  for (int i = 0; i < 4; ++i) Ok(c_->CreateJob(JobDoc("e" + std::to_string(i), 1)));
  ASSERT_TRUE(c_->RunPass().ok());
  std::vector<std::string> whole;
  const Json events = c_->ListEvents();
  for (const Json& item : events["items"]) whole.push_back(item["metadata"]["name"]);
  ASSERT_GE(whole.size(), 4u);
  EXPECT_EQ(PageThrough("Event", 3), whole);
}

TEST_F(ListPagesTest, APositionThatIsNotAUidIsRefusedNamingContinue) {
  const Status refused = Err(c_->ListPage("TrainJob", {"abc", 5, ""}));
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FieldOf(refused), "continue");
  EXPECT_EQ(Err(c_->ListPage("NoSuchKind", {"", 5, ""})).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace tessera::controller
