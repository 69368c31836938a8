// The one suite every Store backend must pass. Backend-specific tests live beside their
// backend (sqlite_store_test.cc).
#include "store/store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/rng.h"
#include "store/etcd_store.h"
#include "store/etcd_test_util.h"
#include "store/memory_store.h"
#include "store/sqlite_store.h"
#include "store/store_test_util.h"

namespace tessera::store {
namespace {

class MemoryBackend {
 public:
  static constexpr bool kPersistent = false;
  bool available() const { return true; }
  Result<std::unique_ptr<Store>> Open(const Options& options) { return MemoryStore::Open(options); }
};

class SqliteBackend {
 public:
  static constexpr bool kPersistent = true;
  bool available() const { return true; }
  Result<std::unique_ptr<Store>> Open(const Options& options) {
    return SqliteStore::Open(dir_.File("store.db"), options);
  }

 private:
  ScopedTempDir dir_;
};

// A real etcd (one per test binary), each test under its own key prefix; Reopen opens a new
// EtcdStore on the same prefix.
class EtcdBackend {
 public:
  static constexpr bool kPersistent = true;
  bool available() const { return SharedEtcd::Get() != nullptr; }
  Result<std::unique_ptr<Store>> Open(const Options& options) {
    EtcdStoreOptions o;
    o.etcd.endpoints = {SharedEtcd::Get()->endpoint()};
    o.prefix = prefix_;
    auto opened = EtcdStore::Open(o, options);
    if (!opened.ok()) return opened.status();
    return std::unique_ptr<Store>(std::move(opened).value());
  }

 private:
  std::string prefix_ = SharedEtcd::UniquePrefix("store");
};

template <typename Backend>
class StoreTest : public testing::Test {
 protected:
  void SetUp() override {
    if (!backend_.available()) GTEST_SKIP() << "etcd is not installed here (see stderr)";
    Open(Options());
  }

  void Open(const Options& options) {
    options_ = options;
    auto opened = backend_.Open(options);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    store_ = std::move(opened).value();
  }

  // Closes the store and opens it again from the same place with the same options. Only
  // meaningful for persistent backends.
  void Reopen() {
    ASSERT_TRUE(store_->Close().ok());
    store_.reset();
    Open(options_);
  }

  Backend backend_;
  Options options_;
  std::unique_ptr<Store> store_;
};

using Backends = testing::Types<MemoryBackend, SqliteBackend, EtcdBackend>;

class BackendNames {
 public:
  template <typename T>
  static std::string GetName(int) {
    if (std::is_same_v<T, MemoryBackend>) return "Memory";
    return std::is_same_v<T, SqliteBackend> ? "Sqlite" : "Etcd";
  }
};

TYPED_TEST_SUITE(StoreTest, Backends, BackendNames);

Object Obj(std::string kind, std::string name, std::string body, int64_t version) {
  return Object{std::move(kind), std::move(name), std::move(body), version};
}

TYPED_TEST(StoreTest, CreateGetListUpdateDelete) {
  Store& s = *this->store_;
  EXPECT_EQ(s.Revision(), 0);

  auto created = s.Create("TrainJob", "llama", R"({"spec":1})");
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ(*created, Obj("TrainJob", "llama", R"({"spec":1})", 1));
  EXPECT_EQ(s.Revision(), 1);

  auto got = s.Get("TrainJob", "llama");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, *created);

  auto updated = s.Update("TrainJob", "llama", R"({"spec":2})", 1);
  ASSERT_TRUE(updated.ok()) << updated.status().ToString();
  EXPECT_EQ(*updated, Obj("TrainJob", "llama", R"({"spec":2})", 2));
  EXPECT_EQ(*s.Get("TrainJob", "llama"), *updated);

  auto listed = s.List("TrainJob");
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(*listed, std::vector<Object>{*updated});

