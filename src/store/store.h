// Store: the head's persistent record of every resource, and the change log that watches
// resume from.
//
// Objects are Kubernetes-style resources keyed by (kind, name). The store keeps each body as
// opaque text (JSON, validated by the api layer, never parsed here) together with a
// resource_version. One global revision counter, as in etcd, orders every write: a successful
// Commit increments it once, and every object written by that Commit (and every change-log
// entry it produces, deletions included) carries the new revision. Create, Update and Delete
// are one-operation Commits.
//
// Owner: the head process owns one Store; the controller, the API handlers and the watch
// streams share it.
// Thread-safety: every method may be called from any thread at any time. Implementations
// serialise internally; a Commit is atomic with respect to every other call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tessera::store {

// A stored resource. resource_version is the revision of the Commit that last wrote it.
struct Object {
  std::string kind;
  std::string name;
  std::string body;
  int64_t resource_version = 0;

  bool operator==(const Object&) const = default;
};

enum class ChangeType { kAdded, kModified, kDeleted };

// "ADDED", "MODIFIED", "DELETED" (the words Kubernetes watch events use).
const char* ChangeTypeName(ChangeType type);

// One entry of the change log. For kDeleted, body is the last body the object had, and
// revision is the revision of the deleting Commit.
struct Change {
  ChangeType type = ChangeType::kAdded;
  std::string kind;
  std::string name;
  int64_t revision = 0;
  std::string body;

  bool operator==(const Change&) const = default;
};

// Options shared by every backend. Each field documents its default.
struct Options {
  // How many change-log entries ChangesSince can still return. Older entries are compacted
  // away; asking for them fails with kFailedPrecondition. Default 10,000; must be >= 1.
  size_t change_log_limit = 10000;

  // SqliteStore only: create the file (not its directory) when it does not exist. Default
  // true; when false, a missing file is kNotFound.
  bool create_if_missing = true;

  // SqliteStore only: how long Open waits for another process that holds the file before it
  // gives up with kUnavailable. Default 1000 ms.
  int busy_timeout_ms = 1000;
};

// What must hold for one operation of a WriteBatch to apply.
enum class Precondition {
  kNone,          // anything: an upsert for a put; the object must exist for a delete
  kMustNotExist,  // a create; fails with kAlreadyExists
  kVersion,       // the object exists with exactly expected_version; else kNotFound/kConflict
};

// Several writes that Commit applies atomically: all of them, or none. Every precondition is
// checked against the state before the batch, so the order of operations does not matter; a
// batch may therefore name each (kind, name) at most once. Not thread-safe; a value.
class WriteBatch {
 public:
  enum class OpType { kPut, kDelete };
  struct Op {
    OpType type = OpType::kPut;
    std::string kind;
    std::string name;
    std::string body;  // empty for kDelete
    Precondition precondition = Precondition::kNone;
    int64_t expected_version = 0;  // used only with Precondition::kVersion
  };

  // Create: the object must not exist.
  WriteBatch& Create(std::string_view kind, std::string_view name, std::string_view body);
  // Update: the object must exist at expected_version.
  WriteBatch& Update(std::string_view kind, std::string_view name, std::string_view body,
                     int64_t expected_version);
  // Put: create or overwrite, whatever the current version.
  WriteBatch& Put(std::string_view kind, std::string_view name, std::string_view body);
  // Delete: the object must exist, and if expected_version is set, be at that version.
  WriteBatch& Delete(std::string_view kind, std::string_view name,
                     std::optional<int64_t> expected_version = std::nullopt);

  const std::vector<Op>& ops() const { return ops_; }
  bool empty() const { return ops_.empty(); }
  size_t size() const { return ops_.size(); }

 private:
  std::vector<Op> ops_;
};

class Store {
 public:
  Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;
  virtual ~Store() = default;

  // The object, or kNotFound.
  virtual Result<Object> Get(std::string_view kind, std::string_view name) = 0;

  // Every object of `kind`, sorted by name; empty when there are none.
  virtual Result<std::vector<Object>> List(std::string_view kind) = 0;

  // Calls `visit` with every object of `kind`, sorted by name, as List returns them; a backend
  // that holds them in memory (a warm standby's copy of etcd, EtcdStore::Follow) passes its own,
  // none copied: a new leader reads 100,000 stored jobs of about 2 KB each this way. `visit`
  // must not call this store. The default visits List's copies. Errors: List's.
  virtual Status Visit(std::string_view kind, const std::function<void(const Object&)>& visit);

  // Applies every operation of `batch` in one atomic step and returns the new revision.
  // On any failure nothing changes and the revision stays where it was. Errors:
  //   kInvalidArgument   an empty batch, an empty kind or name, a (kind, name) named twice,
  //                      or a delete with Precondition::kMustNotExist.
  //   kAlreadyExists     a create found the object.
  //   kNotFound          an update or delete did not find the object.
  //   kConflict          a version precondition failed; the message says both versions.
  //   kUnavailable       the backend could not write (disk full, I/O error, locked).
  //   kFailedPrecondition  the store is closed.
  // When several operations fail, the first failing one in batch order is reported.
  virtual Result<int64_t> Commit(const WriteBatch& batch) = 0;

  // The revision of the last successful Commit; 0 for a new store.
  virtual int64_t Revision() = 0;

  // The changes with revision > `revision`, oldest first (within one revision, in batch
  // order). Returns at most `limit` changes, except that one revision is never split: the
  // last revision returned is complete, so a caller can resume from its number. An empty
  // vector means the caller is up to date. Errors:
  //   kFailedPrecondition  "compacted": changes after `revision` were dropped from the log,
  //                        or `revision` is ahead of this store (it was reset). Re-list and
  //                        resume from Revision() read before the list.
  //   kInvalidArgument     revision < 0 or limit == 0.
  virtual Result<std::vector<Change>> ChangesSince(int64_t revision, size_t limit) = 0;

  // Flushes and releases the backend. Every later call fails with kFailedPrecondition and
  // Revision() returns its last value. Idempotent; the destructor closes too.
  virtual Status Close() = 0;

  // One-operation Commits. The errors are Commit's.
  // Create: kAlreadyExists when the object exists.
  Result<Object> Create(std::string_view kind, std::string_view name, std::string_view body);
  // Update: kNotFound when missing; kConflict when its version is not expected_version.
  Result<Object> Update(std::string_view kind, std::string_view name, std::string_view body,
                        int64_t expected_version);
  // Delete: kNotFound when missing; kConflict when expected_version is set and stale.
  Status Delete(std::string_view kind, std::string_view name,
                std::optional<int64_t> expected_version = std::nullopt);
};

}  // namespace tessera::store
