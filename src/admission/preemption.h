// Gang- and topology-aware victim search: which running workloads to evict so that a slice
// request can be placed, at the least cost.
//
// The search works on the room a request needs, not on chip counts: for a sub-cube shape it
// scores every box position of every cube with the cube's host masks; for a super-slice it
// picks whole cubes inside one block; on 2D fleets it picks fixed slices of the shape. A box
// is possible when each of its hosts is free and healthy or held by a candidate on a healthy
// host; its victims are exactly the candidates holding a host inside it (a workload that does
// not touch the box is never evicted; a multi-host workload is evicted whole). Boxes are
// compared by (highest victim rank, highest victim priority, victim chips, victim lost work),
// ties by cube/slice id
// and position, so the same inputs give the same answer. Then the victim set is minimised: each
// victim, most expensive first, is put back if the request still fits without it.
//
// The result carries the plan for the request inside the chosen room (made by the
// SlicePlanner on a small inventory holding only the room, mapped back), so every victim holds
// a host the preemptor then uses. If the request fits without victims (and passes `check`),
// the answer is the planner's own plan with no victims.
//
// Pure. Thread-safety: FindVictims reads its inputs only; call it from any thread. A
// VictimFinder keeps caches: use one from one thread at a time.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "admission/model.h"
#include "inventory/inventory.h"
#include "placement/planner.h"

namespace tessera {

// A running workload that the preemption policy allows the preemptor to evict. Its hosts are
// the Inventory's hosts of OwnerOf(workload).
struct PreemptionCandidate {
  WorkloadId workload;
  int32_t priority = 0;
  // Chips x milliseconds since its last checkpoint: the work an eviction throws away.
  int64_t lost_work_chip_ms = 0;
  // The caller's ranking of candidates (>= 0; lower is evicted first), compared before
  // anything else: the admission cycle gives Kueue's order here (workloads of other, borrowing
  // queues before the preemptor's own; with fair sharing, the queue with the highest share
  // first), and the search's own costs refine the choice within it.
  int32_t rank = 0;
};

// The cost of evicting a set of workloads, compared lexicographically: lower is cheaper.
struct VictimCost {
  int32_t max_rank = 0;  // the highest PreemptionCandidate::rank among the victims
  int32_t max_priority = std::numeric_limits<int32_t>::min();  // min: no victims
  int64_t chips = 0;
  int64_t lost_work_chip_ms = 0;
  friend auto operator<=>(const VictimCost&, const VictimCost&) = default;
};

struct VictimSet {
  bool found = false;
  std::vector<WorkloadId> victims;  // ascending; may be empty if the room is already free
  VictimCost cost;
  // When found: where the request goes once the victims are gone (hosts that are free now or
  // held by victims).
  PlanResult plan;
  std::string message;  // when not found: why, for people
};

// Extra acceptance test for a victim set (indices into the candidates), e.g. "the preemptor
// then fits its quota". Empty: every set that frees the room is acceptable.
using VictimSetCheck = std::function<bool(const std::vector<int>& candidate_indices)>;

// Whether Find also plans the request inside the freed room (VictimSet::plan).
enum class VictimPlan {
  kPlan,         // victims and the plan (what an admission needs)
  kVictimsOnly,  // victims only (what a "what would help" answer needs); plan left empty
};

// The victim search for one request among fixed candidates on a fixed inventory, prepared once
// and asked many times with different checks (e.g. "fits queue A's quota", "fits queue B's").
// The rooms and their costs do not depend on the check, so they are enumerated and sorted on
// the first call and reused; each call returns exactly what FindVictims with the same
// arguments returns. `inv` and `planner` must outlive the finder and not change.
class VictimFinder {
 public:
  VictimFinder(const Inventory& inv, const SlicePlanner& planner, const SliceRequest& request,
               std::vector<PreemptionCandidate> candidates);
  // A finder for another request among like's candidates (and groups) on like's inventory,
  // answering what a finder built from them answers: what like has found out about the
  // candidates' hosts is copied, not found again, and from then on like, this finder and those
  // made like either share the rooms any of them lists for a shape (so like is changed; use
  // them on one thread).
  VictimFinder(const VictimFinder& like, const SliceRequest& request);
  ~VictimFinder();
  VictimFinder(const VictimFinder&) = delete;
  VictimFinder& operator=(const VictimFinder&) = delete;

  VictimSet Find(const VictimSetCheck& check = {}, VictimPlan plan = VictimPlan::kPlan);

  // Puts each candidate (by index) in a group (>= 0; -1: none), for Find's `needs_group`, and
  // gives it a weight (e.g. the quota it holds), for Find's `needs_weight`; without weights
  // (empty), needs_weight is not used.
  void SetGroups(std::vector<int> group_of_candidate,
                 std::vector<int64_t> weight_of_candidate = {});

  // The same answer as Find(check, plan), given the caller's promise that `check` refuses every
  // victim set holding no candidate of group `needs_group` (e.g. a quota check that only
  // victims of the preemptor's cohort can satisfy): a one-slice search then tries only the
  // rooms with such a victim, found in an index built once per group. With `needs_weight` > 0,
  // the further promise that `check` refuses every set whose candidates of that group weigh
  // less than needs_weight in total (a quota check: victims of the cohort must free at least
  // what the preemptor is over by): lighter rooms are skipped without asking the check.
  VictimSet Find(const VictimSetCheck& check, VictimPlan plan, int needs_group,
                 int64_t needs_weight = 0);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Finds the cheapest acceptable victim set for `request` among `candidates`. Candidates that
// hold no host of the inventory are ignored. For one slice every possible room is considered
// (cheapest first, the first that passes `check` wins); for N slices the rooms are chosen
// greedily one after another, each the cheapest given the earlier ones.
VictimSet FindVictims(const Inventory& inv, const SlicePlanner& planner,
                      const SliceRequest& request,
                      const std::vector<PreemptionCandidate>& candidates,
                      const VictimSetCheck& check = {});

}  // namespace tessera
