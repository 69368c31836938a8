#include "sim/gpu_sim.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <queue>
#include <set>
#include <sstream>
#include <tuple>

namespace tessera::sim {
namespace {

struct GpuSimJob {
  int gpus = 1;
  int64_t submit_s = 0;
  int64_t duration_s = 1;
  GpuRequest request;
  bool whole_host = false;
  // Run state.
  int64_t start_s = -1;
  int64_t end_s = -1;
  int version = 0;  // bumped when a move changes end_s; stale finish events are skipped
  GpuPlacement placement;
};

uint64_t GpuSimMix(uint64_t h, uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  return h;
}

double GpuSimPercentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

GpuClassStats GpuSimStats(std::string name, std::string sizes, const std::vector<double>& waits) {
  GpuClassStats s;
  s.name = std::move(name);
  s.sizes = std::move(sizes);
  s.jobs = static_cast<int64_t>(waits.size());
  s.p50_wait_h = GpuSimPercentile(waits, 0.5) / 3600;
  s.p95_wait_h = GpuSimPercentile(waits, 0.95) / 3600;
  double sum = 0;
  for (double w : waits) sum += w;
  s.mean_wait_h = waits.empty() ? 0 : sum / static_cast<double>(waits.size()) / 3600;
  return s;
}

class GpuSimRun {
 public:
  GpuSimRun(const GpuSimOptions& o, std::vector<GpuSimJob> jobs)
      : o_(o),
        jobs_(std::move(jobs)),
        fleet_(GpuFleet::Make(o.system, o.domains)),
        held_by_(fleet_.hosts.size()) {}

  GpuSimResult Run();
  // Empty, or what broke the simulator's own accounting (a bug, never input).
  const std::string& broken() const { return broken_; }

 private:
  using Finish = std::tuple<int64_t, int, int>;  // end, job, version

  void Start(int j, const GpuPlacement& p, int64_t now);
  void Schedule(int64_t now);
  // tessera: the hosts held for the oldest blocked whole-host job, and moves off them.
  void HoldAndMove();
  std::vector<int> ChooseHeld(const GpuSimJob& job) const;

