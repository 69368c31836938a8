// Controller: the TrainJob kind's driver. RunStep runs one lifecycle step (workload/
// train_lifecycle.h) and applies its effects through the one applier (workload/
// effects_applier.h): a store write with its events, chips released, hosts told, watchers told.
// Here too the job's parts of loading, ticks, heartbeats, lost hosts, assignments, the
// inventory's owners and ports; builtin_kinds.cc plugs them into the controller's core.
#include <algorithm>
#include <utility>

#include "controller/controller.h"
#include "workload/effects_applier.h"
#include "workload/worker_env.h"

namespace tessera::controller {
namespace {

// A step whose one effect is a write of the job's document: nothing to release, tell or record.
bool OnlyStatus(const Effects& e) {
  return e.persist && !e.remove && !e.release_chips && !e.assignments_changed &&
         e.notify_hosts.empty() && e.events.empty() && !e.schedule;
}

// Nothing a pass or a tick does acts on it: finished, neither stopping nor being deleted, with no
// progress or detail to flush and no fence to watch (TrainLifecycle::TickMayAct is false, and no
// scheduling walk looks at a job that is not Pending). Such a job changes again only through a
// step (RunStep) or a deletion.
bool IsSettled(const TrainJob& job) {
  const TrainJobStatus& st = job.status;
  return (st.phase == JobPhase::kSucceeded || st.phase == JobPhase::kFailed) && !st.stopping &&
         !st.deleting && !job.runtime.progress_dirty && !job.runtime.detail_dirty &&
         job.runtime.fencing.empty();
}

}  // namespace

void Controller::IndexUnsettledLocked(const std::string& name) {
  auto it = jobs_.find(name);
  if (it == jobs_.end() || IsSettled(it->second)) {
    unsettled_jobs_.erase(name);
    return;
  }
  unsettled_jobs_.insert_or_assign(std::string_view(it->first), &it->second);
}

Status Controller::CheckJobIndex(bool exact) const {
  auto lock = Hold();
  for (const auto& [name, job] : jobs_) {
    if (IsSettled(job)) continue;
    auto it = unsettled_jobs_.find(name);
    if (it == unsettled_jobs_.end() || it->second != &job)
      return Internal("trainjob " + name + " (phase " + JobPhaseName(job.status.phase) +
                      ") is not settled but missing from the index of unsettled jobs");
  }
  for (const auto& [name, job] : unsettled_jobs_) {
    auto it = jobs_.find(std::string(name));
    if (it == jobs_.end() || &it->second != job || it->first.data() != name.data())
      return Internal("the index of unsettled jobs holds " + std::string(name) +
                      ", which is not a job (or not where it points)");
    if (exact && IsSettled(*job))
      return Internal("the index of unsettled jobs holds trainjob " + std::string(name) +
                      ", which is settled");
  }
  return Status::Ok();
}

bool Controller::View::HostLost(const std::string& host) const {
  auto it = c_.hosts_.find(host);
  return it == c_.hosts_.end() || it->second.status.lost;
}

int Controller::View::LargestFitWithoutJob(const TrainJob& job, int lo, int hi) const {
  if (!c_.inventory_ready_) return 0;
  if (!job.spec.reservation.empty()) return c_.LargestFitInReservation(job, lo, hi);
  Inventory free_of_job = c_.inventory_;
  free_of_job.Release(OwnerId(job.uid));
  PlanResult plan = c_.PlanLargest(free_of_job, job, lo, hi);
  return plan.placed() ? static_cast<int>(plan.slices.size()) : 0;
}

TrainJob* Controller::FindJob(const std::string& name) {
  auto it = jobs_.find(name);
  return it == jobs_.end() ? nullptr : &it->second;
}

Json Controller::JobJson(const TrainJob& job) const { return codec::TrainJobJson(job, NowMs()); }

Status Controller::RunStep(std::string name, const Step& step, StatusWrite status_write) {
  TrainJob* job = FindJob(name);
  if (job == nullptr) return NotFound("trainjob '" + name + "' not found");
  // Whatever the step did (or undid), the job's place among the unsettled ones follows it.
  struct Reindex {
    Controller& c;
    const std::string& name;
    ~Reindex() { c.IndexUnsettledLocked(name); }
  } reindex{*this, name};
  // The head's side of the applier (workload/effects_applier.h): its store, inventory, agents
  // and watchers.
  class HeadSink final : public HeadSinkBase<TrainJob> {
   public:
    HeadSink(Controller& c, const std::string& name) : HeadSinkBase(c), name_(name) {}
    Result<int64_t> Commit(const TrainJob& job, const Effects& e) override {
      store::WriteBatch batch;
      if (e.remove) {
        batch.Delete(codec::kTrainJobKind, name_);
      } else if (e.persist) {
        // The document is built once: stored, then announced with the version the store gave
        // it.
        doc_ = c_.JobJson(job);
        batch.Update(codec::kTrainJobKind, name_, doc_.dump(), job.runtime.version);
      }
      auto committed = c_.CommitWithEvents(batch, "trainjob/" + name_, e.events);
      if (!committed.ok()) return Unavailable(committed.status().message());
      return committed;
    }
    void Announce(TrainJob& job, const Effects& e) override {
      applied_ = true;
      if (e.remove) {
        c_.Emit(codec::kTrainJobKind, "DELETED", c_.JobJson(job));
        c_.job_names_by_uid_.erase(job.uid);
        c_.unsettled_jobs_.erase(name_);  // first: its key is the job's own name
        c_.jobs_.erase(name_);
      } else if (e.persist) {
        doc_["metadata"]["resourceVersion"] = job.runtime.version;
        c_.Emit(codec::kTrainJobKind, "MODIFIED", doc_);
      }
      if (e.persist || e.remove) c_.unsaved_status_.erase(name_);  // the write carried it
      c_.AnnounceEvents();
    }
    bool applied() const { return applied_; }

   private:
    const std::string name_;  // a copy: the object may be erased under a reference to its name
    Json doc_;
    bool applied_ = false;
  };
  const std::string reservation = job->spec.reservation;
  HeadSink sink(*this, name);
  const int attempt = job->status.attempt;
  Status applied = Status::Ok();
  if (status_write == StatusWrite::kBatched) {
    TrainJob before = *job;
    Effects effects = step(*job);
    if (OnlyStatus(effects)) {  // written by FlushStatusWrites with others (status_writes.cc)
      unsaved_status_.insert(name);
      return Status::Ok();
    }
    applied = ApplyEffects(*job, std::move(effects), sink, NowMs());
    if (!applied.ok()) *job = std::move(before);
  } else {
    applied = ApplyStep(*job, step, sink, NowMs());
  }
  // Only a Place moves the job's workers, and it starts an attempt (indexed even if the commit
  // failed: the index is a superset).
  if (const TrainJob* stepped = FindJob(name); stepped && stepped->status.attempt != attempt)
    IndexJobHostsLocked(*stepped);
  TESSERA_RETURN_IF_ERROR(applied);
  if (sink.applied()) NoteReservationUsers(reservation);  // reservation_health.cc: status.users
  return Status::Ok();
}

void Controller::IndexJobHostsLocked(const TrainJob& job) {
  for (const auto& [rank, w] : job.status.workers) jobs_by_host_[w.host].insert(job.name());
}

Status Controller::LoadJobs() {
  const int64_t now = NowMs();
  // Visited, not listed: a warm standby's copy hands its documents over in place, and the
  // decoded jobs it kept (decoded_job) are taken instead of parsing them (issue 35: 100,000
  // stored jobs of about 2 KB each were copied once more only to be skipped).
  Status first = Status::Ok();
  TESSERA_RETURN_IF_ERROR(store_.Visit(codec::kTrainJobKind, [&](const store::Object& obj) {
    if (!first.ok()) return;
    std::optional<TrainJob> job =
        options_.decoded_job ? options_.decoded_job(obj) : std::optional<TrainJob>();
    if (!job) {
      Json doc = Json::parse(obj.body, nullptr, /*allow_exceptions=*/false);
      if (doc.is_discarded()) {
        first = Internal("stored TrainJob " + obj.name + " is not JSON");
        return;
      }
      auto decoded = codec::TrainJobFromJson(doc);
      if (!decoded.ok()) {
        first = decoded.status();
        return;
      }
      job = std::move(*decoded);
    }
    job->runtime.version = obj.resource_version;
    job->runtime.progress_epoch_ms = now;  // progress was not persisted: hang timers restart
    if (job->status.stopping)
      for (const auto& [rank, w] : job->status.workers)
        if (MayRun(w.phase)) job->runtime.unconfirmed.insert(w.host);
    next_uid_ = std::max(next_uid_, job->uid + 1);
    IndexJobHostsLocked(*job);
    job_names_by_uid_[job->uid] = obj.name;
    // Visited by name: each job goes at the end of the map and of the index, no search.
    if (jobs_.empty() || jobs_.rbegin()->first < obj.name) {
      auto it = jobs_.emplace_hint(jobs_.end(), obj.name, std::move(*job));
      if (!IsSettled(it->second))
        unsettled_jobs_.emplace_hint(unsettled_jobs_.end(), std::string_view(it->first),
                                     &it->second);
    } else {
      jobs_.insert_or_assign(obj.name, std::move(*job));
      IndexUnsettledLocked(obj.name);
    }
  }));
  return first;
}

Status Controller::TickJobs(int64_t now) {
  const View view(*this);
  std::vector<std::string> names;
  // Only jobs whose timers may act: a store of 100,000 jobs, most of them finished, costs a
  // tick a copy of each job otherwise (RunStep), on every tick. Only unsettled jobs can
  // (IsSettled); those that settled since their last step leave the index here.
  std::vector<std::string> settled;
  ForEachUnsettledJob([&](std::string_view name, const TrainJob& job) {
    if (train_.TickMayAct(job))
      names.emplace_back(name);
    else if (IsSettled(job))
      settled.emplace_back(name);
  });
  for (const std::string& name : settled) unsettled_jobs_.erase(name);
  Status first = Status::Ok();
  for (const auto& name : names) {
    if (!jobs_.count(name)) continue;
    // A tick's flush of progress or detail alone goes with the other jobs' (status_writes.cc).
    Status s = RunStep(
        name, [&](TrainJob& job) { return train_.Tick(job, view, now); }, StatusWrite::kBatched);
    if (first.ok()) first = s;
  }
  return first;
}

void Controller::JobReports(const std::string& name, const protocol::Heartbeat& beat, int64_t now,
                            Status& failed) {
  const View view(*this);
  auto run = [&](const std::string& job, const Step& step) {
    Status s = RunStep(job, step);
    if (failed.ok() && !s.ok()) failed = s;
  };
  // A report counts only for the job's current attempt (of this job, not of an earlier one of
  // the same name: the uid), and only from the host its worker was placed on.
  // Progress lines also count while the attempt is being stopped: its workers wrote them
  // before they stopped, and the attempt's figures (last step, steps lost) need every one.
  auto current = [&](const protocol::WorkerKey& key, bool stopping_too = false) -> TrainJob* {
    TrainJob* job = FindJob(key.job);
    if (job == nullptr || job->uid != key.uid || (job->status.stopping && !stopping_too) ||
        key.attempt != job->status.attempt)
      return nullptr;
    auto w = job->status.workers.find(key.rank);
    return w == job->status.workers.end() || w->second.host != name ? nullptr : job;
  };
  // Progress before exits: a worker's last lines travel in the heartbeat that reports its
  // exit, and must count before the exit ends the attempt.
  for (const protocol::ProgressReport& p : beat.progress) {
    TrainJob* job = current(p.key, true);
    if (job == nullptr) continue;
    ProgressInput in;
    const std::string& type = p.record.type;
    in.type = type == "checkpoint" ? ProgressInput::Type::kCheckpoint
              : type == "restore"  ? ProgressInput::Type::kRestore
              : type == "alive"    ? ProgressInput::Type::kAlive
                                   : ProgressInput::Type::kProgress;
    in.rank = p.key.rank;
    in.step = type == "alive" ? -1 : p.record.step;
    in.time_ms = p.record.time_ms;
    in.seconds = p.record.seconds;
    run(job->name(), [&](TrainJob& j) { return train_.Progress(j, in, view, now); });
  }
  for (const protocol::WorkerReport& w : beat.workers) {
    TrainJob* job = current(w.key);
    if (job == nullptr) continue;
    const int rank = w.key.rank;
    if (w.state == protocol::WorkerState::kRunning)
      run(job->name(), [&](TrainJob& j) { return train_.WorkerRunning(j, rank, w.pid, now); });
    else
      run(job->name(), [&](TrainJob& j) {
        return train_.WorkerExited(j, rank, w.exit_code, w.signal, w.pid, w.finished_at_ms, view,
                                   now);
      });
  }
  // Jobs being stopped: this heartbeat may confirm that their workers here are gone.
  std::set<std::pair<std::string, uint64_t>> running_here;  // (job, uid)
  for (const protocol::WorkerReport& w : beat.workers)
    if (w.state == protocol::WorkerState::kRunning) running_here.insert({w.key.job, w.key.uid});
  // A host that may still run a stopping job's worker held one of its workers: the jobs on this
  // host, not every job (100,000 stored jobs walked on each of 10,000 heartbeats a second held
  // the controller for good).
  std::vector<std::string> confirmed;
  for (const TrainJob* job : JobsOnHostLocked(name))
    if (job->status.stopping && job->runtime.unconfirmed.count(name) &&
        beat.revision >= job->runtime.stop_revision && !running_here.count({job->name(), job->uid}))
      confirmed.push_back(job->name());
  for (const auto& jn : confirmed)
    run(jn, [&](TrainJob& j) { return train_.ConfirmStopped(j, name, now); });
}

Status Controller::JobsHostLost(const std::string& host, int64_t last_heard_ms,
                                const std::string& why, int64_t now) {
  const View view(*this);
  std::vector<std::string> affected;
  for (const auto& [jn, job] : jobs_)
    if (job.OnHost(host)) affected.push_back(jn);
  for (const auto& jn : affected)
    TESSERA_RETURN_IF_ERROR(RunStep(jn, [&](TrainJob& job) {
      return train_.HostLost(job, host, last_heard_ms, why, view, now);
    }));
  return Status::Ok();
}

Result<AttemptLayout> Controller::TpuLayoutLocked(const TrainJob& job) const {
  const TrainJobStatus& st = job.status;
  AttemptLayout layout;
  layout.job = job.name();
  layout.attempt = st.attempt;
  auto topology = SliceTopology::Make(job.spec.accelerator, job.spec.topology);
  if (!topology.ok()) return topology.status();
  layout.topology = *topology;
  for (const auto& slice : st.placement) {
    layout.slices.emplace_back();
    for (const auto& hn : slice) {
      auto h = hosts_.find(hn);
      if (h == hosts_.end()) {
        layout.slices.back().push_back({hn, "127.0.0.1", false});
        continue;
      }
      // Worker ids follow the placement, whose fixed slices list hosts by discovered worker id.
      layout.slices.back().push_back(
          {hn, h->second.spec.address, h->second.claim && !h->second.spec.discovered.empty()});
    }
  }
  layout.slice_names = st.slice_names;
  layout.master_port = st.master_port;
  layout.jax_port = st.jax_port;
  layout.checkpoint_dir = job.spec.checkpoint_dir;
  return layout;
}

std::vector<const TrainJob*> Controller::JobsOnHostLocked(const std::string& host) const {
  std::vector<const TrainJob*> out;
  auto indexed = jobs_by_host_.find(host);
  if (indexed == jobs_by_host_.end()) return out;
  std::set<std::string>& names = indexed->second;
  for (auto it = names.begin(); it != names.end();) {
    const auto found = jobs_.find(*it);
    const TrainJob* job = found == jobs_.end() ? nullptr : &found->second;
    if (job == nullptr || !job->OnHost(host)) {
      it = names.erase(it);  // gone, or placed elsewhere since
      continue;
    }
    out.push_back(job);
    ++it;
  }
  if (names.empty()) jobs_by_host_.erase(indexed);
  return out;
}

void Controller::AppendJobAssignments(const std::string& host,
                                      std::vector<protocol::Assignment>& out,
                                      std::vector<protocol::StopRequest>& stop) const {
  const std::vector<const TrainJob*> here = JobsOnHostLocked(host);  // in name order
  std::vector<const TrainJob*> jobs;
  for (const TrainJob* job : here)
    if (job->Assigned()) jobs.push_back(job);
  std::sort(jobs.begin(), jobs.end(),
            [](const TrainJob* a, const TrainJob* b) { return a->uid < b->uid; });
  for (const TrainJob* job : jobs) {
    const TrainJobStatus& st = job->status;
    std::vector<WorkerEnv> envs;
    if (job->spec.gpu) {
      envs = GpuWorkerEnvLocked(*job);  // gpu_jobs.cc
    } else {
      auto layout = TpuLayoutLocked(*job);
      if (!layout.ok()) continue;  // validated at creation: cannot happen
      envs = ComputeWorkerEnv(*layout);
    }
    for (const WorkerEnv& e : envs) {
      if (e.host != host) continue;
      std::map<std::string, std::string> env = job->spec.env;
      AddSecretValues(job->name(), job->spec.secret_env, env);  // secrets.cc
      for (const auto& [k, v] : e.env) env[k] = v;
      // With TESSERA_ATTEMPT, what the SDK's checkpoint fence orders attempts by: a later job
      // over the same checkpoint directory is newer than every attempt of an earlier one.
      env["TESSERA_JOB_UID"] = std::to_string(job->uid);
      out.push_back({{job->name(), st.attempt, e.rank, job->uid},
                     e.worker,
                     job->spec.command,
                     std::move(env),
                     job->spec.working_dir,
                     job->spec.grace_ms,
                     protocol::WorkloadKind::kTrainJob});
    }
  }
  // Workers of a broken attempt are killed at once, preemption victims get the preemption's
  // grace instead of their own (docs/agent-protocol.md "stop").
  for (const TrainJob* job : here) {
    const int64_t grace = job->status.fast_stop ? 0 : job->status.stop_grace_ms;
    if (!job->status.stopping || job->status.attempt < 0 || grace < 0) continue;
    stop.push_back({job->name(), job->status.attempt, grace, job->uid});
  }
}

void Controller::ReserveJob(const TrainJob& job) {
  if (!job.spec.reservation.empty()) return;  // its hosts are its reservation's
  std::vector<HostId> ids;
  for (const auto& slice : job.status.placement)
    for (const auto& host : slice)
      if (auto it = host_ids_.find(host); it != host_ids_.end()) ids.push_back(it->second);
  if (ids.empty()) return;
  // A stored placement that overlaps another job's (a corrupted or hand-edited store) cannot
  // be reserved twice: the first job keeps the hosts and this one is failed on its next tick
  // by its own hosts' reports. Say so instead of hiding it.
  if (Status s = inventory_.Reserve(OwnerId(job.uid), ids); !s.ok())
    inventory_conflicts_.push_back("trainjob " + job.name() + ": " + s.message());
}

std::string Controller::JobOwnerOf(uint64_t owner) const {
  auto it = job_names_by_uid_.find(owner);
  return it == job_names_by_uid_.end() ? "" : it->second;
}

}  // namespace tessera::controller
