// The seeded differential sweep of the head and the simulator. Each seed makes a random
// scenario over one 7x cube (16 hosts) and 40 s: TrainJobs and Services created, workers and
// processes exiting, hosts lost, hangs, checkpoints, readiness results, scaling and deletions.
// The scenario is played once through the head's controller (fake clock, memory store, agents'
// heartbeats through the wire decoder) and once through the simulator (sim/scenario_sim.h),
// both applying the lifecycles' effects through workload/effects_applier.h. Every 4 seconds (and at
// the end) the records of both must be identical: each object's status (less the ports, which each
// side draws on its own) and the outcome of each user request. A failure names the seed, the second
// and the first differing record; TESSERA_SWEEP_SEED=N replays one seed. A second test shows that
// the sweep can fail: a simulator given a longer lease than the head's diverges on an early seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "codec/manifest.h"
#include "codec/resource_json.h"
#include "codec/service_json.h"
#include "codec/service_manifest.h"
#include "common/rng.h"
#include "controller/controller.h"
#include "controller/controller_test_util.h"
#include "sim/scenario_sim.h"
#include "store/memory_store.h"

namespace tessera::controller {
namespace {

constexpr int kSeeds = 200;
constexpr int64_t kSeconds = 40;
constexpr int64_t kCompareEveryS = 4;  // and at the last second
constexpr int64_t kLeaseS = 4;         // a host silent for more than this is lost

// The simulator's options that match the head's (HeadSide): the same lease.
sim::ScenarioSimOptions MatchingSimOptions() { return {.lease_ms = kLeaseS * 1000 - 1}; }

// Second t as both clocks read it: ms, with t = 0 at 1 s (0 means unknown to the lifecycles).
int64_t SweepMs(int64_t t) { return t * 1000 + 1000; }

std::string HostName(int x, int y, int z) {
  return "c0-" + std::to_string(x) + std::to_string(y) + std::to_string(z);
}

// ---------------------------------------------------------------------------------------------
// The scenario

struct Action {
  enum class Type {
    kCreateJob,      // doc
    kCreateService,  // doc
    kDeleteJob,      // name
    kDeleteService,  // name
    kScale,          // name, a: replicas
    kExit,           // name (job), a: rank, b: exit code
    kProcessExit,    // name (service), a: replica, b: exit code (worker 0)
    kHostDown,       // host: silent from now on
    kCheckpoint,     // name (job): rank 0 writes a checkpoint
    kHang,           // name (job), a: seconds without progress
    kUnready,        // name (service), a: seconds its probes fail
  };
  int64_t t = 0;
  Type type = Type::kCreateJob;
  std::string name;
  int a = 0, b = 0;
  Json doc;
  std::string host;
};

std::string Describe(const Action& x) {
  static const char* kNames[] = {"create-job", "create-service", "delete-job",   "delete-service",
                                 "scale",      "exit",           "process-exit", "host-down",
                                 "checkpoint", "hang",           "unready"};
  std::string s = "t=" + std::to_string(x.t) + " " + kNames[static_cast<int>(x.type)];
  if (!x.name.empty()) s += " " + x.name;
  if (!x.host.empty()) s += " " + x.host;
  s += " a=" + std::to_string(x.a) + " b=" + std::to_string(x.b);
  if (!x.doc.is_null()) s += " " + x.doc["spec"].dump();
  return s;
}

std::vector<Action> MakeScenario(uint64_t seed) {
  Rng rng(seed);
  auto pick = [&](uint64_t n) { return static_cast<int>(rng.Uniform(n)); };
  std::vector<Action> out;
  const char* kJobShapes[] = {"2x2x1", "2x2x2", "2x2x4", "4x4x2"};
  const int kJobChips[] = {4, 8, 16, 32};
  const char* kServiceShapes[] = {"2x2x1", "2x2x2"};
  const int jobs = 1 + pick(3), services = pick(3);
  std::vector<std::string> job_names, service_names;
  for (int i = 0; i < jobs; ++i) {
    const std::string name = "job" + std::to_string(i);
    job_names.push_back(name);
    const int shape = pick(4);
    const int most = 64 / kJobChips[shape];  // slices of the shape in the cube
    const int lo = std::min(1 + pick(2), most);
    const int hi = std::min(lo + pick(2), most);
    Json spec = {{"accelerator", "7x"},
                 {"topology", kJobShapes[shape]},
                 {"slices", {{"min", lo}, {"max", hi}}},
                 {"failurePolicy",
                  {{"maxFailures", pick(4) - 1},
                   {"onHostLoss", pick(2) ? "resize" : "pause"},
                   {"growBackInterval", "10s"}}},
                 {"template", {{"command", {"python3", "train.py"}}}}};
    if (pick(2)) spec["progress"] = {{"hangTimeout", std::to_string(3 + pick(6)) + "s"}};
    Action x;
    x.t = pick(15);
    x.type = Action::Type::kCreateJob;
    x.name = name;
    x.doc = {{"apiVersion", "tessera/v1"},
             {"kind", "TrainJob"},
             {"metadata", {{"name", name}}},
             {"spec", spec}};
    out.push_back(x);
  }
  for (int i = 0; i < services; ++i) {
    const std::string name = "svc" + std::to_string(i);
    service_names.push_back(name);
    Action x;
    x.t = pick(15);
    x.type = Action::Type::kCreateService;
    x.name = name;
    x.doc = {{"apiVersion", "tessera/v1"},
             {"kind", "Service"},
             {"metadata", {{"name", name}}},
             {"spec",
              {{"accelerator", "7x"},
               {"topology", kServiceShapes[pick(2)]},
               {"command", {"python3", "server.py"}},
               {"replicas", 1 + pick(3)},
               {"readiness",
                {{"period", std::to_string(1 + pick(3)) + "s"},
                 {"startupGrace", std::to_string(2 + pick(8)) + "s"}}}}}};
    out.push_back(x);
  }
  const int events = 4 + pick(12);
  for (int i = 0; i < events; ++i) {
    Action x;
    x.t = 2 + pick(kSeconds - 4);
    const bool job = service_names.empty() || pick(2);
    x.name = job ? job_names[pick(job_names.size())] : service_names[pick(service_names.size())];
    switch (pick(6)) {
      case 0:
        x.type = job ? Action::Type::kExit : Action::Type::kProcessExit;
        x.a = pick(4);
        x.b = pick(3) == 0 ? 0 : 1;
        break;
      case 1:
        x.type = Action::Type::kHostDown;
        x.name.clear();
        x.host = HostName(pick(2), pick(2), pick(4));
        break;
      case 2:
        x.type = job ? Action::Type::kCheckpoint : Action::Type::kUnready;
        x.a = 1 + pick(10);
        break;
      case 3:
        x.type = job ? Action::Type::kHang : Action::Type::kScale;
        x.a = job ? 2 + pick(10) : pick(4);
        break;
      case 4:
        x.type = job ? Action::Type::kDeleteJob : Action::Type::kDeleteService;
        break;
      default:
        x.type = job ? Action::Type::kCheckpoint : Action::Type::kProcessExit;
        x.b = 1;
        break;
    }
    out.push_back(x);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Action& a, const Action& b) { return a.t < b.t; });
  return out;
}

// ---------------------------------------------------------------------------------------------
// The two sides, spoken to in users' and agents' terms

class Side {
 public:
  virtual ~Side() = default;
  virtual void AdvanceTo(int64_t ms) = 0;
  virtual Status Do(const Action& x) = 0;  // a user's request
  virtual std::vector<sim::ScenarioWorker> Assignments(const std::string& host) = 0;
  // The assignments revision: it moves on every change of any host's assignments.
  virtual int64_t Revision() = 0;
  virtual Status Heartbeat(const std::string& host, const sim::ScenarioReport& report) = 0;
  // Answers every due readiness probe: failed ("HTTP 503") for `unready` services.
  virtual Status Probe(const std::set<std::string>& unready) = 0;
  virtual Status Tick() = 0;
  // "trainjob/NAME" or "service/NAME" -> status, ports left out.
  virtual std::map<std::string, Json> Records() = 0;
};

void DropPorts(Json& j) {
  if (j.is_object()) {
    for (const char* key : {"masterPort", "jaxPort", "port", "ports"}) j.erase(key);
    for (auto& item : j.items()) DropPorts(item.value());
  } else if (j.is_array()) {
    for (Json& v : j) DropPorts(v);
  }
}

Status StatusOf(const Result<Json>& r) { return r.status(); }

class HeadSide final : public Side {
 public:
  HeadSide() {
    store_ = OpenMemoryStore();
    ControllerOptions options;
    // A lease runs out when a host is silent for more than lease_ms: heartbeats come every
    // second, so a host last heard at t is lost at the tick of t + kLeaseS.
    options.lease_ms = kLeaseS * 1000 - 1;
    c_ = std::make_unique<Controller>(*store_, clock_, options);
    ok_ = c_->Load().ok();
    for (int z = 0; z < 4; ++z)
      for (int y = 0; y < 2; ++y)
        for (int x = 0; x < 2; ++x)
          ok_ = ok_ &&
                (Register(*c_,
                          {{"name", HostName(x, y, z)},
                           {"generation", "7x"},
                           {"chips", 4},
                           {"cube", {{"name", "c0"}, {"block", "block-00"}, {"coord", {x, y, z}}}}})
                     .ok());
  }
  bool ok() const { return ok_; }

