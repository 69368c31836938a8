// Internal to the admission library (admission.cc, cycle.cc, cycle_explain.cc); not part of
// its API and not to be included from outside src/admission.
//
// Cycle is one admission cycle's working state: a copy of the snapshot's inventory, the quota
// book (per-queue and per-cohort usage), the running workloads and the memos that keep a cycle
// cheap. Admitter::Run builds one, runs its steps in order (Build, StartGuard, Admit, Explain,
// Finish) and discards it. The steps live in cycle.cc (building, start guard, admission and
// preemption) and cycle_explain.cc (pending reasons, what would help, usage rows).
//
// Not thread-safe: a Cycle is used by one thread for one Run; it holds references to the
// Admitter and the Snapshot, which must outlive it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "admission/admission.h"
#include "admission/gpu_preemption.h"
#include "admission/preemption.h"

namespace tessera::admission_internal {

inline constexpr double kInfiniteShare = 1e18;

// A request's identity for memoising plans within a cycle. A GPU request's first element is
// negative (a TPU shape's dimensions are positive).
using RequestKey = std::tuple<int, int, int, int>;
inline RequestKey KeyOf(const Workload& w) {
  if (w.gpu)
    return {-1 - static_cast<int>(w.gpu->request.rule.rule), w.gpu->request.rule.segment_hosts,
            w.gpu->request.gpus, static_cast<int>(w.gpu->system)};
  const SliceRequest& r = w.request;
  return {r.shape.dims[0], r.shape.dims[1], r.shape.dims[2], r.num_slices};
}

// A plan of either cycle: the SlicePlanner's (TPU) or the GPU domain planner's.
struct CyclePlan {
  bool gpu = false;
  PlanResult tpu;
  GpuPlacement gpus;
  bool placed() const { return gpu ? gpus.placed : tpu.placed(); }
  const std::string& message() const { return gpu ? gpus.message : tpu.message; }
};

// A pending workload in its queue's line: what ordering and the first tests need, without
// reading the workload (100,000 workloads do not fit in a cache: each read of one is a miss).
struct LineEntry {
  int64_t neg_priority = 0;  // -priority: higher priority first
  int64_t creation = 0;
  WorkloadId id;
  int64_t chips = 0;
  int workload = -1;  // index into the snapshot's workloads
  int key = -1;       // its request's index among the cycle's RequestKeys (Cycle::key_of_)
};

// Quota of one ClusterQueue for the inventory's generation, and its usage during the cycle.
struct QueueState {
  const ClusterQueueSpec* spec = nullptr;
  int cohort = -1;
  int64_t nominal = 0;
  int64_t guaranteed = 0;  // nominal - lendable: never lent
  int64_t lendable = 0;
  std::optional<int64_t> borrow_limit;
  int64_t used = 0;
  double weight = 1;
  std::vector<LineEntry> entries;  // pending workloads in queue order, with their order keys
  size_t next = 0;                 // next position of `entries` to try
  int blocked_at = -1;             // StrictFIFO: position of the head that could not be admitted
  int admitted = 0;                // admitted or running after the cycle
};

struct CohortState {
  std::string name;
  int64_t pool_cap = 0;   // sum of members' lendable quota
  int64_t pool_used = 0;  // sum of members' usage above their guaranteed part
};

// The cycle's quota book: the only place usage changes.
class QuotaBook {
 public:
  std::vector<QueueState> queues;
  std::vector<CohortState> cohorts;
  std::vector<char> dirty;      // per queue: usage changed since its ordering key was computed
  std::vector<int> dirty_list;  // the queues whose `dirty` was set, in the order it was set
  std::vector<uint64_t> cohort_epoch;  // per cohort: bumped by every usage change

  static int64_t Above(int64_t used, int64_t guaranteed) {
    return std::max<int64_t>(0, used - guaranteed);
  }