  ASSERT_TRUE(s.Delete("TrainJob", "llama", 2).ok());
  EXPECT_EQ(s.Revision(), 3);
  EXPECT_EQ(s.Get("TrainJob", "llama").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(s.List("TrainJob")->empty());

  // A deleted name can be created again, at a new version.
  auto again = s.Create("TrainJob", "llama", "{}");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->resource_version, 4);
}

TYPED_TEST(StoreTest, CreateOfExistingNameIsAlreadyExists) {
  Store& s = *this->store_;
  ASSERT_TRUE(s.Create("Host", "h0", "a").ok());
  auto dup = s.Create("Host", "h0", "b");
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(dup.status().message().find("Host/h0"), std::string::npos);
  EXPECT_EQ(s.Get("Host", "h0")->body, "a");
  EXPECT_EQ(s.Revision(), 1);
  // The same name in another kind is another object.
  EXPECT_TRUE(s.Create("TrainJob", "h0", "c").ok());
}

TYPED_TEST(StoreTest, StaleVersionIsConflictNamingBothVersions) {
  Store& s = *this->store_;
  ASSERT_TRUE(s.Create("Host", "h0", "v1").ok());
  ASSERT_TRUE(s.Update("Host", "h0", "v2", 1).ok());

  auto stale = s.Update("Host", "h0", "v3", 1);
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.status().code(), StatusCode::kConflict);
  EXPECT_NE(stale.status().message().find("expected resource_version 1"), std::string::npos)
      << stale.status().message();
  EXPECT_NE(stale.status().message().find("at 2"), std::string::npos) << stale.status().message();
  EXPECT_EQ(*s.Get("Host", "h0"), Obj("Host", "h0", "v2", 2));

  Status stale_delete = s.Delete("Host", "h0", 1);
  EXPECT_EQ(stale_delete.code(), StatusCode::kConflict);
  EXPECT_TRUE(s.Get("Host", "h0").ok());
  EXPECT_EQ(s.Revision(), 2);
}

TYPED_TEST(StoreTest, UpdateOrDeleteOfMissingIsNotFound) {
  Store& s = *this->store_;
  EXPECT_EQ(s.Update("Host", "ghost", "x", 1).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(s.Delete("Host", "ghost").code(), StatusCode::kNotFound);
  EXPECT_EQ(s.Delete("Host", "ghost", 3).code(), StatusCode::kNotFound);
  EXPECT_EQ(s.Get("Host", "ghost").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(s.Revision(), 0);
  // An unconditional delete of an existing object works.
  ASSERT_TRUE(s.Create("Host", "h", "x").ok());
  EXPECT_TRUE(s.Delete("Host", "h").ok());
}

TYPED_TEST(StoreTest, ListIsSortedByNameAndHoldsOnlyThatKind) {
  Store& s = *this->store_;
  for (const char* name : {"h10", "h2", "a", "h1", "zz"})
    ASSERT_TRUE(s.Create("Host", name, "").ok());
  ASSERT_TRUE(s.Create("Hos", "b", "").ok());
  ASSERT_TRUE(s.Create("HostX", "c", "").ok());
  auto hosts = s.List("Host");
  ASSERT_TRUE(hosts.ok());
  std::vector<std::string> names;
  for (const Object& o : *hosts) {
    EXPECT_EQ(o.kind, "Host");
    names.push_back(o.name);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"a", "h1", "h10", "h2", "zz"}));
  EXPECT_TRUE(s.List("Nothing")->empty());
  // Visit passes the same objects in the same order.
  std::vector<Object> visited;
  ASSERT_TRUE(s.Visit("Host", [&](const Object& o) { visited.push_back(o); }).ok());
  EXPECT_EQ(visited, *hosts);
  size_t none = 0;
  ASSERT_TRUE(s.Visit("Nothing", [&](const Object&) { ++none; }).ok());
  EXPECT_EQ(none, 0u);
}

