// The reasons step: a pending reason for every workload still waiting and what would let it
// in, then the usage row per ClusterQueue.
// See cycle.h.

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "admission/cycle.h"

namespace tessera::admission_internal {
namespace {

// How many workloads ahead of the one it explains the reasons step asks for (prefetches).
constexpr size_t kReadAhead = 8;

constexpr char kFitsNextCycleMessage[] =
    "room and quota became free after it was tried; next cycle";
constexpr char kWaitingBehindPrefix[] = "StrictFIFO: waiting behind ";

// kLocalQueueNotFound's message: the queue, why it was asked for, and the two fixes, with the
// LocalQueues of the workload's namespace that exist (a workload's queue is fixed once it is
// created, so the first fix is to apply it again under metadata.queue). `key` is the queue's
// key (common/object_key.h): a workload uses only its own namespace's LocalQueues.
std::string MissingLocalQueueMessage(const std::string& key,
                                     const std::vector<LocalQueueSpec>& existing) {
  const NamespacedName queue = SplitObjectKey(key);
  const std::string& name = queue.name;
  const bool elsewhere = queue.namespace_name != kDefaultNamespace;
  const std::string in_namespace = " in namespace " + queue.namespace_name;
  std::string m = "LocalQueue " + name + " does not exist" + (elsewhere ? in_namespace : "");
  if (name == kDefaultLocalQueue)
    m += " (a workload without metadata.queue waits for the LocalQueue named " + name + ")";
  std::string names;
  for (const LocalQueueSpec& q : existing) {
    const NamespacedName other = SplitObjectKey(q.name);
    if (other.namespace_name != queue.namespace_name) continue;
    names += (names.empty() ? "" : ", ") + other.name + " (ClusterQueue " + q.cluster_queue + ")";
  }
  if (!elsewhere) {
    if (names.empty())
      return m +
             "; no LocalQueue exists: apply one (kind: LocalQueue, spec.clusterQueue: NAME) "
             "named " +
             name + ", or one of another name and set metadata.queue: NAME";
    return m + "; set metadata.queue: NAME to one of the LocalQueues " + names +
           " (delete the workload and apply it again), or apply a LocalQueue named " + name;
  }
  const std::string apply_one = "apply a LocalQueue named " + name +
                                " with metadata.namespace: " + queue.namespace_name +
                                " (a workload uses only its own namespace's LocalQueues)";
  if (names.empty())
    return m + "; no LocalQueue exists" + in_namespace + ": " + apply_one +
           ", or one of another name there and set metadata.queue: NAME";
  return m + "; set metadata.queue: NAME to one of the LocalQueues" + in_namespace + " " + names +
         " (delete the workload and apply it again), or " + apply_one;
}

}  // namespace

PendingStatus& Cycle::AddPending(int wi, int qi, PendingReason reason, SharedText message) {
  // Built in place (reserved: no status is moved).
  PendingStatus& st = out_.pending.emplace_back();
  st.workload = W(wi).id;
  st.name = W(wi).name;
  if (qi >= 0) st.cluster_queue = quota_.queues[qi].spec->name;
  st.reason = reason;
  st.message = std::move(message);
  st.retries = W(wi).start_guard.retries;
  if (qi >= 0 && reason != PendingReason::kDeactivated) ++pending_of_queue_[qi];
  return st;
}

// The cheapest set of running workloads whose leaving would let workload wi in, ignoring
// policy: it would have to wait for them to finish, or preempt those its policy allows.
void Cycle::WhatHelps(int qi, const LineEntry& e, PendingStatus& st) {
  // What the line entry carries (chips, key, priority, creation) is read there: the workload
  // itself only when a search or a list is built (each read of one is a cache miss).
  const int wi = e.workload;
  // Within quota only room matters, and that is the same for every queue: share the answer.
  const int64_t over_by = quota_.Over(qi, e.chips);
  const bool over = over_by > 0;
  const int key = e.key;
  // Indexed by (queue + 1, key): row 0 is the shared answer within quota.
  if (help_memo_.empty()) help_memo_.resize((quota_.queues.size() + 1) * help_finders_.size());
  std::optional<std::vector<int>>& memo =
      help_memo_[static_cast<size_t>(over ? qi + 1 : 0) * help_finders_.size() + key];
  const bool inserted = !memo;
  if (inserted) memo.emplace();
  std::vector<int>& helpers = *memo;
  if (inserted) {
    // Nothing changes while reasons are given, so every workload of this shape searches the
    // same rooms among the same candidates: one finder per shape, asked once per queue.
    if (help_cands_.empty()) {
      for (size_t i = 0; i < running_.size(); ++i) {
        const Running& r = running_[i];
        if (r.evicted) continue;
        help_index_.emplace(r.id, static_cast<int>(help_cands_.size()));
        help_cands_.push_back({r.id, r.priority, r.lost_work});
        help_candidates_.push_back(static_cast<int>(i));
      }
    }
    const std::vector<int>& cand_running = help_candidates_;
    auto check = [&](const std::vector<int>& victims) {
      for (int v : victims)
        if (running_[cand_running[v]].queue >= 0)
          quota_.Add(running_[cand_running[v]].queue, -running_[cand_running[v]].chips);
      const bool ok = quota_.Over(qi, e.chips) <= 0;
      for (int v : victims)
        if (running_[cand_running[v]].queue >= 0)
          quota_.Add(running_[cand_running[v]].queue, running_[cand_running[v]].chips);
      return ok;
    };
    VictimSet found;
    if (Gpu()) {
      GpuVictimSet g = FindGpuVictims(fleet_, holders_, W(wi).gpu->request, options_.gpu_policy,
                                      help_cands_, over ? VictimSetCheck(check) : VictimSetCheck());
      found.found = g.found;
      found.victims = std::move(g.victims);
    } else {
      std::unique_ptr<VictimFinder>& f = help_finders_[key];
      if (!f) {
        // The candidates' hosts are the same for every shape: a finder that has searched
        // already lends what it found out about them.
        f = help_like_ ? std::make_unique<VictimFinder>(*help_like_, W(wi).request)
                       : std::make_unique<VictimFinder>(inv_, planner_, W(wi).request, help_cands_);
        // Over quota, only victims of qi's pool (its cohort, or qi alone) change what the check
        // tests (qi's usage, its cohort's pool): a room without one is refused, so the finder
        // skips it (the same answer, fewer rooms tried).
        // And a room whose victims of qi's pool hold fewer chips than qi is over by is refused
        // too (with them gone, neither qi's usage nor its cohort's pool falls by more than
        // their chips), so it is skipped without asking the check.
        std::vector<int> groups(cand_running.size(), -1);
        std::vector<int64_t> chips(cand_running.size(), 0);
        for (size_t i = 0; i < cand_running.size(); ++i) {
          if (running_[cand_running[i]].queue >= 0)
            groups[i] = PoolOf(running_[cand_running[i]].queue);
          chips[i] = running_[cand_running[i]].chips;
        }
        f->SetGroups(std::move(groups), std::move(chips));
      }
      found = over ? f->Find(check, VictimPlan::kVictimsOnly, PoolOf(qi), over_by)
                   : f->Find({}, VictimPlan::kVictimsOnly);
      if (over) help_like_ = f.get();  // over quota, the free room is refused: it searched
    }
    if (found.found) {
      // In candidate order (running_ order), as the victims are found by id.
      for (const WorkloadId id : found.victims) {
        const auto at = help_index_.find(id);
        if (at != help_index_.end()) helpers.push_back(cand_running[at->second]);
      }
      std::sort(helpers.begin(), helpers.end());
    }
  }
  const QueueState& q = quota_.queues[qi];
  const bool within_nominal = q.used + e.chips <= q.nominal;
  // The list depends on the helpers (this memo entry) and on what MayPreempt reads of the
  // waiting workload: its queue, priority and chips, whether it would end within nominal, and
  // its creation order only under LowerOrNewerEqualPriority. Usage does not change while
  // reasons are given, so the workloads after it in line with the same of those (the same
  // shape, most often the same priority) get a copy of the list built last for this entry.
  const bool by_creation =
      q.spec->preemption.within_cluster_queue == WithinClusterQueue::kLowerOrNewerEqualPriority;
  const HelpListKey list_key{qi, static_cast<int32_t>(-e.neg_priority), e.chips, within_nominal,
                             by_creation ? e.creation : 0};
  if (help_lists_.size() != help_memo_.size()) help_lists_.resize(help_memo_.size());
  HelpList& last = help_lists_[&memo - help_memo_.data()];
  if (last.key && *last.key == list_key) {
    st.would_help = last.blockers;
    return;
  }
  std::vector<Blocker> blockers;
  blockers.reserve(helpers.size());
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
    b.preemptible = MayPreempt(qi, e, within_nominal, probe);
    blockers.push_back(std::move(b));
  }
  st.would_help = std::move(blockers);
  last.key = list_key;
  last.blockers = st.would_help;
}