  void Add(int qi, int64_t chips) {
    QueueState& q = queues[qi];
    if (q.cohort >= 0) cohorts[q.cohort].pool_used -= Above(q.used, q.guaranteed);
    q.used += chips;
    if (q.cohort >= 0) cohorts[q.cohort].pool_used += Above(q.used, q.guaranteed);
    if (q.cohort >= 0) ++cohort_epoch[q.cohort];
    if (!dirty[qi]) {
      dirty[qi] = 1;
      dirty_list.push_back(qi);
    }
  }

  // Clears the marks set since dirty_list had `size` entries (a trial change undone).
  void ForgetDirtySince(size_t size) {
    for (size_t i = size; i < dirty_list.size(); ++i) dirty[dirty_list[i]] = 0;
    dirty_list.resize(size);
  }

  // By how many chips queue qi would exceed what it may use if it took `chips` more; <= 0 fits.
  int64_t Over(int qi, int64_t chips) const {
    const QueueState& q = queues[qi];
    const int64_t after = q.used + chips;
    if (q.cohort < 0) return after - q.nominal;
    int64_t over = std::numeric_limits<int64_t>::min();
    if (q.borrow_limit) over = after - (q.nominal + *q.borrow_limit);
    const CohortState& c = cohorts[q.cohort];
    const int64_t draw = Above(after, q.guaranteed) - Above(q.used, q.guaranteed);
    return std::max(over, c.pool_used + draw - c.pool_cap);
  }

  // The most chips queue qi could ever hold (an empty cohort).
  int64_t Ceiling(int qi) const {
    const QueueState& q = queues[qi];
    if (q.cohort < 0) return q.nominal;
    const int64_t pool = cohorts[q.cohort].pool_cap - (q.nominal - q.guaranteed);
    int64_t most = q.nominal + pool;
    if (q.borrow_limit) most = std::min(most, q.nominal + *q.borrow_limit);
    return most;
  }

  bool Borrowing(int qi) const { return queues[qi].used > queues[qi].nominal; }

  // Weighted dominant share: chips above nominal over the cohort's lendable pool, over weight.
  // One generation per inventory, so the dominant resource is that generation's chips.
  double Share(int qi, int64_t extra) const {
    const QueueState& q = queues[qi];
    if (q.cohort < 0) return 0;
    const int64_t borrowed = std::max<int64_t>(0, q.used + extra - q.nominal);
    if (borrowed == 0) return 0;
    const int64_t pool = cohorts[q.cohort].pool_cap;
    if (pool <= 0) return kInfiniteShare;
    return static_cast<double>(borrowed) / static_cast<double>(pool) / q.weight;
  }

  // What quota counts in this cycle: "chips" (TPU) or "GPUs" (nvidia.com/gpu of a system).
  std::string unit = "chips";
  std::string Amount(int64_t n) const { return std::to_string(n) + " " + unit; }

  std::string Describe(int qi) const {
    const QueueState& q = queues[qi];
    std::string s = "queue " + q.spec->name + " uses " + std::to_string(q.used) + " of nominal " +
                    Amount(q.nominal);
    if (q.cohort >= 0) {
      const CohortState& c = cohorts[q.cohort];
      s += "; cohort " + c.name + " has " +
           std::to_string(std::max<int64_t>(0, c.pool_cap - c.pool_used)) + " of " +
           std::to_string(c.pool_cap) + " lendable " + unit + " unused";
      if (q.borrow_limit) s += "; borrowing limit " + std::to_string(*q.borrow_limit);
    }
    return s;
  }
};

struct Running {
  int workload = -1;  // index into the snapshot's workloads
  WorkloadId id;      // the workload's id (read here, not through the workload)
  int queue = -1;     // -1: its local queue does not resolve
  int32_t priority = 0;
  int64_t creation = 0;
  int64_t chips = 0;
  int64_t lost_work = 0;
  bool evicted = false;
  bool admitted_this_cycle = false;
};

// One cycle's working state. Built, run and discarded by Admitter::Run.
class Cycle {
 public:
  Cycle(const Admitter& admitter, const Snapshot& snap, int64_t now_ms, tessera::Explain explain)
      : admitter_(admitter),
        options_(admitter.options()),
        explain_(explain),
        planner_(admitter.planner()),
        snap_(snap),
        now_(now_ms),
        inv_(snap.inventory) {
    if (snap.gpu) {
      fleet_ = snap.gpu->fleet;
      holders_ = snap.gpu->holders;
      holders_.resize(fleet_.hosts.size());
    }
  }

