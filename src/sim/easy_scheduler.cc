#include "sim/easy_scheduler.h"

#include <algorithm>
#include <map>
#include <set>

#include "admission/easy_pass.h"
#include "admission/model.h"

namespace tessera::sim {
namespace {

class EasyScheduler : public SimScheduler {
 public:
  explicit EasyScheduler(const EasyOptions& o) : o_(o), help_(o.help) {}

  std::string Name() const override { return "easy"; }
  void OnArrival(JobIndex j, const SimJob& job) override { Enqueue({job.spec.submit_s, j}); }
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

  // One pass of the head's EASY backfill (admission/easy_pass.h) over the queue, in submission
  // order, then its starts and moves applied to the simulation.
  void Schedule(int64_t now, SchedulingContext& ctx) override {
    if (first_s_ < 0) first_s_ = now;
    if (queue_.empty() || ctx.inventory().usable_chips() == 0) return;
    if (!planner_) planner_ = std::make_unique<SlicePlanner>(o_.placement);
    // A large job is helped once it has waited the help threshold (at least reserve_after_s),
    // taken at the start of the pass.
    const int64_t help_after_s = std::max(o_.reserve_after_s, help_.Seconds());
    line_.clear();
    for (const auto& [submit_s, j] : queue_) {
      const SimJob& job = ctx.job(j);
      line_.push_back({WorkloadId(j),
                       job.request,
                       Estimate(job),
                       {},
                       now - submit_s >= help_after_s,
                       job.spec.priority});
    }
    if (total_chips_ == 0) total_chips_ = ctx.inventory().total_chips();  // every host, up or down
    const double capacity_s = static_cast<double>(total_chips_) *
                              static_cast<double>(std::max<int64_t>(1, now - first_s_));
    const int64_t budget =
        static_cast<int64_t>(o_.defrag_options.max_share * capacity_s) - moved_chip_s_;
    EasyPassOptions p;
    p.backfill = o_.backfill;
    p.reserve_min_chips = o_.reserve_min_chips;
    p.defrag = o_.defrag;
    p.defrag_after_backfill = o_.defrag_after_backfill;
    p.defrag_options = o_.defrag_options;
    p.explain = false;
    const EasyPassResult pass = RunEasyPass(
        ctx.inventory(), *planner_, line_,
        [&]() -> const std::vector<EasyRunning>& { return Running(ctx); }, now, budget, p);

    for (const auto& [id, plan] : pass.starts) {
      const JobIndex j = Index(id);
      const SimJob& job = ctx.job(j);
      ctx.Start(j, plan);
      help_.AddStart(job.slice_chips * job.request.num_slices, o_.reserve_min_chips,
                     now - job.spec.submit_s);
      reason_.erase(j);
      Dequeue({job.spec.submit_s, j});
    }
    for (const EasyWait& w : pass.waiting) reason_[Index(w.id)] = w.message;
    if (!pass.defrag) return;
    // Stop the moved jobs (each loses its work since its last checkpoint), start the head where
    // they were, and each moved job on its hint at once (the simulation has no grace period).
    const JobIndex head = Index(pass.defrag_for);
    for (const Move& m : pass.defrag->moves) ctx.Preempt(Index(m.workload), head);
    ctx.Start(head, pass.defrag->plan);
    reason_.erase(head);
    Dequeue({ctx.job(head).spec.submit_s, head});
    for (const Move& m : pass.defrag->moves) {
      const JobIndex v = Index(m.workload);
      Dequeue({ctx.job(v).spec.submit_s, v});
      ctx.Start(v, m.plan);
      last_moved_[v] = now;
      ++moves_;
    }
    moved_chip_s_ += pass.defrag->lost_work_chip_s;
  }

 private:
  using QueueKey = std::pair<int64_t, JobIndex>;  // (submitted, job): the line's order
  // The queue is a sorted vector: every pass reads all of it, and a long replay's passes far
  // outnumber its arrivals and starts.
  void Enqueue(QueueKey k) {
    auto it = std::lower_bound(queue_.begin(), queue_.end(), k);
    if (it == queue_.end() || *it != k) queue_.insert(it, k);
  }
  void Dequeue(QueueKey k) {
    auto it = std::lower_bound(queue_.begin(), queue_.end(), k);
    if (it != queue_.end() && *it == k) queue_.erase(it);
  }

  // The running jobs as the pass sees them, in running_ (which keeps its buffers from pass to
  // pass). A job on a failed host is not moved.
  const std::vector<EasyRunning>& Running(const SchedulingContext& ctx) {
    std::set<OwnerId> on_failed_hosts;
    for (const Host& h : ctx.inventory().hosts())
      if (!h.free() && h.health != Health::kHealthy) on_failed_hosts.insert(h.owner);
    const std::vector<RunningJobView> views = ctx.Running();
    running_.resize(views.size());
    for (size_t i = 0; i < views.size(); ++i) {
      const RunningJobView& r = views[i];
      const SimJob& job = ctx.job(r.job);
      auto moved = last_moved_.find(r.job);
      EasyRunning& e = running_[i];
      e.id = WorkloadId(r.job);
      e.priority = r.priority;
      e.request = job.request;
      e.start_s = r.start_s;
      e.expected_s = Estimate(job);
      e.last_checkpoint_s = r.last_checkpoint_s;
      e.last_moved_s = moved == last_moved_.end() ? -1 : moved->second;
      e.owners = ctx.OwnersOf(r.job);
      e.movable = true;
      for (OwnerId o : e.owners) e.movable = e.movable && !on_failed_hosts.count(o);
    }
    return running_;
  }
  static JobIndex Index(WorkloadId id) { return static_cast<JobIndex>(id.value()); }
  int64_t Estimate(const SimJob& job) const {
    return o_.true_durations ? job.spec.duration_s : job.spec.expected_s;
  }

  EasyOptions o_;
  HelpThreshold help_;
  std::vector<QueueKey> queue_;
  std::map<JobIndex, std::string> reason_;
  std::map<JobIndex, int64_t> last_moved_;
  std::unique_ptr<SlicePlanner> planner_;  // the policy under test
  std::vector<EasyWaiting> line_;          // this pass's
  std::vector<EasyRunning> running_;       // this pass's
  int64_t first_s_ = -1;
  int64_t total_chips_ = 0;
  int64_t moves_ = 0;
  int64_t moved_chip_s_ = 0;
};

}  // namespace

std::unique_ptr<SimScheduler> MakeEasyScheduler(const EasyOptions& options) {
  return std::make_unique<EasyScheduler>(options);
}

}  // namespace tessera::sim
