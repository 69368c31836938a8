// SqliteStore behaviour beyond the shared suite: bad files, locking, schema versions, and
// surviving a process killed mid-write.
#include "store/sqlite_store.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <set>
#include <string>

#include "store/store_test_util.h"

namespace tessera::store {
namespace {

void WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
}

// Runs `sql` on the file with a plain SQLite connection, as an operator's tool would.
void RawExec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* error = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
  EXPECT_EQ(rc, SQLITE_OK) << (error ? error : "");
  sqlite3_free(error);
  sqlite3_close(db);
}

TEST(SqliteStore, GarbageFileIsInvalidArgumentNamingThePath) {
  ScopedTempDir dir;
  const std::string path = dir.File("garbage.db");
  WriteFile(path, std::string(8192, 'x'));
  auto store = SqliteStore::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument) << store.status().ToString();
  EXPECT_NE(store.status().message().find(path), std::string::npos);
}

TEST(SqliteStore, CorruptedPagesAreInvalidArgument) {
  ScopedTempDir dir;
  const std::string path = dir.File("store.db");
  {
    auto store = SqliteStore::Open(path);
    ASSERT_TRUE(store.ok());
    for (int i = 0; i < 200; ++i) {
      ASSERT_TRUE((*store)->Create("Host", "h" + std::to_string(i), std::string(200, 'b')).ok());
    }
    ASSERT_TRUE((*store)->Close().ok());
  }
  // Overwrite every page after the first (the header stays valid, the b-trees do not).
  std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
  f.seekp(0, std::ios::end);
  const auto size = static_cast<size_t>(f.tellp());
  ASSERT_GT(size, 8192u);
  f.seekp(4096);
  f << std::string(size - 4096, '\x5a');
  f.close();

  auto reopened = SqliteStore::Open(path);
  ASSERT_FALSE(reopened.ok());
  EXPECT_EQ(reopened.status().code(), StatusCode::kInvalidArgument) << reopened.status().ToString();
  EXPECT_NE(reopened.status().message().find(path), std::string::npos);
}

TEST(SqliteStore, UnopenableDirectoryIsUnavailableNamingThePath) {
  ScopedTempDir dir;
  const std::string path = dir.File("no/such/dir/store.db");
  auto store = SqliteStore::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kUnavailable) << store.status().ToString();
  EXPECT_NE(store.status().message().find(path), std::string::npos);
}

TEST(SqliteStore, MissingFileWithoutCreateIsNotFound) {
  ScopedTempDir dir;
  Options options;
  options.create_if_missing = false;
  auto store = SqliteStore::Open(dir.File("store.db"), options);
  EXPECT_EQ(store.status().code(), StatusCode::kNotFound) << store.status().ToString();
}

TEST(SqliteStore, InvalidOptionsAreInvalidArgument) {
  ScopedTempDir dir;
  Options options;
  options.change_log_limit = 0;
  EXPECT_EQ(SqliteStore::Open(dir.File("store.db"), options).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(SqliteStore, SecondOpenWhileHeldIsUnavailable) {
  ScopedTempDir dir;
  const std::string path = dir.File("store.db");
  auto first = SqliteStore::Open(path);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE((*first)->Create("Host", "h", "x").ok());

  Options no_wait;
  no_wait.busy_timeout_ms = 0;
  auto second = SqliteStore::Open(path, no_wait);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable) << second.status().ToString();

  ASSERT_TRUE((*first)->Close().ok());
  auto third = SqliteStore::Open(path, no_wait);
  ASSERT_TRUE(third.ok()) << third.status().ToString();
  EXPECT_EQ((*third)->Get("Host", "h")->body, "x");
}

TEST(SqliteStore, ForeignDatabaseIsInvalidArgument) {
  ScopedTempDir dir;
  const std::string path = dir.File("other.db");
  RawExec(path, "CREATE TABLE users (id INTEGER PRIMARY KEY)");
  auto store = SqliteStore::Open(path);
  EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument) << store.status().ToString();
}