  void AdvanceTo(int64_t ms) override { clock_.AdvanceMs(ms - clock_.NowMs()); }
  Status Do(const Action& x) override {
    switch (x.type) {
      case Action::Type::kCreateJob:
        return StatusOf(c_->CreateJob(x.doc));
      case Action::Type::kCreateService:
        return StatusOf(c_->ApplyService(x.doc));
      case Action::Type::kDeleteJob:
        return StatusOf(c_->DeleteJob(x.name));
      case Action::Type::kDeleteService:
        return StatusOf(c_->DeleteService(x.name));
      case Action::Type::kScale:
        return StatusOf(c_->ScaleService(x.name, RoleOf(x.name), x.a));
      default:
        return Internal("not a user's request");
    }
  }
  std::vector<sim::ScenarioWorker> Assignments(const std::string& host) override {
    const Result<Json> a = c_->Assignments(host);
    std::vector<sim::ScenarioWorker> out;
    if (!a.ok()) return out;
    const Json& doc = *a;
    revision_[host] = doc.at("revision").get<int64_t>();
    for (const Json& x : doc.at("assignments"))
      out.push_back({x.at("job").get<std::string>(), x.at("uid").get<uint64_t>(),
                     x.at("attempt").get<int>(), x.at("rank").get<int>()});
    std::sort(out.begin(), out.end());
    return out;
  }
  int64_t Revision() override {
    const Result<Json> a = c_->Assignments(HostName(0, 0, 0));
    return a.ok() ? a->at("revision").get<int64_t>() : -1;
  }
  Status Heartbeat(const std::string& host, const sim::ScenarioReport& report) override {
    Json workers = Json::array();
    auto key = [](const sim::ScenarioWorker& k) {
      return Json{{"job", k.workload}, {"uid", k.uid}, {"attempt", k.attempt}, {"rank", k.rank}};
    };
    for (const sim::ScenarioReport::Worker& w : report.workers) {
      Json j = key(w.key);
      j["pid"] = 100;
      j["startedAtMs"] = clock_.NowMs();
      if (w.exited) {
        j["state"] = "Exited";
        j["exitCode"] = w.exit_code;
        j["signal"] = 0;
        j["finishedAtMs"] = 0;
      } else {
        j["state"] = "Running";
      }
      workers.push_back(std::move(j));
    }
    Json progress = Json::array();
    for (const sim::ScenarioReport::Progress& p : report.progress) {
      Json j = key(p.key);
      j["type"] = p.input.type == ProgressInput::Type::kCheckpoint ? "checkpoint" : "progress";
      j["step"] = p.input.step;
      j["timeMs"] = p.input.time_ms;
      j["seconds"] = p.input.seconds;
      progress.push_back(std::move(j));
    }
    Json body = {{"workers", workers}, {"revision", revision_[host]}};
    if (!progress.empty()) body["progress"] = std::move(progress);
    return StatusOf(Beat(*c_, host, body));
  }
  Status Probe(const std::set<std::string>& unready) override {
    for (const auto& t : c_->DueProbes()) {
      const bool ready = !unready.count(t.service);
      c_->ReportReadiness(t, ready, ready ? "" : "HTTP 503");
    }
    return Status::Ok();
  }
  Status Tick() override { return c_->Tick(); }
  std::map<std::string, Json> Records() override {
    std::map<std::string, Json> out;
    const Json jobs = c_->ListJobs();
    for (const Json& j : jobs["items"]) {
      Json st = j["status"];
      DropPorts(st);
      out["trainjob/" + j["metadata"]["name"].get<std::string>()] = std::move(st);
    }
    const Json services = c_->ListServices();
    for (const Json& s : services["items"]) {
      Json st = s["status"];
      DropPorts(st);
      out["service/" + s["metadata"]["name"].get<std::string>()] = std::move(st);
    }
    return out;
  }