  Status Build();
  void StartGuard();
  void Admit();
  void Explain();
  AdmissionCycle Finish();

 private:
  struct StaticFit {
    PendingReason reason = PendingReason::kNeverFits;
    SharedText message;  // given to every workload of the key
    bool possible = true;
  };

  const Workload& W(int wi) const { return snap_.workloads[wi]; }
  bool Gpu() const { return snap_.gpu.has_value(); }
  std::string Chips(int64_t n) const { return quota_.Amount(n); }
  // A GPU cycle's fix for a queue without quota for the fleet's system.
  std::string NoGpuQuotaHint() const {
    return " (it has no nvidia.com/gpu quota for " + std::string(GpuSystemName(fleet_.system)) +
           "; add {resource: nvidia.com/gpu, gpuSystem: " +
           std::string(GpuSystemName(fleet_.system)) + ", nominalQuota: GPUS} to its spec.quotas)";
  }
  // Whether workload `id` holds hosts: in the inventory (TPU) or the fleet (GPU).
  bool HoldsHosts(WorkloadId id) const;
  // "4x4x4 x2" or "2 gb200-nvl72 hosts (domain: required)": for messages.
  std::string RequestText(const Workload& w) const;
  // What no admission or release changes: whether the request could ever be placed here.
  // Computed once per request key (`key`, key_of_[wi]), on its first workload wi.
  const StaticFit& StaticCheck(int key, int wi);
  // The plan for workload wi's request (key `key`) on the working inventory now. A failure is
  // kept per key until something is released and the reference is to it; a placed plan is
  // left in placed_plan_ (valid until the next call) for the caller to take.
  const CyclePlan& PlanNow(int key, int wi);
  bool TryAdmit(int qi, const LineEntry& e);
  bool TryPreempt(int qi, const LineEntry& head);
  // Whether queue qi would fit `chips` more within its quota (QuotaBook::Over <= 0) with the
  // running workloads `gone` (running_ indices, of qi's pool) evicted; nothing is changed.
  bool QuotaFitsWithout(int qi, int64_t chips, const std::vector<int>& gone) const;
  // False (nothing changed) only if the plan no longer applies, a broken invariant.
  bool Reserve(int qi, int wi, CyclePlan plan);
  // On what grounds policy lets the workload of queue qi preempt running workload `r`, judged
  // on the candidate alone (the whole victim set is checked again before preempting).
  enum class Grounds {
    kNone,
    kOwnQueue,   // withinClusterQueue
    kReclaim,    // reclaimWithinCohort: the preemptor must end within its nominal quota
    kBorrow,     // borrowWithinCohort (no fair sharing): the preemptor may end borrowing
    kFairShare,  // fair sharing: ends within nominal, or the share rule holds
  };
  // `e`: the preemptor's line entry (its priority, creation order and chips).
  Grounds PreemptGrounds(int qi, const LineEntry& e, const Running& r) const;
  bool MayPreempt(int qi, const LineEntry& e, bool within_nominal, const Running& r) const;
  bool PolicyMayPreempt(int qi) const;
  std::vector<WorkloadId> EvictedOn(const CyclePlan& plan) const;
  void Release(Running& r);
  PendingStatus& AddPending(int wi, int qi, PendingReason reason, SharedText message);
  void WhatHelps(int qi, const LineEntry& e, PendingStatus& st);
  using HeadKey = std::tuple<int, double, int64_t, int64_t, int>;
  HeadKey OrderKey(int qi) const;

