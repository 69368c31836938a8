// FaultyStore: a Store that forwards to another and fails its Commits on demand, for tests
// that prove a caller handles every store error (the controller's store fault tests). Reads
// always pass through. A fake, not a mock: the store underneath keeps its real semantics.
//
// Thread-safety: as the wrapped store; arm and disarm from the test thread only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "store/store.h"

namespace tessera::store {

class FaultyStore final : public Store {
 public:
  explicit FaultyStore(Store& inner) : inner_(inner) {}

  // Every Commit fails with kUnavailable ("injected: disk I/O error") until Heal().
  void FailCommits() { failing_ = true; }
  void Heal() { failing_ = false; }
  // Commits refused since construction.
  int64_t refused() const { return refused_; }

  Result<Object> Get(std::string_view kind, std::string_view name) override {
    return inner_.Get(kind, name);
  }
  Result<std::vector<Object>> List(std::string_view kind) override { return inner_.List(kind); }
  Result<int64_t> Commit(const WriteBatch& batch) override {
    if (failing_) {
      ++refused_;
      return Unavailable("injected: disk I/O error");
    }
    return inner_.Commit(batch);
  }
  int64_t Revision() override { return inner_.Revision(); }
  Result<std::vector<Change>> ChangesSince(int64_t revision, size_t limit) override {
    return inner_.ChangesSince(revision, limit);
  }
  Status Close() override { return inner_.Close(); }

 private:
  Store& inner_;
  bool failing_ = false;
  int64_t refused_ = 0;
};

}  // namespace tessera::store
