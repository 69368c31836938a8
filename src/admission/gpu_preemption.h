// FindGpuVictims: the victim search of a GPU cycle (admission.h, Snapshot::gpu). Which running
// GPU workloads, if they left, would let a GPU request be placed by the GPU domain planner
// (placement/gpu_planner.h) and pass the caller's check (quota and policy).
//
// The TPU search (preemption.h) enumerates rooms of a cube; a GPU request's room is a set of
// hosts in one or more NVLink domains chosen by the planner's rule, so this search works from
// the candidates instead: it adds candidates cheapest first (rank, then priority, then lost
// work, then id, as the TPU search orders costs) until the planner places the request on the
// hosts that are free or held by them and the check accepts the set, then puts back each
// victim, most expensive first, that the set does without. Like the TPU search it never evicts
// a workload only to free quota: every victim holds a host of the final placement (when the
// planner's choice leaves one unused, it plans again on the victims' hosts and the free hosts
// of their domains only), or nothing is found. Greedy, not exhaustive: it can miss a cheaper set
// that only a different combination of domains gives.
//
// Pure: no I/O, clocks or threads. Thread-safety: a function of its arguments.
#pragma once

#include <string>
#include <vector>

#include "admission/model.h"
#include "admission/preemption.h"
#include "placement/gpu_planner.h"

namespace tessera {

struct GpuVictimSet {
  bool found = false;
  std::vector<WorkloadId> victims;  // ascending
  VictimCost cost;                  // chips: GPUs
  GpuPlacement plan;                // when found: the request's hosts once the victims are gone
  std::string message;              // when not found: why, for people
};

// `holders[h]` is the workload holding fleet host h (invalid: none of the candidates' world;
// such a host is free when its free_gpus say so). A candidate's hosts are the hosts it holds.
// `check` gets indices into `candidates` (as preemption.h's VictimSetCheck); empty accepts any
// set.
GpuVictimSet FindGpuVictims(const GpuFleet& fleet, const std::vector<WorkloadId>& holders,
                            const GpuRequest& request, GpuPolicy policy,
                            const std::vector<PreemptionCandidate>& candidates,
                            const VictimSetCheck& check = {});

}  // namespace tessera