void Cycle::Explain() {
  // Evicted by the start guard in this cycle: their new state decides their reason.
  std::map<WorkloadId, const Eviction*> guard, preempted;
  for (const Eviction& e : out_.evictions)
    (e.cause == EvictionCause::kStartTimeout ? guard : preempted)[e.workload] = &e;
  std::vector<char> in_line(snap_.workloads.size(), 0);
  for (const QueueState& q : quota_.queues)
    for (const LineEntry& e : q.entries) in_line[e.workload] = 1;

  // Usage does not change while reasons are given (WhatHelps puts back what it tries), so a
  // queue's description is the same for each of its workloads over quota: built once.
  std::vector<std::optional<std::string>> described(quota_.queues.size());
  std::optional<std::string> largest_free;
  // At most one status per workload: reserved once, so the statuses are not moved as they
  // grow.
  out_.pending.reserve(snap_.workloads.size());
  const SharedText fits_next_cycle(kFitsNextCycleMessage);  // one copy for all that fit
  const bool help = explain_ == tessera::Explain::kReasonsAndWhatHelps;
  const bool fits_only = explain_ == tessera::Explain::kFitsNextCycleOnly;
  for (int qi = 0; qi < static_cast<int>(quota_.queues.size()); ++qi) {
    QueueState& q = quota_.queues[qi];
    int position = 0;
    std::vector<std::pair<int64_t, SharedText>> over_messages;  // this queue's, by chips
    std::string behind;  // StrictFIFO: the end of the message of those behind its blocked head
    for (size_t pos = 0; pos < q.entries.size(); ++pos) {
      const LineEntry& e = q.entries[pos];
      const int wi = e.workload;
      // A status reads its workload's id, name and retries: a cache miss each at fleet scale
      // (lines are not in memory order), so they are asked for a few workloads ahead.
      if (pos + kReadAhead < q.entries.size()) {
        const Workload& ahead = W(q.entries[pos + kReadAhead].workload);
        __builtin_prefetch(&ahead);
        __builtin_prefetch(&ahead.start_guard);
      }
      if (admitted_[wi]) continue;
      ++position;
      const StaticFit& fit = StaticCheck(e.key, wi);
      if (fits_only) {
        // The same tests as below, in the same order, without the messages of those that fail.
        if (fit.possible && e.chips <= quota_.Ceiling(qi) &&
            !(q.blocked_at >= 0 && static_cast<int>(pos) > q.blocked_at) &&
            quota_.Over(qi, e.chips) <= 0 && PlanNow(e.key, wi).placed())
          AddPending(wi, qi, PendingReason::kFitsNextCycle, fits_next_cycle).position = position;
        continue;
      }
      PendingStatus* st = nullptr;
      if (!fit.possible) {
        st = &AddPending(wi, qi, fit.reason, fit.message);
      } else if (e.chips > quota_.Ceiling(qi)) {
        st = &AddPending(wi, qi, PendingReason::kOverQuota,
                         "needs " + Chips(e.chips) + "; queue " + q.spec->name +
                             " can never hold more than " + Chips(quota_.Ceiling(qi)) +
                             (Gpu() && q.nominal == 0 ? NoGpuQuotaHint() : std::string()));
        st->over_quota_chips = e.chips - quota_.Ceiling(qi);
      } else if (q.blocked_at >= 0 && static_cast<int>(pos) > q.blocked_at) {
        // "StrictFIFO: waiting behind N workload(s) of <the queue and its first>": the part
        // after N is the same for the whole line behind the blocked head, so built once.
        if (behind.empty())
          behind = " workload(s) of queue " + q.spec->name + ", first " +
                   W(q.entries[q.blocked_at].workload).name;
        const std::string count = std::to_string(position - 1);
        st = &AddPending(wi, qi, PendingReason::kWaitingBehind,
                         SharedText::Concat({kWaitingBehindPrefix, count, behind}));
        st->waiting_behind = position - 1;
      } else if (const int64_t over = quota_.Over(qi, e.chips); over > 0) {
        // "needs N chips; <description>: over quota by M chips": the same for every workload
        // of this queue asking for as many chips (`over` follows from them), so built once per
        // size (a line holds a few sizes) and shared.
        auto known = std::find_if(over_messages.begin(), over_messages.end(),
                                  [&](const auto& m) { return m.first == e.chips; });
        if (known == over_messages.end()) {
          if (!described[qi]) described[qi] = quota_.Describe(qi);
          over_messages.emplace_back(
              e.chips, SharedText::Concat({"needs ", Chips(e.chips), "; ", *described[qi],
                                           ": over quota by ", Chips(over)}));
          known = over_messages.end() - 1;
        }
        st = &AddPending(wi, qi, PendingReason::kOverQuota, known->second);
        st->over_quota_chips = over;
      } else if (const CyclePlan& plan = PlanNow(e.key, wi); !plan.placed()) {
        st = &AddPending(wi, qi, PendingReason::kNoFreeBox, plan.message());
        if (!plan.gpu && plan.tpu.largest_free.empty() && !largest_free)
          largest_free = planner_.LargestFree(inv_);  // inv_ does not change here: once
        if (!plan.gpu)
          st->largest_free = plan.tpu.largest_free.empty() ? *largest_free : plan.tpu.largest_free;
      } else {
        st = &AddPending(wi, qi, PendingReason::kFitsNextCycle, fits_next_cycle);
      }
      st->position = position;
      const bool helps =
          st->reason == PendingReason::kOverQuota || st->reason == PendingReason::kNoFreeBox ||
          (st->reason == PendingReason::kWaitingBehind && static_cast<int>(pos) == q.blocked_at);
      if (help && helps && fit.possible && e.chips <= quota_.Ceiling(qi)) WhatHelps(qi, e, *st);
    }
  }
  if (fits_only) return;
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
                       MissingLocalQueueMessage(w.local_queue, snap_.local_queues));
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
  const std::vector<int>& pending = pending_of_queue_;
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

}  // namespace tessera::admission_internal
