// The serving simulation's engine (serving_sim.h): the discrete-event replay of a trace against one
// Service under one scaling configuration, and RunServingSimulation. The trace reader is in
// llm_trace.cc, the scaling configurations and option checks in serving_config.cc.
#include "sim/serving_sim.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <queue>
#include <set>

#include "common/rng.h"
#include "proxy/dispatcher.h"
#include "sim/sim_effects.h"
#include "workload/service_lifecycle.h"

namespace tessera::sim {
namespace {

// ---------------------------------------------------------------------------------------------
// Metrics

LatencySummary Summarize(std::vector<double> v) {
  LatencySummary s;
  s.count = static_cast<int64_t>(v.size());
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    const double pos = q * static_cast<double>(v.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
  };
  s.p50_ms = at(0.5);
  s.p99_ms = at(0.99);
  double sum = 0;
  for (double x : v) sum += x;
  s.mean_ms = sum / static_cast<double>(v.size());
  return s;
}

// ---------------------------------------------------------------------------------------------
// The engine

// The lifecycle reads 0 as "never" in a few timestamps: its clock starts one second in.
constexpr int64_t kLifecycleEpochMs = 1'000;
constexpr double kDoneTokens = 1e-6;

class NoFailures : public ClusterView {
 public:
  bool HostLost(const std::string&) const override { return false; }
  int LargestFitWithoutJob(const TrainJob&, int, int) const override { return 0; }
  int FreeSlices(Generation, const Shape&) const override { return free_slices; }
  int free_slices = -1;  // the cluster's free slices of the role's shape; -1: unlimited
};

enum class EventType {
  kArrival,
  kReplicaStep,
  kQueueTimeout,
  kProbe,
  kStopDeadline,
  kTick,
  kReport,
  kSample
};

struct Event {
  int64_t t_us = 0;
  uint64_t seq = 0;
  EventType type = EventType::kArrival;
  uint64_t a = 0;  // request index or group owner
  uint64_t b = 0;  // version or incarnation
  bool operator>(const Event& o) const { return t_us != o.t_us ? t_us > o.t_us : seq > o.seq; }
};

enum class RequestState { kPending, kQueued, kRunning, kDone, kRejected, kTimedOut, kFailed };

struct RequestRun {
  RequestState state = RequestState::kPending;
  int64_t arrival_us = 0;
  int output_tokens = 1;
  uint64_t owner = 0;    // the group serving it
  double remaining = 0;  // output tokens left to decode
  int64_t first_token_us = -1;
  int64_t end_us = -1;
};

// One placed group: its slice, and the model of its server.
struct Group {
  uint64_t owner = 0;
  ReplicaKey key;
  int incarnation = 0;
  int slice = 0;
  std::string endpoint_key;
  int64_t placed_us = 0;
  int64_t ready_at_us = 0;
  bool stopping = false;
  std::deque<uint64_t> prefill_queue;
  int64_t prefilling = -1;  // request index
  int64_t prefill_end_us = 0;
  std::vector<uint64_t> decoding;
  int64_t updated_us = 0;
  uint64_t version = 0;
  size_t InFlight() const {
    return prefill_queue.size() + (prefilling >= 0 ? 1 : 0) + decoding.size();
  }
};

class Engine {
 public:
  Engine(const LlmTrace& trace, const ScalingConfig& config, const ServingSimOptions& o,
         const SliceTopology& topology)
      : trace_(trace),
        o_(o),
        topology_(topology),
        rng_(o.seed),
        dispatcher_(o.max_queued),
        requests_(trace.requests.size()) {
    result_.config = config;
    result_.chips_per_replica = topology.chips();
    result_.requests = static_cast<int64_t>(trace.requests.size());
  }

