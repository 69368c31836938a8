#include "api/audit_log.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace tessera::api {
namespace {

TEST(AuditLog, KeepsTheLatestEntriesUpToItsCapacity) {
  AuditLog log(3);
  for (int i = 0; i < 5; ++i) log.Record({i, "ann", "delete", "TrainJob", "default", "j", 200, ""});
  EXPECT_EQ(log.recorded(), 5u);
  const auto all = log.Latest(10);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all.front().time_ms, 2);
  EXPECT_EQ(all.back().time_ms, 4);
  const auto last = log.Latest(1);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].time_ms, 4);
}

TEST(AuditLog, JsonNamesWhoWhatWhichWhenAndTheOutcome) {
  const auto j = AuditEntryToJson({7, "vera", "delete", "TrainJob", "team-a", "x", 403, "no"});
  EXPECT_EQ(j["user"], "vera");
  EXPECT_EQ(j["verb"], "delete");
  EXPECT_EQ(j["kind"], "TrainJob");
  EXPECT_EQ(j["namespace"], "team-a");
  EXPECT_EQ(j["name"], "x");
  EXPECT_EQ(j["timeMs"], 7);
  EXPECT_EQ(j["code"], 403);
  EXPECT_EQ(j["message"], "no");
  EXPECT_FALSE(
      AuditEntryToJson({1, "admin", "delete", "Host", "", "h", 200, ""}).contains("namespace"));
}

// A fresh directory per test, removed afterwards.
class AuditFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tessera-audit-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const std::string& name = "audit.log") const { return dir_ + "/" + name; }
  static std::string Read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  static AuditEntry Entry(int64_t t) {
    return {t, "ann", "delete", "TrainJob", "default", "job-" + std::to_string(t), 200, ""};
  }
  std::string dir_;
};

TEST_F(AuditFileTest, EveryEntryIsALineAndAStartAgainLoadsTheLatest) {
  {
    AuditLog log(3);
    ASSERT_TRUE(log.OpenFile({Path(), 1 << 20, 2}).ok());
    for (int i = 0; i < 5; ++i) log.Record(Entry(i));
    log.Record({9, "vera", "create", "TrainJob", "team-a", "x", 403, "view may not create"});
  }
  struct stat st {};
  ASSERT_EQ(::stat(Path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const std::string text = Read(Path());
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 6);
  EXPECT_NE(text.find("view may not create"), std::string::npos);

  AuditLog again(3);
  ASSERT_TRUE(again.OpenFile({Path(), 1 << 20, 2}).ok());
  const auto latest = again.Latest(10);
  ASSERT_EQ(latest.size(), 3u);
  EXPECT_EQ(latest[0].time_ms, 3);
  EXPECT_EQ(latest[2].user, "vera");
  EXPECT_EQ(latest[2].namespace_name, "team-a");
  EXPECT_EQ(latest[2].code, 403);
  EXPECT_EQ(again.recorded(), 0u);
}

TEST_F(AuditFileTest, RotatesPastMaxBytesAndKeepsOnlyMaxBackups) {
  const uint64_t line = AuditEntryToJson(Entry(10)).dump().size() + 1;
  AuditLog log(100);
  // Two lines fit in a file; the third rotates.
  ASSERT_TRUE(log.OpenFile({Path(), 2 * line, 2}).ok());
  for (int i = 10; i < 19; ++i) log.Record(Entry(i));  // 9 lines: 18, 16-17, 14-15 kept
  EXPECT_EQ(log.file_errors(), 0u);
  EXPECT_NE(Read(Path()).find("job-18"), std::string::npos);
  EXPECT_NE(Read(Path("audit.log.1")).find("job-16"), std::string::npos);
  EXPECT_NE(Read(Path("audit.log.2")).find("job-14"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(Path("audit.log.3")));

  AuditLog again(100);
  ASSERT_TRUE(again.OpenFile({Path(), 2 * line, 2}).ok());
  const auto latest = again.Latest(100);
  ASSERT_EQ(latest.size(), 5u);  // what the kept files hold, oldest first
  EXPECT_EQ(latest.front().time_ms, 14);
  EXPECT_EQ(latest.back().time_ms, 18);
}

TEST_F(AuditFileTest, ATornLineIsSkippedAndCounted) {
  std::ofstream(Path()) << AuditEntryToJson(Entry(1)).dump() << "\n{\"timeMs\": 2, \"us";
  AuditLog log;
  ASSERT_TRUE(log.OpenFile({Path(), 1 << 20, 1}).ok());
  EXPECT_EQ(log.skipped_lines(), 1u);
  ASSERT_EQ(log.Latest(10).size(), 1u);
}

TEST_F(AuditFileTest, BadOptionsNameTheFlag) {
  AuditLog log;
  const Status no_path = log.OpenFile({"", 1, 1});
  EXPECT_NE(no_path.message().find("--audit-log-path"), std::string::npos) << no_path.ToString();
  const Status zero = log.OpenFile({Path(), 0, 1});
  EXPECT_NE(zero.message().find("--audit-log-maxsize"), std::string::npos) << zero.ToString();
  const Status missing = log.OpenFile({dir_ + "/no/such/dir/audit.log", 1, 1});
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("no/such/dir/audit.log"), std::string::npos);
}

}  // namespace
}  // namespace tessera::api