 private:
  std::string RoleOf(const std::string& service) {
    const Result<Json> s = c_->GetService(service);
    if (!s.ok()) return "";
    return s->at("status").at("roles").at(0).at("name").get<std::string>();
  }

  FakeClock clock_{SweepMs(0)};
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Controller> c_;
  std::map<std::string, int64_t> revision_;
  bool ok_ = true;
};

class SimSide final : public Side {
 public:
  explicit SimSide(const sim::ScenarioSimOptions& options)
      : sim_{inventory_, NamesOf(inventory_), options} {
    sim_.Start(SweepMs(0));
  }

  void AdvanceTo(int64_t ms) override {
    now_ = ms;
    sim_.AdvanceTo(ms);
  }
  Status Do(const Action& x) override {
    switch (x.type) {
      case Action::Type::kCreateJob: {
        auto spec = codec::ParseTrainJob(x.doc);
        if (!spec.ok()) return spec.status();
        return sim_.CreateJob(std::move(*spec), x.doc["spec"].dump());
      }
      case Action::Type::kCreateService: {
        auto spec = codec::ParseService(x.doc);
        if (!spec.ok()) return spec.status();
        return sim_.CreateService(std::move(*spec));
      }
      case Action::Type::kDeleteJob:
        return sim_.DeleteJob(x.name);
      case Action::Type::kDeleteService:
        return sim_.DeleteService(x.name);
      case Action::Type::kScale: {
        auto it = sim_.services().find(x.name);
        const std::string role =
            it == sim_.services().end() ? "" : it->second.status.roles.at(0).name;
        return sim_.ScaleService(x.name, role, x.a);
      }
      default:
        return Internal("not a user's request");
    }
  }
  std::vector<sim::ScenarioWorker> Assignments(const std::string& host) override {
    revision_[host] = sim_.assignment_revision();
    return sim_.Assignments(host);
  }
  int64_t Revision() override { return sim_.assignment_revision(); }
  Status Heartbeat(const std::string& host, const sim::ScenarioReport& report) override {
    sim::ScenarioReport with_revision = report;
    with_revision.revision = revision_[host];
    return sim_.Heartbeat(host, with_revision);
  }
  Status Probe(const std::set<std::string>& unready) override {
    for (const sim::ScenarioProbe& p : sim_.DueProbes()) {
      const bool ready = !unready.count(p.service);
      TESSERA_RETURN_IF_ERROR(sim_.Readiness(p, ready, ready ? "" : "HTTP 503"));
    }
    return Status::Ok();
  }
  Status Tick() override { return sim_.Tick(); }
  std::map<std::string, Json> Records() override {
    std::map<std::string, Json> out;
    for (const auto& [name, job] : sim_.jobs()) {
      Json st = codec::TrainJobJson(job, now_)["status"];
      DropPorts(st);
      out["trainjob/" + name] = std::move(st);
    }
    for (const auto& [name, svc] : sim_.services()) {
      Json st = codec::ServiceJson(svc)["status"];
      DropPorts(st);
      out["service/" + name] = std::move(st);
    }
    return out;
  }