  Result<ServingRunResult> Run() {
    ServiceSpec spec;
    spec.name = "sim";
    ServiceRoleSpec role;
    role.accelerator = o_.accelerator;
    role.topology = o_.topology;
    role.command = {"model-server"};
    role.replicas = result_.config.replicas;
    role.autoscaling = result_.config.autoscaling;
    role.max_ongoing_requests = o_.max_ongoing_requests;
    role.readiness.period_ms = o_.probe_period_ms;
    role.readiness.startup_grace_ms = o_.startup_grace_ms;
    role.grace_ms = o_.grace_ms;
    role_name_ = role.name;
    spec.roles.push_back(role);
    service_ = ServiceLifecycle::Create(spec, 1, Ms(0));

    for (size_t i = 0; i < trace_.requests.size(); ++i) {
      const LlmRequest& r = trace_.requests[i];
      requests_[i].arrival_us = static_cast<int64_t>(std::llround(
          static_cast<double>(r.arrival_us - trace_.requests[0].arrival_us) / o_.time_scale));
      requests_[i].output_tokens = std::max(1, r.generated_tokens);
      Push(requests_[i].arrival_us, EventType::kArrival, i, 0);
      drain_limit_us_ = requests_[i].arrival_us + int64_t{7} * 86'400'000'000;
    }
    // Deployed before the traffic: the initial groups are placed and ready at the first arrival.
    Settle(0);
    for (auto& [owner, g] : groups_) {
      g.ready_at_us = 0;
      TESSERA_RETURN_IF_ERROR(Probe(owner, g.incarnation, 0, /*reschedule=*/false));
    }
    Settle(0);
    Push(0, EventType::kTick, 0, 0);
    Push(0, EventType::kReport, 0, 0);
    Push(0, EventType::kSample, 0, 0);

    while (!events_.empty() && resolved_ < requests_.size()) {
      const Event e = events_.top();
      events_.pop();
      now_us_ = e.t_us;
      if (now_us_ > drain_limit_us_)
        return Internal(
            "serving simulation: requests still unresolved 7 days after the last "
            "arrival (a configuration that can never serve them)");
      Hash(static_cast<uint64_t>(e.t_us));
      Hash(static_cast<uint64_t>(e.type));
      Hash(e.a);
      Hash(e.b);
      switch (e.type) {
        case EventType::kArrival:
          Arrive(e.a);
          break;
        case EventType::kReplicaStep:
          Step(e.a, e.b);
          break;
        case EventType::kQueueTimeout:
          QueueTimeout(e.a);
          break;
        case EventType::kProbe:
          TESSERA_RETURN_IF_ERROR(Probe(e.a, static_cast<int>(e.b), now_us_, true));
          break;
        case EventType::kStopDeadline:
          StopDeadline(e.a);
          break;
        case EventType::kTick:
          TESSERA_RETURN_IF_ERROR(Tick());
          Push(now_us_ + o_.tick_ms * 1000, EventType::kTick, 0, 0);
          break;
        case EventType::kReport: {
          const proxy::DispatchLoad load = dispatcher_.Load();
          LoadSample sample;
          sample.time_ms = Ms(now_us_);
          sample.ongoing_requests = static_cast<double>(load.in_flight + load.queued);
          sample.queued_requests = static_cast<double>(load.queued);
          sample.completed = completed_;
          sample.refused = static_cast<int64_t>(load.refused);
          sample.output_tokens = output_tokens_;
          sample.ttft_count = ttft_count_;
          sample.ttft_sum_ms = ttft_sum_ms_;
          sample.tpot_count = tpot_count_;
          sample.tpot_sum_ms = tpot_sum_ms_;
          life_.Load(service_, role_name_, sample);
          Push(now_us_ + o_.report_ms * 1000, EventType::kReport, 0, 0);
          break;
        }
        case EventType::kSample:
          Sample();
          Push(now_us_ + o_.series_interval_ms * 1000, EventType::kSample, 0, 0);
          break;
      }
      if (!error_.ok()) return error_;
    }
    if (resolved_ < requests_.size())
      return Internal("serving simulation: the event queue ran dry with " +
                      std::to_string(requests_.size() - resolved_) + " requests unresolved");
    Finish();
    return std::move(result_);
  }

 private:
  int64_t Ms(int64_t us) const { return us / 1000 + kLifecycleEpochMs; }

  void Push(int64_t t_us, EventType type, uint64_t a, uint64_t b) {
    events_.push(Event{t_us, next_seq_++, type, a, b});
  }

  void Hash(uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      hash_ ^= (v >> (8 * i)) & 0xff;
      hash_ *= 1099511628211ull;
    }
  }

  RoleStatus& Role() { return *service_.status.Role(role_name_); }

  // --- the lifecycle ---------------------------------------------------------------------------

