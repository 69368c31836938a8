#include "store/store.h"

#include <set>
#include <utility>

#include "store/store_internal.h"

namespace tessera::store {

const char* ChangeTypeName(ChangeType type) {
  switch (type) {
    case ChangeType::kAdded:
      return "ADDED";
    case ChangeType::kModified:
      return "MODIFIED";
    case ChangeType::kDeleted:
      return "DELETED";
  }
  return "UNKNOWN";
}

WriteBatch& WriteBatch::Create(std::string_view kind, std::string_view name,
                               std::string_view body) {
  ops_.push_back(Op{OpType::kPut, std::string(kind), std::string(name), std::string(body),
                    Precondition::kMustNotExist, 0});
  return *this;
}

WriteBatch& WriteBatch::Update(std::string_view kind, std::string_view name, std::string_view body,
                               int64_t expected_version) {
  ops_.push_back(Op{OpType::kPut, std::string(kind), std::string(name), std::string(body),
                    Precondition::kVersion, expected_version});
  return *this;
}

WriteBatch& WriteBatch::Put(std::string_view kind, std::string_view name, std::string_view body) {
  ops_.push_back(Op{OpType::kPut, std::string(kind), std::string(name), std::string(body),
                    Precondition::kNone, 0});
  return *this;
}

WriteBatch& WriteBatch::Delete(std::string_view kind, std::string_view name,
                               std::optional<int64_t> expected_version) {
  ops_.push_back(Op{OpType::kDelete, std::string(kind), std::string(name), std::string(),
                    expected_version ? Precondition::kVersion : Precondition::kNone,
                    expected_version.value_or(0)});
  return *this;
}

Status Store::Visit(std::string_view kind, const std::function<void(const Object&)>& visit) {
  auto objects = List(kind);
  if (!objects.ok()) return objects.status();
  for (const Object& object : *objects) visit(object);
  return Status::Ok();
}

Result<Object> Store::Create(std::string_view kind, std::string_view name, std::string_view body) {
  WriteBatch batch;
  batch.Create(kind, name, body);
  Result<int64_t> revision = Commit(batch);
  if (!revision.ok()) return revision.status();
  return Object{std::string(kind), std::string(name), std::string(body), *revision};
}

Result<Object> Store::Update(std::string_view kind, std::string_view name, std::string_view body,
                             int64_t expected_version) {
  WriteBatch batch;
  batch.Update(kind, name, body, expected_version);
  Result<int64_t> revision = Commit(batch);
  if (!revision.ok()) return revision.status();
  return Object{std::string(kind), std::string(name), std::string(body), *revision};
}

Status Store::Delete(std::string_view kind, std::string_view name,
                     std::optional<int64_t> expected_version) {
  WriteBatch batch;
  batch.Delete(kind, name, expected_version);
  return Commit(batch).status();
}

namespace internal {

namespace {
std::string Key(const WriteBatch::Op& op) { return op.kind + "/" + op.name; }
}  // namespace

Status ValidateBatch(const WriteBatch& batch) {
  if (batch.empty()) return InvalidArgument("write batch: no operations");
  std::set<std::pair<std::string_view, std::string_view>> seen;
  for (size_t i = 0; i < batch.size(); ++i) {
    const WriteBatch::Op& op = batch.ops()[i];
    const std::string where = "write batch op " + std::to_string(i) + ": ";
    if (op.kind.empty()) return InvalidArgument(where + "kind is empty");
    if (op.name.empty()) return InvalidArgument(where + "name is empty (kind " + op.kind + ")");
    if (op.type == WriteBatch::OpType::kDelete && op.precondition == Precondition::kMustNotExist) {
      return InvalidArgument(where + "delete of " + Key(op) +
                             " requires the object not to exist; use kNone or kVersion");
    }
    if (!seen.emplace(op.kind, op.name).second) {
      return InvalidArgument(where + Key(op) + " appears twice in one batch; merge the operations");
    }
  }
  return Status::Ok();
}

Status ValidateOptions(const Options& options) {
  if (options.change_log_limit == 0) {
    return InvalidArgument("store options: change_log_limit must be at least 1");
  }
  if (options.busy_timeout_ms < 0) {
    return InvalidArgument("store options: busy_timeout_ms must not be negative");
  }
  return Status::Ok();
}

Status CheckPrecondition(const WriteBatch::Op& op, std::optional<int64_t> current_version) {
  switch (op.precondition) {
    case Precondition::kMustNotExist:
      if (current_version) {
        return AlreadyExists(Key(op) + " already exists (resource_version " +
                             std::to_string(*current_version) + ")");
      }
      return Status::Ok();
    case Precondition::kVersion:
      if (!current_version) {
        return NotFound(Key(op) + " not found (expected resource_version " +
                        std::to_string(op.expected_version) + ")");
      }
      if (*current_version != op.expected_version) {
        return Conflict(Key(op) + ": expected resource_version " +
                        std::to_string(op.expected_version) + " but it is at " +
                        std::to_string(*current_version) + "; re-read and retry");
      }
      return Status::Ok();
    case Precondition::kNone:
      if (op.type == WriteBatch::OpType::kDelete && !current_version) {
        return NotFound(Key(op) + " not found");
      }
      return Status::Ok();
  }
  return Internal("unknown precondition");
}

Status CheckChangesSince(int64_t revision, size_t limit, int64_t current_revision,
                         int64_t compacted_revision) {
  if (revision < 0) {
    return InvalidArgument("changes since revision " + std::to_string(revision) +
                           ": revision must not be negative");
  }
  if (limit == 0) return InvalidArgument("changes since: limit must be at least 1");
  if (revision < compacted_revision) {
    return FailedPrecondition("changes since revision " + std::to_string(revision) +
                              ": required revision has been compacted (oldest available " +
                              "is after " + std::to_string(compacted_revision) +
                              "); re-list and resume from the listed revision");
  }
  if (revision > current_revision) {
    return FailedPrecondition("changes since revision " + std::to_string(revision) +
                              ": revision is ahead of the store (current " +
                              std::to_string(current_revision) +
                              "), so the store was reset; re-list and resume from the listed "
                              "revision");
  }
  return Status::Ok();
}

Status ClosedError() { return FailedPrecondition("store is closed"); }

}  // namespace internal

}  // namespace tessera::store
