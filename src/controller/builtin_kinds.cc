// The built-in workload kinds: TrainJob, Service and SliceReservation, each plugged into the
// controller's core through WorkloadKind (workload_kind.h). Their parts live in the files named
// below; these classes only route the core's calls to them. A new kind is a class of its own
// (a file or folder) and one line in RegisterBuiltinKinds.
#include "codec/manifest.h"
#include "codec/reservation_manifest.h"
#include "codec/service_json.h"
#include "codec/service_manifest.h"
#include "controller/controller.h"
#include "workload/service_admission.h"

namespace tessera::controller {

// TrainJobs: jobs.cc (objects), job_driver.cc (steps, reports, assignments), job_scheduling.cc
// and easy_scheduling.cc (the pass). Its part of a pass runs last: reservations and Services'
// groups are placed first.
class Controller::TrainJobKind final : public WorkloadKind {
 public:
  explicit TrainJobKind(Controller& c) : c_(c) {}
  const std::string& name() const override { return name_; }
  int pass_order() const override { return 2; }

  Status Load() override { return c_.LoadJobs(); }
  Result<Json> Apply(const Json& doc) override { return c_.CreateJobLocked(doc); }
  Result<Preview> DryRun(const Json& doc) override {
    auto spec = codec::ParseTrainJob(doc);
    if (!spec.ok()) return spec.status();
    TESSERA_RETURN_IF_ERROR(c_.NewJobRefusalLocked(*spec));  // a taken name is refused
    return Preview{spec->name, false};
  }
  Result<Json> Get(const std::string& name) const override { return c_.GetJobLocked(name); }
  std::function<Json()> CopyList() const override {
    return [copy = c_.CopyJobsLocked()] { return JobListJson(copy); };
  }
  Result<Json> Delete(const std::string& name, bool /*force*/) override {
    return c_.DeleteJobLocked(name);
  }

  Status Tick(int64_t now) override { return c_.TickJobs(now); }
  Status Schedule() override { return c_.ScheduleJobs(); }

  void Offer(Snapshot& snap, const std::vector<PriorityClass>& classes) override {
    offered_ = c_.AddJobWorkloads(snap, classes);
  }
  Status Admitted(const Admission& a) override { return c_.AdmitJob(Offered(a.workload), a); }
  Status Evicted(const Eviction& e) override { return c_.EvictJob(Offered(e.workload), e); }
  Status Waiting(const PendingStatus& p) override {
    return c_.SetJobPending(Offered(p.workload), p);
  }
  Status CycleFailed(const std::string& message) override {
    for (const auto& [uid, name] : offered_)
      if (c_.jobs_.at(name).status.phase == JobPhase::kPending)
        TESSERA_RETURN_IF_ERROR(c_.RunStep(
            name,
            [&](TrainJob& j) { return c_.train_.SetPending(j, "AdmissionError", message, 0, {}); },
            Controller::StatusWrite::kBatched));
    return Status::Ok();
  }

  void ReserveHosts(std::vector<std::string>& /*conflicts: ReserveJob records them*/) override {
    for (const auto& [name, job] : c_.jobs_)
      if (job.HoldsChips()) c_.ReserveJob(job);
  }
  std::string OwnerOf(uint64_t owner, const std::string& /*host*/) const override {
    return c_.JobOwnerOf(owner);
  }
  std::vector<std::string> HostUsers(const std::string& host) const override {
    std::vector<std::string> users;
    for (const auto& [name, job] : c_.jobs_)
      if (job.HoldsChips() && job.OnHost(host)) users.push_back("trainjob/" + name);
    return users;
  }
  void AppendAssignments(const std::string& host, std::vector<protocol::Assignment>& out,
                         std::vector<protocol::StopRequest>& stop) const override {
    c_.AppendJobAssignments(host, out, stop);
  }
  void TakeHeartbeat(const std::string& host, const protocol::Heartbeat& beat, int64_t now,
                     Status& failed) override {
    c_.JobReports(host, beat, now, failed);
  }
  Status HostLost(const std::string& host, int64_t last_heard_ms, const std::string& why,
                  int64_t now) override {
    return c_.JobsHostLost(host, last_heard_ms, why, now);
  }
  void AddHeldPorts(std::set<int>& held) const override { c_.AddJobPorts(held); }