  // The serving simulation's side of the head's applier (workload/effects_applier.h): a commit
  // folds its events into the hash; a freed group's slice is free again at once.
  class Sink final : public SimEffectsSink<Service> {
   public:
    explicit Sink(Engine& engine) : engine_(engine) {}
    Result<int64_t> Commit(const Service& service, const Effects& effects) override {
      for (const JobEvent& ev : effects.events)
        for (char c : ev.reason) engine_.Hash(static_cast<uint8_t>(c));
      return SimEffectsSink<Service>::Commit(service, effects);
    }
    void Release(uint64_t owner) override { engine_.FreeGroup(owner); }

   private:
    Engine& engine_;
  };

  void Apply(ServiceEffects e) {
    if (Status s = ApplyEffects(service_, std::move(e), sink_); !s.ok() && error_.ok()) error_ = s;
  }

  void FreeGroup(uint64_t owner) {
    auto it = groups_.find(owner);
    if (it == groups_.end()) return;
    Group& g = it->second;
    if (g.InFlight() > 0 && error_.ok())
      error_ = Internal("serving simulation: the lifecycle freed the slice of replica " +
                        std::to_string(g.key.replica) + " with requests still running");
    result_.chip_us += topology_.chips() * (now_us_ - g.placed_us);
    free_slices_.insert(g.slice);
    owner_by_key_.erase(g.endpoint_key);
    groups_.erase(it);
  }

  // After every step, as the controller does after its steps: stops, placement, endpoints.
  void Settle(int64_t now) {
    SyncStops(now);
    PlaceWaiting(now);
    SyncEndpoints();
  }

  void PlaceWaiting(int64_t now) {
    for (const ReplicaKey& key : ServiceLifecycle::WaitingForSlice(service_)) {
      const int in_use = static_cast<int>(groups_.size());
      if (o_.cluster_slices > 0 && in_use >= o_.cluster_slices && free_slices_.empty()) {
        Apply(life_.SetPending(service_, key, "Unschedulable",
                               "all " + std::to_string(o_.cluster_slices) + " " +
                                   o_.topology.ToString() + " slices are in use"));
        continue;
      }
      int slice;
      if (!free_slices_.empty()) {
        slice = *free_slices_.begin();
        free_slices_.erase(free_slices_.begin());
      } else {
        slice = next_slice_++;
      }
      GroupPlacement p;
      p.owner = next_owner_++;
      p.slice = "slice-" + std::to_string(slice);
      for (int w = 0; w < topology_.hosts(); ++w) {
        p.hosts.push_back({p.slice + "-h" + std::to_string(w),
                           "g" + std::to_string(p.owner) + ".w" + std::to_string(w)});
        p.ports.push_back(8000);
      }
      Apply(life_.Place(service_, key, p, Ms(now)));
      const ReplicaStatus* r = Replica(key);
      if (r == nullptr || r->owner != p.owner) {
        free_slices_.insert(slice);
        continue;
      }
      Group g;
      g.owner = p.owner;
      g.key = key;
      g.incarnation = r->incarnation;
      g.slice = slice;
      g.endpoint_key = p.hosts[0].address + ":8000";
      g.placed_us = now;
      g.updated_us = now;
      g.ready_at_us = now + o_.model.startup_ms * 1000;
      owner_by_key_[g.endpoint_key] = g.owner;
      groups_[g.owner] = g;
      ++result_.groups_started;
      result_.max_placed = std::max(result_.max_placed, static_cast<int>(groups_.size()));
      for (int w = 0; w < topology_.hosts(); ++w)
        Apply(life_.ProcessRunning(service_, key, g.incarnation, w,
                                   static_cast<int64_t>(p.owner * 1000 + w)));
      Push(now + o_.probe_period_ms * 1000, EventType::kProbe, g.owner,
           static_cast<uint64_t>(g.incarnation));
    }
  }

  const ReplicaStatus* Replica(const ReplicaKey& key) {
    const RoleStatus* role = service_.status.Role(key.role);
    if (role == nullptr) return nullptr;
    for (const ReplicaStatus& r : role->replicas)
      if (r.replica == key.replica) return &r;
    return nullptr;
  }

