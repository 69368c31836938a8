#include "sim/admission_scheduler.h"

#include <algorithm>
#include <set>
#include <tuple>
#include <utility>

namespace tessera::sim {
namespace {

WorkloadId IdOf(JobIndex j) { return WorkloadId(j); }
JobIndex JobOf(WorkloadId id) { return static_cast<JobIndex>(id.value()); }

class AdmissionScheduler final : public SimScheduler {
 public:
  AdmissionScheduler(AdmissionKind kind, const PlannerOptions& placement, KueueConfig config)
      : kind_(kind),
        config_(std::move(config)),
        admitter_(Options(placement, Explain::kFitsNextCycleOnly)),
        explainer_(Options(placement, config_.admission.explain)) {}

  std::string Name() const override { return AdmissionName(kind_); }

  void OnArrival(JobIndex j, const SimJob&) override {
    pending_.insert(j);
    ++changes_;
  }

  void OnDeparture(JobIndex) override { ++changes_; }

  size_t QueueLength() const override { return pending_.size(); }

  std::vector<JobIndex> Queued() const override {
    return std::vector<JobIndex>(pending_.begin(), pending_.end());
  }

  Status status() const override { return error_; }

  std::string PendingReason(JobIndex j) const override {
    if (!explained_) ExplainLastCycle();
    if (!explain_error_.empty()) return explain_error_;
    for (const PendingStatus& st : last_pending_)
      if (st.workload == IdOf(j))
        return std::string(PendingReasonName(st.reason)) + ": " + st.message.str();
    return {};
  }

  void Schedule(int64_t now, SchedulingContext& ctx) override {
    if (!error_.ok()) return;
    if (!configured_) Configure(ctx.inventory());
    if (!error_.ok() || pending_.empty()) return;
    const auto fingerprint =
        std::make_tuple(changes_, ctx.inventory().usable_chips(), ctx.inventory().owned_chips());
    if (idle_ && fingerprint == idle_at_) return;
    // Another cycle at the same instant only when the last one decided something and left
    // room it could not use in that cycle; bounded, since every extra cycle must admit.
    constexpr int kMaxCyclesPerPass = 8;
    for (int cycle = 0; cycle < kMaxCyclesPerPass; ++cycle) {
      if (!RunCycle(now, ctx)) break;
    }
    idle_at_ =
        std::make_tuple(changes_, ctx.inventory().usable_chips(), ctx.inventory().owned_chips());
  }

 private:
  AdmissionOptions Options(const PlannerOptions& placement, Explain explain) const {
    AdmissionOptions o = config_.admission;
    o.planner = placement;
    o.explain = explain;
    return o;
  }

  // The reasons of the last cycle: the same snapshot at the same instant again, with reasons
  // (a cycle's decisions do not depend on how much it explains).
  void ExplainLastCycle() const {
    explained_ = true;
    auto cycle = explainer_.Run(snapshot_, last_now_ms_);
    if (!cycle.ok()) {  // it ran on this snapshot before, so this is a broken invariant
      last_pending_.clear();
      explain_error_ = "explaining the last cycle failed: " + cycle.status().message();
      return;
    }
    last_pending_ = std::move(cycle->pending);
  }

  void Configure(const Inventory& inv) {
    configured_ = true;
    if (config_.cluster_queues.empty()) {
      KueueConfig d = DefaultKueueConfig(kind_, inv.generation(), inv.total_chips());
      config_.cluster_queues = std::move(d.cluster_queues);
      config_.local_queues = std::move(d.local_queues);
    }
    for (const ClusterQueueSpec& q : config_.cluster_queues) {
      Status st = Validate(q);
      if (!st.ok()) {
        error_ = InvalidArgument("kueue: cluster queue " + q.name + ": " + st.message());
        return;
      }
    }
    for (const LocalQueueSpec& l : config_.local_queues) {
      Status st = Validate(l);
      if (!st.ok()) {
        error_ = InvalidArgument("kueue: local queue " + l.name + ": " + st.message());
        return;
      }
    }
    if (config_.local_queues.empty())
      error_ = InvalidArgument("kueue: no local queue to submit jobs to");
  }

  const std::string& LocalQueueOf(JobIndex j, const SimJob& job) {
    if (local_queue_.size() <= j) local_queue_.resize(j + 1);
    std::string& name = local_queue_[j];
    if (name.empty())
      name = config_.local_queue_of ? config_.local_queue_of(j, job)
                                    : config_.local_queues.front().name;
    return name;
  }

  // The snapshot's next workload, for job j: a slot of the last cycle's list reused, so that its
  // strings keep their capacity (a pass lists every waiting job; under ASan an allocation per
  // name and queue of each made the simulator's kueue runs several times slower).
  tessera::Workload& AddWorkload(JobIndex j, const SimJob& job) {
    std::vector<tessera::Workload>& list = snapshot_.workloads;
    if (listed_ == list.size()) list.emplace_back();
    tessera::Workload& w = list[listed_++];
    std::string name = std::move(w.name), queue = std::move(w.local_queue);
    w = tessera::Workload();
    w.name = std::move(name);
    w.local_queue = std::move(queue);
    w.id = IdOf(j);
    if (job.spec.name.empty()) {
      w.name = "job-" + std::to_string(j);
    } else {
      w.name.assign(job.spec.name);
    }
    w.local_queue.assign(LocalQueueOf(j, job));
    w.priority = job.spec.priority;
    w.request = job.request;
    w.creation_order = j;  // jobs are indexed in submission order
    return w;
  }

