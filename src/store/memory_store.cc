#include "store/memory_store.h"

#include <algorithm>

#include "store/store_internal.h"

namespace tessera::store {

Result<std::unique_ptr<Store>> MemoryStore::Open(const Options& options) {
  TESSERA_RETURN_IF_ERROR(internal::ValidateOptions(options));
  return std::unique_ptr<Store>(std::make_unique<MemoryStore>(options));
}

MemoryStore::MemoryStore(const Options& options) : options_(options) {}

Result<Object> MemoryStore::Get(std::string_view kind, std::string_view name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return internal::ClosedError();
  auto it = objects_.find(Key(kind, name));
  if (it == objects_.end()) {
    return NotFound(std::string(kind) + "/" + std::string(name) + " not found");
  }
  return Object{std::string(kind), std::string(name), it->second.body, it->second.resource_version};
}

Result<std::vector<Object>> MemoryStore::List(std::string_view kind) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return internal::ClosedError();
  std::vector<Object> out;
  for (auto it = objects_.lower_bound(Key(kind, ""));
       it != objects_.end() && it->first.first == kind; ++it) {
    out.push_back(
        Object{it->first.first, it->first.second, it->second.body, it->second.resource_version});
  }
  return out;
}

Result<int64_t> MemoryStore::Commit(const WriteBatch& batch) {
  TESSERA_RETURN_IF_ERROR(internal::ValidateBatch(batch));
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return internal::ClosedError();
  // Check every precondition before touching anything: all or nothing.
  for (const WriteBatch::Op& op : batch.ops()) {
    auto it = objects_.find(Key(op.kind, op.name));
    std::optional<int64_t> current;
    if (it != objects_.end()) current = it->second.resource_version;
    TESSERA_RETURN_IF_ERROR(internal::CheckPrecondition(op, current));
  }
  const int64_t revision = revision_ + 1;
  for (const WriteBatch::Op& op : batch.ops()) {
    Key key(op.kind, op.name);
    auto it = objects_.find(key);
    if (op.type == WriteBatch::OpType::kDelete) {
      log_.push_back(Change{ChangeType::kDeleted, op.kind, op.name, revision, it->second.body});
      objects_.erase(it);
    } else {
      const ChangeType type = it == objects_.end() ? ChangeType::kAdded : ChangeType::kModified;
      objects_[std::move(key)] = Entry{op.body, revision};
      log_.push_back(Change{type, op.kind, op.name, revision, op.body});
    }
  }
  revision_ = revision;
  // Compact: keep at most change_log_limit entries, and never a partial revision.
  while (log_.size() > options_.change_log_limit) {
    compacted_revision_ = std::max(compacted_revision_, log_.front().revision);
    log_.pop_front();
  }
  while (!log_.empty() && log_.front().revision <= compacted_revision_) log_.pop_front();
  return revision;
}

int64_t MemoryStore::Revision() {
  std::lock_guard<std::mutex> lock(mu_);
  return revision_;
}

Result<std::vector<Change>> MemoryStore::ChangesSince(int64_t revision, size_t limit) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return internal::ClosedError();
  TESSERA_RETURN_IF_ERROR(
      internal::CheckChangesSince(revision, limit, revision_, compacted_revision_));
  auto it = std::upper_bound(log_.begin(), log_.end(), revision,
                             [](int64_t r, const Change& c) { return r < c.revision; });
  std::vector<Change> out;
  for (; it != log_.end(); ++it) {
    // Stop at the limit, but only on a revision boundary.
    if (out.size() >= limit && it->revision != out.back().revision) break;
    out.push_back(*it);
  }
  return out;
}

Status MemoryStore::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  return Status::Ok();
}

}  // namespace tessera::store
