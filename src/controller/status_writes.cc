// Controller: the jobs' status writes of a pass, many to a commit.
//
// A pass derives every waiting job's status (its pending reason, message, queue position and
// what would help) and a tick flushes running jobs' progress. Written one job to a commit, as
// RunStep writes any other step, a pass that changes 10,000 reasons (a new leader whose fleet
// differs from the one the statuses were written for, a host that changes what would help every
// job) made 10,000 commits, each a raft round on etcd, while it held the controller: a new
// leader over 100,000 stored jobs answered nothing for over a minute (issue 35, bench/README.md
// "Failover at fleet scale"). So such steps (RunStep's StatusWrite::kBatched) change the job in
// memory at once (reads and the next pass see it) and leave it in unsaved_status_; the flush at
// the end of each tick commits them, kStatusWritesPerCommit to a commit, at most
// kStatusWritesPerFlush a tick, so the controller is never held for more than a few commits and
// a backlog drains over the next ticks. A job's own write (a placement, an eviction) carries
// its status too and takes it out of unsaved_status_. Each flush starts after the job the last
// one wrote (flushed_last_): 1,000 running jobs step every second, more than a flush writes, and
// from the first name each time the same 200 were written at every tick and the rest never.
//
// What survives a failover: every stored document is as it was last written; what a head dies
// with unsaved is derived and recomputed by the next leader's first pass (or is progress, which
// a tick flushes at most once a second anyway). A failed commit leaves its jobs unsaved.
#include <algorithm>
#include <utility>

#include "controller/controller.h"
#include "workload/effects_applier.h"

namespace tessera::controller {
namespace {

// Per commit: etcd refuses a txn of more than --max-txn-ops operations (default 128; a commit
// adds its change-log entry, the log's compaction and the store's meta) and a request of more
// than --max-request-bytes (default 1.5 MiB; each body goes twice, as the object and in the
// change log, base64-encoded). 100 jobs of about 2 KB each (a pending TrainJob) are 200 KB.
constexpr size_t kStatusWritesPerCommit = 100;
constexpr size_t kStatusBytesPerCommit = 384 * 1024;
// Per flush (a tick): a few commits, so that a backlog of 10,000 statuses holds the controller
// for a few raft rounds a tick instead of 10,000 at once.
constexpr size_t kStatusWritesPerFlush = 200;

}  // namespace

Status Controller::FlushStatusWrites() {
  const int64_t now = NowMs();
  // After a commit at `version`: the job's document as written is its stored one.
  auto persisted = [&](const std::string& name, Json doc, int64_t version) {
    unsaved_status_.erase(name);
    TrainJob* job = FindJob(name);
    if (job == nullptr) return;
    NotePersisted(*job, version, now);
    IndexUnsettledLocked(name);  // a finished job whose last progress this wrote is settled now
    doc["metadata"]["resourceVersion"] = version;
    Emit(codec::kTrainJobKind, "MODIFIED", doc);
  };
  // The store cannot write at all (down, fenced, closed): every job stays unsaved.
  auto store_down = [](const Status& s) {
    return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kFailedPrecondition;
  };
  size_t budget = kStatusWritesPerFlush;
  Status first = Status::Ok();
  while (!unsaved_status_.empty() && budget > 0) {
    // One commit: the next unsaved jobs in name order after the last written (wrapping once),
    // each at its stored version.
    store::WriteBatch batch;
    std::vector<std::pair<std::string, Json>> docs;
    size_t bytes = 0;
    const size_t most = std::min(kStatusWritesPerCommit, budget);
    std::vector<std::string> next;
    for (auto it = unsaved_status_.upper_bound(flushed_last_);
         next.size() < std::min(most, unsaved_status_.size()); ++it) {
      if (it == unsaved_status_.end()) it = unsaved_status_.begin();
      next.push_back(*it);
    }
    for (const std::string& name : next) {
      const TrainJob* job = FindJob(name);
      if (job == nullptr) {  // deleted since: nothing to write
        unsaved_status_.erase(name);
        continue;
      }
      Json doc = JobJson(*job);
      const std::string body = doc.dump();
      if (!batch.empty() && bytes + body.size() > kStatusBytesPerCommit) break;
      bytes += body.size();
      batch.Update(codec::kTrainJobKind, name, body, job->runtime.version);
      docs.emplace_back(name, std::move(doc));
    }
    if (batch.empty()) continue;  // only deleted jobs were next (erased): the others follow
    flushed_last_ = docs.back().first;
    budget -= batch.size();
    auto committed = CommitWithEvents(batch, {});
    if (committed.ok()) {
      for (auto& [name, doc] : docs) persisted(name, std::move(doc), *committed);
      continue;
    }
    const std::string failed =
        "writing the status of trainjob " + docs[0].first +
        (docs.size() > 1 ? " and " + std::to_string(docs.size() - 1) + " more jobs"
                         : std::string()) +
        ": " + committed.status().message();
    if (store_down(committed.status())) return Unavailable(failed);
    // An operation failed its precondition (a stored version moved under this head): write
    // these jobs one by one, so that one holds back only itself. One the store refuses on its
    // own leaves unsaved_status_: its status goes with the job's next write of its own.
    for (auto& [name, doc] : docs) {
      const TrainJob* job = FindJob(name);
      if (job == nullptr) continue;
      store::WriteBatch one;
      one.Update(codec::kTrainJobKind, name, doc.dump(), job->runtime.version);
      auto alone = CommitWithEvents(one, {});
      if (alone.ok()) {
        persisted(name, std::move(doc), *alone);
        continue;
      }
      const Status why =
          Unavailable("writing the status of trainjob " + name + ": " + alone.status().message());
      if (store_down(alone.status())) return why;
      unsaved_status_.erase(name);
      if (first.ok()) first = why;
    }
  }
  return first;
}

}  // namespace tessera::controller
