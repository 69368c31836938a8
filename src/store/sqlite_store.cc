#include "store/sqlite_store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "store/store_internal.h"

namespace tessera::store {

namespace {

// Owns one prepared statement. Callers hold a ScopedReset while they use it, so the cached
// statement is always returned reset and unbound, whatever path the caller leaves by.
class Statement {
 public:
  Statement() = default;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement() { sqlite3_finalize(stmt_); }

  // SQLITE_OK or the error of sqlite3_prepare_v3.
  int Prepare(sqlite3* db, const char* sql) {
    return sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt_, nullptr);
  }
  sqlite3_stmt* get() const { return stmt_; }

 private:
  sqlite3_stmt* stmt_ = nullptr;
};

class ScopedReset {
 public:
  explicit ScopedReset(const Statement& s) : stmt_(s.get()) {}
  ScopedReset(const ScopedReset&) = delete;
  ScopedReset& operator=(const ScopedReset&) = delete;
  ~ScopedReset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }

 private:
  sqlite3_stmt* stmt_;
};

// The string is bound without a copy: it must outlive the step, which the callers guarantee
// by resetting the statement before their arguments go out of scope.
int BindText(const Statement& s, int index, std::string_view text) {
  return sqlite3_bind_text(s.get(), index, text.data(), static_cast<int>(text.size()),
                           SQLITE_STATIC);
}

std::string ColumnText(const Statement& s, int column) {
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(s.get(), column));
  const int bytes = sqlite3_column_bytes(s.get(), column);
  return text == nullptr ? std::string() : std::string(text, static_cast<size_t>(bytes));
}

// Stored as small integers in the changes table; never renumber.
int ChangeTypeCode(ChangeType type) {
  switch (type) {
    case ChangeType::kAdded:
      return 1;
    case ChangeType::kModified:
      return 2;
    case ChangeType::kDeleted:
      return 3;
  }
  return 0;
}

ChangeType ChangeTypeFromCode(int code) {
  if (code == 1) return ChangeType::kAdded;
  if (code == 2) return ChangeType::kModified;
  return ChangeType::kDeleted;
}

constexpr const char* kCreateSchema = R"sql(
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE meta (
  id INTEGER PRIMARY KEY CHECK (id = 0),
  revision INTEGER NOT NULL,
  compacted_revision INTEGER NOT NULL
);
INSERT INTO meta (id, revision, compacted_revision) VALUES (0, 0, 0);
CREATE TABLE objects (
  kind TEXT NOT NULL,
  name TEXT NOT NULL,
  body TEXT NOT NULL,
  resource_version INTEGER NOT NULL,
  PRIMARY KEY (kind, name)
) WITHOUT ROWID;
CREATE TABLE changes (
  seq INTEGER PRIMARY KEY,
  revision INTEGER NOT NULL,
  type INTEGER NOT NULL,
  kind TEXT NOT NULL,
  name TEXT NOT NULL,
  body TEXT NOT NULL
);
CREATE INDEX changes_by_revision ON changes (revision);
)sql";

// Makes the database file and its -wal and -shm files readable and writable by their owner
// only (0600): the store keeps specs, whose env may hold secrets. A file that exists with a
// wider mode is tightened; a missing database file is created 0600 first (when `create`), so
// the -wal and -shm files SQLite creates later copy that mode from it.
Status RestrictToOwner(const std::string& path, bool create) {
  if (create) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
      return Unavailable("store " + path + ": cannot create the file: " + std::strerror(errno));
    }
    ::close(fd);
  }
  for (const std::string& file : {path, path + "-wal", path + "-shm"}) {
    if (::chmod(file.c_str(), 0600) == 0 || errno == ENOENT) continue;
    return Unavailable("store " + path + ": cannot make " + file + " private (mode 0600): " +
                       std::strerror(errno) + "; run as the owner of the file");
  }
  return Status::Ok();
}

}  // namespace

struct SqliteStore::Statements {
  Statement begin, commit, rollback;
  Statement get, list, upsert, erase;
  Statement log_append, log_since, log_revision_at, log_drop_through;
  Statement set_meta;