TEST(SqliteStore, NewerSchemaIsFailedPreconditionAndFileIsInWalMode) {
  ScopedTempDir dir;
  const std::string path = dir.File("store.db");
  {
    auto store = SqliteStore::Open(path);
    ASSERT_TRUE(store.ok());
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &stmt, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)), "wal");
  sqlite3_finalize(stmt);
  sqlite3_close(db);

  RawExec(path,
          "UPDATE schema_version SET version = " + std::to_string(SqliteStore::kSchemaVersion + 1));
  auto store = SqliteStore::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kFailedPrecondition) << store.status().ToString();
  EXPECT_NE(store.status().message().find("newer"), std::string::npos);
}

// The child increments Counter/c and creates Item/<n> in one batch, forever, and reports each
// n on a pipe once its Commit has returned. It never returns into the test.
[[noreturn]] void WriteUntilKilled(const std::string& path, int report_fd) {
  auto opened = SqliteStore::Open(path);
  if (!opened.ok()) _exit(10);
  Store& store = **opened;
  for (;;) {
    auto counter = store.Get("Counter", "c");
    int64_t n = 1;
    WriteBatch batch;
    if (counter.ok()) {
      n = std::stoll(counter->body) + 1;
      batch.Update("Counter", "c", std::to_string(n), counter->resource_version);
    } else {
      batch.Create("Counter", "c", "1");
    }
    batch.Create("Item", "i" + std::to_string(n), std::to_string(n));
    if (!store.Commit(batch).ok()) _exit(11);
    if (write(report_fd, &n, sizeof n) != static_cast<ssize_t>(sizeof n)) _exit(12);
  }
}

// Kills the child on every way out of the test, so a failed assertion never leaks it.
class ChildGuard {
 public:
  explicit ChildGuard(pid_t pid) : pid_(pid) {}
  ChildGuard(const ChildGuard&) = delete;
  ChildGuard& operator=(const ChildGuard&) = delete;
  ~ChildGuard() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  // Kills the child and returns its wait status.
  int KillAndReap() {
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_;
};

TEST(SqliteStoreCrash, EveryCommittedWriteSurvivesSigkill) {
  ScopedTempDir dir;
  const std::string path = dir.File("store.db");
  int64_t last_reported = 0;
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      WriteUntilKilled(path, fds[1]);
    }
    close(fds[1]);
    ChildGuard child(pid);

    // Let the child commit a few dozen batches, then kill it wherever it is.
    int64_t n = 0;
    for (int seen = 0; seen < 40; ++seen) {
      ASSERT_EQ(read(fds[0], &n, sizeof n), static_cast<ssize_t>(sizeof n))
          << "the child stopped early";
      EXPECT_EQ(n, last_reported + 1);
      last_reported = n;
    }
    const int status = child.KillAndReap();
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "the child exited by itself with status " << status;
    // Reports written before the kill are committed writes too.
    while (read(fds[0], &n, sizeof n) == static_cast<ssize_t>(sizeof n)) last_reported = n;
    close(fds[0]);

    auto reopened = SqliteStore::Open(path);
    ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
    Store& store = **reopened;
    auto counter = store.Get("Counter", "c");
    ASSERT_TRUE(counter.ok());
    const int64_t count = std::stoll(counter->body);
    // The kill may land after a Commit but before its report: at most one unreported batch.
    EXPECT_GE(count, last_reported);
    EXPECT_LE(count, last_reported + 1);
    auto items = store.List("Item");
    ASSERT_TRUE(items.ok());
    ASSERT_EQ(static_cast<int64_t>(items->size()), count);
    std::set<int64_t> seen;
    for (const Object& item : *items) seen.insert(std::stoll(item.body));
    EXPECT_EQ(*seen.begin(), 1);
    EXPECT_EQ(*seen.rbegin(), count);
    EXPECT_EQ(store.Revision(), count);  // one revision per batch, none lost, none torn
    auto log = store.ChangesSince(count - 1, 10);
    ASSERT_TRUE(log.ok()) << log.status().ToString();
    EXPECT_EQ(log->size(), 2u);
    last_reported = count;
    ASSERT_TRUE(store.Close().ok());
  }
}

}  // namespace
}  // namespace tessera::store