 private:
  // The head's inventory of the same hosts: one cube, each host named by its coordinate.
  static Inventory Cube() {
    auto inv = Inventory::MakePod(Generation::k7x, {1});
    if (!inv.ok()) throw std::runtime_error("one 7x cube: " + inv.status().ToString());
    return std::move(*inv);
  }
  static std::vector<std::string> NamesOf(const Inventory& inv) {
    std::vector<std::string> names(inv.hosts().size());
    for (const Host& h : inv.hosts())
      names[h.id.value()] = HostName(h.coord.x, h.coord.y, h.coord.z);
    return names;
  }

  std::map<std::string, int64_t> revision_;  // the revision each host last read
  const Inventory inventory_ = Cube();
  sim::ScenarioSim sim_;
  int64_t now_ = SweepMs(0);
};

// ---------------------------------------------------------------------------------------------
// The agents: the same rules on both sides, each reading its own side's assignments

class Agents {
 public:
  Agents(Side& side, const std::vector<Action>& scenario) : side_(side), scenario_(scenario) {}

  // One second: users' requests, every live host's heartbeat (workers, progress, exits), the
  // head's tick, then the heartbeats of hosts whose assignments changed (they confirm stopped
  // workers and report new ones running, as agents woken by their assignment watch do), then
  // readiness probes. Returns the outcome of each request, for the comparison.
  std::vector<std::string> Second(int64_t t) {
    side_.AdvanceTo(SweepMs(t));
    std::vector<std::string> outcomes;
    std::map<std::string, int> exits;  // "job/rank" or "service/replica" -> code, this second
    for (const Action& x : scenario_) {
      if (x.t != t) continue;
      switch (x.type) {
        case Action::Type::kCreateJob:
        case Action::Type::kCreateService:
        case Action::Type::kDeleteJob:
        case Action::Type::kDeleteService:
        case Action::Type::kScale:
          outcomes.push_back(Describe(x) + ": " + (side_.Do(x).ok() ? "ok" : "refused"));
          break;
        case Action::Type::kExit:
          exits[x.name + "/" + std::to_string(x.a)] = x.b;
          break;
        case Action::Type::kProcessExit:
          exits[x.name + "#" + std::to_string(x.a)] = x.b;
          break;
        case Action::Type::kHostDown:
          down_.insert(x.host);
          break;
        case Action::Type::kCheckpoint:
          checkpoints_.insert(x.name);
          break;
        case Action::Type::kHang:
          hung_until_[x.name] = t + x.a;
          break;
        case Action::Type::kUnready:
          unready_until_[x.name] = t + x.a;
          break;
      }
    }
    for (const std::string& host : Hosts())
      if (!down_.count(host)) Beat(host, t, exits, /*progress=*/true);
    checkpoints_.clear();
    Check(side_.Tick(), "tick", t);
    for (int round = 0; round < 3; ++round) {
      bool any = false;
      const int64_t revision = side_.Revision();
      for (const std::string& host : Hosts()) {
        // Unchanged since the host's last heartbeat: the revision moves on every change.
        if (down_.count(host) || revision_at_beat_[host] == revision) continue;
        if (side_.Assignments(host) == last_[host]) continue;
        any = true;
        Beat(host, t, {}, /*progress=*/false);
      }
      if (!any) break;
    }
    std::set<std::string> unready;
    for (const auto& [name, until] : unready_until_)
      if (t < until) unready.insert(name);
    Check(side_.Probe(unready), "probes", t);
    return outcomes;
  }
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  static const std::vector<std::string>& Hosts() {
    static const std::vector<std::string> hosts = [] {
      std::vector<std::string> out;
      for (int z = 0; z < 4; ++z)
        for (int y = 0; y < 2; ++y)
          for (int x = 0; x < 2; ++x) out.push_back(HostName(x, y, z));
      std::sort(out.begin(), out.end());
      return out;
    }();
    return hosts;
  }

