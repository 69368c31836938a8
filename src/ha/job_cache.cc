#include "ha/job_cache.h"

#include <algorithm>
#include <utility>

#include "codec/resource_json.h"

namespace tessera::ha {

size_t JobCache::Refresh(const store::EtcdStore& store) {
  size_t decoded = 0;
  int64_t seen = seen_;
  store.VisitFollowed(codec::kTrainJobKind, seen_, [&](const store::Object& object) {
    seen = std::max(seen, object.resource_version);
    const codec::Json doc = codec::Json::parse(object.body, nullptr, /*allow_exceptions=*/false);
    auto job =
        doc.is_discarded() ? Result<TrainJob>(Internal("not JSON")) : codec::TrainJobFromJson(doc);
    if (!job.ok()) {
      jobs_.erase(object.name);
      return;
    }
    jobs_[object.name] = Entry{object.resource_version, std::move(*job)};
    ++decoded;
  });
  seen_ = seen;
  return decoded;
}

std::optional<TrainJob> JobCache::Take(const store::Object& object) {
  // The controller's load asks by name, in name order, as the cache keeps them: the one asked
  // for is the first one left, unless some document was not cached.
  auto it = jobs_.begin();
  if (it == jobs_.end() || it->first != object.name) it = jobs_.find(object.name);
  if (it == jobs_.end() || it->second.version != object.resource_version) return std::nullopt;
  std::optional<TrainJob> job(std::move(it->second.job));
  jobs_.erase(it);
  return job;
}

void JobCache::Clear() {
  jobs_.clear();
  seen_ = 0;
}

}  // namespace tessera::ha
