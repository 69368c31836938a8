#include "sim/scheduler.h"

#include <algorithm>
#include <optional>

#include "sim/admission_scheduler.h"
#include "sim/easy_scheduler.h"

namespace tessera::sim {
namespace {

// The queue order: (-priority, submit time, job index). fifo and backfill use priority 0.
using QueueKey = std::tuple<int, int64_t, JobIndex>;

bool SameRequest(const SliceRequest& a, const SliceRequest& b) {
  return a.shape == b.shape && a.num_slices == b.num_slices;
}

class QueueScheduler : public SimScheduler {
 public:
  explicit QueueScheduler(AdmissionKind kind) : kind_(kind) {}

  std::string Name() const override { return AdmissionName(kind_); }

  void OnArrival(JobIndex j, const SimJob& job) override {
    const int prio = kind_ == AdmissionKind::kPriority ? -job.spec.priority : 0;
    queue_.insert({prio, job.spec.submit_s, j});
  }

  void OnDeparture(JobIndex) override { ++departures_; }

  size_t QueueLength() const override { return queue_.size(); }

  std::vector<JobIndex> Queued() const override {
    std::vector<JobIndex> out;
    for (const auto& k : queue_) out.push_back(std::get<2>(k));
    return out;
  }

  void Schedule(int64_t /*now*/, SchedulingContext& ctx) override {
    // Requests that did not fit in this pass. Chips are only taken during a pass, so a request
    // that failed cannot fit later in the same pass: skip the planner for it.
    std::vector<SliceRequest> failed;
    bool have_blocked = false;
    QueueKey blocked{};
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (ctx.inventory().usable_chips() == 0) {
        if (!have_blocked) have_blocked = true, blocked = *it;
        break;
      }
      const JobIndex j = std::get<2>(*it);
      const SimJob& job = ctx.job(j);
      const int64_t need = job.slice_chips * job.request.num_slices;
      bool fits = need <= ctx.inventory().usable_chips();
      if (fits)
        for (const auto& f : failed) fits = fits && !SameRequest(f, job.request);
      if (fits) {
        PlanResult plan = ctx.Plan(j);
        if (plan.placed()) {
          ctx.Start(j, plan);
          it = queue_.erase(it);
          ++starts_;
          continue;
        }
        failed.push_back(job.request);
      }
      if (!have_blocked) {
        have_blocked = true;
        blocked = *it;
      }
      if (kind_ == AdmissionKind::kFifo) break;
      ++it;
    }
    if (kind_ == AdmissionKind::kPriority && have_blocked) TryPreempt(blocked, ctx);
  }

 private:
  // Greedy then minimised, topology-aware: release candidates (lowest priority first, then the
  // most recently started) in a scratch copy until the blocked job fits there; then evict only
  // the candidates whose hosts that placement uses.
  void TryPreempt(const QueueKey& key, SchedulingContext& ctx) {
    const JobIndex j = std::get<2>(key);
    const SimJob& job = ctx.job(j);
    // Nothing changed since the last attempt for this job failed: it would fail again.
    if (last_failed_ && *last_failed_ == std::make_tuple(j, departures_, starts_)) return;
    std::vector<RunningJobView> candidates;
    int64_t reclaimable = 0;
    for (const RunningJobView& r : ctx.Running())
      if (r.priority < job.spec.priority) {
        candidates.push_back(r);
        reclaimable += r.chips;
      }
    const int64_t need = job.slice_chips * job.request.num_slices;
    if (candidates.empty() || reclaimable + ctx.inventory().usable_chips() < need) {
      last_failed_ = std::make_tuple(j, departures_, starts_);
      return;
    }
    std::sort(candidates.begin(), candidates.end(), [](const auto& a, const auto& b) {
      return std::make_tuple(a.priority, -a.start_s, a.job) <
             std::make_tuple(b.priority, -b.start_s, b.job);
    });
    Inventory scratch = ctx.inventory();
    PlanResult plan;
    plan.reason = NoFit::kNotEnoughChips;  // until a plan places it
    size_t released = 0;
    for (; released < candidates.size() && !plan.placed(); ++released) {
      for (OwnerId o : ctx.OwnersOf(candidates[released].job)) scratch.Release(o);
      if (scratch.usable_chips() >= need) plan = ctx.PlanOn(scratch, j);
    }
    if (!plan.placed()) {
      last_failed_ = std::make_tuple(j, departures_, starts_);
      return;
    }
    std::vector<HostId> used = plan.AllHosts();
    std::sort(used.begin(), used.end());
    std::vector<JobIndex> victims;
    for (size_t i = 0; i < released; ++i) {
      bool helps = false;
      for (OwnerId o : ctx.OwnersOf(candidates[i].job))
        for (HostId h : ctx.inventory().HostsOf(o))
          helps = helps || std::binary_search(used.begin(), used.end(), h);
      if (helps) victims.push_back(candidates[i].job);
    }
    queue_.erase(key);
    for (JobIndex v : victims) ctx.Preempt(v, j);
    ctx.Start(j, plan);
    ++starts_;
  }

  AdmissionKind kind_;
  std::set<QueueKey> queue_;
  int64_t departures_ = 0;
  int64_t starts_ = 0;
  std::optional<std::tuple<JobIndex, int64_t, int64_t>> last_failed_;
};

}  // namespace

Result<AdmissionKind> ParseAdmission(std::string_view name) {
  if (name == "fifo") return AdmissionKind::kFifo;
  if (name == "backfill") return AdmissionKind::kBackfill;
  if (name == "priority") return AdmissionKind::kPriority;
  if (name == "kueue") return AdmissionKind::kKueue;
  if (name == "kueue-strict") return AdmissionKind::kKueueStrict;
  if (name == "easy") return AdmissionKind::kEasy;
  return InvalidArgument("admission: '" + std::string(name) +
                         "' is not one of fifo, backfill, priority, kueue, kueue-strict, easy");
}

const char* AdmissionName(AdmissionKind kind) {
  switch (kind) {
    case AdmissionKind::kFifo:
      return "fifo";
    case AdmissionKind::kBackfill:
      return "backfill";
    case AdmissionKind::kPriority:
      return "priority";
    case AdmissionKind::kKueue:
      return "kueue";
    case AdmissionKind::kKueueStrict:
      return "kueue-strict";
    case AdmissionKind::kEasy:
      return "easy";
  }
  return "unknown";
}

std::unique_ptr<SimScheduler> MakeScheduler(AdmissionKind kind, const PlannerOptions& placement) {
  if (kind == AdmissionKind::kEasy) {
    EasyOptions o;
    o.placement = placement;
    return MakeEasyScheduler(o);
  }
  if (kind == AdmissionKind::kKueue || kind == AdmissionKind::kKueueStrict)
    return MakeAdmissionScheduler(kind, placement);
  return std::make_unique<QueueScheduler>(kind);
}

}  // namespace tessera::sim
