// Controller: the scheduling pass with EASY backfill and defragmentation (`tessera head
// --backfill easy [--defrag]`), used instead of first come, first served while no ClusterQueue
// exists (with ClusterQueues the admission cycle runs as before). The decisions are
// admission/easy_pass.h's; this file applies them:
// - a job that the pass starts is placed (Admit);
// - defragmentation: each moved job is stopped with SIGTERM and the preemption grace period
//   (TrainLifecycle::Evict, so it checkpoints) and requeued with its placement hint held; the
//   head of the line waits (WaitingForDefragmentation) with its room held; each starts on its
//   held placement at the first pass after those hosts are free;
// - every waiting job says why (explain): WaitingForReservation, BehindReservation,
//   WaitingForDefragmentation, MovedByDefragmentation, or the planner's reason.
// - the help threshold (`--help-factor`, ControllerOptions::help_threshold): the small jobs'
//   waits at their starts feed EasyHeadState::help, and a large job is helped (reserves, has
//   jobs moved for it) only once it has waited past it (EasyWaiting::may_help), as the simulator.
// A held placement is dropped (the job waits in line again) when a host of it is held by a job
// that is not stopping, or is no longer usable.
//
// Budget of moved work: the work lost by the moves (chips x time since each moved job's last
// checkpoint) stays under DefragOptions::max_share (1%) of the capacity's chip-time since the
// head's first pass, counted over at least one day (so a head just started may move some).
// docs/admission.md "EASY backfill and defragmentation in the head".
#include <algorithm>
#include <set>

#include "admission/easy_pass.h"
#include "controller/controller.h"

