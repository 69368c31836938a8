#include "sim/easy_scheduler.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "admission/model.h"

namespace tessera::sim {
namespace {

bool SameRequest(const SliceRequest& a, const SliceRequest& b) {
  return a.shape == b.shape && a.num_slices == b.num_slices;
}

bool Failed(const std::vector<SliceRequest>& failed, const SliceRequest& r) {
  for (const auto& f : failed)
    if (SameRequest(f, r)) return true;
  return false;
}

std::string Hours(int64_t s) {
  return std::to_string(s / 3600) + "h" + std::to_string((s % 3600) / 60) + "m";
}

class EasyScheduler : public SimScheduler {
 public:
  explicit EasyScheduler(const EasyOptions& o) : o_(o), help_(o.help) {}

  std::string Name() const override { return "easy"; }
  void OnArrival(JobIndex j, const SimJob& job) override { queue_.insert({job.spec.submit_s, j}); }
  void OnDeparture(JobIndex) override {}
  size_t QueueLength() const override { return queue_.size(); }
  std::vector<JobIndex> Queued() const override {
    std::vector<JobIndex> out;
    for (const auto& [submit, j] : queue_) out.push_back(j);
    return out;
  }
  std::string PendingReason(JobIndex j) const override {
    auto it = reason_.find(j);
    return it == reason_.end() ? std::string() : it->second;
  }
  int64_t moves() const override { return moves_; }
  double moved_chip_hours() const override { return static_cast<double>(moved_chip_s_) / 3600; }

  void Schedule(int64_t now, SchedulingContext& ctx) override {
    if (first_s_ < 0) first_s_ = now;
    help_after_s_ = std::max(o_.reserve_after_s, help_.Seconds());
    std::vector<SliceRequest> failed_live, failed_blocked;
    std::optional<Reservation> res;
    std::optional<Inventory> blocked;     // the live inventory with the reservation held
    std::optional<JobIndex> defrag_head;  // defrag_after_backfill: the head to make room for
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (ctx.inventory().usable_chips() == 0) break;
      const JobIndex j = it->second;
      const SimJob& job = ctx.job(j);
      const int64_t need = job.slice_chips * job.request.num_slices;
      if (need > ctx.inventory().usable_chips()) {
        if (!res && MayReserve(now, job, need)) res = MakeReservation(now, j, need, ctx);
        ++it;
        continue;
      }
      const bool anywhere = !res || EndsBefore(*res, now, Estimate(job), o_.backfill);
      PlanResult plan;
      plan.reason = NoFit::kNotEnoughChips;  // until a plan places it (a skipped request)
      if (anywhere) {
        if (!Failed(failed_live, job.request)) plan = ctx.Plan(j);
      } else if (!Failed(failed_blocked, job.request)) {
        if (!blocked) {
          Result<Inventory> b = Blocked(ctx.inventory(), *res);
          if (!b.ok()) {
            status_ = b.status();
            return;
          }
          blocked = std::move(*b);
        }
        plan = ctx.PlanOn(*blocked, j);
      }
      if (plan.placed()) {
        ctx.Start(j, plan);
        help_.AddStart(need, o_.reserve_min_chips, now - job.spec.submit_s);
        reason_.erase(j);
        it = queue_.erase(it);
        blocked.reset();
        continue;
      }
      (anywhere ? failed_live : failed_blocked).push_back(job.request);
      if (!res && !defrag_head && need >= o_.reserve_min_chips) {
        // The head of the line does not fit: move jobs to make room, or reserve.
        if (o_.defrag && o_.defrag_after_backfill && NeedsWholeCubes(job.request)) {
          // After the rest of the line has started what fits, and (as the reservation) only
          // once it has waited reserve_after_s.
          if (now - job.spec.submit_s >= help_after_s_) defrag_head = j;
          if (MayReserve(now, job, need)) res = MakeReservation(now, j, need, ctx);
          ++it;
          continue;
        }
        if (o_.defrag && TryDefrag(now, j, ctx)) {
          it = queue_.erase(queue_.find({job.spec.submit_s, j}));
          failed_live.clear();
          continue;
        }
        if (MayReserve(now, job, need)) res = MakeReservation(now, j, need, ctx);
      }
      ++it;
    }
    if (defrag_head && status_.ok() && TryDefrag(now, *defrag_head, ctx))
      queue_.erase({ctx.job(*defrag_head).spec.submit_s, *defrag_head});
  }

  Status status() const override { return status_; }

 private:
  bool MayReserve(int64_t now, const SimJob& job, int64_t need) const {
    return need >= o_.reserve_min_chips && now - job.spec.submit_s >= help_after_s_;
  }
  int64_t Estimate(const SimJob& job) const {
    return o_.true_durations ? job.spec.duration_s : job.spec.expected_s;
  }