TYPED_TEST(StoreTest, BatchAppliesEveryOperationAtOneRevision) {
  Store& s = *this->store_;
  ASSERT_TRUE(s.Create("Host", "h0", "free").ok());
  ASSERT_TRUE(s.Create("Host", "old", "x").ok());
  WriteBatch b;
  b.Create("TrainJob", "j", "reserved")
      .Update("Host", "h0", "owned by j", 1)
      .Put("Host", "h1", "owned by j")
      .Delete("Host", "old", 2);
  auto revision = s.Commit(b);
  ASSERT_TRUE(revision.ok()) << revision.status().ToString();
  EXPECT_EQ(*revision, 3);
  EXPECT_EQ(s.Revision(), 3);
  EXPECT_EQ(*s.Get("TrainJob", "j"), Obj("TrainJob", "j", "reserved", 3));
  EXPECT_EQ(*s.Get("Host", "h0"), Obj("Host", "h0", "owned by j", 3));
  EXPECT_EQ(*s.Get("Host", "h1"), Obj("Host", "h1", "owned by j", 3));
  EXPECT_EQ(s.Get("Host", "old").status().code(), StatusCode::kNotFound);
  // Put overwrites whatever the version.
  WriteBatch put;
  put.Put("Host", "h1", "again");
  ASSERT_TRUE(s.Commit(put).ok());
  EXPECT_EQ(*s.Get("Host", "h1"), Obj("Host", "h1", "again", 4));
}

TYPED_TEST(StoreTest, BatchWithOneFailingPreconditionChangesNothing) {
  Store& s = *this->store_;
  ASSERT_TRUE(s.Create("Host", "h0", "free").ok());
  ASSERT_TRUE(s.Create("Host", "h1", "free").ok());
  const int64_t before = s.Revision();

  struct Case {
    const char* what;
    WriteBatch::Op failing;
    StatusCode code;
  };
  const Case cases[] = {
      {"create of existing",
       {WriteBatch::OpType::kPut, "Host", "h1", "taken", Precondition::kMustNotExist, 0},
       StatusCode::kAlreadyExists},
      {"stale update",
       {WriteBatch::OpType::kPut, "Host", "h1", "taken", Precondition::kVersion, 1},
       StatusCode::kConflict},
      {"update of missing",
       {WriteBatch::OpType::kPut, "Host", "h9", "taken", Precondition::kVersion, 1},
       StatusCode::kNotFound},
      {"delete of missing",
       {WriteBatch::OpType::kDelete, "Host", "h9", "", Precondition::kNone, 0},
       StatusCode::kNotFound},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    WriteBatch b;
    b.Create("TrainJob", "j", "reserved").Update("Host", "h0", "owned", 1);
    if (c.failing.type == WriteBatch::OpType::kDelete) {
      b.Delete(c.failing.kind, c.failing.name);
    } else if (c.failing.precondition == Precondition::kMustNotExist) {
      b.Create(c.failing.kind, c.failing.name, c.failing.body);
    } else {
      b.Update(c.failing.kind, c.failing.name, c.failing.body, c.failing.expected_version);
    }
    b.Put("Host", "h5", "new");
    auto r = s.Commit(b);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), c.code) << r.status().ToString();
    EXPECT_EQ(s.Revision(), before);
    EXPECT_EQ(s.Get("TrainJob", "j").status().code(), StatusCode::kNotFound);
    EXPECT_EQ(*s.Get("Host", "h0"), Obj("Host", "h0", "free", 1));
    EXPECT_EQ(*s.Get("Host", "h1"), Obj("Host", "h1", "free", 2));
    EXPECT_EQ(s.Get("Host", "h5").status().code(), StatusCode::kNotFound);
    EXPECT_TRUE(s.ChangesSince(before, 10)->empty());
  }
}

