// Saturation experiment: fill a cluster with a stream of requests drawn from a shape mix, with
// optional churn (random departures), until no shape of the mix fits any more. Requests that do
// not fit when they arrive are turned away and counted. Two figures measure how well a policy
// keeps room for the mix: the chips allocated when the first request was turned away, and the
// chips allocated at saturation. A policy that fragments the pod turns requests away while
// many chips are still free. Used by
// `tessera plan` and the benchmarks to compare placement policies on one request stream.
//
// Pure: randomness comes from the Rng passed in, so the same seed gives the same stream and
// the same result. Thread-safety: none needed; a run owns its inventory copy.
#pragma once

#include <cstdint>
#include <string>

#include "common/rng.h"
#include "placement/planner.h"

namespace tessera {

struct SaturationOptions {
  uint64_t seed = 1;
  // Before each arrival, with this probability one random running allocation departs first.
  double churn = 0.3;
  int64_t max_steps = 1'000'000;  // a bound, in case a mix never saturates
};

struct SaturationResult {
  std::string policy;
  int64_t requests = 0;  // arrivals drawn
  int64_t placed = 0;
  int64_t rejected = 0;             // arrivals turned away
  std::string failed_shape;         // the shape of the first arrival turned away
  int64_t first_failure_chips = 0;  // chips allocated at that moment
  int64_t departed = 0;
  int64_t allocated_chips = 0;  // at saturation
  int64_t total_chips = 0;
  double fragmentation = 0;  // at saturation (SlicePlanner::Fragmentation)
  std::string largest_free;  // at saturation
  bool saturated = false;    // false if max_steps ran out first
};

// Runs one policy. `inv` is copied; the caller's inventory is untouched. Each arrival draws
// a shape with probability proportional to its weight in `planner.options().mix`, which must
// not be empty.
SaturationResult RunToSaturation(const SlicePlanner& planner, const Inventory& inv,
                                 const SaturationOptions& options);

// Parses "2x2x1:4,2x2x2:3,4x4x4:1" (shape:weight, weight optional and positive) for a
// generation. Errors name the entry and say what would be valid.
Result<ShapeMix> ParseShapeMix(Generation g, std::string_view text);

}  // namespace tessera
