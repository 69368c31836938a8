#include "admission/admission.h"

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <tuple>

namespace tessera {
namespace {

constexpr double kInfiniteShare = 1e18;

// A request's identity for memoising plans within a cycle.
using RequestKey = std::tuple<int, int, int, int>;
RequestKey KeyOf(const SliceRequest& r) {
  return {r.shape.dims[0], r.shape.dims[1], r.shape.dims[2], r.num_slices};
}

std::string Chips(int64_t n) { return std::to_string(n) + " chips"; }

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
  std::vector<int> line;  // pending workloads (indices) in queue order
  size_t next = 0;        // next position of `line` to try
  int blocked_at = -1;    // StrictFIFO: position of the head that could not be admitted
  int admitted = 0;       // admitted or running after the cycle
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
  std::vector<char> dirty;  // per queue: usage changed since its ordering key was computed
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
    dirty[qi] = 1;
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

  std::string Describe(int qi) const {
    const QueueState& q = queues[qi];
    std::string s = "queue " + q.spec->name + " uses " + std::to_string(q.used) + " of nominal " +
                    std::to_string(q.nominal);
    if (q.cohort >= 0) {
      const CohortState& c = cohorts[q.cohort];
      s += "; cohort " + c.name + " has " +
           std::to_string(std::max<int64_t>(0, c.pool_cap - c.pool_used)) + " of " +
           std::to_string(c.pool_cap) + " lendable chips unused";
      if (q.borrow_limit) s += "; borrowing limit " + std::to_string(*q.borrow_limit);
    }
    return s;
  }
};

struct Running {
  int workload = -1;  // index into the snapshot's workloads
  int queue = -1;     // -1: its local queue does not resolve
  int32_t priority = 0;
  int64_t creation = 0;
  int64_t chips = 0;
  int64_t lost_work = 0;
  bool evicted = false;
  bool admitted_this_cycle = false;
};

}  // namespace

const char* PreemptionKindName(PreemptionKind kind) {
  switch (kind) {
    case PreemptionKind::kWithinClusterQueue:
      return "WithinClusterQueue";
    case PreemptionKind::kReclaimWithinCohort:
      return "ReclaimWithinCohort";
    case PreemptionKind::kBorrowWithinCohort:
      return "BorrowWithinCohort";
  }
  return "Unknown";
}

const char* EvictionCauseName(EvictionCause cause) {
  return cause == EvictionCause::kPreempted ? "Preempted" : "StartTimeout";
}

const char* PendingReasonName(PendingReason reason) {
  switch (reason) {
    case PendingReason::kLocalQueueNotFound:
      return "LocalQueueNotFound";
    case PendingReason::kInvalidRequest:
      return "InvalidRequest";
    case PendingReason::kNeverFits:
      return "NeverFits";
    case PendingReason::kOverQuota:
      return "OverQuota";
    case PendingReason::kNoFreeBox:
      return "NoFreeBox";
    case PendingReason::kWaitingBehind:
      return "WaitingBehind";
    case PendingReason::kBackoff:
      return "Backoff";
    case PendingReason::kDeactivated:
      return "Deactivated";
    case PendingReason::kFitsNextCycle:
      return "FitsNextCycle";
    case PendingReason::kPreempted:
      return "Preempted";
  }
  return "Unknown";
}

Status Validate(const AdmissionOptions& o) {
  const StartGuardOptions& g = o.start_guard;
  if (g.start_timeout_ms <= 0) return InvalidArgument("startGuard.startTimeout: must be > 0");
  if (g.backoff_base_ms <= 0) return InvalidArgument("startGuard.backoffBase: must be > 0");
  if (g.backoff_cap_ms < g.backoff_base_ms)
    return InvalidArgument("startGuard.backoffCap: must be >= backoffBase (" +
                           std::to_string(g.backoff_base_ms) + " ms)");
  if (g.retry_limit < 0) return InvalidArgument("startGuard.retryLimit: must be >= 0");
  if (o.preemption_grace_ms < 0) return InvalidArgument("preemption.grace: must be >= 0");
  return Status::Ok();
}

Admitter::Admitter(AdmissionOptions options)
    : options_(std::move(options)), planner_(options_.planner) {}

int64_t Admitter::BackoffMs(int retries) const {
  const StartGuardOptions& g = options_.start_guard;
  int64_t delay = g.backoff_base_ms;
  for (int i = 1; i < retries && delay < g.backoff_cap_ms; ++i) delay *= 2;
  return std::min(delay, g.backoff_cap_ms);
}