  // Groups the lifecycle is stopping: they leave routing; once their requests are done (or the
  // grace runs out) every host confirms.
  void SyncStops(int64_t now) {
    std::vector<uint64_t> drained;
    for (const ReplicaStatus& r : Role().replicas) {
      if (!r.stopping || !r.placed()) continue;
      auto it = groups_.find(r.owner);
      if (it == groups_.end()) continue;
      Group& g = it->second;
      if (!g.stopping) {
        g.stopping = true;
        Push(now + o_.grace_ms * 1000, EventType::kStopDeadline, g.owner, 0);
      }
      if (g.InFlight() == 0) drained.push_back(g.owner);
    }
    for (uint64_t owner : drained) ConfirmStopped(owner);
  }

  void ConfirmStopped(uint64_t owner) {
    auto it = groups_.find(owner);
    if (it == groups_.end()) return;
    const ReplicaKey key = it->second.key;
    const ReplicaStatus* r = Replica(key);
    if (r == nullptr || r->owner != owner || !r->stopping) return;
    const std::set<std::string> hosts = r->unconfirmed;
    for (const std::string& host : hosts) Apply(life_.ConfirmStopped(service_, key, host, view_));
  }

  void SyncEndpoints() {
    std::vector<proxy::Endpoint> ready;
    for (const tessera::Endpoint& e : service_.Endpoints()) {
      if (!e.ready || e.role != role_name_) continue;
      proxy::Endpoint p;
      p.replica = e.replica;
      p.generation = e.generation;
      p.address = e.address;
      p.port = static_cast<uint16_t>(e.port);
      ready.push_back(std::move(p));
    }
    if (ready == endpoints_) return;
    endpoints_ = ready;
    StartGrants(dispatcher_.SetEndpoints(std::move(ready), o_.max_ongoing_requests, rng_));
  }

  Status Tick() {
    const int before = Role().desired_replicas;
    view_.free_slices = o_.cluster_slices > 0
                            ? std::max(0, o_.cluster_slices - static_cast<int>(groups_.size()))
                            : -1;
    Apply(life_.Tick(service_, view_, Ms(now_us_)));
    const RoleStatus& role = Role();
    if (role.desired_replicas != before) {
      result_.scale_events.push_back({static_cast<double>(now_us_) / 1e6, before,
                                      role.desired_replicas, role.autoscaler.reason});
      Hash(static_cast<uint64_t>(role.desired_replicas));
    }
    Settle(now_us_);
    return Status::Ok();
  }

  Status Probe(uint64_t owner, int incarnation, int64_t now, bool reschedule) {
    auto it = groups_.find(owner);
    if (it == groups_.end() || it->second.incarnation != incarnation || it->second.stopping)
      return Status::Ok();
    const Group& g = it->second;
    const bool ready = now >= g.ready_at_us;
    const ReplicaKey key = g.key;
    Apply(life_.Readiness(service_, key, incarnation, ready,
                          ready ? "" : "connection refused (the server is starting)", view_,
                          Ms(now)));
    if (reschedule)
      Push(now + o_.probe_period_ms * 1000, EventType::kProbe, owner,
           static_cast<uint64_t>(incarnation));
    Settle(now);
    return Status::Ok();
  }

  // --- the router ------------------------------------------------------------------------------

  void Arrive(uint64_t id) {
    const proxy::Dispatcher::Admission a = dispatcher_.Admit(id, rng_);
    switch (a.outcome) {
      case proxy::Dispatcher::Outcome::kGranted:
        StartGrants({proxy::Grant{id, a.endpoint}});
        break;
      case proxy::Dispatcher::Outcome::kQueued:
        requests_[id].state = RequestState::kQueued;
        if (o_.queue_timeout_ms > 0)
          Push(now_us_ + o_.queue_timeout_ms * 1000, EventType::kQueueTimeout, id, 0);
        break;
      case proxy::Dispatcher::Outcome::kRejected:
        Resolve(id, RequestState::kRejected);
        break;
    }
  }

  void QueueTimeout(uint64_t id) {
    if (requests_[id].state == RequestState::kQueued && dispatcher_.Cancel(id))
      Resolve(id, RequestState::kTimedOut);
  }