  void Check(const Status& s, const std::string& what, int64_t t) {
    if (!s.ok()) errors_.push_back("t=" + std::to_string(t) + " " + what + ": " + s.ToString());
  }

  void Beat(const std::string& host, int64_t t, const std::map<std::string, int>& exits,
            bool progress) {
    revision_at_beat_[host] = side_.Revision();
    const std::vector<sim::ScenarioWorker> assigned = side_.Assignments(host);
    last_[host] = assigned;
    sim::ScenarioReport report;
    for (const sim::ScenarioWorker& w : assigned) {
      const auto ref = ParseReplicaWorkloadName(w.workload);
      const std::string exit_key = ref ? ref->service + "#" + std::to_string(ref->replica)
                                       : w.workload + "/" + std::to_string(w.rank);
      // A replica's exit is its leader's (worker 0).
      if (auto e = exits.find(exit_key); e != exits.end() && (!ref || w.rank == 0))
        exited_[w] = e->second;
      sim::ScenarioReport::Worker r;
      r.key = w;
      if (auto e = exited_.find(w); e != exited_.end()) {
        r.exited = true;
        r.exit_code = e->second;
      }
      report.workers.push_back(r);
      // The workers of a job: one step a second from the second the attempt was first seen,
      // none while the job hangs; rank 0 writes the checkpoints.
      if (ref || !progress || r.exited) continue;
      const auto it = started_.try_emplace({w.workload, w.uid, w.attempt, 0}, t).first;
      if (auto h = hung_until_.find(w.workload); h != hung_until_.end() && t < h->second) continue;
      sim::ScenarioReport::Progress p;
      p.key = w;
      p.input.type = ProgressInput::Type::kProgress;
      p.input.rank = w.rank;
      p.input.step = t - it->second;
      p.input.time_ms = SweepMs(t);
      report.progress.push_back(p);
      if (w.rank == 0 && checkpoints_.count(w.workload)) {
        p.input.type = ProgressInput::Type::kCheckpoint;
        p.input.seconds = 1.0;
        report.progress.push_back(p);
      }
    }
    Check(side_.Heartbeat(host, report), "heartbeat of " + host, t);
  }