  const GpuSimOptions& o_;
  std::vector<GpuSimJob> jobs_;
  GpuFleet fleet_;
  std::vector<std::set<int>> held_by_;  // per host: running jobs on it
  std::deque<int> queue_;               // waiting jobs, submission order
  std::priority_queue<Finish, std::vector<Finish>, std::greater<>> finishes_;
  std::vector<bool> held_;  // tessera: hosts held for held_for_
  int held_for_ = -1;
  GpuSimResult r_;
  double held_gpu_s_ = 0;
  std::string broken_;
};

void GpuSimRun::Start(int j, const GpuPlacement& p, int64_t now) {
  GpuSimJob& job = jobs_[j];
  // The plan came from this fleet a moment ago: applying it cannot fail unless the simulator
  // lost count of its GPUs, which the run reports as an internal error.
  if (Status s = ApplyGpuPlacement(fleet_, p); !s.ok()) {
    broken_ = "job " + std::to_string(j) + ": " + s.message();
    return;
  }
  job.placement = p;
  job.start_s = now;
  const double factor = p.spans() ? o_.span_slowdown : 1.0;
  job.end_s =
      now + std::max<int64_t>(1, static_cast<int64_t>(std::llround(job.duration_s * factor)));
  for (int h : p.hosts) held_by_[h].insert(j);
  finishes_.emplace(job.end_s, j, job.version);
  if (p.spans()) ++r_.spanned;
  held_gpu_s_ += static_cast<double>(p.gpus_per_host) * static_cast<double>(p.hosts.size()) *
                 static_cast<double>(job.end_s - now);
  r_.hash = GpuSimMix(r_.hash, static_cast<uint64_t>(j));
  r_.hash = GpuSimMix(r_.hash, static_cast<uint64_t>(now));
  for (int h : p.hosts) r_.hash = GpuSimMix(r_.hash, static_cast<uint64_t>(h));
}

void GpuSimRun::Schedule(int64_t now) {
  // A failure stays a failure for the rest of a pass (starts only take GPUs), so each
  // (size, rule) is planned at most once per pass until something fits.
  std::set<std::tuple<int, int, int>> failed;
  const bool holding = held_for_ >= 0;
  static const std::vector<bool> kNone;
  for (auto it = queue_.begin(); it != queue_.end();) {
    const int j = *it;
    const GpuSimJob& job = jobs_[j];
    const bool owner = j == held_for_;
    const auto key = std::make_tuple(job.gpus, static_cast<int>(job.request.rule.rule),
                                     job.request.rule.segment_hosts);
    if (!owner && failed.count(key)) {
      ++it;
      continue;
    }
    const GpuPlacement p =
        PlanGpu(fleet_, job.request, o_.policy, holding && !owner ? held_ : kNone);
    if (p.placed) {
      Start(j, p, now);
      if (owner) held_for_ = -1;
      it = queue_.erase(it);
      continue;
    }
    if (!owner) failed.insert(key);
    ++it;
  }
}

std::vector<int> GpuSimRun::ChooseHeld(const GpuSimJob& job) const {
  // Hosts the job could have if small jobs moved away: usable, holding no whole-host job,
  // NVLink-ready unless the rule is preferred. Cheapest = fewest GPUs in use.
  const int g = fleet_.gpus_per_host();
  const int n = (job.gpus + g - 1) / g;
  const DomainRuleSpec& rule = job.request.rule;
  const int unit = rule.rule == DomainRule::kSegment ? rule.segment_hosts : 1;
  std::vector<std::vector<std::pair<int, int>>> per_domain(fleet_.domains);  // (used, host)
  for (int h = 0; h < static_cast<int>(fleet_.hosts.size()); ++h) {
    const GpuHostState& s = fleet_.hosts[h];
    if (!s.usable) continue;
    if (rule.rule != DomainRule::kPreferred && !s.nvlink_ready) continue;
    bool movable = true;
    for (int other : held_by_[h]) movable = movable && !jobs_[other].whole_host;
    if (!movable) continue;
    per_domain[s.domain].emplace_back(g - s.free_gpus, h);
  }
  for (auto& d : per_domain) std::sort(d.begin(), d.end());
  // Candidate groups: the whole job in one domain (required), or segments of `unit` hosts.
  std::vector<std::pair<int, std::vector<int>>> groups;  // (cost, hosts)
  const int group = rule.rule == DomainRule::kRequired ? n : unit;
  for (const auto& d : per_domain) {
    for (size_t s = 0; s + group <= d.size(); s += group) {
      int cost = 0;
      std::vector<int> hosts;
      for (size_t i = s; i < s + group; ++i) cost += d[i].first, hosts.push_back(d[i].second);
      groups.emplace_back(cost, std::move(hosts));
      if (rule.rule == DomainRule::kRequired) break;  // one group per domain
    }
  }
  std::stable_sort(groups.begin(), groups.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<int> chosen;
  for (const auto& [cost, hosts] : groups) {
    if (static_cast<int>(chosen.size()) >= n) break;
    chosen.insert(chosen.end(), hosts.begin(), hosts.end());
  }
  if (static_cast<int>(chosen.size()) < n) return {};
  chosen.resize(n);
  return chosen;
}

void GpuSimRun::HoldAndMove() {
  held_for_ = -1;
  int owner = -1;
  for (int j : queue_) {
    if (jobs_[j].whole_host) {
      owner = j;
      break;
    }
  }
  if (owner < 0) return;
  const std::vector<int> chosen = ChooseHeld(jobs_[owner]);
  if (chosen.empty()) return;
  held_.assign(fleet_.hosts.size(), false);
  for (int h : chosen) held_[h] = true;
  held_for_ = owner;
  // Move every small job off the held hosts, or none.
  std::vector<int> movers;
  for (int h : chosen) {
    for (int j : held_by_[h]) movers.push_back(j);
  }
  std::sort(movers.begin(), movers.end());
  movers.erase(std::unique(movers.begin(), movers.end()), movers.end());
  if (movers.empty()) return;
  std::vector<std::pair<int, GpuPlacement>> moved;  // job, old placement
  bool all = true;
  for (int j : movers) {
    GpuSimJob& job = jobs_[j];
    ReleaseGpuPlacement(fleet_, job.placement);
    const GpuPlacement p = PlanGpu(fleet_, job.request, GpuPolicy::kTessera, held_);
    if (!p.placed || !ApplyGpuPlacement(fleet_, p).ok()) {
      all = false;
      // Back where it was: its GPUs were just released, so this cannot fail.
      if (Status s = ApplyGpuPlacement(fleet_, job.placement); !s.ok()) {
        broken_ = "moving job " + std::to_string(j) + ": " + s.message();
        return;
      }
      break;
    }
    moved.emplace_back(j, job.placement);
    job.placement = p;
  }
  if (!all) {
    for (auto it = moved.rbegin(); it != moved.rend(); ++it) {
      GpuSimJob& job = jobs_[it->first];
      ReleaseGpuPlacement(fleet_, job.placement);
      job.placement = it->second;
      // Its old GPUs were free until the move took them: restoring cannot fail.
      if (Status s = ApplyGpuPlacement(fleet_, job.placement); !s.ok()) {
        broken_ = "restoring job " + std::to_string(it->first) + ": " + s.message();
        return;
      }
    }
    return;
  }
  for (auto& [j, old] : moved) {
    GpuSimJob& job = jobs_[j];
    for (int h : old.hosts) held_by_[h].erase(j);
    for (int h : job.placement.hosts) held_by_[h].insert(j);
    job.end_s += o_.migrate_s;
    ++job.version;
    finishes_.emplace(job.end_s, j, job.version);
    ++r_.migrations;
    const double gpus = static_cast<double>(job.placement.gpus_per_host);
    r_.migrated_gpu_h += gpus * static_cast<double>(o_.migrate_s) / 3600;
    held_gpu_s_ += gpus * static_cast<double>(o_.migrate_s);
    r_.hash = GpuSimMix(r_.hash, 0xABCDull ^ static_cast<uint64_t>(j));
  }
}

GpuSimResult GpuSimRun::Run() {
  r_.policy = std::string(GpuPolicyName(o_.policy));
  r_.jobs = static_cast<int64_t>(jobs_.size());
  const int g = fleet_.gpus_per_host();
  const int gpd = Info(o_.system).gpus_per_domain();
  size_t next = 0;
  int64_t first_submit = jobs_.empty() ? 0 : jobs_.front().submit_s, last_end = first_submit;
  while (next < jobs_.size() || !finishes_.empty()) {
    int64_t now = next < jobs_.size() ? jobs_[next].submit_s : INT64_MAX;
    if (!finishes_.empty()) now = std::min(now, std::get<0>(finishes_.top()));
    while (!finishes_.empty() && std::get<0>(finishes_.top()) <= now) {
      auto [end, j, version] = finishes_.top();
      finishes_.pop();
      if (version != jobs_[j].version) continue;
      ReleaseGpuPlacement(fleet_, jobs_[j].placement);
      for (int h : jobs_[j].placement.hosts) held_by_[h].erase(j);
      last_end = std::max(last_end, end);
    }
    while (next < jobs_.size() && jobs_[next].submit_s <= now) {
      const int j = static_cast<int>(next++);
      // A job no empty fleet could hold is reported, not queued forever.
      const GpuFleet empty = GpuFleet::Make(o_.system, o_.domains);
      const GpuPlacement p = PlanGpu(empty, jobs_[j].request, o_.policy);
      if (!p.placed) {
        ++r_.never_placed;
        continue;
      }
      queue_.push_back(j);
    }
    Schedule(now);
    if (o_.policy == GpuPolicy::kTessera && o_.defrag) {
      HoldAndMove();
      if (held_for_ >= 0) Schedule(now);
    }
  }
  for (const GpuHostState& h : fleet_.hosts) {
    if (h.free_gpus != g && broken_.empty()) broken_ = "GPUs still held after the last job";
  }
  std::vector<double> small, domain, multi, all;
  for (const GpuSimJob& job : jobs_) {
    if (job.start_s < 0) continue;
    const double w = static_cast<double>(job.start_s - job.submit_s);
    all.push_back(w);
    (job.gpus <= gpd / 2 ? small : job.gpus <= gpd ? domain : multi).push_back(w);
  }
  r_.classes.push_back(GpuSimStats("small", "1-" + std::to_string(gpd / 2) + " GPUs", small));
  r_.classes.push_back(GpuSimStats(
      "domain", std::to_string(gpd / 2 + 1) + "-" + std::to_string(gpd) + " GPUs", domain));
  r_.classes.push_back(GpuSimStats("multi-domain", std::to_string(gpd + 1) + "+ GPUs", multi));
  r_.overall = GpuSimStats("all", "", all);
  r_.makespan_s = last_end - first_submit;
  const double capacity = static_cast<double>(fleet_.hosts.size()) * g *
                          static_cast<double>(std::max<int64_t>(1, r_.makespan_s));
  r_.utilisation = held_gpu_s_ / capacity;
  return r_;
}

}  // namespace

Result<GpuSimResult> RunGpuSimulation(const Workload& workload, const GpuSimOptions& options) {
  if (options.domains < 1) {
    return InvalidArgument(
        "domains: " + std::to_string(options.domains) +
        " must be at least 1 (--hosts for h100/h200, --domains for gb200-nvl72)");
  }
  if (options.migrate_s < 0) return InvalidArgument("migrate_s: must be >= 0");
  if (!(options.span_slowdown >= 1.0)) {
    return InvalidArgument("span_slowdown: must be >= 1 (1: spanning cliques costs nothing)");
  }
  const GpuSystemInfo& info = Info(options.system);
  std::vector<GpuSimJob> jobs;
  jobs.reserve(workload.jobs.size());
  for (const JobSpec& spec : workload.jobs) {
    GpuSimJob job;
    job.gpus = std::max(1, spec.accelerators * std::max(1, spec.num_slices));
    job.submit_s = spec.submit_s;
    job.duration_s = std::max<int64_t>(1, spec.duration_s);
    job.whole_host = job.gpus >= info.gpus_per_host;
    job.request.gpus = job.gpus;
    if (options.rule) {
      job.request.rule = *options.rule;
      const int hosts = (job.gpus + info.gpus_per_host - 1) / info.gpus_per_host;
      // A segment that does not divide a job (or a required job larger than a domain) cannot
      // be asked as written: such a job falls back to preferred, as a user would write it.
      if ((options.rule->rule == DomainRule::kSegment &&
           hosts % options.rule->segment_hosts != 0) ||
          (options.rule->rule == DomainRule::kRequired && job.gpus > info.gpus_per_domain())) {
        job.request.rule = DomainRuleSpec{DomainRule::kPreferred, 0};
      }
    } else {
      job.request.rule = DomainRuleSpec{
          job.gpus <= info.gpus_per_domain() ? DomainRule::kRequired : DomainRule::kPreferred, 0};
    }
    jobs.push_back(job);
  }
  GpuSimRun run(options, std::move(jobs));
  GpuSimResult result = run.Run();
  if (!run.broken().empty()) return Internal("gpu simulation: " + run.broken());
  return result;
}

void WriteGpuText(std::ostream& out, const GpuComparison& c) {
  out << "cluster:  " << c.cluster << "\nworkload: " << c.workload << "\noptions:  " << c.command
      << "\n\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-12s %-13s %-14s %6s %9s %9s %9s\n", "policy", "class",
                "sizes", "jobs", "p50 h", "p95 h", "mean h");
  out << line;
  for (const GpuSimResult& r : c.runs) {
    std::vector<GpuClassStats> rows = r.classes;
    rows.push_back(r.overall);
    for (const GpuClassStats& s : rows) {
      std::snprintf(line, sizeof line, "%-12s %-13s %-14s %6lld %9.2f %9.2f %9.2f\n",
                    r.policy.c_str(), s.name.c_str(), s.sizes.c_str(),
                    static_cast<long long>(s.jobs), s.p50_wait_h, s.p95_wait_h, s.mean_wait_h);
      out << line;
    }
  }
  out << "\n";
  std::snprintf(line, sizeof line, "%-12s %8s %8s %10s %12s %8s %12s\n", "policy", "spanned",
                "never", "moves", "moved GPU-h", "util %", "makespan d");
  out << line;
  for (const GpuSimResult& r : c.runs) {
    std::snprintf(line, sizeof line, "%-12s %8lld %8lld %10lld %12.1f %8.1f %12.1f\n",
                  r.policy.c_str(), static_cast<long long>(r.spanned),
                  static_cast<long long>(r.never_placed), static_cast<long long>(r.migrations),
                  r.migrated_gpu_h, 100 * r.utilisation, static_cast<double>(r.makespan_s) / 86400);
    out << line;
  }
  // The goal, against slurm-block when both ran.
  const GpuSimResult *t = nullptr, *s = nullptr;
  for (const GpuSimResult& r : c.runs) {
    if (r.policy == "tessera") t = &r;
    if (r.policy == "slurm-block") s = &r;
  }
  if (t != nullptr && s != nullptr && t->classes[1].jobs > 0) {
    const double dom = s->classes[1].p95_wait_h > 0
                           ? t->classes[1].p95_wait_h / s->classes[1].p95_wait_h
                           : (t->classes[1].p95_wait_h > 0 ? INFINITY : 0);
    const double all = s->overall.p95_wait_h > 0 ? t->overall.p95_wait_h / s->overall.p95_wait_h
                                                 : (t->overall.p95_wait_h > 0 ? INFINITY : 1);
    std::snprintf(line, sizeof line,
                  "\ngoal: domain-class p95 wait tessera/slurm-block = %.2fx (goal <= 0.5x, %s); "
                  "overall p95 %.2fx (goal <= 1x, %s)\n",
                  dom, dom <= 0.5 || s->classes[1].p95_wait_h == 0 ? "met" : "missed", all,
                  all <= 1.0 ? "met" : "missed");
    out << line;
  }
}

void WriteGpuJson(std::ostream& out, const GpuComparison& c) {
  nlohmann::json j;
  j["cluster"] = c.cluster;
  j["workload"] = c.workload;
  j["options"] = c.command;
  auto stats = [](const GpuClassStats& s) {
    return nlohmann::json{{"class", s.name},
                          {"sizes", s.sizes},
                          {"jobs", s.jobs},
                          {"p50_wait_h", s.p50_wait_h},
                          {"p95_wait_h", s.p95_wait_h},
                          {"mean_wait_h", s.mean_wait_h}};
  };
  for (const GpuSimResult& r : c.runs) {
    nlohmann::json run{{"policy", r.policy},
                       {"jobs", r.jobs},
                       {"never_placed", r.never_placed},
                       {"spanned", r.spanned},
                       {"migrations", r.migrations},
                       {"migrated_gpu_h", r.migrated_gpu_h},
                       {"utilisation", r.utilisation},
                       {"makespan_s", r.makespan_s},
                       {"hash", std::to_string(r.hash)},
                       {"overall", stats(r.overall)}};
    for (const GpuClassStats& s : r.classes) run["classes"].push_back(stats(s));
    j["runs"].push_back(run);
  }
  out << j.dump(2) << "\n";
}

}  // namespace tessera::sim