  void StartGrants(const std::vector<proxy::Grant>& grants) {
    for (const proxy::Grant& grant : grants) {
      auto owner = owner_by_key_.find(grant.endpoint.Key());
      if (owner == owner_by_key_.end()) {
        if (error_.ok())
          error_ = Internal("serving simulation: the dispatcher chose " + grant.endpoint.Key() +
                            ", which no group serves");
        continue;
      }
      RequestRun& q = requests_[grant.request];
      q.state = RequestState::kRunning;
      q.owner = owner->second;
      Group& g = groups_.at(owner->second);
      Advance(g);
      g.prefill_queue.push_back(grant.request);
      StartPrefill(g);
      Reschedule(g);
    }
  }

  void Resolve(uint64_t id, RequestState state) {
    requests_[id].state = state;
    requests_[id].end_us = now_us_;
    ++resolved_;
    end_us_ = std::max(end_us_, now_us_);
  }

  // A request ended on its group (done or killed): its router slot is free.
  void Leave(Group& g, uint64_t id, RequestState state) {
    Resolve(id, state);
    if (state == RequestState::kDone) {
      // What the router measures of a finished stream (the autoscaler's SLO signal).
      const RequestRun& q = requests_[id];
      ++completed_;
      output_tokens_ += q.output_tokens;
      ++ttft_count_;
      ttft_sum_ms_ += static_cast<double>(q.first_token_us - q.arrival_us) / 1e3;
      if (q.output_tokens >= 2) {
        ++tpot_count_;
        tpot_sum_ms_ += static_cast<double>(q.end_us - q.first_token_us) / 1e3 /
                        static_cast<double>(q.output_tokens - 1);
      }
    }
    const std::string key = g.endpoint_key;
    StartGrants(dispatcher_.Release(key, rng_));
  }

  // --- the replica model -----------------------------------------------------------------------

  double DecodeRate(const Group& g) const {
    return DecodeTokensPerSecond(o_.model, g.decoding.size());
  }

  void Advance(Group& g) {
    if (g.prefilling < 0 && !g.decoding.empty() && now_us_ > g.updated_us) {
      const double tokens = DecodeRate(g) * static_cast<double>(now_us_ - g.updated_us) / 1e6;
      for (uint64_t id : g.decoding) requests_[id].remaining -= tokens;
    }
    g.updated_us = now_us_;
  }

  void StartPrefill(Group& g) {
    if (g.prefilling >= 0 || g.prefill_queue.empty()) return;
    g.prefilling = static_cast<int64_t>(g.prefill_queue.front());
    g.prefill_queue.pop_front();
    const double s = trace_.requests[static_cast<size_t>(g.prefilling)].context_tokens /
                     o_.model.prefill_tokens_per_s;
    g.prefill_end_us = now_us_ + std::max<int64_t>(1, static_cast<int64_t>(std::ceil(s * 1e6)));
  }

  void Reschedule(Group& g) {
    ++g.version;
    int64_t t;
    if (g.prefilling >= 0) {
      t = g.prefill_end_us;
    } else if (!g.decoding.empty()) {
      double least = requests_[g.decoding[0]].remaining;
      for (uint64_t id : g.decoding) least = std::min(least, requests_[id].remaining);
      t = now_us_ +
          std::max<int64_t>(0, static_cast<int64_t>(std::ceil(least / DecodeRate(g) * 1e6)));
    } else {
      return;
    }
    Push(t, EventType::kReplicaStep, g.owner, g.version);
  }

  void Step(uint64_t owner, uint64_t version) {
    auto it = groups_.find(owner);
    if (it == groups_.end() || it->second.version != version) return;
    Group& g = it->second;
    Advance(g);
    std::vector<uint64_t> finished;
    if (g.prefilling >= 0) {
      if (now_us_ >= g.prefill_end_us) {
        const uint64_t id = static_cast<uint64_t>(g.prefilling);
        RequestRun& q = requests_[id];
        q.first_token_us = now_us_;
        q.remaining = q.output_tokens - 1;
        if (q.output_tokens <= 1)
          finished.push_back(id);
        else
          g.decoding.push_back(id);
        g.prefilling = -1;
        StartPrefill(g);
      }
    } else {
      std::erase_if(g.decoding, [&](uint64_t id) {
        if (requests_[id].remaining > kDoneTokens) return false;
        finished.push_back(id);
        return true;
      });
    }
    Reschedule(g);
    for (uint64_t id : finished) Leave(g, id, RequestState::kDone);
    if (g.stopping && g.InFlight() == 0) {
      ConfirmStopped(owner);
      Settle(now_us_);
    }
  }

