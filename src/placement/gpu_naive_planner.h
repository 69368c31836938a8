// The exhaustive reference for the GPU domain planner (gpu_planner.h), for tests only.
//
// It tries every subset of domains (fleets of at most 12 domains) and every host, one at a
// time, with none of the planner's shortcuts, and answers what any correct plan must agree
// with: whether the request fits under its rule, the fewest domains a plan can use, and the
// least room among single places that hold it (what best fit must pick).
//
// Pure. Thread-safety: a function of its arguments.
#pragma once

#include <vector>

#include "placement/gpu_planner.h"

namespace tessera {

struct GpuNaiveAnswer {
  bool fits = false;
  int fewest_domains = 0;  // whole-host requests: the fewest domains of any valid plan
  // One place that holds it all: for small jobs the least free GPUs of a host that fits; for
  // whole-host jobs the least room (eligible free hosts, or segments) of one domain that holds
  // the job, or -1 when no single domain does.
  int best_fit_room = -1;
};

GpuNaiveAnswer NaiveGpuFit(const GpuFleet& fleet, const GpuRequest& request,
                           const std::vector<bool>& avoid = {});

}  // namespace tessera
