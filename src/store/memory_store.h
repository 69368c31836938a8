// MemoryStore: a Store that keeps everything in process memory and forgets it on exit.
//
// For unit tests of the controller and the api layer (a fake, not a mock), and for the
// simulator. It follows exactly the semantics of SqliteStore, including revisions, error
// codes and change-log compaction; the shared suite in store_test.cc holds both to it.
// Thread-safety: every method is safe to call from any thread; one mutex serialises them.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "store/store.h"

namespace tessera::store {

class MemoryStore final : public Store {
 public:
  // An empty store at revision 0. kInvalidArgument when `options` are invalid.
  static Result<std::unique_ptr<Store>> Open(const Options& options = Options());

  explicit MemoryStore(const Options& options);  // options must be valid; prefer Open

  Result<Object> Get(std::string_view kind, std::string_view name) override;
  Result<std::vector<Object>> List(std::string_view kind) override;
  Result<int64_t> Commit(const WriteBatch& batch) override;
  int64_t Revision() override;
  Result<std::vector<Change>> ChangesSince(int64_t revision, size_t limit) override;
  Status Close() override;

 private:
  struct Entry {
    std::string body;
    int64_t resource_version = 0;
  };
  // Ordered by (kind, name), so List is a range scan already sorted by name.
  using Key = std::pair<std::string, std::string>;

  const Options options_;
  std::mutex mu_;
  bool closed_ = false;             // guarded by mu_
  int64_t revision_ = 0;            // guarded by mu_
  int64_t compacted_revision_ = 0;  // guarded by mu_
  std::map<Key, Entry> objects_;    // guarded by mu_
  std::deque<Change> log_;          // guarded by mu_
};

}  // namespace tessera::store