TYPED_TEST(StoreTest, MalformedBatchIsInvalidArgument) {
  Store& s = *this->store_;
  ASSERT_TRUE(s.Create("Host", "h0", "x").ok());
  WriteBatch empty;
  EXPECT_EQ(s.Commit(empty).status().code(), StatusCode::kInvalidArgument);
  WriteBatch twice;
  twice.Put("Host", "h1", "a").Put("Host", "h1", "b");
  EXPECT_EQ(s.Commit(twice).status().code(), StatusCode::kInvalidArgument);
  WriteBatch no_name;
  no_name.Put("Host", "", "a");
  EXPECT_EQ(s.Commit(no_name).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.Create("", "x", "a").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.Revision(), 1);
  EXPECT_EQ(s.List("Host")->size(), 1u);
}

TYPED_TEST(StoreTest, RevisionRisesByOnePerSuccessfulWriteOnly) {
  Store& s = *this->store_;
  int64_t expected = 0;
  for (int i = 0; i < 20; ++i) {
    const std::string name = "n" + std::to_string(i % 4);
    auto current = s.Get("Host", name);
    if (!current.ok()) {
      ASSERT_TRUE(s.Create("Host", name, "x").ok());
      ++expected;
    } else if (i % 3 == 0) {
      ASSERT_TRUE(s.Delete("Host", name, current->resource_version).ok());
      ++expected;
    } else {
      auto updated = s.Update("Host", name, "y", current->resource_version);
      ASSERT_TRUE(updated.ok());
      ++expected;
      EXPECT_EQ(updated->resource_version, expected);
    }
    EXPECT_EQ(s.Revision(), expected);
    // A failed write leaves the revision alone.
    EXPECT_FALSE(s.Update("Host", name, "z", -1).ok());
    EXPECT_EQ(s.Revision(), expected);
  }
}

TYPED_TEST(StoreTest, ChangesSinceReturnsTheOrderedLog) {
  Store& s = *this->store_;
  ASSERT_TRUE(s.Create("Host", "a", "a1").ok());     // 1
  ASSERT_TRUE(s.Update("Host", "a", "a2", 1).ok());  // 2
  WriteBatch b;
  b.Create("TrainJob", "j", "j1").Delete("Host", "a").Put("Host", "b", "b1");  // 3
  ASSERT_TRUE(s.Commit(b).ok());

  auto all = s.ChangesSince(0, 100);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  const std::vector<Change> expected = {
      {ChangeType::kAdded, "Host", "a", 1, "a1"},     {ChangeType::kModified, "Host", "a", 2, "a2"},
      {ChangeType::kAdded, "TrainJob", "j", 3, "j1"}, {ChangeType::kDeleted, "Host", "a", 3, "a2"},
      {ChangeType::kAdded, "Host", "b", 3, "b1"},
  };
  EXPECT_EQ(*all, expected);

  auto tail = s.ChangesSince(2, 100);
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ(*tail, std::vector<Change>(expected.begin() + 2, expected.end()));
  EXPECT_TRUE(s.ChangesSince(3, 100)->empty());
  EXPECT_STREQ(ChangeTypeName(ChangeType::kDeleted), "DELETED");
}

TYPED_TEST(StoreTest, ChangesSinceLimitNeverSplitsARevision) {
  Store& s = *this->store_;
  ASSERT_TRUE(s.Create("Host", "a", "").ok());  // 1
  WriteBatch b;
  b.Put("Host", "b", "").Put("Host", "c", "").Put("Host", "d", "");  // 2
  ASSERT_TRUE(s.Commit(b).ok());
  ASSERT_TRUE(s.Create("Host", "e", "").ok());  // 3

  auto first = s.ChangesSince(0, 1);
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->size(), 1u);
  EXPECT_EQ(first->back().revision, 1);

  // A limit of 2 would cut revision 2 in half: all of it comes back, and nothing after it.
  auto second = s.ChangesSince(1, 2);
  ASSERT_TRUE(second.ok());
  ASSERT_EQ(second->size(), 3u);
  for (const Change& c : *second) EXPECT_EQ(c.revision, 2);

  auto third = s.ChangesSince(2, 2);
  ASSERT_TRUE(third.ok());
  ASSERT_EQ(third->size(), 1u);
  EXPECT_EQ(third->front().name, "e");
}