namespace {

// One cycle's working state. Built, run and discarded by Admitter::Run.
class Cycle {
 public:
  Cycle(const Admitter& admitter, const Snapshot& snap, int64_t now_ms)
      : admitter_(admitter),
        options_(admitter.options()),
        planner_(admitter.planner()),
        snap_(snap),
        now_(now_ms),
        inv_(snap.inventory) {}

  Status Build();
  void StartGuard();
  void Admit();
  void Explain();
  AdmissionCycle Finish();

 private:
  struct StaticFit {
    PendingReason reason = PendingReason::kNeverFits;
    std::string message;
    bool possible = true;
  };

  const Workload& W(int wi) const { return snap_.workloads[wi]; }
  const StaticFit& StaticCheck(const SliceRequest& req);
  PlanResult PlanNow(const SliceRequest& req);
  bool TryAdmit(int qi, int wi);
  bool TryPreempt(int qi, int wi);
  void Reserve(int qi, int wi, PlanResult plan);
  bool MayPreempt(int qi, const Workload& w, bool within_nominal, const Running& r) const;
  bool PolicyMayPreempt(int qi) const;
  std::vector<WorkloadId> EvictedOn(const PlanResult& plan) const;
  void Release(Running& r);
  PendingStatus& AddPending(int wi, int qi, PendingReason reason, std::string message);
  void WhatHelps(int qi, int wi, PendingStatus& st);
  std::tuple<double, int64_t, int64_t, int> OrderKey(int qi) const;