  Reservation MakeReservation(int64_t now, JobIndex j, int64_t need, SchedulingContext& ctx) {
    std::vector<BackfillRunning> running;
    for (const RunningJobView& r : ctx.Running())
      running.push_back({ctx.OwnersOf(r.job), r.start_s, Estimate(ctx.job(r.job))});
    Reservation res = Reserve(
        ctx.inventory(), [&](const Inventory& inv) { return ctx.PlanOn(inv, j); }, need, running,
        now, o_.backfill);
    if (res.made)
      reason_[j] = "head of the line: reserved " + std::to_string(res.hosts.size()) + " hosts in " +
                   std::to_string(res.cubes.size()) + " cube(s), expected to start in " +
                   Hours(res.start_s - now) + (defrag_note_.empty() ? "" : "; " + defrag_note_);
    else
      reason_[j] = "head of the line: does not fit even when every running job has ended";
    return res;
  }

  // Moves sub-cube jobs so that the blocked head `j` fits; true when it started.
  bool TryDefrag(int64_t now, JobIndex j, SchedulingContext& ctx) {
    defrag_note_.clear();
    const SimJob& job = ctx.job(j);
    if (!NeedsWholeCubes(job.request)) return false;
    const int64_t need = job.slice_chips * job.request.num_slices;
    if (ctx.inventory().usable_chips() < need) return false;
    const double capacity_s = static_cast<double>(ctx.inventory().total_chips()) *
                              static_cast<double>(std::max<int64_t>(1, now - first_s_));
    const int64_t budget =
        static_cast<int64_t>(o_.defrag_options.max_share * capacity_s) - moved_chip_s_;
    if (budget <= 0) {
      defrag_note_ = "waits: the defragmentation budget is spent";
      return false;
    }
    // Re-own every running job's slices under its workload id (as the kueue adapter does).
    Inventory inv = ctx.inventory();
    const std::vector<RunningJobView> running = ctx.Running();
    std::vector<std::vector<HostId>> hosts(running.size());
    for (size_t i = 0; i < running.size(); ++i)
      for (OwnerId o : ctx.OwnersOf(running[i].job)) {
        for (HostId h : ctx.inventory().HostsOf(o)) hosts[i].push_back(h);
        inv.Release(o);
      }
    std::vector<MoveCandidate> candidates;
    for (size_t i = 0; i < running.size(); ++i) {
      const RunningJobView& r = running[i];
      bool down = false;
      for (HostId h : hosts[i]) down = down || inv.host(h).health != Health::kHealthy;
      if (down) {  // a job on a failed host is not moved (and not re-owned: its hosts stay held)
        Status st = Status::Ok();
        for (HostId h : hosts[i])
          if (inv.host(h).health == Health::kHealthy && st.ok())
            st = inv.Reserve(OwnerOf(WorkloadId(r.job)), {h});
        if (!st.ok()) {
          status_ = Internal("easy: re-owning a job on a failed host: " + st.message());
          return false;
        }
        continue;
      }
      if (Status st = inv.Reserve(OwnerOf(WorkloadId(r.job)), hosts[i]); !st.ok()) {
        status_ = Internal("easy: re-owning job " + ctx.job(r.job).spec.name + ": " + st.message());
        return false;
      }
      auto moved = last_moved_.find(r.job);
      candidates.push_back({WorkloadId(r.job), r.priority, ctx.job(r.job).request,
                            r.chips * (now - r.last_checkpoint_s),
                            moved == last_moved_.end() ? -1 : moved->second});
    }
    if (!planner_) planner_ = std::make_unique<SlicePlanner>(o_.placement);
    const SlicePlanner& planner = *planner_;
    DefragPlan plan =
        PlanDefrag(inv, planner, job.request, candidates, now, budget, o_.defrag_options);
    if (!plan.found) {
      defrag_note_ = "defragmentation: " + plan.message;
      return false;
    }
    for (const Move& m : plan.moves) {
      const JobIndex v = static_cast<JobIndex>(m.workload.value());
      ctx.Preempt(v, j);
    }
    ctx.Start(j, plan.plan);
    reason_.erase(j);
    for (const Move& m : plan.moves) {
      const JobIndex v = static_cast<JobIndex>(m.workload.value());
      queue_.erase({ctx.job(v).spec.submit_s, v});
      ctx.Start(v, m.plan);
      last_moved_[v] = now;
      ++moves_;
    }
    moved_chip_s_ += plan.lost_work_chip_s;
    return true;
  }

  EasyOptions o_;
  HelpThreshold help_;
  int64_t help_after_s_ = 0;  // this pass's: max(reserve_after_s, help_.Seconds())
  std::set<std::pair<int64_t, JobIndex>> queue_;
  std::map<JobIndex, std::string> reason_;
  std::map<JobIndex, int64_t> last_moved_;
  std::string defrag_note_;
  std::unique_ptr<SlicePlanner> planner_;  // the policy under test, for the victim search
  int64_t first_s_ = -1;
  int64_t moves_ = 0;
  int64_t moved_chip_s_ = 0;
  Status status_ = Status::Ok();
};

}  // namespace

std::unique_ptr<SimScheduler> MakeEasyScheduler(const EasyOptions& options) {
  return std::make_unique<EasyScheduler>(options);
}

}  // namespace tessera::sim