  // SQLITE_OK or the first error.
  int PrepareAll(sqlite3* db) {
    const std::pair<Statement*, const char*> all[] = {
        {&begin, "BEGIN IMMEDIATE"},
        {&commit, "COMMIT"},
        {&rollback, "ROLLBACK"},
        {&get, "SELECT body, resource_version FROM objects WHERE kind = ?1 AND name = ?2"},
        {&list, "SELECT name, body, resource_version FROM objects WHERE kind = ?1 ORDER BY name"},
        {&upsert,
         "INSERT INTO objects (kind, name, body, resource_version) VALUES (?1, ?2, ?3, ?4) "
         "ON CONFLICT (kind, name) DO UPDATE SET body = excluded.body, "
         "resource_version = excluded.resource_version"},
        {&erase, "DELETE FROM objects WHERE kind = ?1 AND name = ?2"},
        {&log_append,
         "INSERT INTO changes (revision, type, kind, name, body) VALUES (?1, ?2, ?3, ?4, ?5)"},
        {&log_since,
         "SELECT revision, type, kind, name, body FROM changes WHERE revision > ?1 ORDER BY seq"},
        {&log_revision_at, "SELECT revision FROM changes ORDER BY seq LIMIT 1 OFFSET ?1"},
        {&log_drop_through, "DELETE FROM changes WHERE revision <= ?1"},
        {&set_meta, "UPDATE meta SET revision = ?1, compacted_revision = ?2 WHERE id = 0"},
    };
    for (const auto& [stmt, sql] : all) {
      const int rc = stmt->Prepare(db, sql);
      if (rc != SQLITE_OK) return rc;
    }
    return SQLITE_OK;
  }
};

namespace {

// Runs `stmt` to completion (a statement that returns no rows).
int StepDone(const Statement& stmt) {
  const int rc = sqlite3_step(stmt.get());
  return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

// Rolls the open transaction back unless Commit() succeeded.
class Transaction {
 public:
  explicit Transaction(const Statement& rollback) : rollback_(rollback) {}
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  ~Transaction() {
    if (!done_) {
      ScopedReset reset(rollback_);
      // A destructor cannot return it: say so, the connection's next statement fails too.
      if (const int rc = StepDone(rollback_); rc != SQLITE_OK)
        std::fprintf(stderr, "store: rollback failed: %s\n", sqlite3_errstr(rc));
    }
  }
  void MarkCommitted() { done_ = true; }

 private:
  const Statement& rollback_;
  bool done_ = false;
};

}  // namespace

SqliteStore::SqliteStore(std::string path, const Options& options)
    : path_(std::move(path)), options_(options) {}

SqliteStore::~SqliteStore() {
  std::lock_guard<std::mutex> lock(mu_);
  if (Status s = CloseLocked(); !s.ok())
    std::fprintf(stderr, "store: closing %s failed: %s\n", path_.c_str(), s.ToString().c_str());
}

Status SqliteStore::Error(int rc, std::string_view what) const {
  std::string message = "store " + path_ + ": " + std::string(what) + ": " + sqlite3_errstr(rc);
  if (db_ != nullptr && sqlite3_extended_errcode(db_) == rc) {
    const std::string detail = sqlite3_errmsg(db_);
    if (detail != sqlite3_errstr(rc)) message += " (" + detail + ")";
  }
  switch (rc & 0xff) {
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
      return InvalidArgument(message + "; the file is not a healthy tessera store");
    case SQLITE_TOOBIG:
      return InvalidArgument(message);
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return Unavailable(message + "; another open store holds the file");
    case SQLITE_IOERR:
    case SQLITE_FULL:
    case SQLITE_CANTOPEN:
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_NOMEM:
    case SQLITE_PROTOCOL:
      return Unavailable(message);
    default:
      return Internal(message);
  }
}

Status SqliteStore::Exec(const char* sql) {
  const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, nullptr);
  return rc == SQLITE_OK ? Status::Ok() : Error(rc, sql);
}

Result<std::unique_ptr<Store>> SqliteStore::Open(const std::string& path, const Options& options) {
  TESSERA_RETURN_IF_ERROR(internal::ValidateOptions(options));
  if (path.empty()) return InvalidArgument("store: the file path is empty");
  if (!options.create_if_missing) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
      return NotFound("store " + path + ": no such file (create_if_missing is false)");
    }
  }
  std::unique_ptr<SqliteStore> store(new SqliteStore(path, options));
  std::lock_guard<std::mutex> lock(store->mu_);
  if (Status s = store->OpenLocked(); !s.ok()) {
    if (Status closed = store->CloseLocked(); !closed.ok())
      return Status(s.code(), s.message() + "; closing it failed too: " + closed.message());
    return s;
  }
  return std::unique_ptr<Store>(std::move(store));
}

