// Building the cycle, the start guard, admission in queue order and preemption.
// See cycle.h.

#include "admission/cycle.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace tessera::admission_internal {
namespace {

// An id that two of the workloads use, if any. Workload ids are creation orders (a job's
// uid), so a cycle's ids are dense: over a range less than 8 times their count they are
// marked in a bitmap, in one pass (sorting 100,000 ids was 1.6 % of a fleet-scale cycle's
// instructions). Sparse ids are sorted instead.
std::optional<WorkloadId> UsedTwice(std::vector<WorkloadId>& ids) {
  if (ids.empty()) return std::nullopt;
  const auto [lowest, highest] = std::minmax_element(ids.begin(), ids.end());
  const uint64_t low = lowest->value();
  const uint64_t span = highest->value() - low;
  if (span / 8 < ids.size()) {
    std::vector<uint64_t> seen(span / 64 + 1, 0);
    for (const WorkloadId id : ids) {
      const uint64_t bit = id.value() - low;
      const uint64_t mask = uint64_t{1} << (bit % 64);
      if (seen[bit / 64] & mask) return id;
      seen[bit / 64] |= mask;
    }
    return std::nullopt;
  }
  std::sort(ids.begin(), ids.end());
  const auto twice = std::adjacent_find(ids.begin(), ids.end());
  if (twice == ids.end()) return std::nullopt;
  return *twice;
}

}  // namespace

Status Cycle::Build() {
  TESSERA_RETURN_IF_ERROR(Validate(options_));
  const Generation gen = inv_.generation();
  if (Gpu()) {
    quota_.unit = "GPUs";
    if (holders_.size() != snap_.gpu->holders.size() && !snap_.gpu->holders.empty())
      return InvalidArgument("gpu.holders: one entry per fleet host expected, got " +
                             std::to_string(snap_.gpu->holders.size()) + " for " +
                             std::to_string(fleet_.hosts.size()) + " hosts");
  }
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
      // A TPU cycle counts its generation's chips; a GPU cycle its system's GPUs.
      if (Gpu() ? rq.gpu_system != fleet_.system : rq.gpu_system || rq.generation != gen) continue;
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
  while (head_leaves_ < quota_.queues.size()) head_leaves_ *= 2;
  head_tree_.assign(2 * head_leaves_, -1);
  pending_of_queue_.assign(quota_.queues.size(), 0);

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

  running_of_queue_.assign(quota_.queues.size(), {});
  cohort_queues_.assign(quota_.cohorts.size(), {});
  for (int qi = 0; qi < static_cast<int>(quota_.queues.size()); ++qi)
    if (quota_.queues[qi].cohort >= 0) cohort_queues_[quota_.queues[qi].cohort].push_back(qi);

  std::vector<WorkloadId> ids;
  queue_of_.assign(snap_.workloads.size(), -1);
  admitted_.assign(snap_.workloads.size(), 0);
  key_of_.assign(snap_.workloads.size(), -1);
  std::map<RequestKey, int> key_index;
  evicted_host_owner_.assign(Gpu() ? fleet_.hosts.size() : inv_.hosts().size(), WorkloadId());
  block_changed_.assign(inv_.is_3d() ? inv_.blocks().size() : 0, 0);
  std::vector<int> first_of_key;  // per key: the first workload asking for it (valid)
  for (size_t i = 0; i < snap_.workloads.size(); ++i) {
    const Workload& w = snap_.workloads[i];
    // A queue among the local queues, and a TPU shape of a key seen before in the same
    // generation, passed their checks already.
    const auto it = local_to_queue_.find(w.local_queue);
    const auto [key, first] = key_index.try_emplace(KeyOf(w), static_cast<int>(key_index.size()));
    if (first) first_of_key.push_back(static_cast<int>(i));
    const Workload& like = snap_.workloads[first_of_key[key->second]];
    KnownValid known;
    known.queue = it != local_to_queue_.end();
    known.shape = !first && !w.gpu && !like.gpu &&
                  w.request.generation == like.request.generation &&
                  w.request.shape == like.request.shape;
    Status st = Validate(w, known);
    if (!st.ok())
      return InvalidArgument("workloads[" + std::to_string(i) + "] (" + w.name +
                             "): " + st.message());
    ids.push_back(w.id);
    key_of_[i] = key->second;
    if (it != local_to_queue_.end()) queue_of_[i] = it->second;
    if (w.state == WorkloadState::kAdmitted || w.state == WorkloadState::kRunning) {
      if (!HoldsHosts(w.id))
        return InvalidArgument("workloads[" + std::to_string(i) + "] (" + w.name + "): state " +
                               WorkloadStateName(w.state) + " but it holds no hosts");
      Running r;
      r.workload = static_cast<int>(i);
      r.id = w.id;
      r.queue = queue_of_[i];
      r.priority = w.priority;
      r.creation = w.creation_order;
      r.chips = w.chips();
      const int64_t since = w.last_checkpoint_ms.value_or(w.admitted_at_ms);
      r.lost_work = r.chips * std::max<int64_t>(0, now_ - since);
      if (r.queue >= 0) quota_.Add(r.queue, r.chips);
      if (r.queue >= 0) running_of_queue_[r.queue].push_back(static_cast<int>(running_.size()));
      running_.push_back(r);
    }
  }
  static_fit_.resize(key_index.size());
  memo_first_.assign(quota_.queues.size(), {});
  plan_failures_.resize(key_index.size());
  help_finders_.resize(key_index.size());
  if (const std::optional<WorkloadId> twice = UsedTwice(ids))
    return InvalidArgument("workloads: id " + std::to_string(twice->value()) + " is used twice");
  return Status::Ok();
}