TYPED_TEST(StoreTest, CompactedOrFutureRevisionIsFailedPrecondition) {
  Options options;
  options.change_log_limit = 5;
  this->store_.reset();
  this->Open(options);
  Store& s = *this->store_;
  for (int i = 0; i < 12; ++i) ASSERT_TRUE(s.Create("Host", "h" + std::to_string(i), "").ok());

  auto compacted = s.ChangesSince(0, 100);
  ASSERT_FALSE(compacted.ok());
  EXPECT_EQ(compacted.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(compacted.status().message().find("compacted"), std::string::npos)
      << compacted.status().message();
  EXPECT_EQ(s.ChangesSince(6, 100).status().code(), StatusCode::kFailedPrecondition);

  // The last five changes are still there.
  auto kept = s.ChangesSince(7, 100);
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  ASSERT_EQ(kept->size(), 5u);
  EXPECT_EQ(kept->front().revision, 8);
  EXPECT_EQ(kept->back().revision, 12);

  EXPECT_EQ(s.ChangesSince(13, 100).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.ChangesSince(-1, 100).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.ChangesSince(12, 0).status().code(), StatusCode::kInvalidArgument);
}

TYPED_TEST(StoreTest, CompactionDropsWholeRevisionsOnly) {
  Options options;
  options.change_log_limit = 3;
  this->store_.reset();
  this->Open(options);
  Store& s = *this->store_;
  WriteBatch b;
  b.Put("Host", "a", "").Put("Host", "b", "");  // revision 1: two entries
  ASSERT_TRUE(s.Commit(b).ok());
  ASSERT_TRUE(s.Create("Host", "c", "").ok());  // 2
  ASSERT_TRUE(s.Create("Host", "d", "").ok());  // 3: four entries, one of revision 1 too many
  // Revision 1 is gone whole: resuming from 0 is refused, from 1 returns 2 and 3.
  EXPECT_EQ(s.ChangesSince(0, 10).status().code(), StatusCode::kFailedPrecondition);
  auto rest = s.ChangesSince(1, 10);
  ASSERT_TRUE(rest.ok());
  ASSERT_EQ(rest->size(), 2u);
  EXPECT_EQ(rest->front().name, "c");
}

TYPED_TEST(StoreTest, CloseAndReopenKeepsEverything) {
  if constexpr (!TypeParam::kPersistent) {
    GTEST_SKIP() << "the memory store keeps nothing across a reopen by design";
  } else {
    Options options;
    options.change_log_limit = 4;
    this->store_.reset();
    this->Open(options);
    for (int i = 0; i < 6; ++i) {
      ASSERT_TRUE(this->store_->Create("Host", "h" + std::to_string(i), "b").ok());
    }
    ASSERT_TRUE(this->store_->Delete("Host", "h0").ok());  // 7
    auto objects = this->store_->List("Host");
    auto log = this->store_->ChangesSince(3, 100);
    ASSERT_TRUE(objects.ok() && log.ok());

    this->Reopen();
    Store& s = *this->store_;
    EXPECT_EQ(s.Revision(), 7);
    EXPECT_EQ(*s.List("Host"), *objects);
    EXPECT_EQ(*s.ChangesSince(3, 100), *log);
    EXPECT_EQ(s.ChangesSince(2, 100).status().code(), StatusCode::kFailedPrecondition);
    auto next = s.Create("Host", "h9", "b");
    ASSERT_TRUE(next.ok());
    EXPECT_EQ(next->resource_version, 8);
  }
}

TYPED_TEST(StoreTest, ClosedStoreRefusesCalls) {
  Store& s = *this->store_;
  ASSERT_TRUE(s.Create("Host", "h", "").ok());
  ASSERT_TRUE(s.Close().ok());
  EXPECT_TRUE(s.Close().ok());  // idempotent
  EXPECT_EQ(s.Get("Host", "h").status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.List("Host").status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.Create("Host", "g", "").status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.ChangesSince(0, 1).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.Revision(), 1);
}

TYPED_TEST(StoreTest, ConcurrentReadModifyWriteLosesNoUpdate) {
  Store& s = *this->store_;
  ASSERT_TRUE(s.Create("Counter", "c", "0").ok());
  constexpr int kThreads = 4;
  constexpr int kIncrements = 50;
  std::atomic<int> conflicts{0};
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kIncrements; ++i) {
        for (;;) {
          auto current = s.Get("Counter", "c");
          if (!current.ok()) {
            ++errors;
            return;
          }
          const int value = std::stoi(current->body);
          auto updated =
              s.Update("Counter", "c", std::to_string(value + 1), current->resource_version);
          if (updated.ok()) break;
          if (updated.status().code() != StatusCode::kConflict) {
            ++errors;
            return;
          }
          ++conflicts;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(s.Get("Counter", "c")->body, std::to_string(kThreads * kIncrements));
  EXPECT_EQ(s.Revision(), 1 + kThreads * kIncrements);
  std::cout << "concurrent increments: " << conflicts.load() << " conflicts retried\n";
}

// The naive model: a map, a full log, and the compaction rule written as plainly as possible.
class Model {
 public:
  explicit Model(size_t log_limit) : log_limit_(log_limit) {}

  // The status code Commit must return, applying the batch when it succeeds.
  StatusCode Commit(const WriteBatch& batch) {
    for (const WriteBatch::Op& op : batch.ops()) {
      auto it = objects_.find({op.kind, op.name});
      const bool exists = it != objects_.end();
      if (op.precondition == Precondition::kMustNotExist && exists) {
        return StatusCode::kAlreadyExists;
      }
      if (op.precondition == Precondition::kVersion) {
        if (!exists) return StatusCode::kNotFound;
        if (it->second.resource_version != op.expected_version) return StatusCode::kConflict;
      }
      if (op.type == WriteBatch::OpType::kDelete && !exists) return StatusCode::kNotFound;
    }
    ++revision_;
    for (const WriteBatch::Op& op : batch.ops()) {
      auto it = objects_.find({op.kind, op.name});
      if (op.type == WriteBatch::OpType::kDelete) {
        log_.push_back({ChangeType::kDeleted, op.kind, op.name, revision_, it->second.body});
        objects_.erase(it);
      } else {
        log_.push_back({it == objects_.end() ? ChangeType::kAdded : ChangeType::kModified, op.kind,
                        op.name, revision_, op.body});
        objects_[{op.kind, op.name}] = Object{op.kind, op.name, op.body, revision_};
      }
    }
    if (log_.size() > log_limit_) {
      compacted_ = std::max(compacted_, log_[log_.size() - log_limit_ - 1].revision);
    }
    return StatusCode::kOk;
  }

  std::vector<Object> List(const std::string& kind) const {
    std::vector<Object> out;
    for (const auto& [key, object] : objects_) {
      if (key.first == kind) out.push_back(object);
    }
    return out;
  }

  std::optional<int64_t> Version(const std::string& kind, const std::string& name) const {
    auto it = objects_.find({kind, name});
    if (it == objects_.end()) return std::nullopt;
    return it->second.resource_version;
  }

  // Every change after `since`, or nullopt when the store must refuse.
  std::optional<std::vector<Change>> ChangesSince(int64_t since) const {
    if (since < compacted_ || since > revision_) return std::nullopt;
    std::vector<Change> out;
    for (const Change& c : log_) {
      if (c.revision > since) out.push_back(c);
    }
    return out;
  }

  int64_t revision() const { return revision_; }
  int64_t compacted() const { return compacted_; }

 private:
  size_t log_limit_;
  std::map<std::pair<std::string, std::string>, Object> objects_;
  std::vector<Change> log_;
  int64_t revision_ = 0;
  int64_t compacted_ = 0;
};

TYPED_TEST(StoreTest, MatchesNaiveModelUnderRandomOps) {
  uint64_t seed = 20240611;
  if (const char* env = std::getenv("TESSERA_STORE_SEED")) seed = std::strtoull(env, nullptr, 10);
  std::cout << "seed " << seed << " (rerun with TESSERA_STORE_SEED=" << seed << ")\n";
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);

  Options options;
  options.change_log_limit = 16;
  this->store_.reset();
  this->Open(options);
  Model model(options.change_log_limit);

  const std::vector<std::string> kinds = {"Host", "TrainJob"};
  auto pick_kind = [&] { return kinds[rng.Uniform(kinds.size())]; };
  auto pick_name = [&] { return "n" + std::to_string(rng.Uniform(6)); };

  std::map<StatusCode, int> outcomes;
  constexpr int kSteps = 600;
  for (int step = 0; step < kSteps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    WriteBatch batch;
    const size_t ops = 1 + rng.Uniform(rng.Uniform(4) == 0 ? 4 : 1);
    std::set<std::pair<std::string, std::string>> used;
    for (size_t i = 0; i < ops; ++i) {
      std::string kind = pick_kind();
      std::string name = pick_name();
      if (!used.emplace(kind, name).second) continue;
      const std::string body = "b" + std::to_string(rng.Uniform(1000));
      // Versions are usually right, sometimes stale or made up.
      int64_t version = model.Version(kind, name).value_or(1);
      if (rng.Uniform(5) == 0) version = static_cast<int64_t>(rng.Uniform(model.revision() + 2));
      switch (rng.Uniform(5)) {
        case 0:
          batch.Create(kind, name, body);
          break;
        case 1:
        case 2:
          batch.Update(kind, name, body, version);
          break;
        case 3:
          batch.Put(kind, name, body);
          break;
        default:
          batch.Delete(kind, name,
                       rng.Uniform(2) == 0 ? std::nullopt : std::optional<int64_t>(version));
      }
    }
    const StatusCode want = model.Commit(batch);
    ++outcomes[want];
    auto got = this->store_->Commit(batch);
    ASSERT_EQ(got.status().code(), want) << got.status().ToString();
    if (got.ok()) {
      ASSERT_EQ(*got, model.revision());
    }
    ASSERT_EQ(this->store_->Revision(), model.revision());

    if (step % 10 == 0) {
      for (const std::string& kind : kinds) {
        auto listed = this->store_->List(kind);
        ASSERT_TRUE(listed.ok());
        ASSERT_EQ(*listed, model.List(kind));
      }
      for (int64_t since = model.compacted() - 1; since <= model.revision() + 1; ++since) {
        if (since < 0) continue;
        auto want_changes = model.ChangesSince(since);
        auto got_changes = this->store_->ChangesSince(since, 1000);
        ASSERT_EQ(got_changes.ok(), want_changes.has_value())
            << "since " << since << ": " << got_changes.status().ToString();
        if (want_changes) {
          ASSERT_EQ(*got_changes, *want_changes) << "since " << since;
        }
      }
    }
    if constexpr (TypeParam::kPersistent) {
      if (step % 150 == 149) this->Reopen();
    }
  }
  // The generator must reach every outcome, or the comparison above proves little.
  for (StatusCode code : {StatusCode::kOk, StatusCode::kAlreadyExists, StatusCode::kNotFound,
                          StatusCode::kConflict}) {
    EXPECT_GE(outcomes[code], 20) << StatusCodeName(code);
  }
  EXPECT_GT(model.compacted(), 0);
}

}  // namespace
}  // namespace tessera::store
