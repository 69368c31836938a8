// SeedJobs: puts N TrainJobs into a head's store in the stored format, fast, for the failover
// benchmark (bench/README.md "Failover at fleet scale"): a leader kill with 100,000 stored jobs.
//
// The documents come from the controller itself, not written by hand: a controller over a
// MemoryStore (fake clock) runs one job to success on one emulated 4x4 v6e slice and creates one
// job that stays Pending; each seeded job is a copy of one of those two stored documents with
// its name and uid changed (every occurrence, status included), written with Create in batches
// of at most `batch_bytes` of bodies (an etcd txn is capped at 1.5 MiB by default and carries
// every body twice: the object and its change-log entry). The events the template job produced
// are copied the same way for the newest jobs, up to the head's event limit, and the uid
// counter is set past the last uid, as a head that created the jobs would have left it.
//
// Thread-safety: none; one call at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/status.h"
#include "store/store.h"

namespace tessera::bench {

struct SeedOptions {
  int64_t jobs = 100'000;  // stored TrainJobs in all
  int64_t pending = 0;     // of which Pending (a v6e 8x8 slice, never placed on 4x4 slices)
  size_t batch_bytes = 512 * 1024;
  size_t batch_objects = 1000;
  size_t max_events = 2000;  // the head's default (ControllerOptions::max_events)
  std::string name_prefix = "seed-";
  // Called after each committed batch with the jobs written so far (progress lines).
  std::function<void(int64_t written)> on_batch;
};

struct SeedReport {
  int64_t jobs = 0, pending = 0, succeeded = 0, events = 0;
  int64_t commits = 0;
  int64_t body_bytes = 0;  // of the job documents
  uint64_t next_uid = 0;   // the uid counter written
  int64_t revision = 0;    // the store's revision at the end
};

// The two template documents (stored TrainJob bodies, as the controller wrote them), for tests
// and for --print-templates.
struct SeedTemplates {
  std::string succeeded;  // a job run to success on 4 emulated hosts
  std::string pending;    // a job that cannot be placed
  std::string succeeded_name, pending_name;
  uint64_t succeeded_uid = 0, pending_uid = 0;
  std::vector<std::string> events;  // the succeeded job's events, oldest first
};
Result<SeedTemplates> MakeSeedTemplates();

// Writes the jobs into `target`, which must hold no TrainJob of the seeded names (Create).
// Errors name the batch that failed; the batches before it stay written.
Result<SeedReport> SeedJobs(store::Store& target, const SeedOptions& options);

}  // namespace tessera::bench
