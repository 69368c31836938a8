// JobCache: a standby's typed copy of the stored TrainJobs, so that once elected its controller
// copies decoded jobs instead of parsing every document (issue 35: a new leader over 100,000
// stored jobs spent about 7 s parsing and decoding them before it served; docs/ha.md "A warm
// standby").
//
// The standby's loop (ha_head.cc) calls Refresh after each Follow of its store copy: only the
// jobs whose stored version is above the highest one seen are decoded. Controller::Load asks
// Take for each listed document (ControllerOptions::decoded_job): a job is handed out only for
// the exact name and version it was decoded from, so a document written since is parsed as
// before. Not thread-safe: one thread (the HA head's loop) owns it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "store/etcd_store.h"
#include "workload/train_job.h"

namespace tessera::ha {

class JobCache {
 public:
  // Decodes the TrainJobs of `store`'s copy written after the last Refresh. Returns how many
  // it decoded; a document that does not decode is left to Controller::Load, which says why.
  size_t Refresh(const store::EtcdStore& store);
  // The job decoded from exactly this document (name and version), moved out; nullopt if none.
  std::optional<TrainJob> Take(const store::Object& object);
  void Clear();
  size_t size() const { return jobs_.size(); }

 private:
  struct Entry {
    int64_t version = 0;
    TrainJob job;
  };
  std::map<std::string, Entry, std::less<>> jobs_;
  int64_t seen_ = 0;  // the highest version decoded
};

}  // namespace tessera::ha
