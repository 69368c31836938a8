// EtcdStore: the Store on an etcd 3.4 cluster, for several heads that share one state (HA).
//
// Same contract as SqliteStore (store.h; the typed suite in store_test.cc runs against both):
// tessera's own revision counter, one per successful Commit, and a change log compacted by
// whole revisions. Layout under `prefix` (README.md, "EtcdStore"):
//   <prefix>schema        the layout version (kSchemaVersion); a newer one is refused
//   <prefix>meta          {"revision":R,"compacted":C,"entries":N}
//   <prefix>o/<kind>/<name>   "<resource_version>\n<body>"   (kind with '/' and '%' escaped)
//   <prefix>log/<revision, 20 digits>   the changes of that revision, length-prefixed
// A Commit reads meta and every key it touches in one txn (one snapshot), checks the
// preconditions there, and writes in a second txn whose compare holds meta's and every
// touched key's mod_revision (optimistic concurrency: a write that raced another is retried
// from a fresh read) and, when a fence is set, the leader key's create_revision (the term):
// a head that was deposed cannot write, whatever its clock says.
//
// Owner: the head. Thread-safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "store/etcd_client.h"
#include "store/store.h"

namespace tessera::store {

struct EtcdStoreOptions {
  EtcdOptions etcd;
  // Every key of this store starts with it. Must start and end with '/'. Default "/tessera/".
  std::string prefix = "/tessera/";
  // Open: how long to keep retrying while no endpoint answers (backoff from 100 ms doubling
  // to 2 s). 0 = one attempt. Default 0 (the head passes its own).
  std::chrono::milliseconds open_timeout{0};
  // Called before each Open retry with the error and the wait that follows (for logging).
  std::function<void(const Status& error, std::chrono::milliseconds wait)> on_open_retry;
  // List and a standby's first copy of the store read this many objects per etcd request, every
  // page at the first one's revision (one snapshot), so no answer holds the whole store: 100,000
  // stored jobs were about 200 MB in one answer, past the client's limit of 64 MiB.
  int64_t page_size = 1000;
};

class EtcdStore final : public Store {
 public:
  static constexpr int kSchemaVersion = 1;

  // Connects (retrying as options say), creates the layout under the prefix when it is
  // absent and checks its schema version. Errors: kInvalidArgument for bad options or a
  // prefix that holds something else; kFailedPrecondition for a newer schema;
  // kUnavailable when no endpoint answered within open_timeout.
  static Result<std::unique_ptr<EtcdStore>> Open(EtcdStoreOptions options,
                                                 const Options& store_options = Options());

  // From now on every Commit also requires `key` to exist with exactly this create_revision
  // (the leader's term, election.h). A Commit that fails only that compare returns
  // kUnavailable saying this head is fenced. term 0 clears the fence.
  void SetFence(std::string key, int64_t term);

  Result<Object> Get(std::string_view kind, std::string_view name) override;
  Result<std::vector<Object>> List(std::string_view kind) override;
  // From the warm copy while there is one (none copied, under the copy's lock), else List's.
  Status Visit(std::string_view kind, const std::function<void(const Object&)>& visit) override;
  Result<int64_t> Commit(const WriteBatch& batch) override;
  int64_t Revision() override;
  Result<std::vector<Change>> ChangesSince(int64_t revision, size_t limit) override;
  Status Close() override;

  // A warm standby (docs/ha.md, "A warm standby"): the first Follow() reads every object in
  // one snapshot, each later one only the change log since the last (a full read again when
  // the log was compacted past it). Until this store's first Commit, Get and List answer from
  // that copy as of the last Follow() that succeeded; a Commit drops it for good, and so does
  // StopFollowing(). So an elected head calls Follow() once more after its election (nobody
  // else can write then: the fence) and loads from memory instead of reading the whole store.
  // A Follow() that fails leaves the copy as it was; returns the number of changes applied.
  Result<int64_t> Follow();
  void StopFollowing();
  // The revision the copy is at, or nullopt when there is none.
  std::optional<int64_t> following_revision() const;
  // Calls `visit` with each object of `kind` in the copy whose resource_version is above
  // `after` (the copy's own objects, none copied: a standby's typed cache of what changed since
  // it last looked, ha/ha_head.cc), by name. False when there is no copy. Not a change log:
  // objects deleted since are simply not visited.
  bool VisitFollowed(std::string_view kind, int64_t after,
                     const std::function<void(const Object&)>& visit) const;