  // Builds the snapshot, runs one cycle and applies it. True when another cycle at the same
  // instant could admit more.
  bool RunCycle(int64_t now, SchedulingContext& ctx) {
    Snapshot& snap = snapshot_;
    snap.inventory = ctx.inventory();
    snap.cluster_queues = config_.cluster_queues;
    snap.local_queues = config_.local_queues;
    listed_ = 0;
    const std::vector<RunningJobView> running = ctx.Running();
    // Re-own every running job's slices under its workload id: release all first, since a
    // simulator owner id may equal another job's workload owner id.
    std::vector<std::vector<HostId>>& hosts = hosts_;
    if (hosts.size() < running.size()) hosts.resize(running.size());
    for (size_t i = 0; i < running.size(); ++i) hosts[i].clear();
    for (size_t i = 0; i < running.size(); ++i)
      for (OwnerId o : ctx.OwnersOf(running[i].job)) {
        for (HostId h : ctx.inventory().HostsOf(o)) hosts[i].push_back(h);
        snap.inventory.Release(o);
      }
    for (size_t i = 0; i < running.size(); ++i) {
      const RunningJobView& r = running[i];
      const SimJob& job = ctx.job(r.job);
      // A job keeps a failed host until the failure is noticed (SimOptions::failures): Reserve
      // takes only healthy hosts, so such a host is re-owned while marked healthy.
      std::vector<HostId> down;
      for (HostId h : hosts[i])
        if (snap.inventory.host(h).health == Health::kDown) down.push_back(h);
      Status st;
      for (HostId h : down)
        if (st.ok()) st = snap.inventory.SetHealth(h, Health::kHealthy);
      if (st.ok()) st = snap.inventory.Reserve(OwnerOf(IdOf(r.job)), hosts[i]);
      for (HostId h : down)
        if (st.ok()) st = snap.inventory.SetHealth(h, Health::kDown);
      if (!st.ok()) {
        error_ = Internal("kueue: re-owning job " + job.spec.name + ": " + st.message());
        return false;
      }
      tessera::Workload& w = AddWorkload(r.job, job);
      w.state = WorkloadState::kRunning;
      // After a shrink the job holds fewer slices than it asked for; quota counts what it holds.
      w.request.num_slices = static_cast<int>(std::max<int64_t>(1, r.chips / job.slice_chips));
      w.admitted_at_ms = r.start_s * 1000;
      w.last_checkpoint_ms = r.last_checkpoint_s * 1000;
    }
    for (JobIndex j : pending_) AddWorkload(j, ctx.job(j));
    snap.workloads.resize(listed_);

    last_now_ms_ = now * 1000;
    auto cycle = admitter_.Run(snap, last_now_ms_);
    if (!cycle.ok()) {
      error_ = cycle.status();
      return false;
    }
    explained_ = false;
    // Victims first: each admission's placement may use their hosts.
    for (const Eviction& e : cycle->evictions) {
      // The start guard never fires here: every workload reported running is running.
      if (e.cause != EvictionCause::kPreempted) continue;
      ctx.Preempt(JobOf(e.workload), JobOf(e.preemptor));
    }
    for (const Admission& a : cycle->admissions) {
      const JobIndex j = JobOf(a.workload);
      pending_.erase(j);
      ctx.Start(j, a.placement);
    }
    const bool decided = !cycle->admissions.empty() || !cycle->evictions.empty();
    bool fits_next = false;
    for (const PendingStatus& st : cycle->pending)
      fits_next = fits_next || st.reason == PendingReason::kFitsNextCycle;
    idle_ = !decided;
    return decided && fits_next && !pending_.empty();
  }

  AdmissionKind kind_;
  KueueConfig config_;
  Admitter admitter_;   // the cycles: decisions, and who fits now
  Admitter explainer_;  // the last cycle again, with reasons, when one is asked for
  bool configured_ = false;
  Status error_;
  std::set<JobIndex> pending_;
  std::vector<std::string> local_queue_;  // per job, resolved once
  Snapshot snapshot_;  // the last cycle's; reused so its vectors keep their capacity
  size_t listed_ = 0;  // workloads listed in snapshot_ so far in this cycle
  std::vector<std::vector<HostId>> hosts_;  // by running job, this cycle's
  int64_t last_now_ms_ = 0;
  // The last cycle's reasons, computed when asked for.
  mutable bool explained_ = true;
  mutable std::vector<PendingStatus> last_pending_;
  mutable std::string explain_error_;
  // Arrivals and departures seen; with the free and owned chips, what a pass that decided
  // nothing saw.
  int64_t changes_ = 0;
  bool idle_ = false;
  std::tuple<int64_t, int64_t, int64_t> idle_at_{-1, -1, -1};
};

}  // namespace

KueueConfig DefaultKueueConfig(AdmissionKind kind, Generation generation, int64_t total_chips) {
  KueueConfig c;
  ClusterQueueSpec q;
  q.name = "default";
  q.quotas.push_back(
      ResourceQuota{generation, total_chips, std::nullopt, std::nullopt, std::nullopt});
  q.queueing_strategy = kind == AdmissionKind::kKueueStrict ? QueueingStrategy::kStrictFIFO
                                                            : QueueingStrategy::kBestEffortFIFO;
  q.preemption.within_cluster_queue = WithinClusterQueue::kLowerPriority;
  c.cluster_queues.push_back(std::move(q));
  c.local_queues.push_back(LocalQueueSpec{"default", "default"});
  return c;
}

std::unique_ptr<SimScheduler> MakeAdmissionScheduler(AdmissionKind kind,
                                                     const PlannerOptions& placement,
                                                     KueueConfig config) {
  return std::make_unique<AdmissionScheduler>(kind, placement, std::move(config));
}

}  // namespace tessera::sim