  // The grace period of a stopped group is over: whatever still runs is killed.
  void StopDeadline(uint64_t owner) {
    auto it = groups_.find(owner);
    if (it == groups_.end() || !it->second.stopping) return;
    Group& g = it->second;
    std::vector<uint64_t> killed(g.prefill_queue.begin(), g.prefill_queue.end());
    if (g.prefilling >= 0) killed.push_back(static_cast<uint64_t>(g.prefilling));
    killed.insert(killed.end(), g.decoding.begin(), g.decoding.end());
    g.prefill_queue.clear();
    g.prefilling = -1;
    g.decoding.clear();
    ++g.version;
    for (uint64_t id : killed) Leave(g, id, RequestState::kFailed);
    ConfirmStopped(owner);
    Settle(now_us_);
  }

  // --- results ---------------------------------------------------------------------------------

  void Sample() {
    const proxy::DispatchLoad load = dispatcher_.Load();
    ReplicaPoint p;
    p.time_s = static_cast<double>(now_us_) / 1e6;
    p.desired = Role().desired_replicas;
    p.placed = static_cast<int>(groups_.size());
    p.ready = static_cast<int>(endpoints_.size());
    p.ongoing = load.in_flight + load.queued;
    p.queued = load.queued;
    result_.series.push_back(p);
  }

  void Finish() {
    now_us_ = end_us_;
    Sample();
    for (const auto& [owner, g] : groups_)
      result_.chip_us += topology_.chips() * (end_us_ - g.placed_us);
    result_.duration_us = end_us_;
    result_.chip_hours = static_cast<double>(result_.chip_us) / 3.6e9;
    result_.replica_hours =
        static_cast<double>(result_.chip_us) / static_cast<double>(topology_.chips()) / 3.6e9;
    std::vector<double> ttft, tpot, latency;
    const auto window_of = [&](int64_t us) {
      return static_cast<size_t>(us / (o_.oracle_window_ms * 1000));
    };
    const size_t windows = window_of(end_us_) + 1;
    result_.window_requests.assign(windows, 0);
    result_.early_cut_us = std::max<int64_t>(0, (o_.model.startup_ms - o_.slo.ttft_ms) * 1000);
    result_.window_met.assign(windows, 0);
    result_.window_early_met.assign(windows, 0);
    result_.window_early_ttft_met.assign(windows, 0);
    for (const RequestRun& q : requests_) {
      ++result_.window_requests[window_of(q.arrival_us)];
      if (q.arrival_us < result_.early_cut_us) ++result_.early_requests;
    }
    for (const RequestRun& q : requests_) {
      switch (q.state) {
        case RequestState::kDone: {
          ++result_.completed;
          const double first = static_cast<double>(q.first_token_us - q.arrival_us) / 1e3;
          ttft.push_back(first);
          latency.push_back(static_cast<double>(q.end_us - q.arrival_us) / 1e3);
          bool met = first <= static_cast<double>(o_.slo.ttft_ms);
          if (q.output_tokens >= 2) {
            const double per = static_cast<double>(q.end_us - q.first_token_us) / 1e3 /
                               static_cast<double>(q.output_tokens - 1);
            tpot.push_back(per);
            met = met && per <= o_.slo.tpot_ms;
          }
          result_.slo_met += met ? 1 : 0;
          const size_t window = window_of(q.arrival_us);
          if (met) ++result_.window_met[window];
          if (q.arrival_us < result_.early_cut_us) {
            if (met) ++result_.window_early_met[window];
            if (first <= static_cast<double>(o_.slo.ttft_ms))
              ++result_.window_early_ttft_met[window];
          }
          break;
        }
        case RequestState::kRejected:
          ++result_.rejected;
          break;
        case RequestState::kTimedOut:
          ++result_.timed_out;
          break;
        case RequestState::kFailed:
          ++result_.failed;
          break;
        default:
          break;
      }
    }
    result_.slo_attainment = result_.requests == 0 ? 0
                                                   : static_cast<double>(result_.slo_met) /
                                                         static_cast<double>(result_.requests);
    result_.ttft = Summarize(std::move(ttft));
    result_.tpot = Summarize(std::move(tpot));
    result_.latency = Summarize(std::move(latency));
    result_.event_hash = hash_;
  }