  Side& side_;
  const std::vector<Action>& scenario_;
  std::set<std::string> down_;
  std::set<std::string> checkpoints_;
  std::map<std::string, int64_t> hung_until_, unready_until_;
  std::map<sim::ScenarioWorker, int> exited_;
  std::map<sim::ScenarioWorker, int64_t> started_;  // (workload, uid, attempt, 0) -> second
  std::map<std::string, std::vector<sim::ScenarioWorker>> last_;  // at the host's last beat
  std::map<std::string, int64_t> revision_at_beat_;
  std::vector<std::string> errors_;
};

// The first record that differs, or "" when all agree.
std::string FirstDifference(const std::map<std::string, Json>& head,
                            const std::map<std::string, Json>& sim) {
  std::set<std::string> keys;
  for (const auto& [k, v] : head) keys.insert(k);
  for (const auto& [k, v] : sim) keys.insert(k);
  for (const std::string& k : keys) {
    auto h = head.find(k);
    auto s = sim.find(k);
    if (h == head.end()) return k + ": only the simulator has it:\n  " + s->second.dump();
    if (s == sim.end()) return k + ": only the head has it:\n  " + h->second.dump();
    if (h->second == s->second) continue;
    const Json patch = Json::diff(h->second, s->second);
    return k + " differs (head -> simulator: " + patch.dump() +
           ")\n  head:      " + h->second.dump() + "\n  simulator: " + s->second.dump();
  }
  return "";
}

// Plays one seed on both sides, the simulator with `sim_options`; "" when their records agree
// every second.
std::string RunSeed(uint64_t seed, const sim::ScenarioSimOptions& sim_options) {
  const std::vector<Action> scenario = MakeScenario(seed);
  HeadSide head;
  if (!head.ok()) return "the head did not start";
  SimSide sim(sim_options);
  Agents head_agents(head, scenario), sim_agents(sim, scenario);
  auto scenario_text = [&] {
    std::string s;
    for (const Action& x : scenario) s += "\n  " + Describe(x);
    return s;
  };
  for (int64_t t = 0; t < kSeconds; ++t) {
    const std::vector<std::string> h = head_agents.Second(t);
    const std::vector<std::string> s = sim_agents.Second(t);
    if (h != s) {
      std::string d = "t=" + std::to_string(t) + " requests answered differently:";
      for (size_t i = 0; i < h.size() && i < s.size(); ++i)
        if (h[i] != s[i]) d += "\n  head: " + h[i] + "\n  simulator: " + s[i];
      return d + "\nscenario:" + scenario_text();
    }
    for (const Agents* a : {&head_agents, &sim_agents})
      if (!a->errors().empty())
        return std::string(a == &head_agents ? "head" : "simulator") + ": " + a->errors().front() +
               "\nscenario:" + scenario_text();
    if (t % kCompareEveryS != 0 && t != kSeconds - 1) continue;
    const std::string diff = FirstDifference(head.Records(), sim.Records());
    if (!diff.empty())
      return "t=" + std::to_string(t) + " " + diff + "\nscenario:" + scenario_text();
  }
  return "";
}

// Plays seeds first..last and stops at the first that diverges: the failure text, naming the seed,
// or "" when every seed agrees.
std::string Sweep(uint64_t first, uint64_t last, const sim::ScenarioSimOptions& sim_options) {
  for (uint64_t seed = first; seed <= last; ++seed) {
    const std::string diff = RunSeed(seed, sim_options);
    if (!diff.empty())
      return "seed " + std::to_string(seed) +
             " (replay: TESSERA_SWEEP_SEED=" + std::to_string(seed) + "): " + diff;
  }
  return "";
}

// The seeds 1..kSeeds in kShards tests of consecutive seeds, so that CTest runs them side by
// side (each shard is a test of its own) instead of one core playing all of them at the end.
constexpr int kShards = 4;
class HeadVsSimulatorSweep : public testing::TestWithParam<int> {};

TEST_P(HeadVsSimulatorSweep, RandomScenariosRecordTheSameHistory) {
  const int per_shard = (kSeeds + kShards - 1) / kShards;
  uint64_t first = 1 + static_cast<uint64_t>(GetParam() * per_shard);
  uint64_t last = std::min<uint64_t>(kSeeds, first + per_shard - 1);
  if (const char* one = std::getenv("TESSERA_SWEEP_SEED")) {
    if (GetParam() != 0) GTEST_SKIP() << "TESSERA_SWEEP_SEED replays one seed, in shard 0";
    first = last = std::strtoull(one, nullptr, 10);
  }
  const std::string failure = Sweep(first, last, MatchingSimOptions());
  ASSERT_TRUE(failure.empty()) << failure;
}

INSTANTIATE_TEST_SUITE_P(Seeds, HeadVsSimulatorSweep, testing::Range(0, kShards),
                         [](const testing::TestParamInfo<int>& shard) {
                           return "Shard" + std::to_string(shard.param);
                         });

// The sweep can fail. A simulator given a legitimate configuration that is not the head's (a
// lease twice as long: a silent host is lost 4 s later than the head loses it) must diverge on
// some seed among the first few dozen, and the failure must read as the sweep's failures do: the
// seed, the second, then the first differing record with both sides' versions of it.
TEST(HeadVsSimulatorSweepCheck, CatchesASimulatorWithAnotherLease) {
  sim::ScenarioSimOptions longer = MatchingSimOptions();
  longer.lease_ms = 2 * kLeaseS * 1000 - 1;
  constexpr uint64_t kFirst = 1, kLast = 40;
  const std::string failure = Sweep(kFirst, kLast, longer);
  ASSERT_FALSE(failure.empty()) << "seeds " << kFirst << ".." << kLast
                                << " all agree with a simulator whose lease is " << longer.lease_ms
                                << " ms, the head's " << MatchingSimOptions().lease_ms << " ms";
  SCOPED_TRACE(failure);
  std::vector<std::string> lines;
  for (size_t at = 0; at <= failure.size();) {
    size_t end = failure.find('\n', at);
    if (end == std::string::npos) end = failure.size();
    lines.push_back(failure.substr(at, end - at));
    at = end + 1;
  }
  ASSERT_GE(lines.size(), 5u);

  // "seed S (replay: TESSERA_SWEEP_SEED=S): t=T KIND/NAME differs (head -> simulator: PATCH)"
  const std::string& first = lines[0];
  ASSERT_EQ(first.rfind("seed ", 0), 0u);
  size_t end = 0;
  const uint64_t seed = std::stoull(first.substr(5), &end);
  ASSERT_GE(seed, kFirst);
  ASSERT_LE(seed, kLast);
  std::string rest = first.substr(5 + end);
  const std::string replay = " (replay: TESSERA_SWEEP_SEED=" + std::to_string(seed) + "): t=";
  ASSERT_EQ(rest.rfind(replay, 0), 0u);
  rest = rest.substr(replay.size());
  const int64_t t = std::stoll(rest, &end);
  EXPECT_GE(t, 0);
  EXPECT_LT(t, kSeconds);
  EXPECT_TRUE(t % kCompareEveryS == 0 || t == kSeconds - 1) << "not a comparison second: " << t;
  rest = rest.substr(end);
  const std::string differs = " differs (head -> simulator: ";
  const size_t at = rest.find(differs);
  ASSERT_NE(at, std::string::npos);
  const std::string record = rest.substr(1, at - 1);
  EXPECT_TRUE(record.rfind("trainjob/", 0) == 0 || record.rfind("service/", 0) == 0) << record;
  ASSERT_EQ(rest.back(), ')');
  const Json patch =
      Json::parse(rest.substr(at + differs.size(), rest.size() - at - differs.size() - 1));
  ASSERT_TRUE(patch.is_array());
  EXPECT_FALSE(patch.empty());

  // "  head:      STATUS", "  simulator: STATUS": two different statuses the patch maps across.
  ASSERT_EQ(lines[1].rfind("  head:      {", 0), 0u);
  ASSERT_EQ(lines[2].rfind("  simulator: {", 0), 0u);
  const Json head = Json::parse(lines[1].substr(13)), sim = Json::parse(lines[2].substr(13));
  EXPECT_NE(head, sim);
  EXPECT_EQ(head.patch(patch), sim);

  // Then the scenario, which has a host go silent by then: the agents here send no liveness
  // ticks, so the lease (also the hang verdicts' alive timeout) decides only when one is lost.
  ASSERT_EQ(lines[3], "scenario:");
  bool silent = false;
  for (size_t i = 4; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i].rfind("  t=", 0), 0u) << lines[i];
    if (lines[i].find(" host-down ") != std::string::npos && std::stoll(lines[i].substr(4)) <= t)
      silent = true;
  }
  EXPECT_TRUE(silent) << "no host went silent by t=" << t;

  // With the head's lease, the same seed agrees: the lease made the difference.
  EXPECT_EQ(RunSeed(seed, MatchingSimOptions()), "");
}

}  // namespace
}  // namespace tessera::controller
