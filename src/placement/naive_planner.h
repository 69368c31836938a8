// NaivePlanner: the reference model for SlicePlanner. An exhaustive first-fit search over
// every cube, rotation and host-aligned offset that checks hosts one at a time; for
// super-slices it counts whole free cubes per block host by host. Slow on purpose and simple
// enough to trust: the property tests check SlicePlanner against it, and the benchmarks use
// it as the baseline.
//
// Thread-safety: stateless; safe from any thread.
#pragma once

#include "placement/planner.h"

namespace tessera {

class NaivePlanner {
 public:
  explicit NaivePlanner(PositionMode positions = PositionMode::kAny) : positions_(positions) {}
  // Places one slice (num_slices is ignored beyond 1) or returns kNoFreeBox with no message
  // detail. Worker order inside the box is x fastest, then y, then z.
  PlanResult Plan(const Inventory& inv, const SliceRequest& request) const;

 private:
  PositionMode positions_;
};

}  // namespace tessera