  const LlmTrace& trace_;
  const ServingSimOptions& o_;
  const SliceTopology& topology_;
  ServiceLifecycle life_;
  NoFailures view_;
  Service service_;
  std::string role_name_;
  Rng rng_;
  proxy::Dispatcher dispatcher_;
  std::vector<proxy::Endpoint> endpoints_;
  std::vector<RequestRun> requests_;
  std::map<uint64_t, Group> groups_;              // by owner
  std::map<std::string, uint64_t> owner_by_key_;  // endpoint key -> owner
  std::set<int> free_slices_;
  int next_slice_ = 0;
  uint64_t next_owner_ = 1;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  uint64_t next_seq_ = 0;
  int64_t now_us_ = 0;
  int64_t end_us_ = 0;
  int64_t drain_limit_us_ = 0;
  size_t resolved_ = 0;
  int64_t completed_ = 0;  // the router's cumulative stream counters
  int64_t output_tokens_ = 0;
  int64_t ttft_count_ = 0;
  double ttft_sum_ms_ = 0;
  int64_t tpot_count_ = 0;
  double tpot_sum_ms_ = 0;
  uint64_t hash_ = 1469598103934665603ull;
  Status error_ = Status::Ok();
  ServingRunResult result_;
  Sink sink_{*this};
};

}  // namespace

double DecodeTokensPerSecond(const ReplicaModel& model, size_t decoding) {
  const double n = static_cast<double>(std::max<size_t>(decoding, 1));
  const std::vector<DecodeRow>& table = model.decode_table;
  if (table.empty())
    return std::min(model.decode_tokens_per_s_per_request, model.decode_tokens_per_s / n);
  double per_request = table.back().per_request_tokens_per_s;
  double per_group = table.back().per_group_tokens_per_s;
  if (n <= table.front().concurrency) {
    per_request = table.front().per_request_tokens_per_s;
    per_group = table.front().per_group_tokens_per_s;
  }
  for (size_t i = 1; i < table.size() && n > table.front().concurrency; ++i) {
    const DecodeRow& lo = table[i - 1];
    const DecodeRow& hi = table[i];
    if (n > hi.concurrency) continue;
    const double f = (n - lo.concurrency) / static_cast<double>(hi.concurrency - lo.concurrency);
    per_request = lo.per_request_tokens_per_s +
                  f * (hi.per_request_tokens_per_s - lo.per_request_tokens_per_s);
    per_group =
        lo.per_group_tokens_per_s + f * (hi.per_group_tokens_per_s - lo.per_group_tokens_per_s);
    break;
  }
  return std::min(per_request, per_group / n);
}

Result<ServingRunResult> RunServingSimulation(const LlmTrace& trace, const ScalingConfig& config,
                                              const ServingSimOptions& options) {
  TESSERA_RETURN_IF_ERROR(ValidateServingOptions(options));
  if (trace.requests.empty()) return InvalidArgument("trace: no requests to replay");
  if (config.autoscaling) {
    const AutoscalerConfig& a = *config.autoscaling;
    if (a.min_replicas < 0 || a.max_replicas < 1 || a.min_replicas > a.max_replicas ||
        (a.initial_replicas >= 0 &&
         (a.initial_replicas < a.min_replicas || a.initial_replicas > a.max_replicas)) ||
        !(a.target_ongoing_requests >= 0) || a.upscale_delay_ms < 0 || a.downscale_delay_ms < 0 ||
        a.lookback_ms <= 0 || !(a.target_ttft_ms >= 0) || !(a.target_tpot_ms >= 0))
      return InvalidArgument(
          "configuration " + config.name +
          ": needs 0 <= min <= initial <= max, max >= 1, targets >= 0, a positive "
          "look-back, and delays >= 0");
  } else if (config.replicas < 1) {
    return InvalidArgument("configuration " + config.name + ": needs 1 replica or more");
  }
  auto topology = SliceTopology::Make(options.accelerator, options.topology);
  if (!topology.ok()) return topology.status();
  Engine engine(trace, config, options, *topology);
  return engine.Run();
}

}  // namespace tessera::sim