  const Admitter& admitter_;
  const AdmissionOptions& options_;
  const tessera::Explain explain_;  // this cycle's level (Admitter::Run), not options_.explain
  const SlicePlanner& planner_;
  const Snapshot& snap_;
  const int64_t now_;
  Inventory inv_;
  // A GPU cycle's working fleet and who holds each of its hosts (Snapshot::gpu).
  GpuFleet fleet_;
  std::vector<WorkloadId> holders_;
  QuotaBook quota_;
  std::map<std::string, int> queue_index_;               // ClusterQueue name -> index (lookup only)
  std::unordered_map<std::string, int> local_to_queue_;  // lookup only: one per workload
  std::vector<int> queue_of_;                            // per workload: ClusterQueue index or -1
  std::vector<Running> running_;
  // The running workloads a preemptor of queue qi may take are those of its cohort (or of qi
  // alone, without a cohort): per queue, its running_ indices, ascending. Only those that were
  // running before the cycle and are not evicted: no other can be a candidate (PreemptGrounds).
  // Kept per queue, so that an attempt passes over a queue that gives none (one that does not
  // borrow) without reading its workloads: most of a cohort's at fleet scale.
  std::vector<std::vector<int>> running_of_queue_;
  std::vector<std::vector<int>> cohort_queues_;  // per cohort: its queues, ascending
  // A pool: the cohort's queues, or qi alone without a cohort; an index over both.
  int PoolOf(int qi) const {
    const int c = quota_.queues[qi].cohort;
    return c >= 0 ? c : static_cast<int>(quota_.cohorts.size()) + qi;
  }
  std::vector<char> admitted_;  // per workload: admitted in this cycle
  // per host (inventory host, or fleet host in a GPU cycle): workload evicted from it this cycle
  std::vector<WorkloadId> evicted_host_owner_;
  // Per workload: the index of its RequestKey among the cycle's keys (a dozen in practice),
  // given in Build as the workloads are read in order; the memos below are indexed by it.
  std::vector<int> key_of_;
  std::vector<std::optional<StaticFit>> static_fit_;  // per key, once computed
  // Per key: the failed plan, valid while no capacity is released; failed_keys_ lists the set
  // entries (to clear them at a release).
  std::vector<std::optional<CyclePlan>> plan_failures_;
  std::vector<int> failed_keys_;
  // The inventory's chips (a sum over its hosts; no admission or release changes it), once.
  int64_t TotalChips() {
    if (total_chips_ < 0) total_chips_ = inv_.total_chips();
    return total_chips_;
  }
  int64_t total_chips_ = -1;
  std::vector<int64_t> largest_;  // TryPreempt's check: per queue, reset to 0 after each use
  // TryPreempt's lists, kept between attempts (tens of thousands a cycle): the running
  // workloads with grounds; per candidate, the candidate, its running_ index and its grounds.
  std::vector<std::pair<int, Grounds>> pool_hits_;  // (running_ index, grounds), ascending
  std::vector<PreemptionCandidate> cands_;
  std::vector<int> cand_running_;
  std::vector<Grounds> cand_grounds_;
  CyclePlan placed_plan_;  // PlanNow's last placed plan
  // Failed preemption searches, valid while nothing was released and the usage of the
  // queue's cohort did not change: (release epoch, cohort epoch) when it failed; the release
  // epoch kAnyRelease when the queue has a cohort and there was no candidate at all (any
  // release but the cohort's own, which changes its usage, leaves that so). Later workloads
  // of the same queue, priority and shape come after it in line (older first), so they have no
  // more candidates.
  static constexpr uint64_t kAnyRelease = std::numeric_limits<uint64_t>::max();
  // A failed search that found no room at all (a pod, a queue in a cohort) also keeps what it
  // searched: its candidates (running_ indices, grounds, ranks) and the blocks that hold them,
  // with the inventory's change count then. The victim searcher looks for rooms only in those
  // blocks (FindVictims: the candidates' cubes, for a super-slice their blocks), so while the
  // cohort's usage is the same (the same check), the candidates are the same and none of
  // those blocks changed (block_changed_), a new search would find no room either: a release
  // elsewhere does not make it run again. (If the free room is tried first and found, the
  // answer has no victims: a failure too.)
  struct PreemptMemo {
    std::pair<uint64_t, uint64_t> stamp;  // MemoStamp when it failed
    bool searched = false;                // the fields below are set
    uint64_t changes = 0;                 // change_count_ when it failed
    std::vector<int> cand_running;
    std::vector<Grounds> grounds;
    std::vector<int32_t> ranks;
    std::vector<uint32_t> blocks;  // ascending
  };
  // Per (queue, priority, key_of_). Found through memo_first_[queue][key] (allocated on the
  // queue's first attempt; -1: none), the first of the pair's memos in preempt_memos_, each
  // linking to the next of another priority (a queue has a few). At fleet scale a cycle asks
  // some 80,000 times: an index instead of a hash map's buckets and nodes.
  struct MemoEntry {
    int32_t priority = 0;
    int32_t next = -1;
    PreemptMemo memo;
  };
  std::vector<std::vector<int32_t>> memo_first_;
  std::vector<MemoEntry> preempt_memos_;
  PreemptMemo* FindPreemptMemo(int qi, int32_t priority, int key);
  // The memo for (qi, priority, key), added if there is none. Invalidates earlier pointers.
  PreemptMemo& PreemptMemoFor(int qi, int32_t priority, int key);
  uint64_t release_epoch_ = 0;
  // Pod cycles: a count of the changes of the working inventory (each admission, each release)
  // and per block the count at its last change.
  uint64_t change_count_ = 0;
  std::vector<uint64_t> block_changed_;
  // After a reservation or a release of `hosts` in inv_: their blocks' change counts and the
  // sub-cube index.
  void HostsChanged(const std::vector<HostId>& hosts);
  SubCubeIndex cube_index_;  // PlanNow's one-slice sub-cube plans (planner.h)
  std::pair<uint64_t, uint64_t> MemoStamp(int qi) const {
    const int c = quota_.queues[qi].cohort;
    return {release_epoch_, c >= 0 ? quota_.cohort_epoch[c] : 0};
  }
  bool MemoHolds(const std::pair<uint64_t, uint64_t>& memo, int qi) const {
    const std::pair<uint64_t, uint64_t> now = MemoStamp(qi);
    return memo.second == now.second && (memo.first == kAnyRelease || memo.first == now.first);
  }
  // What would help, per (queue if over quota else -1, key_of_): running workload indices.
  // Flat: index (queue + 1) * keys + key, queue -1 for the within-quota answer.
  std::vector<std::optional<std::vector<int>>> help_memo_;
  // Per help_memo_ entry: the would_help list built last from it, and what it was built for
  // (WhatHelps), copied to the next workload asking with the same.
  struct HelpListKey {
    int queue = 0;
    int32_t priority = 0;
    int64_t chips = 0;
    bool within_nominal = false;
    int64_t creation = 0;  // only under LowerOrNewerEqualPriority, else 0
    bool operator==(const HelpListKey&) const = default;
  };
  struct HelpList {
    std::optional<HelpListKey> key;
    SharedList<Blocker> blockers;
  };
  std::vector<HelpList> help_lists_;
  // One victim finder per key for the reasons step, over the same candidates: the running
  // workloads not evicted (help_candidates_ maps candidate index to running_ index).
  std::vector<std::unique_ptr<VictimFinder>> help_finders_;
  const VictimFinder* help_like_ = nullptr;  // one of help_finders_ that has searched
  std::vector<PreemptionCandidate> help_cands_;
  std::vector<int> help_candidates_;
  std::unordered_map<WorkloadId, int> help_index_;  // candidate index by workload id
  // The queues that have a workload to try (not blocked, line not done): keys_[qi] is qi's
  // OrderKey (empty: nothing to try), and head_tree_ a tournament tree over them (node i holds
  // the queue with the least key below it, -1 if none; leaves from head_leaves_), so
  // head_tree_[1] is the queue to try (keys end with the queue index: no ties). A key changes
  // only when the queue's usage or head does (QuotaBook::dirty, Admit).
  std::vector<std::optional<HeadKey>> keys_;
  std::vector<int> head_tree_;
  size_t head_leaves_ = 1;
  void RefreshHead(int qi);
  // Per queue: the statuses given (AddPending), those of deactivated workloads left out.
  std::vector<int> pending_of_queue_;
  AdmissionCycle out_;
};

}  // namespace tessera::admission_internal