  // etcd keeps every version of every key, and every key deleted, until its history is
  // compacted, and nothing else compacts it: each status a commit rewrites and each change-log
  // entry the store drops stays in etcd's backend. With 1,000 jobs running it grew a GiB in 13
  // minutes (bench/README.md, "etcd at 1,000 running jobs"); past etcd's default quota (2 GiB)
  // etcd refuses every write (alarm NOSPACE) until an operator compacts and defragments it.
  // So the leader calls this every interval (--etcd-compaction-interval-ms, ha_head.cc), as
  // kube-apiserver does: it notes etcd's current revision and compacts etcd's history up to
  // the revision the previous call noted. One interval of history stays: a read pinned to a
  // revision (List's pages) that takes less than an interval never meets a compacted one.
  // Returns the revision compacted to; 0 on the first call (nothing noted yet). Another head
  // having compacted past it already is not an error.
  Result<int64_t> CompactHistory();

  // True once a commit's answer was lost and whether it was applied could not be settled:
  // the caller's view may differ from etcd's, so the store refuses writes; a head restarts.
  bool outcome_unknown() const { return outcome_unknown_; }

  EtcdClient& client() { return *client_; }
  const std::string& prefix() const { return options_.prefix; }

 private:
  EtcdStore(EtcdStoreOptions options, const Options& store_options);
  Status Init();

  // A commit whose txn got no answer.
  struct LostCommit {
    std::string commit;         // its id, in the meta it writes
    int64_t revision = 0;       // the revision it would have made
    int64_t meta_mod_revision;  // meta's mod_revision when it read meta
    std::string retired_meta;   // meta as it read it, under another id
  };
  // Applied or not? Retires the commit by writing retired_meta under the same compares (meta's
  // mod_revision, the term), so that it can never apply later, unless meta shows it was
  // applied. true: applied; false: not, and never will be; an error when etcd cannot tell
  // within twice the request timeout, or another head's commit has since taken that revision
  // (outcome_unknown() is then true).
  Result<bool> SettleLostCommit(const LostCommit& lost, const std::string& fence_key,
                                int64_t fence_term);

  std::string ObjectKey(std::string_view kind, std::string_view name) const;
  std::string KindPrefix(std::string_view kind) const;
  std::string LogKey(int64_t revision) const;

  // Every object under <prefix>o/ and meta's revision, read in one txn.
  Status ReadSnapshot();

  EtcdStoreOptions options_;
  const Options store_options_;
  std::unique_ptr<EtcdClient> client_;
  std::atomic<bool> closed_{false};
  std::atomic<bool> outcome_unknown_{false};
  std::string writer_id_;  // random, per store: tells this store's commits apart
  std::atomic<uint64_t> commits_{0};
  std::atomic<int64_t> last_revision_{0};
  std::atomic<int64_t> history_noted_{0};  // etcd's revision at the last CompactHistory
  std::mutex fence_mu_;
  std::string fence_key_;   // guarded by fence_mu_
  int64_t fence_term_ = 0;  // guarded by fence_mu_

  struct Mirror {
    int64_t revision = 0;
    std::map<std::string, std::map<std::string, Object, std::less<>>, std::less<>> objects;
  };
  mutable std::mutex mirror_mu_;
  std::optional<Mirror> mirror_;  // guarded by mirror_mu_
  bool mirror_dropped_ = false;   // guarded by mirror_mu_: by a Commit or StopFollowing
};

}  // namespace tessera::store