namespace tessera::controller {
namespace {

constexpr int64_t kDayMs = 86'400'000;

bool Waiting(const TrainJob& job) {
  return job.status.phase == JobPhase::kPending && !job.status.deleting && !job.status.stopping;
}

// What the pass asks for a job: an elastic job its minimum.
SliceRequest Request(const TrainJob& job) {
  return {job.spec.accelerator, job.spec.topology, job.SizeRange().first};
}
int64_t Chips(const SliceRequest& r) { return r.shape.chips() * r.num_slices; }
// The help threshold's wait (help_threshold.h): since the job was created, as the simulator's
// since its submission.
int64_t WaitS(const TrainJob& job, int64_t now_ms) { return (now_ms - job.created_ms) / 1000; }

std::string Hours(int64_t s) {
  return std::to_string(s / 3600) + "h" + std::to_string((s % 3600) / 60) + "m";
}

// The stored jobs' first starts, oldest first, for a threshold that starts after a head restart
// (easy_state.h): every small job that was ever placed, outside SliceReservations.
void SeedHelp(HelpThreshold& help, const std::map<std::string, TrainJob>& jobs,
              int64_t reserve_min_chips) {
  std::vector<std::pair<int64_t, int64_t>> starts;  // (placed ms, wait s)
  for (const auto& [name, job] : jobs) {
    if (job.status.attempts.empty() || !job.spec.reservation.empty()) continue;
    if (!HelpThreshold::IsSmall(Chips(Request(job)), reserve_min_chips)) continue;
    const int64_t placed_ms = job.status.attempts.front().placed_ms;
    starts.push_back({placed_ms, WaitS(job, placed_ms)});
  }
  std::sort(starts.begin(), starts.end());
  for (const auto& [placed_ms, wait_s] : starts) help.AddSmallStart(wait_s);
}

}  // namespace

Status Controller::ScheduleEasy() {
  const int64_t now = NowMs();
  const int64_t now_s = now / 1000;
  EasyHeadState& st = easy_;
  if (st.first_pass_ms < 0) st.first_pass_ms = now;

  // Held placements: start the ones whose hosts are free; drop the ones that cannot come free.
  Inventory inv = inventory_;
  for (auto it = st.holds.begin(); it != st.holds.end();) {
    TrainJob* job = nullptr;
    for (auto& [name, j] : jobs_)
      if (j.uid == it->first) job = &j;
    // A moved job keeps its hint while its workers stop (it is Pending and stopping then).
    const bool requeuing =
        job != nullptr && job->status.phase == JobPhase::kPending && job->status.stopping;
    if (job == nullptr || (!Waiting(*job) && !requeuing)) {
      it = st.holds.erase(it);
      continue;
    }
    bool usable = true;
    for (HostId h : it->second.plan.AllHosts())
      usable = usable && inventory_.host(h).health == Health::kHealthy;
    const std::set<std::string> holders = HoldersOf(it->second.plan);
    bool will_free = usable;
    for (const std::string& n : holders) {
      auto holder = jobs_.find(n);
      will_free = will_free && holder != jobs_.end() && holder->second.status.stopping;
    }
    if (!will_free) {
      it = st.holds.erase(it);
      continue;
    }
    if (holders.empty() && !requeuing) {
      auto placed = Admit(*job, it->second.plan);
      if (!placed.ok()) return placed.status();
      if (*placed) {
        TESSERA_RETURN_IF_ERROR(RecordEvent(
            "trainjob/" + job->name(), false, "Defragmented",
            it->second.moved ? "restarted on the placement defragmentation chose (toward cubes "
                               "already in use); it resumes from its last checkpoint"
                             : "started on the room defragmentation made"));
        inv = inventory_;
        it = st.holds.erase(it);
        continue;
      }
    }
    ++it;
  }
  // The pass's inventory: the held placements are taken.
  const OwnerId hold_owner(OwnerId::kInvalid / 2 + 4);
  for (const auto& [uid, hold] : st.holds) {
    std::vector<HostId> free;
    for (HostId h : hold.plan.AllHosts())
      if (inv.host(h).free()) free.push_back(h);
    if (!free.empty()) TESSERA_RETURN_IF_ERROR(inv.Reserve(hold_owner, free));
  }

  std::vector<PriorityClass> classes;
  for (const auto& [n, o] : priority_classes_) classes.push_back(std::get<PriorityClass>(o.spec));
  auto priority_of = [&](const TrainJob& job) {
    if (job.spec.priority.empty()) return int32_t{0};
    auto priority = ResolvePriority(classes, job.spec.priority);
    return priority.ok() ? static_cast<int32_t>(*priority) : int32_t{0};
  };
  std::vector<TrainJob*> pending;
  std::vector<EasyRunning> running;
  std::map<uint64_t, TrainJob*> by_uid;
  for (auto& [name, job] : jobs_) {
    by_uid[job.uid] = &job;
    // A job inside a SliceReservation is placed on its reservation's hosts (reservations.cc),
    // never by this pass, and is never moved by defragmentation: the reservation holds them.
    if (!job.spec.reservation.empty()) continue;
    if (job.spec.gpu) continue;  // GPU jobs wait in their own line (gpu_jobs.cc)
    if (Waiting(job)) {
      if (!st.holds.count(job.uid) && !jobs_missing_secrets_.count(job.name()))
        pending.push_back(&job);
      continue;
    }
    if (!job.HoldsChips()) continue;
    const TrainJobStatus& js = job.status;
    EasyRunning r;
    r.id = WorkloadId(job.uid);
    r.priority = priority_of(job);
    r.request = {job.spec.accelerator, job.spec.topology, std::max(1, job.slices())};
    if (js.stopping) {  // its chips free soon: it ends now, and it does not move
      r.start_s = now_s;
      r.expected_s = 1;
      r.movable = false;
    } else {
      r.start_s = js.start_ms / 1000;
      r.expected_s = job.spec.expected_duration_ms / 1000;
      r.last_checkpoint_s = js.last_checkpoint_ms > 0 ? js.last_checkpoint_ms / 1000 : -1;
      auto moved = st.last_moved_ms.find(job.uid);
      int64_t last_moved_ms = moved == st.last_moved_ms.end() ? -1 : moved->second;
      // The in-memory record is lost with a head restart; the stored attempts are not: an
      // attempt that ended Preempted counts as a move, so no job moves twice within the hour
      // across a restart either.
      for (const AttemptRecord& a : js.attempts)
        if (a.end_reason == "Preempted" && a.ended_ms > 0)
          last_moved_ms = std::max(last_moved_ms, a.ended_ms);
      r.last_moved_s = last_moved_ms < 0 ? -1 : last_moved_ms / 1000;
      r.movable = js.phase == JobPhase::kRunning;
      for (HostId h : inventory_.HostsOf(OwnerId(job.uid)))
        r.movable = r.movable && inventory_.host(h).health == Health::kHealthy;
    }
    running.push_back(std::move(r));
  }
  std::sort(pending.begin(), pending.end(),
            [](TrainJob* a, TrainJob* b) { return a->uid < b->uid; });
  EasyPassOptions o;
  o.defrag = options_.defrag;
  // The help threshold, taken once at the start of the pass as the simulator does: a large job
  // that has not waited that long yet gets no reservation and no moves (EasyWaiting::may_help).
  if (!st.help) {
    st.help.emplace(options_.help_threshold);
    SeedHelp(*st.help, jobs_, o.reserve_min_chips);
  }
  // A threshold of 0 (off, or no small wait yet) helps every job, even one created by a head
  // whose clock was ahead (a negative wait).
  const int64_t help_after_s = st.help->Seconds();
  std::vector<EasyWaiting> line;
  std::set<WorkloadId> not_helped;  // large jobs below the threshold: their reason says so
  for (TrainJob* job : pending) {
    const bool may_help = help_after_s <= 0 || WaitS(*job, now) >= help_after_s;
    line.push_back({WorkloadId(job->uid), Request(*job), job->spec.expected_duration_ms / 1000,
                    job->name(), may_help, priority_of(*job)});
    if (!may_help && !HelpThreshold::IsSmall(Chips(Request(*job)), o.reserve_min_chips))
      not_helped.insert(WorkloadId(job->uid));
  }

  const double capacity_chip_ms = static_cast<double>(inventory_.total_chips()) *
                                  static_cast<double>(std::max(now - st.first_pass_ms, kDayMs));
  const int64_t budget_chip_s =
      static_cast<int64_t>(o.defrag_options.max_share * capacity_chip_ms / 1000) -
      st.lost_chip_ms / 1000;
  const EasyPassResult pass = RunEasyPass(inv, planner_, line, running, now_s, budget_chip_s, o);

  for (const auto& [id, plan] : pass.starts) {
    TrainJob* job = by_uid.at(id.value());
    auto placed = Admit(*job, plan);
    if (!placed.ok()) return placed.status();
    if (*placed) st.help->AddStart(Chips(Request(*job)), o.reserve_min_chips, WaitS(*job, now));
  }
  if (pass.defrag) {
    TrainJob* head = by_uid.at(pass.defrag_for.value());
    std::string moved_names;
    for (const Move& m : pass.defrag->moves)
      moved_names += (moved_names.empty() ? "" : ", ") + by_uid.at(m.workload.value())->name();
    const View view(*this);
    for (const Move& m : pass.defrag->moves) {
      TrainJob* job = by_uid.at(m.workload.value());
      Eviction e;
      e.workload = m.workload;
      e.cause = EvictionCause::kPreempted;
      e.preemptor = pass.defrag_for;
      e.grace_ms = options_.preemption_grace_ms;
      e.start_guard = job->status.start_guard;
      e.message = "moved by defragmentation to make room for trainjob " + head->name() +
                  " (needs whole cubes); it restarts from its last checkpoint on a placement "
                  "toward cubes already in use";
      st.holds[job->uid] = {m.plan, head->name(), true};
      st.last_moved_ms[job->uid] = now;
      TESSERA_RETURN_IF_ERROR(
          RunStep(job->name(), [&](TrainJob& j) { return train_.Evict(j, e, view, now); }));
    }
    st.lost_chip_ms += pass.defrag->lost_work_chip_s * 1000;
    st.holds[head->uid] = {pass.defrag->plan, head->name(), false};
    TESSERA_RETURN_IF_ERROR(
        RecordEvent("trainjob/" + head->name(), false, "WaitingForDefragmentation",
                    "moving " + moved_names + " (checkpoint and restart elsewhere, " +
                        std::to_string(pass.defrag->lost_work_chip_s / 3600) +
                        " chip-h of work since their checkpoints) to free whole cubes"));
  }
  // Every held job says what it waits for.
  for (const auto& [uid, hold] : st.holds) {
    TrainJob* job = by_uid.count(uid) ? by_uid.at(uid) : nullptr;
    if (job == nullptr || !Waiting(*job)) continue;
    std::string names;
    for (const std::string& n : HoldersOf(hold.plan)) names += (names.empty() ? "" : ", ") + n;
    const std::string message =
        hold.moved
            ? "moved by defragmentation for trainjob " + hold.made_for +
                  "; restarts from its checkpoint once " +
                  (names.empty() ? std::string("its new hosts are free") : names) + " have stopped"
            : "defragmentation is making room: starts once " +
                  (names.empty() ? std::string("the moved jobs") : names) + " have stopped";
    const std::string reason = hold.moved ? "MovedByDefragmentation" : "WaitingForDefragmentation";
    TESSERA_RETURN_IF_ERROR(RunStep(
        job->name(), [&](TrainJob& j) { return train_.SetPending(j, reason, message, 0, {}); },
        StatusWrite::kBatched));
  }
  int position = 0;
  for (const EasyWait& w : pass.waiting) {
    ++position;
    TrainJob* job = by_uid.at(w.id.value());
    if (!Waiting(*job)) continue;
    std::string message = WithPartialSlices(*job, w.message);
    // A large job not helped yet (the pass's message says so): with the threshold's figures.
    if (not_helped.count(w.id))
      message += " (" + Hours(help_after_s) + ", from the last " +
                 std::to_string(st.help->recent()) + " small jobs' waits; it has waited " +
                 Hours(std::max<int64_t>(0, WaitS(*job, now))) + ")";
    TESSERA_RETURN_IF_ERROR(RunStep(
        job->name(),
        [&](TrainJob& j) { return train_.SetPending(j, w.reason, message, position, {}); },
        StatusWrite::kBatched));
  }
  return Status::Ok();
}

}  // namespace tessera::controller
