// Reading and writing the parts of stored documents that several kinds share.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "workload/train_job.h"

namespace tessera::codec {

// A JSON value of the expected type, or `fallback` when it is missing or of another type:
// stored documents written by older heads may lack fields added since.
template <typename T>
T GetOr(const nlohmann::json& obj, const char* key, T fallback) {
  if (!obj.is_object()) return fallback;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    return fallback;
  }
}

// status.wouldHelp: the workloads whose end would let a pending one in.
inline nlohmann::json WouldHelpJson(const std::vector<WouldHelp>& would_help) {
  nlohmann::json out = nlohmann::json::array();
  for (const WouldHelp& b : would_help)
    out.push_back({{"name", b.name},
                   {"clusterQueue", b.cluster_queue},
                   {"priority", b.priority},
                   {"chips", b.chips},
                   {"preemptible", b.preemptible}});
  return out;
}

}  // namespace tessera::codec
