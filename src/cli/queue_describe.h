// `tessera describe clusterqueue NAME`: a ClusterQueue's spec, its usage from the latest
// admission cycle (used, borrowed, lendable chips, share, pending and admitted workloads) and
// the settings that cannot take effect, each with its field and the reason (the same warnings
// the head returns when the queue is applied; docs/admission.md, "Settings that cannot take
// effect"). Pure: renders the head's JSON (an item of GET /api/v1/clusterqueues) into text; the
// command fetches it and prints the queue's events after it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace tessera::cli {

// The description of `queue`, a ClusterQueue object with its status, as lines of text.
// Fields the document leaves out are shown with their defaults (Never, BestEffortFIFO, no
// limit).
std::string DescribeClusterQueue(const nlohmann::json& queue);

}  // namespace tessera::cli