Status SqliteStore::OpenLocked() {
  TESSERA_RETURN_IF_ERROR(RestrictToOwner(path_, options_.create_if_missing));
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX;
  if (options_.create_if_missing) flags |= SQLITE_OPEN_CREATE;
  int rc = sqlite3_open_v2(path_.c_str(), &db_, flags, nullptr);
  if (rc != SQLITE_OK) return Error(rc, "open");
  sqlite3_extended_result_codes(db_, 1);
  sqlite3_busy_timeout(db_, options_.busy_timeout_ms);

  // The exclusive lock keeps other processes out until Close (see the header). It must be set
  // before WAL mode is entered, so that the WAL index lives in heap memory, not a -shm file.
  TESSERA_RETURN_IF_ERROR(Exec("PRAGMA locking_mode = EXCLUSIVE"));
  {
    Statement journal;
    rc = journal.Prepare(db_, "PRAGMA journal_mode = WAL");
    if (rc != SQLITE_OK) return Error(rc, "set journal mode");
    ScopedReset reset(journal);
    rc = sqlite3_step(journal.get());
    if (rc != SQLITE_ROW) return Error(rc, "set journal mode");
    if (ColumnText(journal, 0) != "wal") {
      return Unavailable("store " + path_ + ": cannot use WAL journal mode (got " +
                         ColumnText(journal, 0) + ")");
    }
  }
  TESSERA_RETURN_IF_ERROR(Exec("PRAGMA synchronous = FULL"));
  TESSERA_RETURN_IF_ERROR(Exec("PRAGMA foreign_keys = OFF"));

  {
    // Catches a damaged file now, with the path in the message, rather than mid-request.
    Statement check;
    rc = check.Prepare(db_, "PRAGMA quick_check");
    if (rc != SQLITE_OK) return Error(rc, "integrity check");
    ScopedReset reset(check);
    rc = sqlite3_step(check.get());
    if (rc != SQLITE_ROW) return Error(rc, "integrity check");
    if (ColumnText(check, 0) != "ok") {
      return InvalidArgument("store " + path_ +
                             ": integrity check failed: " + ColumnText(check, 0));
    }
  }

  stmts_ = std::make_unique<Statements>();
  TESSERA_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  Status schema = [&]() -> Status {
    Statement tables;
    int prc = tables.Prepare(db_,
                             "SELECT count(*), sum(name = 'schema_version') FROM sqlite_schema "
                             "WHERE type = 'table'");
    if (prc != SQLITE_OK) return Error(prc, "read schema");
    ScopedReset reset(tables);
    prc = sqlite3_step(tables.get());
    if (prc != SQLITE_ROW) return Error(prc, "read schema");
    const int64_t table_count = sqlite3_column_int64(tables.get(), 0);
    const bool has_version = sqlite3_column_int64(tables.get(), 1) > 0;
    if (table_count == 0) {
      TESSERA_RETURN_IF_ERROR(Exec(kCreateSchema));
      return Exec(
          ("INSERT INTO schema_version (version) VALUES (" + std::to_string(kSchemaVersion) + ")")
              .c_str());
    }
    if (!has_version) {
      return InvalidArgument("store " + path_ +
                             ": the file is a SQLite database of something else "
                             "(no schema_version table)");
    }
    Statement version;
    prc = version.Prepare(db_, "SELECT version FROM schema_version");
    if (prc != SQLITE_OK) return Error(prc, "read schema version");
    ScopedReset version_reset(version);
    prc = sqlite3_step(version.get());
    if (prc != SQLITE_ROW) return InvalidArgument("store " + path_ + ": no schema version row");
    const int64_t found = sqlite3_column_int64(version.get(), 0);
    if (found > kSchemaVersion) {
      return FailedPrecondition("store " + path_ + ": schema version " + std::to_string(found) +
                                " was written by a newer tessera; this build reads " +
                                std::to_string(kSchemaVersion));
    }
    if (found != kSchemaVersion) {
      return InvalidArgument("store " + path_ + ": unknown schema version " +
                             std::to_string(found));
    }
    return Status::Ok();
  }();
  if (!schema.ok()) {
    if (Status rolled_back = Exec("ROLLBACK"); !rolled_back.ok())
      return Status(schema.code(),
                    schema.message() + "; the rollback failed too: " + rolled_back.message());
    return schema;
  }
  TESSERA_RETURN_IF_ERROR(Exec("COMMIT"));

  rc = stmts_->PrepareAll(db_);
  if (rc != SQLITE_OK) return Error(rc, "prepare statements");

  Statement meta;
  rc = meta.Prepare(db_,
                    "SELECT revision, compacted_revision, (SELECT count(*) FROM changes) "
                    "FROM meta WHERE id = 0");
  if (rc != SQLITE_OK) return Error(rc, "read revision");
  ScopedReset reset(meta);
  rc = sqlite3_step(meta.get());
  if (rc != SQLITE_ROW) {
    return rc == SQLITE_DONE ? InvalidArgument("store " + path_ + ": the meta row is missing")
                             : Error(rc, "read revision");
  }
  revision_ = sqlite3_column_int64(meta.get(), 0);
  compacted_revision_ = sqlite3_column_int64(meta.get(), 1);
  log_size_ = sqlite3_column_int64(meta.get(), 2);
  return Status::Ok();
}