  const Admitter& admitter_;
  const AdmissionOptions& options_;
  const SlicePlanner& planner_;
  const Snapshot& snap_;
  const int64_t now_;
  Inventory inv_;
  QuotaBook quota_;
  std::map<std::string, int> queue_index_;  // ClusterQueue name -> index (lookup only)
  std::map<std::string, int> local_to_queue_;
  std::vector<int> queue_of_;  // per workload: ClusterQueue index or -1
  std::vector<Running> running_;
  std::vector<char> admitted_;                  // per workload: admitted in this cycle
  std::vector<WorkloadId> evicted_host_owner_;  // per host: workload evicted from it this cycle
  std::map<RequestKey, StaticFit> static_fit_;
  std::map<RequestKey, PlanResult> plan_failures_;  // valid while no capacity is released
  // Failed preemption searches, valid while nothing was released and the usage of the
  // queue's cohort did not change: (release epoch, cohort epoch) when it failed. Later
  // workloads of the same queue, priority and shape come after it in line (older first), so
  // they have no more candidates.
  std::map<std::tuple<int, int32_t, RequestKey>, std::pair<uint64_t, uint64_t>> preempt_failures_;
  uint64_t release_epoch_ = 0;
  std::pair<uint64_t, uint64_t> MemoStamp(int qi) const {
    const int c = quota_.queues[qi].cohort;
    return {release_epoch_, c >= 0 ? quota_.cohort_epoch[c] : 0};
  }
  // What would help, per (queue if over quota else -1, shape): running workload indices.
  std::map<std::tuple<int, RequestKey>, std::vector<int>> help_memo_;
  // One victim finder per shape for the reasons step, over the same candidates: the running
  // workloads not evicted (help_candidates_ maps candidate index to running_ index).
  std::map<RequestKey, std::unique_ptr<VictimFinder>> help_finders_;
  std::vector<PreemptionCandidate> help_cands_;
  std::vector<int> help_candidates_;
  std::vector<std::optional<std::tuple<double, int64_t, int64_t, int>>> keys_;
  AdmissionCycle out_;
};

Status Cycle::Build() {
  TESSERA_RETURN_IF_ERROR(Validate(options_));
  const Generation gen = inv_.generation();
  std::map<std::string, int> cohort_index;
  // Queues by name, so every tie is broken by name.
  std::vector<const ClusterQueueSpec*> specs;
  for (size_t i = 0; i < snap_.cluster_queues.size(); ++i) {
    const ClusterQueueSpec& s = snap_.cluster_queues[i];
    Status st = Validate(s);
    if (!st.ok())
      return InvalidArgument("clusterQueues[" + std::to_string(i) + "] (" + s.name +
                             "): " + st.message());
    specs.push_back(&s);
  }
  std::sort(specs.begin(), specs.end(),
            [](const ClusterQueueSpec* a, const ClusterQueueSpec* b) { return a->name < b->name; });
  for (const ClusterQueueSpec* s : specs) {
    if (queue_index_.count(s->name))
      return InvalidArgument("clusterQueues: the name " + s->name + " is used twice");
    queue_index_[s->name] = static_cast<int>(quota_.queues.size());
    QueueState q;
    q.spec = s;
    q.weight = s->fair_sharing_weight;
    for (const ResourceQuota& rq : s->quotas) {
      if (rq.generation != gen) continue;
      q.nominal = rq.nominal_chips;
      q.borrow_limit = rq.borrowing_limit_chips;
      if (!s->cohort.empty()) q.lendable = rq.lending_limit_chips.value_or(rq.nominal_chips);
    }
    q.guaranteed = q.nominal - q.lendable;
    if (!s->cohort.empty()) {
      auto [it, inserted] =
          cohort_index.try_emplace(s->cohort, static_cast<int>(quota_.cohorts.size()));
      if (inserted) quota_.cohorts.push_back(CohortState{s->cohort, 0, 0});
      q.cohort = it->second;
      quota_.cohorts[q.cohort].pool_cap += q.lendable;
    }
    quota_.queues.push_back(std::move(q));
  }
  quota_.dirty.assign(quota_.queues.size(), 1);
  quota_.cohort_epoch.assign(quota_.cohorts.size(), 0);
  keys_.assign(quota_.queues.size(), std::nullopt);

  for (size_t i = 0; i < snap_.local_queues.size(); ++i) {
    const LocalQueueSpec& l = snap_.local_queues[i];
    Status st = Validate(l);
    if (!st.ok())
      return InvalidArgument("localQueues[" + std::to_string(i) + "] (" + l.name +
                             "): " + st.message());
    if (local_to_queue_.count(l.name))
      return InvalidArgument("localQueues: the name " + l.name + " is used twice");
    auto it = queue_index_.find(l.cluster_queue);
    if (it == queue_index_.end())
      return InvalidArgument("localQueues[" + std::to_string(i) + "] (" + l.name +
                             ").clusterQueue: " + l.cluster_queue + " does not exist");
    local_to_queue_[l.name] = it->second;
  }

  std::vector<WorkloadId> ids;
  queue_of_.assign(snap_.workloads.size(), -1);
  admitted_.assign(snap_.workloads.size(), 0);
  evicted_host_owner_.assign(inv_.hosts().size(), WorkloadId());
  for (size_t i = 0; i < snap_.workloads.size(); ++i) {
    const Workload& w = snap_.workloads[i];
    Status st = Validate(w);
    if (!st.ok())
      return InvalidArgument("workloads[" + std::to_string(i) + "] (" + w.name +
                             "): " + st.message());
    ids.push_back(w.id);
    auto it = local_to_queue_.find(w.local_queue);
    if (it != local_to_queue_.end()) queue_of_[i] = it->second;
    if (w.state == WorkloadState::kAdmitted || w.state == WorkloadState::kRunning) {
      auto held = inv_.owners().find(OwnerOf(w.id));
      if (held == inv_.owners().end())
        return InvalidArgument("workloads[" + std::to_string(i) + "] (" + w.name + "): state " +
                               WorkloadStateName(w.state) + " but it holds no hosts");
      Running r;
      r.workload = static_cast<int>(i);
      r.queue = queue_of_[i];
      r.priority = w.priority;
      r.creation = w.creation_order;
      r.chips = w.chips();
      const int64_t since = w.last_checkpoint_ms.value_or(w.admitted_at_ms);
      r.lost_work = r.chips * std::max<int64_t>(0, now_ - since);
      if (r.queue >= 0) quota_.Add(r.queue, r.chips);
      running_.push_back(r);
    }
  }
  std::sort(ids.begin(), ids.end());
  if (std::adjacent_find(ids.begin(), ids.end()) != ids.end())
    return InvalidArgument("workloads: id " +
                           std::to_string(std::adjacent_find(ids.begin(), ids.end())->value()) +
                           " is used twice");
  return Status::Ok();
}

void Cycle::Release(Running& r) {
  r.evicted = true;
  const Workload& w = W(r.workload);
  for (HostId h : inv_.HostsOf(OwnerOf(w.id))) evicted_host_owner_[h.value()] = w.id;
  inv_.Release(OwnerOf(w.id));
  if (r.queue >= 0) quota_.Add(r.queue, -r.chips);
  plan_failures_.clear();
  ++release_epoch_;
}

void Cycle::StartGuard() {
  const StartGuardOptions& g = options_.start_guard;
  for (Running& r : running_) {
    const Workload& w = W(r.workload);
    if (w.state != WorkloadState::kAdmitted || now_ - w.admitted_at_ms < g.start_timeout_ms)
      continue;
    Eviction e;
    e.workload = w.id;
    e.cause = EvictionCause::kStartTimeout;
    e.start_guard.retries = w.start_guard.retries + 1;
    e.start_guard.last_eviction =
        "not all workers running " + std::to_string(g.start_timeout_ms / 1000) +
        " s after admission (attempt " + std::to_string(e.start_guard.retries) + ")";
    if (e.start_guard.retries > g.retry_limit) {
      e.deactivated = true;
      e.message = e.start_guard.last_eviction + "; deactivated after " +
                  std::to_string(e.start_guard.retries) + " evictions (retry limit " +
                  std::to_string(g.retry_limit) + ")";
    } else {
      const int64_t delay = admitter_.BackoffMs(e.start_guard.retries);
      e.start_guard.backoff_until_ms = now_ + delay;
      e.message = e.start_guard.last_eviction + "; requeued, back off " +
                  std::to_string(delay / 1000) + " s";
    }
    Release(r);
    out_.evictions.push_back(std::move(e));
  }
}

const Cycle::StaticFit& Cycle::StaticCheck(const SliceRequest& req) {
  auto [it, inserted] = static_fit_.try_emplace(KeyOf(req));
  if (!inserted) return it->second;
  StaticFit& f = it->second;
  if (req.generation != inv_.generation()) {
    f.possible = false;
    f.reason = PendingReason::kInvalidRequest;
    f.message = "accelerator: this cluster has " + std::string(GenerationName(inv_.generation())) +
                " chips; the workload asks for " + std::string(GenerationName(req.generation));
    return f;
  }
  const PlanResult r = PlanNow(req);
  if (r.reason == NoFit::kInvalidRequest || r.reason == NoFit::kNeverFits) {
    f.possible = false;
    f.reason =
        r.reason == NoFit::kNeverFits ? PendingReason::kNeverFits : PendingReason::kInvalidRequest;
    f.message = r.message;
  } else if (req.shape.chips() * req.num_slices > inv_.total_chips()) {
    f.possible = false;
    f.message = "needs " + Chips(req.shape.chips() * req.num_slices) + "; this cluster has " +
                std::to_string(inv_.total_chips());
  }
  return f;
}

PlanResult Cycle::PlanNow(const SliceRequest& req) {
  auto it = plan_failures_.find(KeyOf(req));
  if (it != plan_failures_.end()) return it->second;
  PlanResult r = planner_.Plan(inv_, req);
  // Admissions only take room, so a failure stays a failure until something is released.
  if (!r.placed()) plan_failures_.emplace(KeyOf(req), r);
  return r;
}

std::tuple<double, int64_t, int64_t, int> Cycle::OrderKey(int qi) const {
  const QueueState& q = quota_.queues[qi];
  const Workload& head = W(q.line[q.next]);
  const double share =
      options_.fair_sharing == FairSharing::kEnabled ? quota_.Share(qi, head.chips()) : 0.0;
  return {share, -int64_t{head.priority}, head.creation_order, qi};
}

void Cycle::Admit() {
  // Lines: pending workloads out of backoff, by priority, then creation order, then id.
  for (size_t i = 0; i < snap_.workloads.size(); ++i) {
    const Workload& w = W(static_cast<int>(i));
    if (w.state != WorkloadState::kPending || queue_of_[i] < 0) continue;
    if (w.start_guard.backoff_until_ms > now_) continue;
    quota_.queues[queue_of_[i]].line.push_back(static_cast<int>(i));
  }
  for (QueueState& q : quota_.queues)
    std::sort(q.line.begin(), q.line.end(), [&](int a, int b) {
      return std::make_tuple(-int64_t{W(a).priority}, W(a).creation_order, W(a).id) <
             std::make_tuple(-int64_t{W(b).priority}, W(b).creation_order, W(b).id);
    });
  const int nq = static_cast<int>(quota_.queues.size());
  while (true) {
    int best = -1;
    for (int qi = 0; qi < nq; ++qi) {
      QueueState& q = quota_.queues[qi];
      if (q.blocked_at >= 0 || q.next >= q.line.size()) continue;
      if (quota_.dirty[qi] || !keys_[qi]) {
        keys_[qi] = OrderKey(qi);
        quota_.dirty[qi] = 0;
      }
      if (best < 0 || *keys_[qi] < *keys_[best]) best = qi;
    }
    if (best < 0) break;
    QueueState& q = quota_.queues[best];
    const int wi = q.line[q.next];
    const bool ok = TryAdmit(best, wi);
    if (!ok && q.spec->queueing_strategy == QueueingStrategy::kStrictFIFO &&
        StaticCheck(W(wi).request).possible && W(wi).chips() <= quota_.Ceiling(best))
      q.blocked_at = static_cast<int>(q.next);
    ++q.next;
    keys_[best].reset();
  }
}

bool Cycle::TryAdmit(int qi, int wi) {
  const Workload& w = W(wi);
  if (!StaticCheck(w.request).possible || w.chips() > quota_.Ceiling(qi)) return false;
  if (quota_.Over(qi, w.chips()) <= 0) {
    PlanResult plan = PlanNow(w.request);
    if (plan.placed()) {
      Reserve(qi, wi, std::move(plan));
      return true;
    }
  }
  return PolicyMayPreempt(qi) && TryPreempt(qi, wi);
}

bool Cycle::PolicyMayPreempt(int qi) const {
  const QueueState& q = quota_.queues[qi];
  const PreemptionPolicy& p = q.spec->preemption;
  if (p.within_cluster_queue != WithinClusterQueue::kNever) return true;
  if (q.cohort < 0) return false;
  return p.reclaim_within_cohort != ReclaimWithinCohort::kNever ||
         p.borrow_within_cohort.policy != BorrowWithinCohortPolicy::kNever;
}

// Whether policy lets workload `w` of queue qi preempt running workload `r`, judged on the
// candidate alone (the whole victim set is checked again before preempting).
bool Cycle::MayPreempt(int qi, const Workload& w, bool within_nominal, const Running& r) const {
  if (r.evicted || r.admitted_this_cycle || r.queue < 0) return false;
  const QueueState& q = quota_.queues[qi];
  const PreemptionPolicy& p = q.spec->preemption;
  if (r.queue == qi) {
    switch (p.within_cluster_queue) {
      case WithinClusterQueue::kNever:
        return false;
      case WithinClusterQueue::kLowerPriority:
        return r.priority < w.priority;
      case WithinClusterQueue::kLowerOrNewerEqualPriority:
        return r.priority < w.priority ||
               (r.priority == w.priority && r.creation > w.creation_order);
    }
    return false;
  }
  if (q.cohort < 0 || quota_.queues[r.queue].cohort != q.cohort) return false;
  if (!quota_.Borrowing(r.queue)) return false;
  auto reclaim_allows = [&] {
    return p.reclaim_within_cohort == ReclaimWithinCohort::kAny ||
           (p.reclaim_within_cohort == ReclaimWithinCohort::kLowerPriority &&
            r.priority < w.priority);
  };
  if (within_nominal) return reclaim_allows();
  if (options_.fair_sharing == FairSharing::kEnabled)
    return reclaim_allows() && quota_.Share(qi, w.chips()) < quota_.Share(r.queue, -r.chips);
  const BorrowWithinCohort& b = p.borrow_within_cohort;
  return b.policy == BorrowWithinCohortPolicy::kLowerPriority && r.priority < w.priority &&
         (!b.max_priority_threshold || r.priority <= *b.max_priority_threshold);
}

bool Cycle::TryPreempt(int qi, int wi) {
  const Workload& w = W(wi);
  const auto memo_key = std::make_tuple(qi, w.priority, KeyOf(w.request));
  if (auto it = preempt_failures_.find(memo_key);
      it != preempt_failures_.end() && it->second == MemoStamp(qi))
    return false;
  const QueueState& q = quota_.queues[qi];
  const bool within_nominal = q.used + w.chips() <= q.nominal;
  std::vector<PreemptionCandidate> cands;
  std::vector<int> cand_running;
  for (size_t i = 0; i < running_.size(); ++i) {
    const Running& r = running_[i];
    if (!MayPreempt(qi, w, within_nominal, r)) continue;
    cands.push_back({W(r.workload).id, r.priority, r.lost_work});
    cand_running.push_back(static_cast<int>(i));
  }
  if (cands.empty()) {
    preempt_failures_[memo_key] = MemoStamp(qi);
    return false;
  }
  const bool fair = options_.fair_sharing == FairSharing::kEnabled;
  // The whole set: the preemptor fits its quota once they leave, and (borrowing with fair
  // sharing) its share after admission stays strictly below every victim queue's share after
  // the eviction.
  auto check = [&](const std::vector<int>& victims) {
    for (int v : victims) {
      const Running& r = running_[cand_running[v]];
      quota_.Add(r.queue, -r.chips);
    }
    bool ok = quota_.Over(qi, w.chips()) <= 0;
    if (ok && fair && !within_nominal) {
      const double mine = quota_.Share(qi, w.chips());
      for (int v : victims) {
        const Running& r = running_[cand_running[v]];
        if (r.queue != qi && !(mine < quota_.Share(r.queue, 0))) ok = false;
      }
    }
    for (int v : victims) {
      const Running& r = running_[cand_running[v]];
      quota_.Add(r.queue, r.chips);
    }
    return ok;
  };
  std::vector<char> dirty_before = quota_.dirty;
  std::vector<uint64_t> epochs_before = quota_.cohort_epoch;
  VictimSet found = FindVictims(inv_, planner_, w.request, cands, check);
  quota_.dirty = std::move(dirty_before);
  quota_.cohort_epoch = std::move(epochs_before);
  if (!found.found || found.victims.empty()) {
    preempt_failures_[memo_key] = MemoStamp(qi);
    return false;
  }
  Preemption p;
  p.preemptor = w.id;
  p.victims = found.victims;
  p.grace_ms = options_.preemption_grace_ms;
  p.cost = found.cost;
  bool others = false;
  for (int i = 0; i < static_cast<int>(cands.size()); ++i) {
    if (!std::binary_search(found.victims.begin(), found.victims.end(), cands[i].workload))
      continue;
    Running& r = running_[cand_running[i]];
    others = others || r.queue != qi;
    Eviction e;
    e.workload = cands[i].workload;
    e.cause = EvictionCause::kPreempted;
    e.preemptor = w.id;
    e.grace_ms = options_.preemption_grace_ms;
    e.start_guard = W(r.workload).start_guard;
    e.message = "preempted by " + w.name + " (priority " + std::to_string(w.priority) +
                "); requeued in its original place in line";
    Release(r);
    out_.evictions.push_back(std::move(e));
  }
  p.kind = !others          ? PreemptionKind::kWithinClusterQueue
           : within_nominal ? PreemptionKind::kReclaimWithinCohort
                            : PreemptionKind::kBorrowWithinCohort;
  p.message = std::string(PreemptionKindName(p.kind)) + ": " + std::to_string(p.victims.size()) +
              " workload(s), " + Chips(p.cost.chips) + ", highest priority " +
              std::to_string(p.cost.max_priority) + ", to place " + w.request.shape.ToString() +
              (w.request.num_slices > 1 ? " x" + std::to_string(w.request.num_slices) : "");
  Reserve(qi, wi, std::move(found.plan));
  out_.preemptions.push_back(std::move(p));
  return true;
}

std::vector<WorkloadId> Cycle::EvictedOn(const PlanResult& plan) const {
  std::vector<WorkloadId> out;
  for (HostId h : plan.AllHosts()) {
    const WorkloadId id = evicted_host_owner_[h.value()];
    if (id.valid() && std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
  }
  std::sort(out.begin(), out.end());
  return out;
}

void Cycle::Reserve(int qi, int wi, PlanResult plan) {
  const Workload& w = W(wi);
  Status st = ApplyPlan(inv_, OwnerOf(w.id), plan);
  // The plan was made on inv_ a moment ago; a failure here is a broken invariant.
  assert(st.ok());
  (void)st;
  quota_.Add(qi, w.chips());
  admitted_[wi] = 1;
  Running r;
  r.workload = wi;
  r.queue = qi;
  r.priority = w.priority;
  r.creation = w.creation_order;
  r.chips = w.chips();
  r.admitted_this_cycle = true;
  running_.push_back(r);
  Admission a;
  a.workload = w.id;
  a.cluster_queue = quota_.queues[qi].spec->name;
  a.waits_for = EvictedOn(plan);
  a.borrowed_chips = std::max<int64_t>(0, quota_.queues[qi].used - quota_.queues[qi].nominal);
  a.placement = std::move(plan);
  out_.admissions.push_back(std::move(a));
}

PendingStatus& Cycle::AddPending(int wi, int qi, PendingReason reason, std::string message) {
  PendingStatus st;
  st.workload = W(wi).id;
  st.name = W(wi).name;
  if (qi >= 0) st.cluster_queue = quota_.queues[qi].spec->name;
  st.reason = reason;
  st.message = std::move(message);
  st.retries = W(wi).start_guard.retries;
  out_.pending.push_back(std::move(st));
  return out_.pending.back();
}

// The cheapest set of running workloads whose leaving would let workload wi in, ignoring
// policy: it would have to wait for them to finish, or preempt those its policy allows.
void Cycle::WhatHelps(int qi, int wi, PendingStatus& st) {
  const Workload& w = W(wi);
  // Within quota only room matters, and that is the same for every queue: share the answer.
  const bool over = quota_.Over(qi, w.chips()) > 0;
  auto [it, inserted] = help_memo_.try_emplace({over ? qi : -1, KeyOf(w.request)});
  std::vector<int>& helpers = it->second;
  if (inserted) {
    // Nothing changes while reasons are given, so every workload of this shape searches the
    // same rooms among the same candidates: one finder per shape, asked once per queue.
    if (help_cands_.empty()) {
      for (size_t i = 0; i < running_.size(); ++i) {
        const Running& r = running_[i];
        if (r.evicted) continue;
        help_cands_.push_back({W(r.workload).id, r.priority, r.lost_work});
        help_candidates_.push_back(static_cast<int>(i));
      }
    }
    auto [f, created] = help_finders_.try_emplace(KeyOf(w.request));
    if (created) f->second = std::make_unique<VictimFinder>(inv_, planner_, w.request, help_cands_);
    const std::vector<int>& cand_running = help_candidates_;
    auto check = [&](const std::vector<int>& victims) {
      for (int v : victims)
        if (running_[cand_running[v]].queue >= 0)
          quota_.Add(running_[cand_running[v]].queue, -running_[cand_running[v]].chips);
      const bool ok = quota_.Over(qi, w.chips()) <= 0;
      for (int v : victims)
        if (running_[cand_running[v]].queue >= 0)
          quota_.Add(running_[cand_running[v]].queue, running_[cand_running[v]].chips);
      return ok;
    };
    VictimSet found =
        f->second->Find(over ? VictimSetCheck(check) : VictimSetCheck(), VictimPlan::kVictimsOnly);
    if (found.found)
      for (size_t i = 0; i < cand_running.size(); ++i)
        if (std::binary_search(found.victims.begin(), found.victims.end(),
                               W(running_[cand_running[i]].workload).id))
          helpers.push_back(cand_running[i]);
  }
  const QueueState& q = quota_.queues[qi];
  const bool within_nominal = q.used + w.chips() <= q.nominal;
  for (int ri : helpers) {
    const Running& r = running_[ri];
    const Workload& hw = W(r.workload);
    Blocker b;
    b.workload = hw.id;
    b.name = hw.name;
    if (r.queue >= 0) b.cluster_queue = quota_.queues[r.queue].spec->name;
    b.priority = r.priority;
    b.chips = r.chips;
    Running probe = r;
    probe.admitted_this_cycle = false;  // judged as it will be next cycle
    b.preemptible = MayPreempt(qi, w, within_nominal, probe);
    st.would_help.push_back(std::move(b));
  }
}

void Cycle::Explain() {
  // Evicted by the start guard in this cycle: their new state decides their reason.
  std::map<WorkloadId, const Eviction*> guard, preempted;
  for (const Eviction& e : out_.evictions)
    (e.cause == EvictionCause::kStartTimeout ? guard : preempted)[e.workload] = &e;
  std::vector<char> in_line(snap_.workloads.size(), 0);
  for (const QueueState& q : quota_.queues)
    for (int wi : q.line) in_line[wi] = 1;

  const bool help = options_.explain == Explain::kReasonsAndWhatHelps;
  for (int qi = 0; qi < static_cast<int>(quota_.queues.size()); ++qi) {
    QueueState& q = quota_.queues[qi];
    int position = 0;
    for (size_t pos = 0; pos < q.line.size(); ++pos) {
      const int wi = q.line[pos];
      if (admitted_[wi]) continue;
      ++position;
      const Workload& w = W(wi);
      const StaticFit& fit = StaticCheck(w.request);
      PendingStatus* st = nullptr;
      if (!fit.possible) {
        st = &AddPending(wi, qi, fit.reason, fit.message);
      } else if (w.chips() > quota_.Ceiling(qi)) {
        st = &AddPending(wi, qi, PendingReason::kOverQuota,
                         "needs " + Chips(w.chips()) + "; queue " + q.spec->name +
                             " can never hold more than " + Chips(quota_.Ceiling(qi)));
        st->over_quota_chips = w.chips() - quota_.Ceiling(qi);
      } else if (q.blocked_at >= 0 && static_cast<int>(pos) > q.blocked_at) {
        st = &AddPending(wi, qi, PendingReason::kWaitingBehind,
                         "StrictFIFO: waiting behind " + std::to_string(position - 1) +
                             " workload(s) of queue " + q.spec->name + ", first " +
                             W(q.line[q.blocked_at]).name);
        st->waiting_behind = position - 1;
      } else if (const int64_t over = quota_.Over(qi, w.chips()); over > 0) {
        st = &AddPending(wi, qi, PendingReason::kOverQuota,
                         "needs " + Chips(w.chips()) + "; " + quota_.Describe(qi) +
                             ": over quota by " + Chips(over));
        st->over_quota_chips = over;
      } else if (PlanResult plan = PlanNow(w.request); !plan.placed()) {
        st = &AddPending(wi, qi, PendingReason::kNoFreeBox, plan.message);
        st->largest_free =
            plan.largest_free.empty() ? planner_.LargestFree(inv_) : plan.largest_free;
      } else {
        st = &AddPending(wi, qi, PendingReason::kFitsNextCycle,
                         "room and quota became free after it was tried; next cycle");
      }
      st->position = position;
      const bool helps =
          st->reason == PendingReason::kOverQuota || st->reason == PendingReason::kNoFreeBox ||
          (st->reason == PendingReason::kWaitingBehind && static_cast<int>(pos) == q.blocked_at);
      if (help && helps && fit.possible && w.chips() <= quota_.Ceiling(qi)) WhatHelps(qi, wi, *st);
    }
  }
  // Not in any line: unknown queue, backoff, deactivated.
  for (size_t i = 0; i < snap_.workloads.size(); ++i) {
    const int wi = static_cast<int>(i);
    const Workload& w = W(wi);
    if (in_line[i] || admitted_[i]) continue;
    const int qi = queue_of_[i];
    if (auto p = preempted.find(w.id); p != preempted.end()) {
      AddPending(wi, qi, PendingReason::kPreempted,
                 p->second->message + "; stopping within " +
                     std::to_string(p->second->grace_ms / 1000) + " s");
      continue;
    }
    auto g = guard.find(w.id);
    if (w.state != WorkloadState::kPending && w.state != WorkloadState::kDeactivated &&
        g == guard.end())
      continue;
    const bool deactivated =
        w.state == WorkloadState::kDeactivated || (g != guard.end() && g->second->deactivated);
    const StartGuardState& sg = g != guard.end() ? g->second->start_guard : w.start_guard;
    PendingStatus* st = nullptr;
    if (deactivated) {
      st = &AddPending(wi, qi, PendingReason::kDeactivated,
                       "deactivated after " + std::to_string(sg.retries) +
                           " start-guard evictions; last: " + sg.last_eviction);
    } else if (qi < 0) {
      st = &AddPending(wi, qi, PendingReason::kLocalQueueNotFound,
                       "queue: local queue " + w.local_queue + " does not exist");
    } else {
      st = &AddPending(wi, qi, PendingReason::kBackoff,
                       "in start-guard backoff until " + std::to_string(sg.backoff_until_ms) +
                           " ms (" + std::to_string(sg.retries) +
                           " eviction(s); last: " + sg.last_eviction + ")");
      st->backoff_until_ms = sg.backoff_until_ms;
    }
    st->retries = sg.retries;
  }
}

AdmissionCycle Cycle::Finish() {
  for (const Running& r : running_)
    if (!r.evicted && r.queue >= 0) ++quota_.queues[r.queue].admitted;
  std::vector<int> pending(quota_.queues.size(), 0);
  for (const PendingStatus& st : out_.pending) {
    if (st.cluster_queue.empty() || st.reason == PendingReason::kDeactivated) continue;
    ++pending[queue_index_.at(st.cluster_queue)];
  }
  for (int qi = 0; qi < static_cast<int>(quota_.queues.size()); ++qi) {
    const QueueState& q = quota_.queues[qi];
    ClusterQueueUsage u;
    u.name = q.spec->name;
    u.cohort = q.spec->cohort;
    u.nominal_chips = q.nominal;
    u.used_chips = q.used;
    u.borrowed_chips = std::max<int64_t>(0, q.used - q.nominal);
    u.lendable_chips = q.lendable;
    u.pending_workloads = pending[qi];
    u.admitted_workloads = q.admitted;
    u.share = quota_.Share(qi, 0);
    out_.usage.push_back(std::move(u));
  }
  out_.inventory = std::move(inv_);
  return std::move(out_);
}

}  // namespace

Result<AdmissionCycle> Admitter::Run(const Snapshot& snapshot, int64_t now_ms) const {
  Cycle cycle(*this, snapshot, now_ms);
  TESSERA_RETURN_IF_ERROR(cycle.Build());
  cycle.StartGuard();
  cycle.Admit();
  cycle.Explain();
  return cycle.Finish();
}

}  // namespace tessera
