// CountingStore: a Store that forwards every call to another and counts the writes of the
// Commits that succeed, per kind: the head's tessera_store_writes_total on /metrics, and what
// tests read to prove that a heartbeat which changes nothing writes nothing (issue 35).
//
// An object write is one operation of a committed batch (a put, a create, an update or a
// delete); a commit is one successful Commit, whatever its size. Failed commits count nothing.
//
// Ownership: owns the wrapped store. Thread-safety: as the wrapped store; the counters may be
// read from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "store/store.h"

namespace tessera::store {

class CountingStore final : public Store {
 public:
  explicit CountingStore(std::unique_ptr<Store> inner) : inner_(std::move(inner)) {}

  struct Counts {
    std::map<std::string, uint64_t> writes_by_kind;  // object writes per kind
    uint64_t commits = 0;                            // successful Commits
    uint64_t writes() const {
      uint64_t total = 0;
      for (const auto& [kind, n] : writes_by_kind) total += n;
      return total;
    }
  };
  Counts counts() const {
    std::lock_guard lock(mu_);
    return counts_;
  }

  Result<Object> Get(std::string_view kind, std::string_view name) override {
    return inner_->Get(kind, name);
  }
  Result<std::vector<Object>> List(std::string_view kind) override { return inner_->List(kind); }
  Status Visit(std::string_view kind, const std::function<void(const Object&)>& visit) override {
    return inner_->Visit(kind, visit);
  }
  Result<int64_t> Commit(const WriteBatch& batch) override {
    auto committed = inner_->Commit(batch);
    if (committed.ok()) {
      std::lock_guard lock(mu_);
      ++counts_.commits;
      for (const WriteBatch::Op& op : batch.ops()) ++counts_.writes_by_kind[op.kind];
    }
    return committed;
  }
  int64_t Revision() override { return inner_->Revision(); }
  Result<std::vector<Change>> ChangesSince(int64_t revision, size_t limit) override {
    return inner_->ChangesSince(revision, limit);
  }
  Status Close() override { return inner_->Close(); }

 private:
  std::unique_ptr<Store> inner_;
  mutable std::mutex mu_;
  Counts counts_;
};

}  // namespace tessera::store