Status SqliteStore::CloseLocked() {
  stmts_.reset();  // statements must be finalized before the connection closes
  if (db_ == nullptr) return Status::Ok();
  const int rc = sqlite3_close(db_);
  if (rc != SQLITE_OK) {
    Status s = Error(rc, "close");
    sqlite3_close_v2(db_);  // releases the handle once anything still open is finalized
    db_ = nullptr;
    return s;
  }
  db_ = nullptr;
  return Status::Ok();
}

Status SqliteStore::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  return CloseLocked();
}

int64_t SqliteStore::Revision() {
  std::lock_guard<std::mutex> lock(mu_);
  return revision_;
}

Result<Object> SqliteStore::Get(std::string_view kind, std::string_view name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (db_ == nullptr) return internal::ClosedError();
  const Statement& get = stmts_->get;
  ScopedReset reset(get);
  BindText(get, 1, kind);
  BindText(get, 2, name);
  const int rc = sqlite3_step(get.get());
  if (rc == SQLITE_DONE) {
    return NotFound(std::string(kind) + "/" + std::string(name) + " not found");
  }
  if (rc != SQLITE_ROW) return Error(rc, "get");
  return Object{std::string(kind), std::string(name), ColumnText(get, 0),
                sqlite3_column_int64(get.get(), 1)};
}

Result<std::vector<Object>> SqliteStore::List(std::string_view kind) {
  std::lock_guard<std::mutex> lock(mu_);
  if (db_ == nullptr) return internal::ClosedError();
  const Statement& list = stmts_->list;
  ScopedReset reset(list);
  BindText(list, 1, kind);
  std::vector<Object> out;
  int rc;
  while ((rc = sqlite3_step(list.get())) == SQLITE_ROW) {
    out.push_back(Object{std::string(kind), ColumnText(list, 0), ColumnText(list, 1),
                         sqlite3_column_int64(list.get(), 2)});
  }
  if (rc != SQLITE_DONE) return Error(rc, "list");
  return out;
}

Result<int64_t> SqliteStore::Commit(const WriteBatch& batch) {
  TESSERA_RETURN_IF_ERROR(internal::ValidateBatch(batch));
  std::lock_guard<std::mutex> lock(mu_);
  if (db_ == nullptr) return internal::ClosedError();
  return CommitLocked(batch);
}