 private:
  // The job a workload id of the last Offer names; "" (no such job) otherwise.
  std::string Offered(WorkloadId id) const {
    auto it = offered_.find(id.value());
    return it == offered_.end() ? std::string() : it->second;
  }

  Controller& c_;
  const std::string name_ = codec::kTrainJobKind;
  std::map<uint64_t, std::string> offered_;  // by uid, from the last Offer
};

// Services: services.cc (objects, steps, reports, assignments, the pass without queues) and
// service_admission.cc (replica groups in the admission cycle).
class Controller::ServiceKind final : public WorkloadKind {
 public:
  explicit ServiceKind(Controller& c) : c_(c) {}
  const std::string& name() const override { return name_; }
  int pass_order() const override { return 1; }

  Status Load() override { return c_.LoadServices(); }
  Result<Json> Apply(const Json& doc) override { return c_.ApplyServiceLocked(doc); }
  Result<Preview> DryRun(const Json& doc) override {
    auto spec = codec::ParseService(doc);
    if (!spec.ok()) return spec.status();
    TESSERA_RETURN_IF_ERROR(c_.ServiceRefusalLocked(*spec, doc));
    return Preview{spec->name, c_.services_.count(spec->name) > 0};
  }
  Result<Json> Get(const std::string& name) const override { return c_.GetServiceLocked(name); }
  std::function<Json()> CopyList() const override {
    return [list = c_.ListServicesLocked()] { return list; };
  }
  Result<Json> Delete(const std::string& name, bool /*force*/) override {
    return c_.DeleteServiceLocked(name);
  }

  Status Tick(int64_t now) override { return c_.TickServices(now); }
  Status Schedule() override { return c_.ScheduleServices(); }

  void Offer(Snapshot& snap, const std::vector<PriorityClass>& classes) override {
    offered_ = c_.AddServiceWorkloads(snap, classes);
  }
  Status Admitted(const Admission& a) override {
    const GroupRef* g = Offered(a.workload);
    return g == nullptr ? Status::Ok() : c_.AdmitGroup(*g, a);
  }
  Status Evicted(const Eviction& e) override {
    const GroupRef* g = Offered(e.workload);
    return g == nullptr ? Status::Ok() : c_.EvictGroup(*g, e);
  }
  Status Waiting(const PendingStatus& p) override {
    const GroupRef* g = Offered(p.workload);
    return g == nullptr
               ? Status::Ok()
               : c_.SetGroupPending(*g, PendingReasonName(p.reason), GroupPendingMessage(p));
  }
  Status CycleFailed(const std::string& message) override {
    for (const auto& [id, group] : offered_)
      TESSERA_RETURN_IF_ERROR(c_.SetGroupPending(group, "AdmissionError", message));
    return Status::Ok();
  }

  void ReserveHosts(std::vector<std::string>& /*conflicts*/) override { c_.ReserveServiceGroups(); }
  std::string OwnerOf(uint64_t owner, const std::string& /*host*/) const override {
    return c_.ServiceOwnerOf(owner);
  }
  std::vector<std::string> HostUsers(const std::string& host) const override {
    std::vector<std::string> users;
    for (const auto& [name, svc] : c_.services_)
      if (svc.OnHost(host)) users.push_back("service/" + name);
    return users;
  }
  void AppendAssignments(const std::string& host, std::vector<protocol::Assignment>& out,
                         std::vector<protocol::StopRequest>& stop) const override {
    c_.AppendServiceAssignments(host, out, stop);
  }
  void TakeHeartbeat(const std::string& host, const protocol::Heartbeat& beat, int64_t now,
                     Status& failed) override {
    c_.ServiceReports(host, beat, now, failed);
  }
  Status HostLost(const std::string& host, int64_t /*last_heard_ms*/, const std::string& why,
                  int64_t /*now*/) override {
    return c_.ServicesHostLost(host, why);
  }
  void AddHeldPorts(std::set<int>& held) const override { c_.AddServicePorts(held); }