bool Cycle::HoldsHosts(WorkloadId id) const {
  if (!Gpu()) return inv_.Holds(OwnerOf(id));
  return std::find(holders_.begin(), holders_.end(), id) != holders_.end();
}

std::string Cycle::RequestText(const Workload& w) const {
  if (w.gpu) {
    const GpuSystemInfo& info = Info(w.gpu->system);
    return std::to_string(w.gpu->request.gpus / info.gpus_per_host) + " " + std::string(info.name) +
           " hosts (domain: " + w.gpu->request.rule.ToString() + ")";
  }
  return w.request.shape.ToString() +
         (w.request.num_slices > 1 ? " x" + std::to_string(w.request.num_slices) : "");
}

void Cycle::Release(Running& r) {
  r.evicted = true;
  const Workload& w = W(r.workload);
  if (Gpu()) {
    for (size_t h = 0; h < holders_.size(); ++h) {
      if (holders_[h] != w.id) continue;
      evicted_host_owner_[h] = w.id;
      holders_[h] = WorkloadId();
      fleet_.hosts[h].free_gpus = fleet_.gpus_per_host();
    }
  } else {
    const std::vector<HostId> hosts = inv_.HostsOf(OwnerOf(w.id));
    for (HostId h : hosts) evicted_host_owner_[h.value()] = w.id;
    inv_.Release(OwnerOf(w.id));
    HostsChanged(hosts);
  }
  if (r.queue >= 0) {
    quota_.Add(r.queue, -r.chips);
    // No longer a candidate of anyone (PreemptGrounds): out of its pool.
    std::vector<int>& own = running_of_queue_[r.queue];
    own.erase(std::find(own.begin(), own.end(), static_cast<int>(&r - running_.data())));
  }
  for (int k : failed_keys_) plan_failures_[k].reset();
  failed_keys_.clear();
  ++release_epoch_;
}