Result<int64_t> SqliteStore::CommitLocked(const WriteBatch& batch) {
  Statements& st = *stmts_;
  {
    ScopedReset reset(st.begin);
    if (const int rc = StepDone(st.begin); rc != SQLITE_OK) return Error(rc, "begin");
  }
  Transaction txn(st.rollback);

  // Phase 1: every precondition against the state before the batch. A delete remembers the
  // body it removes, for its change-log entry.
  std::vector<std::optional<std::string>> current_bodies;
  current_bodies.reserve(batch.size());
  for (const WriteBatch::Op& op : batch.ops()) {
    ScopedReset reset(st.get);
    BindText(st.get, 1, op.kind);
    BindText(st.get, 2, op.name);
    const int rc = sqlite3_step(st.get.get());
    std::optional<int64_t> version;
    std::optional<std::string> body;
    if (rc == SQLITE_ROW) {
      body = ColumnText(st.get, 0);
      version = sqlite3_column_int64(st.get.get(), 1);
    } else if (rc != SQLITE_DONE) {
      return Error(rc, "read before write");
    }
    TESSERA_RETURN_IF_ERROR(internal::CheckPrecondition(op, version));
    current_bodies.push_back(std::move(body));
  }

  // Phase 2: apply, and log each change at the new revision.
  const int64_t revision = revision_ + 1;
  for (size_t i = 0; i < batch.size(); ++i) {
    const WriteBatch::Op& op = batch.ops()[i];
    ChangeType type;
    std::string_view logged_body;
    if (op.type == WriteBatch::OpType::kDelete) {
      ScopedReset reset(st.erase);
      BindText(st.erase, 1, op.kind);
      BindText(st.erase, 2, op.name);
      if (const int rc = StepDone(st.erase); rc != SQLITE_OK) return Error(rc, "delete");
      type = ChangeType::kDeleted;
      logged_body = *current_bodies[i];
    } else {
      ScopedReset reset(st.upsert);
      BindText(st.upsert, 1, op.kind);
      BindText(st.upsert, 2, op.name);
      if (const int rc = BindText(st.upsert, 3, op.body); rc != SQLITE_OK) {
        return Error(rc, "write " + op.kind + "/" + op.name);
      }
      sqlite3_bind_int64(st.upsert.get(), 4, revision);
      if (const int rc = StepDone(st.upsert); rc != SQLITE_OK) return Error(rc, "write");
      type = current_bodies[i] ? ChangeType::kModified : ChangeType::kAdded;
      logged_body = op.body;
    }
    ScopedReset reset(st.log_append);
    sqlite3_bind_int64(st.log_append.get(), 1, revision);
    sqlite3_bind_int(st.log_append.get(), 2, ChangeTypeCode(type));
    BindText(st.log_append, 3, op.kind);
    BindText(st.log_append, 4, op.name);
    BindText(st.log_append, 5, logged_body);
    if (const int rc = StepDone(st.log_append); rc != SQLITE_OK) {
      return Error(rc, "append change");
    }
  }

  // Phase 3: compact the log to change_log_limit entries, dropping whole revisions only
  // (the same rule as MemoryStore).
  int64_t log_size = log_size_ + static_cast<int64_t>(batch.size());
  int64_t compacted = compacted_revision_;
  const auto limit = static_cast<int64_t>(options_.change_log_limit);
  if (log_size > limit) {
    {
      // The newest entry that no longer fits.
      ScopedReset reset(st.log_revision_at);
      sqlite3_bind_int64(st.log_revision_at.get(), 1, log_size - limit - 1);
      const int rc = sqlite3_step(st.log_revision_at.get());
      if (rc != SQLITE_ROW) {
        return rc == SQLITE_DONE ? Internal("store " + path_ + ": change log shorter than " +
                                            std::to_string(log_size) + " entries")
                                 : Error(rc, "compact");
      }
      compacted = std::max<int64_t>(compacted, sqlite3_column_int64(st.log_revision_at.get(), 0));
    }
    ScopedReset reset(st.log_drop_through);
    sqlite3_bind_int64(st.log_drop_through.get(), 1, compacted);
    if (const int rc = StepDone(st.log_drop_through); rc != SQLITE_OK) {
      return Error(rc, "compact");
    }
    log_size -= sqlite3_changes(db_);
  }

  {
    ScopedReset reset(st.set_meta);
    sqlite3_bind_int64(st.set_meta.get(), 1, revision);
    sqlite3_bind_int64(st.set_meta.get(), 2, compacted);
    if (const int rc = StepDone(st.set_meta); rc != SQLITE_OK) return Error(rc, "set revision");
  }
  {
    ScopedReset reset(st.commit);
    if (const int rc = StepDone(st.commit); rc != SQLITE_OK) return Error(rc, "commit");
  }
  txn.MarkCommitted();
  revision_ = revision;
  compacted_revision_ = compacted;
  log_size_ = log_size;
  return revision;
}

Result<std::vector<Change>> SqliteStore::ChangesSince(int64_t revision, size_t limit) {
  std::lock_guard<std::mutex> lock(mu_);
  if (db_ == nullptr) return internal::ClosedError();
  TESSERA_RETURN_IF_ERROR(
      internal::CheckChangesSince(revision, limit, revision_, compacted_revision_));
  const Statement& since = stmts_->log_since;
  ScopedReset reset(since);
  sqlite3_bind_int64(since.get(), 1, revision);
  std::vector<Change> out;
  int rc;
  while ((rc = sqlite3_step(since.get())) == SQLITE_ROW) {
    const int64_t r = sqlite3_column_int64(since.get(), 0);
    // Stop at the limit, but only on a revision boundary.
    if (out.size() >= limit && r != out.back().revision) return out;
    out.push_back(Change{ChangeTypeFromCode(sqlite3_column_int(since.get(), 1)),
                         ColumnText(since, 2), ColumnText(since, 3), r, ColumnText(since, 4)});
  }
  if (rc != SQLITE_DONE) return Error(rc, "changes since");
  return out;
}

}  // namespace tessera::store
