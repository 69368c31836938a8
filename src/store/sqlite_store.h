// SqliteStore: the default Store backend, one SQLite file owned by one head process.
//
// The file holds the objects, the change log, the revision counters and a schema version.
// It runs in WAL journal mode with synchronous=FULL, so a Commit that returned is on disk and
// survives a crash of the process or the machine; a Commit that did not return is either
// entirely present or entirely absent after reopening. The file is opened with an exclusive
// lock that it keeps until Close: a second store (another head, or another SqliteStore in
// this process) cannot open it meanwhile, which makes the cached revision safe to trust.
//
// Thread-safety: every method is safe to call from any thread; one mutex serialises them
// over a single connection with cached prepared statements.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "store/store.h"

struct sqlite3;

namespace tessera::store {

class SqliteStore final : public Store {
 public:
  // The schema this build reads and writes; stored in the file's schema_version table.
  static constexpr int kSchemaVersion = 1;

  // Opens (or creates) the store at `path`. Errors, each naming the path:
  //   kInvalidArgument     the file is not a SQLite database, is corrupt, holds tables of
  //                        something else, or `options` are invalid.
  //   kNotFound            the file is missing and options.create_if_missing is false.
  //   kUnavailable         the file or its directory cannot be opened or written, or
  //                        another store holds it (retry after it closes).
  //   kFailedPrecondition  the file was written with a newer schema version.
  static Result<std::unique_ptr<Store>> Open(const std::string& path,
                                             const Options& options = Options());

  ~SqliteStore() override;

  Result<Object> Get(std::string_view kind, std::string_view name) override;
  Result<std::vector<Object>> List(std::string_view kind) override;
  Result<int64_t> Commit(const WriteBatch& batch) override;
  int64_t Revision() override;
  Result<std::vector<Change>> ChangesSince(int64_t revision, size_t limit) override;
  // Also reports a failure to close the file cleanly (kUnavailable).
  Status Close() override;

 private:
  struct Statements;  // the prepared statements, defined in sqlite_store.cc

  SqliteStore(std::string path, const Options& options);
  Status OpenLocked();
  Status CloseLocked();
  // The SQLite error `rc` of `what` as a Status naming the file.
  Status Error(int rc, std::string_view what) const;
  Status Exec(const char* sql);
  Result<int64_t> CommitLocked(const WriteBatch& batch);

  const std::string path_;
  const Options options_;
  std::mutex mu_;
  sqlite3* db_ = nullptr;              // guarded by mu_; null once closed
  std::unique_ptr<Statements> stmts_;  // guarded by mu_
  int64_t revision_ = 0;               // guarded by mu_; mirrors the meta table
  int64_t compacted_revision_ = 0;     // guarded by mu_; mirrors the meta table
  int64_t log_size_ = 0;               // guarded by mu_; rows in the changes table
};

}  // namespace tessera::store