 private:
  const GroupRef* Offered(WorkloadId id) const {
    auto it = offered_.find(id.value());
    return it == offered_.end() ? nullptr : &it->second;
  }

  Controller& c_;
  const std::string name_ = codec::kServiceKind;
  std::map<uint64_t, GroupRef> offered_;
};

// SliceReservations: reservations.cc, reservation_services.cc and reservation_health.cc. Its
// part of a pass runs first: the hosts it sets aside are not planned for other workloads.
class Controller::ReservationKind final : public WorkloadKind {
 public:
  explicit ReservationKind(Controller& c) : c_(c) {}
  const std::string& name() const override { return name_; }
  int pass_order() const override { return 0; }

  Status Load() override { return c_.LoadReservations(); }
  Result<Json> Apply(const Json& doc) override { return c_.ApplyReservationLocked(doc); }
  Result<Preview> DryRun(const Json& doc) override {
    auto spec = codec::ParseSliceReservation(doc);
    if (!spec.ok()) return spec.status();
    TESSERA_RETURN_IF_ERROR(c_.DryRunReservationLocked(*spec));
    return Preview{spec->name, c_.reservations_.count(spec->name) > 0};
  }
  Result<Json> Get(const std::string& name) const override { return c_.GetReservationLocked(name); }
  std::function<Json()> CopyList() const override {
    return [list = c_.ListReservationsLocked()] { return list; };
  }
  Result<Json> Delete(const std::string& name, bool force) override {
    return c_.DeleteReservationLocked(name, force);
  }

  Status Tick(int64_t now) override { return c_.TickReservations(now); }
  Status Schedule() override { return c_.ScheduleReservations(); }

  void Offer(Snapshot& snap, const std::vector<PriorityClass>& classes) override {
    offered_ = c_.AddReservationWorkloads(snap, classes);
  }
  Status Admitted(const Admission& a) override {
    auto it = offered_.find(a.workload.value());
    return it == offered_.end() ? Status::Ok() : c_.AdmitReservation(it->second, a);
  }
  Status Evicted(const Eviction& e) override {
    auto it = offered_.find(e.workload.value());
    return it == offered_.end() ? Status::Ok() : c_.EvictReservation(it->second, e);
  }
  Status Waiting(const PendingStatus& p) override {
    auto it = offered_.find(p.workload.value());
    return it == offered_.end() ? Status::Ok() : c_.SetReservationPending(it->second, p);
  }
  // A reservation keeps its phase while the queues are misconfigured; its users say why.
  Status CycleFailed(const std::string& /*message*/) override { return Status::Ok(); }

  void ReserveHosts(std::vector<std::string>& /*conflicts*/) override { c_.ReserveReservations(); }
  std::string OwnerOf(uint64_t owner, const std::string& host) const override {
    return c_.ReservationOwnerOf(owner, host);
  }
  // Its hosts run only other kinds' workers, which those kinds name.
  std::vector<std::string> HostUsers(const std::string& /*host*/) const override { return {}; }
  void AppendAssignments(const std::string& /*host*/, std::vector<protocol::Assignment>& /*out*/,
                         std::vector<protocol::StopRequest>& /*stop*/) const override {}
  void TakeHeartbeat(const std::string& /*host*/, const protocol::Heartbeat& /*beat*/,
                     int64_t /*now*/, Status& /*failed*/) override {}
  // Its lost slices are given up on its next tick (reservation_health.cc).
  Status HostLost(const std::string& /*host*/, int64_t /*last_heard_ms*/,
                  const std::string& /*why*/, int64_t /*now*/) override {
    return Status::Ok();
  }
  void AddHeldPorts(std::set<int>& /*held*/) const override {}

 private:
  Controller& c_;
  const std::string name_ = codec::kSliceReservationKind;
  std::map<uint64_t, std::string> offered_;
};

void Controller::RegisterBuiltinKinds() {
  // Registration order is the order of loads, ticks, heartbeats, assignments and lost hosts.
  AddKind(std::make_unique<TrainJobKind>(*this));
  AddKind(std::make_unique<ServiceKind>(*this));
  AddKind(std::make_unique<ReservationKind>(*this));
}

}  // namespace tessera::controller