void Cycle::HostsChanged(const std::vector<HostId>& hosts) {
  ++change_count_;
  for (HostId h : hosts)
    if (const CubeId cube = inv_.host(h).cube; cube.valid())
      block_changed_[inv_.cube(cube).block.value()] = change_count_;
  cube_index_.OwnersChanged(inv_, hosts);
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

const Cycle::StaticFit& Cycle::StaticCheck(int key, int wi) {
  std::optional<StaticFit>& known = static_fit_[key];
  if (known) return *known;
  StaticFit& f = known.emplace();
  const Workload& w = W(wi);
  if (Gpu() || w.gpu) {
    if (!Gpu() || !w.gpu || w.gpu->system != fleet_.system) {
      f.possible = false;
      f.reason = PendingReason::kInvalidRequest;
      const std::string here = Gpu() ? std::string(GpuSystemName(fleet_.system)) + " GPUs"
                                     : std::string(GenerationName(inv_.generation())) + " chips";
      const std::string asked = w.gpu
                                    ? std::string(GpuSystemName(w.gpu->system)) + " GPUs"
                                    : std::string(GenerationName(w.request.generation)) + " chips";
      f.message = "this cycle places " + here + "; the workload asks for " + asked;
      return f;
    }
    // Empty, every host is free and usable: what fails then fails until the fleet grows.
    GpuFleet empty = fleet_;
    for (GpuHostState& h : empty.hosts) {
      h.free_gpus = empty.gpus_per_host();
      h.usable = true;
    }
    const GpuPlacement r = PlanGpu(empty, w.gpu->request, options_.gpu_policy);
    if (r.reason == GpuNoFit::kNeverFits || r.reason == GpuNoFit::kInvalidRequest ||
        fleet_.hosts.empty()) {
      f.possible = false;
      f.reason = r.reason == GpuNoFit::kInvalidRequest ? PendingReason::kInvalidRequest
                                                       : PendingReason::kNeverFits;
      f.message = fleet_.hosts.empty()
                      ? "no " + std::string(GpuSystemName(fleet_.system)) + " host is registered"
                      : "domain: " + w.gpu->request.rule.ToString() + ": " + r.message;
    }
    return f;
  }
  const SliceRequest& req = w.request;
  if (req.generation != inv_.generation()) {
    f.possible = false;
    f.reason = PendingReason::kInvalidRequest;
    f.message = "accelerator: this cluster has " + std::string(GenerationName(inv_.generation())) +
                " chips; the workload asks for " + std::string(GenerationName(req.generation));
    return f;
  }
  const PlanResult& r = PlanNow(key, wi).tpu;
  if (r.reason == NoFit::kInvalidRequest || r.reason == NoFit::kNeverFits) {
    f.possible = false;
    f.reason =
        r.reason == NoFit::kNeverFits ? PendingReason::kNeverFits : PendingReason::kInvalidRequest;
    f.message = r.message;
  } else if (req.shape.chips() * req.num_slices > TotalChips()) {
    f.possible = false;
    f.message = "needs " + Chips(req.shape.chips() * req.num_slices) + "; this cluster has " +
                std::to_string(TotalChips());
  }
  return f;
}

const CyclePlan& Cycle::PlanNow(int key, int wi) {
  if (plan_failures_[key]) return *plan_failures_[key];
  const Workload& w = W(wi);
  CyclePlan r;
  r.gpu = Gpu();
  if (Gpu()) {
    r.gpus = PlanGpu(fleet_, w.gpu->request, options_.gpu_policy);
    if (!r.gpus.placed)
      r.gpus.message = "no placement for " + RequestText(w) + " now: " + r.gpus.message;
  } else {
    r.tpu = planner_.Plan(inv_, w.request, cube_index_);
  }
  if (r.placed()) {
    placed_plan_ = std::move(r);
    return placed_plan_;
  }
  // Admissions only take room, so a failure stays a failure until something is released.
  failed_keys_.push_back(key);
  return plan_failures_[key].emplace(std::move(r));
}

// Kueue's order of heads: those that fit within their queue's nominal quota before those that
// must borrow, then (with fair sharing) the lower share after admission, then priority, then age.
Cycle::HeadKey Cycle::OrderKey(int qi) const {
  const QueueState& q = quota_.queues[qi];
  const LineEntry& head = q.entries[q.next];
  const int borrows = q.used + head.chips > q.nominal ? 1 : 0;
  const double share =
      options_.fair_sharing == FairSharing::kEnabled ? quota_.Share(qi, head.chips) : 0.0;
  return {borrows, share, head.neg_priority, head.creation, qi};
}

namespace {

// Sorts a line by priority, then creation, then id. When the workloads come in creation order,
// a line is in order but for priority: it is put in order by counting its entries per priority
// level (a few levels), keeping their order within a level. Otherwise (or with many levels), by
// a full sort. `scratch`: space for the counting.
void SortLine(std::vector<LineEntry>& line, std::vector<LineEntry>& scratch) {
  auto by_creation = [](const LineEntry& a, const LineEntry& b) {
    return std::tie(a.creation, a.id) < std::tie(b.creation, b.id);
  };
  constexpr size_t kMaxLevels = 8;
  std::array<int64_t, kMaxLevels> levels;  // the line's distinct neg_priority values
  size_t count = 0;
  bool counted = std::is_sorted(line.begin(), line.end(), by_creation);
  for (size_t i = 0; counted && i < line.size(); ++i) {
    const int64_t p = line[i].neg_priority;
    if (std::find(levels.begin(), levels.begin() + count, p) != levels.begin() + count) continue;
    if (count == kMaxLevels)
      counted = false;
    else
      levels[count++] = p;
  }
  if (!counted) {
    std::sort(line.begin(), line.end(), [](const LineEntry& a, const LineEntry& b) {
      return std::tie(a.neg_priority, a.creation, a.id) <
             std::tie(b.neg_priority, b.creation, b.id);
    });
    return;
  }
  if (count <= 1) return;  // one level: in order already
  // The levels in order: a few, put in place one by one.
  for (size_t i = 1; i < count; ++i)
    for (size_t j = i; j > 0 && levels[j] < levels[j - 1]; --j) std::swap(levels[j], levels[j - 1]);
  auto level_of = [&](const LineEntry& e) -> size_t {
    return std::find(levels.begin(), levels.begin() + count, e.neg_priority) - levels.begin();
  };
  std::array<size_t, kMaxLevels + 1> at{};  // per level, where its entries start
  for (const LineEntry& e : line) ++at[1 + level_of(e)];
  for (size_t l = 1; l <= count; ++l) at[l] += at[l - 1];
  scratch.resize(line.size());
  for (const LineEntry& e : line) scratch[at[level_of(e)]++] = e;
  line.swap(scratch);
}

}  // namespace

void Cycle::Admit() {
  // Lines: pending workloads out of backoff, by priority, then creation order, then id. Room
  // for every workload of the queue first (read from queue_of_, not from the workloads).
  std::vector<size_t> line_sizes(quota_.queues.size(), 0);
  for (int qi : queue_of_)
    if (qi >= 0) ++line_sizes[qi];
  for (size_t qi = 0; qi < line_sizes.size(); ++qi)
    quota_.queues[qi].entries.reserve(line_sizes[qi]);
  for (size_t i = 0; i < snap_.workloads.size(); ++i) {
    const Workload& w = W(static_cast<int>(i));
    if (w.state != WorkloadState::kPending || queue_of_[i] < 0) continue;
    if (w.start_guard.backoff_until_ms > now_) continue;
    quota_.queues[queue_of_[i]].entries.push_back(
        {-int64_t{w.priority}, w.creation_order, w.id, w.chips(), static_cast<int>(i), key_of_[i]});
  }
  // Sorted by what the entries carry (ids are unique: a total order), not through W().
  std::vector<LineEntry> scratch;
  for (QueueState& q : quota_.queues) SortLine(q.entries, scratch);
  // Every queue's key, then at each step only those of the queues whose usage changed (the
  // one admitted into, its victims' queues) and of the queue whose head moved: the same pick
  // as comparing every queue's key at every step, without the scan of every queue.
  quota_.dirty.assign(quota_.queues.size(), 0);
  quota_.dirty_list.clear();
  for (int qi = 0; qi < static_cast<int>(quota_.queues.size()); ++qi) RefreshHead(qi);
  while (head_tree_[1] >= 0) {
    for (int qi : quota_.dirty_list) {
      quota_.dirty[qi] = 0;
      RefreshHead(qi);
    }
    quota_.dirty_list.clear();
    const int best = head_tree_[1];
    QueueState& q = quota_.queues[best];
    const LineEntry& e = q.entries[q.next];
    const bool ok = TryAdmit(best, e);
    if (!ok && q.spec->queueing_strategy == QueueingStrategy::kStrictFIFO &&
        StaticCheck(e.key, e.workload).possible && e.chips <= quota_.Ceiling(best))
      q.blocked_at = static_cast<int>(q.next);
    ++q.next;
    RefreshHead(best);
  }
}

void Cycle::RefreshHead(int qi) {
  const QueueState& q = quota_.queues[qi];
  if (q.blocked_at >= 0 || q.next >= q.entries.size())
    keys_[qi].reset();
  else
    keys_[qi] = OrderKey(qi);
  size_t node = head_leaves_ + static_cast<size_t>(qi);
  head_tree_[node] = keys_[qi] ? qi : -1;
  for (node /= 2; node >= 1; node /= 2) {
    const int a = head_tree_[2 * node], b = head_tree_[2 * node + 1];
    head_tree_[node] = a < 0 ? b : b < 0 ? a : *keys_[b] < *keys_[a] ? b : a;
  }
}

bool Cycle::TryAdmit(int qi, const LineEntry& e) {
  if (!StaticCheck(e.key, e.workload).possible || e.chips > quota_.Ceiling(qi)) return false;
  if (quota_.Over(qi, e.chips) <= 0) {
    const CyclePlan& plan = PlanNow(e.key, e.workload);
    if (plan.placed() && Reserve(qi, e.workload, std::move(placed_plan_))) return true;
  }
  return PolicyMayPreempt(qi) && TryPreempt(qi, e);
}

bool Cycle::PolicyMayPreempt(int qi) const {
  const QueueState& q = quota_.queues[qi];
  const PreemptionPolicy& p = q.spec->preemption;
  if (p.within_cluster_queue != WithinClusterQueue::kNever) return true;
  if (q.cohort < 0) return false;
  return p.reclaim_within_cohort != ReclaimWithinCohort::kNever ||
         p.borrow_within_cohort.policy != BorrowWithinCohortPolicy::kNever;
}

Cycle::Grounds Cycle::PreemptGrounds(int qi, const LineEntry& e, const Running& r) const {
  if (r.evicted || r.admitted_this_cycle || r.queue < 0) return Grounds::kNone;
  const QueueState& q = quota_.queues[qi];
  const PreemptionPolicy& p = q.spec->preemption;
  const int64_t priority = -e.neg_priority;
  if (r.queue == qi) {
    bool ok = false;
    switch (p.within_cluster_queue) {
      case WithinClusterQueue::kNever:
        break;
      case WithinClusterQueue::kLowerPriority:
        ok = r.priority < priority;
        break;
      case WithinClusterQueue::kLowerOrNewerEqualPriority:
        ok = r.priority < priority || (r.priority == priority && r.creation > e.creation);
        break;
    }
    return ok ? Grounds::kOwnQueue : Grounds::kNone;
  }
  // Another queue's workload: only in the same cohort, and only while that queue borrows.
  if (q.cohort < 0 || quota_.queues[r.queue].cohort != q.cohort) return Grounds::kNone;
  if (!quota_.Borrowing(r.queue)) return Grounds::kNone;
  const bool reclaim =
      p.reclaim_within_cohort == ReclaimWithinCohort::kAny ||
      (p.reclaim_within_cohort == ReclaimWithinCohort::kLowerPriority && r.priority < priority);
  // With fair sharing, borrowWithinCohort is ignored (as in Kueue): reclaimWithinCohort says
  // which priorities, and the share rule (or ending within nominal) decides.
  if (options_.fair_sharing == FairSharing::kEnabled)
    return reclaim ? Grounds::kFairShare : Grounds::kNone;
  const BorrowWithinCohort& b = p.borrow_within_cohort;
  if (b.policy == BorrowWithinCohortPolicy::kLowerPriority && r.priority < priority &&
      (!b.max_priority_threshold || r.priority <= *b.max_priority_threshold))
    return Grounds::kBorrow;
  // Kueue reclaims only for a queue below its nominal quota before the admission.
  return reclaim && q.used < q.nominal ? Grounds::kReclaim : Grounds::kNone;
}

// The same judgement for a single candidate, with the preemptor's quota as it stands:
// `within_nominal` says whether it would be within nominal after admission.
bool Cycle::MayPreempt(int qi, const LineEntry& e, bool within_nominal, const Running& r) const {
  switch (PreemptGrounds(qi, e, r)) {
    case Grounds::kNone:
      return false;
    case Grounds::kOwnQueue:
    case Grounds::kBorrow:
      return true;
    case Grounds::kReclaim:
      return within_nominal;
    case Grounds::kFairShare:
      return within_nominal || quota_.Share(qi, e.chips) < quota_.Share(r.queue, -r.chips);
  }
  return false;
}

bool Cycle::TryPreempt(int qi, const LineEntry& head) {
  const auto priority = static_cast<int32_t>(-head.neg_priority);
  PreemptMemo* memo = FindPreemptMemo(qi, priority, head.key);
  if (memo != nullptr && MemoHolds(memo->stamp, qi)) return false;
  const int wi = head.workload;
  const int64_t chips = head.chips;
  const QueueState& q = quota_.queues[qi];
  const bool fair = options_.fair_sharing == FairSharing::kEnabled;
  // Only workloads of its own queue and of its cohort's can be candidates, and only of a queue
  // that gives any (PreemptGrounds): its own unless under `never`, another while it borrows.
  // Those with grounds, in running_ order.
  std::vector<std::pair<int, Grounds>>& hits = pool_hits_;
  hits.clear();
  // The least the preemptor's queue can use after admission: all its candidates evicted.
  int64_t own_low = q.used + chips;
  auto visit = [&](int rq) {
    for (int ri : running_of_queue_[rq]) {
      const Grounds g = PreemptGrounds(qi, head, running_[ri]);
      if (g == Grounds::kNone) continue;
      hits.push_back({ri, g});
      if (g == Grounds::kOwnQueue) own_low -= running_[ri].chips;
    }
  };
  if (q.spec->preemption.within_cluster_queue != WithinClusterQueue::kNever) visit(qi);
  if (q.cohort >= 0)
    for (int rq : cohort_queues_[q.cohort])
      if (rq != qi && quota_.Borrowing(rq)) visit(rq);
  std::sort(hits.begin(), hits.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  const bool may_end_within = own_low <= q.nominal;
  const double my_share = quota_.Share(qi, chips);
  const double my_low_share = quota_.Share(qi, own_low - q.used);  // own candidates all gone
  std::vector<PreemptionCandidate>& cands = cands_;
  std::vector<int>& cand_running = cand_running_;
  std::vector<Grounds>& cand_grounds = cand_grounds_;
  cands.clear();
  cand_running.clear();
  cand_grounds.clear();
  for (const auto& [ri, g] : hits) {
    const Running& r = running_[ri];
    // Candidates that no victim set can make acceptable are left out of the search.
    if ((g == Grounds::kReclaim && !may_end_within) ||
        (g == Grounds::kFairShare && !may_end_within &&
         !(my_low_share < quota_.Share(r.queue, -r.chips))))
      continue;
    cands.push_back({r.id, r.priority, r.lost_work});
    cand_running.push_back(ri);
    cand_grounds.push_back(g);
  }
  if (cands.empty()) {
    // Who is a candidate depends on the cohort's usage and running workloads alone (a release
    // elsewhere changes neither): valid until the cohort's usage changes.
    std::pair<uint64_t, uint64_t> stamp = MemoStamp(qi);
    if (q.cohort >= 0) stamp.first = kAnyRelease;
    PreemptMemo& m = PreemptMemoFor(qi, priority, head.key);
    m = PreemptMemo();
    m.stamp = stamp;
    return false;
  }
  // A bound before any search: the check below accepts a set only if the preemptor fits its
  // quota with the set's victims gone, and evicting more never makes that worse (usage and
  // the cohort's pool only fall). If even every candidate gone leaves it over quota, no set
  // passes and no room is worth looking for: the search would fail as well.
  if (!QuotaFitsWithout(qi, chips, cand_running)) {
    PreemptMemo& m = PreemptMemoFor(qi, priority, head.key);
    m = PreemptMemo();
    m.stamp = MemoStamp(qi);
    return false;
  }
  // Kueue's candidate order, as ranks (lower is evicted first; the victim search minimises the
  // highest rank before priority, chips and lost work). Without fair sharing: workloads of
  // other (borrowing) queues before the preemptor's own. With fair sharing: by queue, highest
  // share first (the preemptor's own counted with the workload admitted), ties by name.
  if (fair) {
    std::vector<std::pair<double, int>> order;  // (-share, queue)
    for (int i : cand_running) {
      const int rq = running_[i].queue;
      const double share = rq == qi ? my_share : quota_.Share(rq, 0);
      if (std::find_if(order.begin(), order.end(), [&](const auto& e) { return e.second == rq; }) ==
          order.end())
        order.push_back({-share, rq});
    }
    std::sort(order.begin(), order.end());
    for (size_t c = 0; c < cands.size(); ++c) {
      const int rq = running_[cand_running[c]].queue;
      cands[c].rank = static_cast<int32_t>(
          std::find_if(order.begin(), order.end(), [&](const auto& e) { return e.second == rq; }) -
          order.begin());
    }
  } else {
    for (size_t c = 0; c < cands.size(); ++c)
      cands[c].rank = running_[cand_running[c]].queue == qi ? 1 : 0;
  }
  // The same search as one that found no room, on the same rooms: no room again.
  if (memo != nullptr && memo->searched && memo->stamp.second == MemoStamp(qi).second &&
      memo->cand_running == cand_running && memo->grounds == cand_grounds) {
    const PreemptMemo& m = *memo;
    bool same = true;
    for (size_t c = 0; c < cands.size() && same; ++c) same = cands[c].rank == m.ranks[c];
    for (size_t i = 0; i < m.blocks.size() && same; ++i)
      same = block_changed_[m.blocks[i]] <= m.changes;
    if (same) {
      memo->stamp = MemoStamp(qi);  // as the search would have left it
      return false;
    }
  }
  // The whole set, with the victims gone: the preemptor fits its quota; if a victim was
  // reclaimed, it ends within its nominal quota; with fair sharing, it ends within nominal or
  // its share after admission stays strictly below every victim queue's share after the
  // eviction; and each other queue gives back only what it borrows (in some order, each of its
  // victims is taken while it is still above nominal: Kueue skips a candidate whose queue no
  // longer borrows).
  std::vector<int64_t>& largest = largest_;  // all 0 between checks
  largest.resize(quota_.queues.size(), 0);
  auto check = [&](const std::vector<int>& victims) {
    for (int v : victims) {
      const Running& r = running_[cand_running[v]];
      quota_.Add(r.queue, -r.chips);
      largest[r.queue] = std::max(largest[r.queue], r.chips);
    }
    bool ok = quota_.Over(qi, chips) <= 0;
    const bool ends_within = q.used + chips <= q.nominal;
    const double mine = quota_.Share(qi, chips);
    for (int v : victims) {
      if (!ok) break;
      const Running& r = running_[cand_running[v]];
      if (r.queue == qi) continue;
      const Grounds g = cand_grounds[v];
      if (g == Grounds::kReclaim && !ends_within) ok = false;
      if (g == Grounds::kFairShare && !ends_within && !(mine < quota_.Share(r.queue, 0)))
        ok = false;
      const QueueState& vq = quota_.queues[r.queue];
      if (vq.used + largest[r.queue] <= vq.nominal) ok = false;
    }
    for (int v : victims) {
      const Running& r = running_[cand_running[v]];
      quota_.Add(r.queue, r.chips);
      largest[r.queue] = 0;
    }
    return ok;
  };
  // The check changes usage and puts it back: it changes no key and no memo's stamp.
  const size_t dirty_before = quota_.dirty_list.size();
  std::vector<uint64_t> epochs_before = quota_.cohort_epoch;
  const Workload& w = W(wi);  // read only now: the cycle's lines hold the rest
  VictimSet found;
  CyclePlan plan;
  plan.gpu = Gpu();
  if (Gpu()) {
    GpuVictimSet g =
        FindGpuVictims(fleet_, holders_, w.gpu->request, options_.gpu_policy, cands, check);
    found.found = g.found;
    found.victims = std::move(g.victims);
    found.cost = g.cost;
    plan.gpus = std::move(g.plan);
  } else {
    found = FindVictims(inv_, planner_, w.request, cands, check);
    plan.tpu = std::move(found.plan);
  }
  quota_.ForgetDirtySince(dirty_before);
  quota_.cohort_epoch = std::move(epochs_before);
  if (!found.found || found.victims.empty()) {
    PreemptMemo m;
    m.stamp = MemoStamp(qi);
    if (!found.found && !Gpu() && inv_.is_3d() && q.cohort >= 0) {
      m.searched = true;
      m.changes = change_count_;
      m.cand_running = cand_running;
      m.grounds = cand_grounds;
      for (const PreemptionCandidate& c : cands) {
        m.ranks.push_back(c.rank);
        for (HostId h : inv_.HostsOf(OwnerOf(c.workload)))
          m.blocks.push_back(inv_.cube(inv_.host(h).cube).block.value());
      }
      std::sort(m.blocks.begin(), m.blocks.end());
      m.blocks.erase(std::unique(m.blocks.begin(), m.blocks.end()), m.blocks.end());
    }
    PreemptMemoFor(qi, priority, head.key) = std::move(m);
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
  const bool within_nominal = q.used + chips <= q.nominal;  // the victims are gone
  p.kind = !others          ? PreemptionKind::kWithinClusterQueue
           : within_nominal ? PreemptionKind::kReclaimWithinCohort
                            : PreemptionKind::kBorrowWithinCohort;
  p.message = std::string(PreemptionKindName(p.kind)) + ": " + std::to_string(p.victims.size()) +
              " workload(s), " + Chips(p.cost.chips) + ", highest priority " +
              std::to_string(p.cost.max_priority) + ", to place " + RequestText(w);
  if (!Reserve(qi, wi, std::move(plan))) return false;
  out_.preemptions.push_back(std::move(p));
  return true;
}

Cycle::PreemptMemo* Cycle::FindPreemptMemo(int qi, int32_t priority, int key) {
  const std::vector<int32_t>& first = memo_first_[qi];
  if (first.empty()) return nullptr;
  for (int32_t i = first[key]; i >= 0; i = preempt_memos_[i].next)
    if (preempt_memos_[i].priority == priority) return &preempt_memos_[i].memo;
  return nullptr;
}

Cycle::PreemptMemo& Cycle::PreemptMemoFor(int qi, int32_t priority, int key) {
  if (PreemptMemo* m = FindPreemptMemo(qi, priority, key)) return *m;
  std::vector<int32_t>& first = memo_first_[qi];
  if (first.empty()) first.assign(static_fit_.size(), -1);
  preempt_memos_.push_back({priority, first[key], PreemptMemo()});
  first[key] = static_cast<int32_t>(preempt_memos_.size() - 1);
  return preempt_memos_.back().memo;
}

bool Cycle::QuotaFitsWithout(int qi, int64_t chips, const std::vector<int>& gone) const {
  const QueueState& q = quota_.queues[qi];
  int64_t own = 0;     // chips of qi's own among `gone`
  int64_t others = 0;  // what the other queues' pool use falls by with `gone` evicted
  // Per other queue, its usage after the evictions: accumulated over `gone` (a pool holds a
  // few queues' workloads; small linear lists, no allocation beyond them).
  std::vector<std::pair<int, int64_t>> freed;
  for (int ri : gone) {
    const Running& r = running_[ri];
    if (r.queue == qi) {
      own += r.chips;
      continue;
    }
    auto it = std::find_if(freed.begin(), freed.end(),
                           [&](const std::pair<int, int64_t>& f) { return f.first == r.queue; });
    if (it == freed.end())
      freed.push_back({r.queue, r.chips});
    else
      it->second += r.chips;
  }
  const int64_t after = q.used - own + chips;
  if (q.cohort < 0) return after - q.nominal <= 0;
  if (q.borrow_limit && after - (q.nominal + *q.borrow_limit) > 0) return false;
  for (const auto& [vq, freed_chips] : freed) {
    const QueueState& v = quota_.queues[vq];
    // Only a queue of qi's cohort changes its pool (candidates are of qi's pool: all are).
    if (v.cohort != q.cohort) continue;
    others += QuotaBook::Above(v.used, v.guaranteed) -
              QuotaBook::Above(v.used - freed_chips, v.guaranteed);
  }
  const CohortState& c = quota_.cohorts[q.cohort];
  const int64_t pool_used = c.pool_used - others - QuotaBook::Above(q.used, q.guaranteed) +
                            QuotaBook::Above(q.used - own, q.guaranteed);
  const int64_t draw =
      QuotaBook::Above(after, q.guaranteed) - QuotaBook::Above(q.used - own, q.guaranteed);
  return pool_used + draw - c.pool_cap <= 0;
}

std::vector<WorkloadId> Cycle::EvictedOn(const CyclePlan& plan) const {
  std::vector<WorkloadId> out;
  std::vector<size_t> hosts;
  if (plan.gpu)
    for (int h : plan.gpus.hosts) hosts.push_back(static_cast<size_t>(h));
  else
    for (HostId h : plan.tpu.AllHosts()) hosts.push_back(h.value());
  for (size_t h : hosts) {
    const WorkloadId id = evicted_host_owner_[h];
    if (id.valid() && std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool Cycle::Reserve(int qi, int wi, CyclePlan plan) {
  const Workload& w = W(wi);
  Status st =
      plan.gpu ? ApplyGpuPlacement(fleet_, plan.gpus) : ApplyPlan(inv_, OwnerOf(w.id), plan.tpu);
  // The plan was made on inv_ a moment ago; a failure here is a broken invariant. Without
  // asserts, the workload is then simply not admitted this cycle.
  assert(st.ok());
  if (!st.ok()) return false;
  if (!plan.gpu) HostsChanged(plan.tpu.AllHosts());  // as Release does (2D hosts have no cube)
  quota_.Add(qi, w.chips());
  admitted_[wi] = 1;
  Running r;
  r.workload = wi;
  r.id = w.id;
  r.queue = qi;
  r.priority = w.priority;
  r.creation = w.creation_order;
  r.chips = w.chips();
  r.admitted_this_cycle = true;  // never a candidate in this cycle: not in a pool
  running_.push_back(r);
  Admission a;
  a.workload = w.id;
  a.cluster_queue = quota_.queues[qi].spec->name;
  a.waits_for = EvictedOn(plan);
  a.borrowed_chips = std::max<int64_t>(0, quota_.queues[qi].used - quota_.queues[qi].nominal);
  if (plan.gpu)
    for (int h : plan.gpus.hosts) holders_[h] = w.id;
  a.placement = std::move(plan.tpu);
  a.gpu_placement = std::move(plan.gpus);
  out_.admissions.push_back(std::move(a));
  return true;
}

}  // namespace tessera::admission_internal
