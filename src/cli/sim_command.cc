// `tessera sim`: replay a trace (or a generated workload) on a simulated cluster, once per
// (admission, placement policy), and report the metrics side by side. The simulator core is
// pure (src/sim/); this file is its shell: it opens files, draws the progress bar and writes
// the reports.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "admission/help_threshold.h"
#include "cli/commands.h"
#include "common/rng.h"
#include "sim/cluster.h"
#include "sim/gpu_sim.h"
#include "sim/report.h"
#include "sim/simulator.h"

namespace tessera::cli {
namespace {

constexpr const char* kSimTpuPolicies = "first-fit,tightest-fit,tessera";

struct SimFlags {
  std::string preset = "ironwood";
  std::string generation;
  int blocks = 0;
  int cubes_per_block = 0;
  std::string fleet;
  int unhealthy_hosts = 0;
  std::string trace;
  std::string trace_format = "auto";
  int64_t generate = 0;
  double load = 0.9;
  std::string sizes;
  double mean_duration_s = 3600;
  double multi_slice_fraction = 0;
  double priority_fraction = 0.2;
  std::string shape_map;
  std::string policies = kSimTpuPolicies;
  std::string admission = "backfill";
  bool fair_sharing = false;  // kueue admissions: the cluster-wide fair-sharing setting
  uint64_t seed = 1;
  double host_mtbf_hours = 0;
  double host_repair_hours = 4;
  double cube_mtbf_hours = 0;
  double cube_repair_hours = 24;
  int64_t checkpoint_interval_s = 3600;
  std::string on_host_loss = "restart";
  int max_failures = -1;
  int64_t grow_back_interval_s = 60;
  // Restart costs; defaults from sim::FailureOptions (bench/recovery figures).
  double detect_s = sim::FailureOptions{}.detect_s;
  double schedule_s = sim::FailureOptions{}.schedule_s;
  double start_s = sim::FailureOptions{}.start_s;
  double restore_s = sim::FailureOptions{}.restore_s;
  int64_t sample_interval_s = 0;
  double horizon_days = 0;
  std::string output = "text";
  std::string csv;
  std::string classes_csv;
  // easy admission (src/sim/easy_scheduler.h)
  std::string estimates;  // empty: default (easy), history (--gpu)
  double default_estimate_h = 24;
  bool no_defrag = false;
  double defrag_share = 0.01;
  int64_t reserve_min_chips = 64;
  double reserve_after_h = 0;
  HelpThresholdOptions help;  // --help-factor, --help-quantile, --help-window
  std::string html;
  bool no_progress = false;
  // GPU domains (src/sim/gpu_sim.h): --gpu switches the run to them.
  std::string gpu;
  int gpu_hosts = 0;
  int gpu_domains = 0;
  std::string domain_rule = "auto";
  int64_t migrate_s = sim::GpuSimOptions{}.migrate_s;
  int gpu_holds = sim::GpuSimOptions{}.holds;
  bool baseline_holds = false;
  bool gpu_preempt = false;
  bool no_reclaim = false;
  std::string las_h = "24";  // hours of run time, comma list; "off": none
  double las_starve_limit = sim::GpuSimOptions{}.las_starve_limit;
  double preempt_exempt_h = static_cast<double>(sim::GpuSimOptions{}.preempt_exempt_s) / 3600;
  std::string hold_for = std::string(sim::GpuHoldForName(sim::GpuSimOptions{}.hold_for));
  std::string hold_when = std::string(sim::GpuHoldWhenName(sim::GpuSimOptions{}.hold_when));
  double span_slowdown = 1.0;
};

std::vector<std::string> SplitPolicies(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(item);
  return out;
}

sim::ClusterSpec BuildSpec(const SimFlags& f) {
  auto spec = sim::Preset(f.preset);
  if (!spec.ok()) throw CommandError("--preset: " + spec.status().message());
  if (!f.generation.empty()) {
    auto g = ParseGeneration(f.generation);
    if (!g.ok()) throw CommandError("--generation: " + g.status().message());
    spec->generation = *g;
    spec->name = "custom";
    if (Info(*g).rank == 2 && f.fleet.empty())
      throw CommandError("--fleet: a 2D generation needs fixed slices, e.g. --fleet 4x4:64,8x8:16");
  }
  if (f.blocks > 0) spec->blocks = f.blocks, spec->name = "custom";
  if (f.cubes_per_block > 0) spec->cubes_per_block = f.cubes_per_block, spec->name = "custom";
  if (!f.fleet.empty()) spec->fleet = f.fleet, spec->name = "custom";
  spec->unhealthy_hosts = f.unhealthy_hosts;
  spec->unhealthy_seed = f.seed;
  return *spec;
}

// Assigns priority 1 to a seeded random share of jobs when the trace carries no priorities,
// so the priority admission has something to act on.
void AssignPriorities(sim::Workload& w, double fraction, uint64_t seed) {
  if (w.has_priorities || fraction <= 0) return;
  Rng rng(seed ^ 0x7072696f72697479ull);
  for (auto& j : w.jobs) j.priority = rng.UniformDouble() < fraction ? 1 : 0;
}

class ProgressBar {
 public:
  explicit ProgressBar(bool on) : on_(on) {}
  void Update(const std::string& label, double fraction) {
    if (!on_) return;
    const int width = 30, filled = static_cast<int>(fraction * width);
    std::fprintf(stderr, "\r%-28s [%s%s] %3d%%", label.c_str(), std::string(filled, '#').c_str(),
                 std::string(width - filled, ' ').c_str(), static_cast<int>(fraction * 100));
    std::fflush(stderr);
  }
  void Done() {
    if (on_) std::fprintf(stderr, "\r%80s\r", "");
  }

 private:
  bool on_;
};

void WriteFile(const std::string& path, const std::string& what,
               void (*writer)(std::ostream&, const sim::Comparison&), const sim::Comparison& c) {
  std::ofstream out(path);
  if (!out) throw CommandError(what + ": cannot write " + path, 1);
  writer(out, c);
  if (!out.flush()) throw CommandError(what + ": writing " + path + " failed", 1);
}

// `tessera sim --gpu SYSTEM --hosts N | --domains N --trace FILE`: the trace natively on GPU
// NVLink domains, once per GPU placement policy.
void RunGpu(const SimFlags& f) {
  auto system = ParseGpuSystem(f.gpu);
  if (!system.ok()) {  // the catalog names the manifest's field, `gpu: ...`: name the flag
    std::string why = system.status().message();
    if (why.starts_with("gpu: ")) why.erase(0, 5);
    throw CommandError("--gpu: " + why);
  }
  const GpuSystemInfo& info = Info(*system);
  int domains = 0;
  if (info.hosts_per_domain == 1) {
    if (f.gpu_domains > 0 && f.gpu_hosts > 0 && f.gpu_domains != f.gpu_hosts)
      throw CommandError("--hosts and --domains: on " + std::string(info.name) +
                         " a domain is one host; give --hosts N");
    domains = f.gpu_hosts > 0 ? f.gpu_hosts : f.gpu_domains;
  } else {
    if (f.gpu_hosts > 0 && f.gpu_hosts % info.hosts_per_domain != 0)
      throw CommandError("--hosts: " + std::to_string(f.gpu_hosts) + " is not a whole number of " +
                         std::string(info.name) + " domains (" +
                         std::to_string(info.hosts_per_domain) + " hosts each); use --domains N");
    domains = f.gpu_domains > 0 ? f.gpu_domains : f.gpu_hosts / info.hosts_per_domain;
  }
  if (domains < 1)
    throw CommandError("--hosts or --domains: the size of the GPU fleet, e.g. --hosts 64");
  if (f.trace.empty())
    throw CommandError(
        "--trace: --gpu replays a trace (ITP csv, openb pod list or Philly cluster_job_log)");
  auto format = sim::ParseTraceFormat(f.trace_format);
  if (!format.ok()) throw CommandError("--trace-format: " + format.status().message());
  std::ifstream in(f.trace);
  if (!in) throw CommandError("--trace: cannot open " + f.trace);
  const size_t slash = f.trace.find_last_of('/');
  auto w =
      sim::ReadTrace(in, slash == std::string::npos ? f.trace : f.trace.substr(slash + 1), *format);
  if (!w.ok()) throw CommandError("--trace: " + w.status().message());

  sim::GpuSimOptions base;
  base.system = *system;
  base.domains = domains;
  if (f.domain_rule != "auto") {
    auto rule = ParseDomainRule(f.domain_rule);
    if (!rule.ok()) throw CommandError("--domain-rule: " + rule.status().message() + ", or auto");
    base.rule = *rule;
  }
  base.defrag = !f.no_defrag;
  base.preempt = f.gpu_preempt;
  base.reclaim = !f.no_reclaim;
  base.las_levels_s.clear();
  base.las_starve_limit = f.las_starve_limit;
  base.preempt_exempt_s = static_cast<int64_t>(std::llround(f.preempt_exempt_h * 3600));
  if (f.las_h != "off") {
    for (const std::string& item : SplitPolicies(f.las_h)) {
      char* end = nullptr;
      const double h = std::strtod(item.c_str(), &end);
      if (item.empty() || end != item.c_str() + item.size() || !(h > 0) || h > 8760)
        throw CommandError("--las-h: '" + item +
                           "' is not a number of hours between 0 and 8760; give ascending "
                           "hours of run time, e.g. --las-h 24 or --las-h 4,24, or off");
      const int64_t s = std::llround(h * 3600);
      if (!base.las_levels_s.empty() && s <= base.las_levels_s.back())
        throw CommandError("--las-h: levels must ascend (" + f.las_h + "), e.g. --las-h 4,24");
      base.las_levels_s.push_back(s);
    }
  }
  base.holds = f.gpu_holds;
  base.baseline_holds = f.baseline_holds;
  auto hold_for = sim::ParseGpuHoldFor(f.hold_for);
  if (!hold_for.ok()) {
    std::string why = hold_for.status().message();
    if (why.starts_with("hold_for: ")) why.erase(0, 10);
    throw CommandError("--hold-for: " + why);
  }
  base.hold_for = *hold_for;
  auto hold_when = sim::ParseGpuHoldWhen(f.hold_when);
  if (!hold_when.ok()) {
    std::string why = hold_when.status().message();
    if (why.starts_with("hold_when: ")) why.erase(0, 11);
    throw CommandError("--hold-when: " + why);
  }
  base.hold_when = *hold_when;
  base.migrate_s = f.migrate_s;
  const std::string estimate_name = f.estimates.empty() ? "history" : f.estimates;
  auto estimates = sim::ParseGpuEstimate(estimate_name);
  if (!estimates.ok()) {
    std::string why = estimates.status().message();
    if (why.starts_with("estimates: ")) why.erase(0, 11);
    throw CommandError("--estimates: " + why);
  }
  if (!(f.default_estimate_h > 0))
    throw CommandError("--default-estimate-h: must be positive, e.g. 24");
  base.estimates = *estimates;
  base.default_estimate_s = std::max<int64_t>(1, std::llround(f.default_estimate_h * 3600));
  base.span_slowdown = f.span_slowdown;
  const std::string names =
      f.policies == kSimTpuPolicies ? "tessera,slurm-block,first-fit" : f.policies;
  sim::GpuComparison c;
  std::ostringstream cluster;
  cluster << info.name << ": " << domains << " NVLink domain(s) x " << info.hosts_per_domain
          << " host(s) x " << info.gpus_per_host << " GPUs = " << domains * info.gpus_per_domain()
          << " GPUs";
  c.cluster = cluster.str();
  c.workload = w->source + ", " + std::to_string(w->jobs.size()) + " jobs";
  if (!w->skipped_reason.empty()) c.workload += " (" + w->skipped_reason + ")";
  std::ostringstream cmd;
  cmd << "domain rule " << f.domain_rule << "; tessera holds " << f.gpu_holds << " at a time for "
      << f.hold_for << " jobs when " << f.hold_when
      << " (EASY backfill on held hosts, time limits ";
  if (estimate_name == "true")
    cmd << "the real run times (an oracle)";
  else if (estimate_name == "history")
    cmd << "the median run time of the finished jobs that ran as long";
  else
    cmd << "expected durations, else " << f.default_estimate_h << " h";
  cmd << (f.baseline_holds ? "; the baselines hold too" : "") << "), moves "
      << (f.no_defrag ? "off" : "on") << (f.gpu_preempt ? ", preemption on" : "")
      << (f.no_reclaim ? ", backfills not reclaimed" : ", backfills reclaimed when a hold is due");
  if (f.las_h == "off")
    cmd << ", no preemption by attained service";
  else
    cmd << ", least attained service first (levels at " << f.las_h << " h, starve limit "
        << f.las_starve_limit << ", a restarted --hold-for job exempt for " << f.preempt_exempt_h
        << " h)";
  cmd << " (move costs " << f.migrate_s << " s); span slowdown " << f.span_slowdown;
  c.command = cmd.str();
  const auto t0 = std::chrono::steady_clock::now();
  for (const std::string& name : SplitPolicies(names)) {
    auto policy = ParseGpuPolicy(name);
    if (!policy.ok()) throw CommandError("--policies: " + policy.status().message());
    sim::GpuSimOptions o = base;
    o.policy = *policy;
    auto r = sim::RunGpuSimulation(*w, o);
    if (!r.ok()) throw CommandError(name + ": " + r.status().message());
    c.runs.push_back(std::move(*r));
  }
  auto alone = sim::RunDomainClassAlone(*w, base);
  if (!alone.ok()) throw CommandError("the domain class alone: " + alone.status().message());
  c.domain_alone = std::move(*alone);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (f.output == "json")
    sim::WriteGpuJson(std::cout, c);
  else
    sim::WriteGpuText(std::cout, c);
  std::fprintf(stderr, "simulated %zu GPU run(s) of %zu jobs in %.2f s\n", c.runs.size(),
               w->jobs.size(), seconds);
}

void Run(const SimFlags& f) {
  if (!f.gpu.empty()) return RunGpu(f);
  const sim::ClusterSpec spec = BuildSpec(f);
  auto inv = sim::BuildCluster(spec);
  if (!inv.ok()) throw CommandError(inv.status().message());

  sim::ShapeMap map = sim::ShapeMap::Default(spec.generation);
  if (!f.shape_map.empty()) {
    auto m = sim::ShapeMap::Parse(spec.generation, f.shape_map);
    if (!m.ok()) throw CommandError("--shape-map: " + m.status().message());
    map = *m;
  }

  sim::Workload workload;
  if (!f.trace.empty() && f.generate > 0)
    throw CommandError("--trace and --generate: choose one workload");
  if (!f.trace.empty()) {
    auto format = sim::ParseTraceFormat(f.trace_format);
    if (!format.ok()) throw CommandError("--trace-format: " + format.status().message());
    std::ifstream in(f.trace);
    if (!in) throw CommandError("--trace: cannot open " + f.trace);
    const size_t slash = f.trace.find_last_of('/');
    auto w = sim::ReadTrace(in, slash == std::string::npos ? f.trace : f.trace.substr(slash + 1),
                            *format);
    if (!w.ok()) throw CommandError("--trace: " + w.status().message());
    workload = std::move(*w);
    AssignPriorities(workload, f.priority_fraction, f.seed);
  } else if (f.generate > 0) {
    sim::GeneratorOptions g;
    g.jobs = f.generate;
    g.seed = f.seed;
    g.mean_duration_s = f.mean_duration_s;
    g.high_priority_fraction = f.priority_fraction;
    g.multi_slice_fraction = f.multi_slice_fraction;
    if (!f.sizes.empty()) {
      auto sizes = sim::ParseSizeMix(f.sizes);
      if (!sizes.ok()) throw CommandError("--sizes: " + sizes.status().message());
      g.sizes = *sizes;
    }
    if (!(f.load > 0)) throw CommandError("--load: must be positive");
    // Offered load = mean chip-seconds per job / (interarrival x chips).
    g.mean_interarrival_s =
        sim::MeanChipSeconds(g, map) / (f.load * static_cast<double>(inv->total_chips()));
    workload = sim::Generate(g);
  } else {
    throw CommandError("a workload is needed: --trace FILE or --generate N");
  }

  sim::SimOptions base;
  base.shape_map = map;
  base.seed = f.seed;
  base.kueue.admission.fair_sharing =
      f.fair_sharing ? FairSharing::kEnabled : FairSharing::kDisabled;
  base.sample_interval_s = f.sample_interval_s;
  base.horizon_s = static_cast<int64_t>(f.horizon_days * 86400);
  base.failures.host_mtbf_hours = f.host_mtbf_hours;
  base.failures.host_repair_hours = f.host_repair_hours;
  base.failures.cube_mtbf_hours = f.cube_mtbf_hours;
  base.failures.cube_repair_hours = f.cube_repair_hours;
  base.failures.checkpoint_interval_s = f.checkpoint_interval_s;
  if (f.on_host_loss == "shrink" || f.on_host_loss == "resize")
    base.failures.on_host_loss = sim::OnHostLoss::kShrink;
  else if (f.on_host_loss != "restart" && f.on_host_loss != "pause")
    throw CommandError("--on-host-loss: '" + f.on_host_loss +
                       "' is not restart (pause) or shrink (resize)");
  base.failures.max_failures = f.max_failures;
  base.failures.grow_back_interval_s = f.grow_back_interval_s;
  base.failures.detect_s = f.detect_s;
  base.failures.schedule_s = f.schedule_s;
  base.failures.start_s = f.start_s;
  base.failures.restore_s = f.restore_s;
  if (f.host_mtbf_hours < 0 || f.cube_mtbf_hours < 0 || f.host_repair_hours <= 0 ||
      f.cube_repair_hours <= 0 || f.checkpoint_interval_s < 0)
    throw CommandError("failure options: MTBFs >= 0, repair times > 0, checkpoint interval >= 0");
  if (f.max_failures < -1 || f.grow_back_interval_s <= 0 || f.detect_s < 0 || f.schedule_s < 0 ||
      f.start_s < 0 || f.restore_s < 0)
    throw CommandError(
        "failure options: --max-failures >= -1, --grow-back-interval-s > 0, restart costs >= 0");

  const std::string estimates = f.estimates.empty() ? "default" : f.estimates;
  if (estimates != "default" && estimates != "true")
    throw CommandError("--estimates: '" + estimates +
                       "' is not default (the jobs' expected durations, else "
                       "--default-estimate-h) or true (the real durations, an oracle)");
  if (!(f.default_estimate_h > 0))
    throw CommandError("--default-estimate-h: must be positive, e.g. 24");
  if (!(f.defrag_share >= 0 && f.defrag_share < 1))
    throw CommandError("--defrag-share: must be in [0, 1), e.g. 0.01");
  base.easy.true_durations = estimates == "true";
  base.easy.backfill.default_duration_s = static_cast<int64_t>(f.default_estimate_h * 3600);
  base.easy.defrag = !f.no_defrag;
  base.easy.defrag_options.max_share = f.defrag_share;
  base.easy.reserve_min_chips = f.reserve_min_chips;
  base.easy.reserve_after_s = static_cast<int64_t>(f.reserve_after_h * 3600);
  base.easy.help = f.help;
  base.easy.help.floor_s = base.easy.reserve_after_s;
  if (Status valid = ValidateHelpThreshold(base.easy.help); !valid.ok())
    throw CommandError(valid.message());

  std::vector<PlannerOptions> policies;
  for (const std::string& name : SplitPolicies(f.policies)) {
    auto p = PlannerOptions::Named(name);
    if (!p.ok()) throw CommandError("--policies: " + p.status().message());
    policies.push_back(*p);
  }
  std::vector<sim::AdmissionKind> admissions;
  for (const std::string& name : SplitPolicies(f.admission)) {
    auto a = sim::ParseAdmission(name);
    if (!a.ok()) throw CommandError("--admission: " + a.status().message());
    admissions.push_back(*a);
  }
  if (policies.empty() || admissions.empty())
    throw CommandError("--policies and --admission: name at least one each");

  // Planner tables take milliseconds to build: one planner per policy, shared by admissions.
  std::vector<std::unique_ptr<SlicePlanner>> planners;
  for (const PlannerOptions& p : policies) planners.push_back(std::make_unique<SlicePlanner>(p));
  const SlicePlanner tessera_planner(PlannerOptions::Tessera());
  const std::vector<sim::SimJob> jobs = sim::MapJobs(workload, *inv, map, tessera_planner);
  sim::Comparison c;
  c.cluster = sim::Describe(spec, *inv);
  c.workload = workload.source + ", shape map " + map.ToString();
  c.command = "policies " + f.policies + "; admission " + f.admission + "; seed " +
              std::to_string(f.seed) + "; checkpoint every " +
              std::to_string(f.checkpoint_interval_s) + " s";
  if (f.admission.find("easy") != std::string::npos) {
    std::ostringstream s;
    s << "; easy: estimates " << (f.estimates.empty() ? "default" : f.estimates) << " (default "
      << f.default_estimate_h << " h), reservations for jobs of " << f.reserve_min_chips
      << "+ chips, defrag " << (f.no_defrag ? "off" : "on") << " (share " << f.defrag_share << ")";
    c.command += s.str();
  }
  if (base.failures.enabled()) {
    std::ostringstream s;
    s << "; host MTBF " << f.host_mtbf_hours << " h (repair " << f.host_repair_hours
      << " h); cube MTBF " << f.cube_mtbf_hours << " h (repair " << f.cube_repair_hours
      << " h); on host loss: " << f.on_host_loss << "; max failures " << f.max_failures
      << "; restart costs: detect " << f.detect_s << " s, schedule " << f.schedule_s << " s, start "
      << f.start_s << " s, restore " << f.restore_s << " s";
    c.command += s.str();
  }
  c.jobs = static_cast<int64_t>(jobs.size());
  c.skipped_rows = workload.skipped_rows;
  c.skipped_reason = workload.skipped_reason;
  if (!workload.jobs.empty())  // sorted by submission
    c.submit_span_s = workload.jobs.back().submit_s - workload.jobs.front().submit_s;
  c.seed = f.seed;
  c.failures = base.failures.enabled();

  ProgressBar bar(!f.no_progress && isatty(STDERR_FILENO) && jobs.size() >= 1000);
  const auto t0 = std::chrono::steady_clock::now();
  for (sim::AdmissionKind a : admissions)
    for (size_t i = 0; i < policies.size(); ++i) {
      const PlannerOptions& p = policies[i];
      sim::SimOptions o = base;
      o.placement = p;
      o.admission = a;
      const std::string label = p.Name() + "/" + sim::AdmissionName(a);
      o.progress = [&bar, label](double fraction) { bar.Update(label, fraction); };
      auto r = sim::RunSimulation(*inv, jobs, o, *planners[i]);
      if (!r.ok()) throw CommandError(label + ": " + r.status().ToString(), 1);
      c.runs.push_back(std::move(*r));
    }
  bar.Done();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  if (f.output == "json")
    sim::WriteJson(std::cout, c);
  else
    sim::WriteText(std::cout, c);
  if (!f.csv.empty()) WriteFile(f.csv, "--csv", &sim::WriteCsv, c);
  if (!f.classes_csv.empty()) WriteFile(f.classes_csv, "--classes-csv", &sim::WriteClassCsv, c);
  if (!f.html.empty()) WriteFile(f.html, "--html", &sim::WriteHtml, c);
  // Wall time is the shell's business, and goes to stderr so stdout stays reproducible.
  std::fprintf(stderr, "simulated %zu run(s) of %zu jobs in %.2f s\n", c.runs.size(), jobs.size(),
               seconds);
}

}  // namespace

void AddSimCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "sim",
      "Replay a job trace or a generated workload on a simulated cluster and compare "
      "placement policies and admission variants");
  auto f = std::make_shared<SimFlags>();
  cmd->add_option("--preset", f->preset, "cluster: ironwood, v5p, v6e-fleet")
      ->capture_default_str();
  cmd->add_option("--generation", f->generation, "override the preset's generation");
  cmd->add_option("--blocks", f->blocks, "3D: optical-switch blocks (overrides the preset)");
  cmd->add_option("--cubes-per-block", f->cubes_per_block, "3D: cubes per block");
  cmd->add_option("--fleet", f->fleet, "2D: fixed slices as shape:count,...");
  cmd->add_option("--unhealthy-hosts", f->unhealthy_hosts, "hosts down for the whole run");
  cmd->add_option("--trace", f->trace,
                  "trace file (ITP cluster csv, openb pod list or Philly cluster_job_log)");
  cmd->add_option("--trace-format", f->trace_format,
                  "auto, itp, openb, philly (auto: philly when the file starts with '[')")
      ->capture_default_str();
  cmd->add_option("--generate", f->generate, "generate N jobs instead of reading a trace");
  cmd->add_option("--load", f->load, "generated: offered load over cluster chips")
      ->capture_default_str();
  cmd->add_option("--sizes", f->sizes,
                  "generated: accelerators:weight,... (default 4:8,8:4,16:2,32:1,64:1)");
  cmd->add_option("--mean-duration-s", f->mean_duration_s, "generated: mean job duration")
      ->capture_default_str();
  cmd->add_option("--multi-slice-fraction", f->multi_slice_fraction,
                  "generated: share of 2-4 slice elastic jobs")
      ->capture_default_str();
  cmd->add_option("--priority-fraction", f->priority_fraction,
                  "share of high-priority jobs (generated, or traces without priorities)")
      ->capture_default_str();
  cmd->add_option("--shape-map", f->shape_map,
                  "accelerators:shape,... (default 4:2x2x1,...,512:8x8x8 for 3D)");
  cmd->add_option("--policies", f->policies, "placement: first-fit, tightest-fit, tessera")
      ->capture_default_str();
  cmd->add_option("--admission", f->admission,
                  "fifo, backfill, priority, kueue, kueue-strict, easy (comma list; kueue runs "
                  "the admission module; easy: EASY backfill with reservations and "
                  "defragmentation)")
      ->capture_default_str();
  cmd->add_flag("--fair-sharing", f->fair_sharing,
                "kueue admissions: fair sharing on, as `tessera head --fair-sharing` "
                "(docs/admission.md)");
  cmd->add_option("--estimates", f->estimates,
                  "easy and --gpu: default (expected durations, else --default-estimate-h; "
                  "easy's default) or true (real durations, an oracle); --gpu also: history "
                  "(the median run time of the finished jobs that ran as long; --gpu's default)");
  cmd->add_option("--default-estimate-h", f->default_estimate_h,
                  "easy and --gpu: expected duration (time limit) of a job that gives none")
      ->capture_default_str();
  cmd->add_flag("--no-defrag", f->no_defrag,
                "easy and --gpu: no defragmentation by checkpoint-and-move (--gpu: holds stay)");
  cmd->add_option("--reserve-min-chips", f->reserve_min_chips,
                  "easy: only a blocked job of this many chips or more gets a reservation (64: "
                  "a cube's worth; 0: every blocked head, classic EASY)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("--reserve-after-h", f->reserve_after_h,
                  "easy: a large job reserves, and has jobs moved for it, only after waiting this "
                  "long")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 24.0 * 365));
  cmd->add_option("--help-factor", f->help.factor,
                  "easy: a large job is helped (reservation, moves) only once it has waited this "
                  "many times the recent small jobs' wait quantile, and at least "
                  "--reserve-after-h (0: off, to 1000; admission/help_threshold.h)")
      ->capture_default_str();
  cmd->add_option("--help-quantile", f->help.quantile,
                  "easy: the quantile of the recent small jobs' waits for --help-factor (0 to 1)")
      ->capture_default_str();
  cmd->add_option("--help-window", f->help.window,
                  "easy: how many of the last small starts --help-factor looks at (1 to 1048576)")
      ->capture_default_str();
  cmd->add_option("--defrag-share", f->defrag_share,
                  "easy: moved chip-hours (work lost) at most this share of capacity")
      ->capture_default_str();
  cmd->add_option("--seed", f->seed, "seed for failures, generator, priorities")
      ->capture_default_str();
  cmd->add_option("--host-mtbf-hours", f->host_mtbf_hours, "per-host MTBF; 0 = no failures")
      ->capture_default_str();
  cmd->add_option("--host-repair-hours", f->host_repair_hours, "mean host repair time")
      ->capture_default_str();
  cmd->add_option("--cube-mtbf-hours", f->cube_mtbf_hours, "per-cube MTBF; 0 = none")
      ->capture_default_str();
  cmd->add_option("--cube-repair-hours", f->cube_repair_hours, "mean cube repair time")
      ->capture_default_str();
  cmd->add_option("--checkpoint-interval-s", f->checkpoint_interval_s,
                  "training checkpoint interval; 0 = none")
      ->capture_default_str();
  cmd->add_option("--on-host-loss", f->on_host_loss,
                  "restart (onHostLoss: pause) or shrink (onHostLoss: resize, multi-slice jobs)")
      ->capture_default_str();
  cmd->add_option("--max-failures", f->max_failures,
                  "failures a job may take before it fails; -1 = unlimited")
      ->capture_default_str();
  cmd->add_option("--grow-back-interval-s", f->grow_back_interval_s,
                  "how often a shrunk job looks for room to grow back")
      ->capture_default_str();
  cmd->add_option("--detect-s", f->detect_s, "failure -> noticed (the head's lease)")
      ->capture_default_str();
  cmd->add_option("--schedule-s", f->schedule_s, "noticed -> next attempt placed")
      ->capture_default_str();
  cmd->add_option("--start-s", f->start_s, "placed -> workers ready to restore")
      ->capture_default_str();
  cmd->add_option("--restore-s", f->restore_s, "checkpoint load")->capture_default_str();
  cmd->add_option("--sample-interval-s", f->sample_interval_s, "time-series period; 0 = span/500")
      ->capture_default_str();
  cmd->add_option("--horizon-days", f->horizon_days, "stop after this much simulated time");
  cmd->add_option("-o,--output", f->output, "text or json")->check(CLI::IsMember({"text", "json"}));
  cmd->add_option("--csv", f->csv, "write the time series to FILE");
  cmd->add_option("--classes-csv", f->classes_csv,
                  "write waits, JCT and preemptions by size and priority class to FILE");
  cmd->add_option("--html", f->html, "write a self-contained HTML report to FILE");
  cmd->add_flag("--no-progress", f->no_progress, "no progress bar even on a terminal");
  cmd->add_option("--gpu", f->gpu,
                  "replay the trace on GPU NVLink domains instead: h100, h200, gb200-nvl72 "
                  "(policies tessera, slurm-block, first-fit; docs/simulator.md)");
  cmd->add_option("--hosts", f->gpu_hosts, "--gpu: hosts (h100/h200: each its own domain)");
  cmd->add_option("--domains", f->gpu_domains,
                  "--gpu: NVLink domains (gb200-nvl72: 18 trays each)");
  cmd->add_option("--domain-rule", f->domain_rule,
                  "--gpu: auto (required up to a domain, preferred above), required, preferred, "
                  "segment:K")
      ->capture_default_str();
  cmd->add_option("--holds", f->gpu_holds,
                  "--gpu: tessera's reservations at a time, for the oldest waiting --hold-for "
                  "jobs (0: none)")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  cmd->add_option("--hold-for", f->hold_for,
                  "--gpu: which jobs tessera holds hosts for: whole-host, large (more than half a "
                  "domain), domain (more than half a domain and at most one)")
      ->capture_default_str();
  cmd->add_option(
         "--hold-when", f->hold_when,
         "--gpu: when a job gets its hold: gpu-wait (only when its wait x GPUs is at least "
         "that of every older smaller waiting job), fifo (only when no older waiting job "
         "is smaller), tail (only when no older smaller waiting job has waited the p95 "
         "wait of the jobs started so far), always")
      ->capture_default_str();
  cmd->add_flag("--baseline-holds", f->baseline_holds,
                "--gpu: slurm-block and first-fit hold hosts too, with the same backfill and "
                "time limits (Slurm's backfill scheduler)");
  cmd->add_flag("--preempt", f->gpu_preempt,
                "--gpu: when moves cannot clear hosts for a held job, tessera preempts the small "
                "jobs on them (requeued, restarted at --migrate-s; each job once) and starts it");
  cmd->add_flag("--no-reclaim", f->no_reclaim,
                "--gpu: tessera leaves the jobs backfilled on held hosts running past the hold's "
                "time (default: preempts them then, and never backfills them on that hold again)");
  cmd->add_option("--las-h", f->las_h,
                  "--gpu: tessera queues by least attained service (Tiresias): levels at these "
                  "hours of run time (comma list, ascending); a waiting job preempts running "
                  "jobs of a higher level to start (restart cost --migrate-s; --hold-for jobs "
                  "yield only to jobs as large); off: none")
      ->capture_default_str();
  cmd->add_option("--las-starve-limit", f->las_starve_limit,
                  "--gpu: a job preempted by --las-h that has waited this many times the run time "
                  "it has had is first in line again")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 100.0));
  cmd->add_option("--preempt-exempt-h", f->preempt_exempt_h,
                  "--gpu: a --hold-for job restarted after a --las-h preemption runs this many "
                  "hours before it may be preempted by attained service again (Slurm's "
                  "PreemptExemptTime); 0: at once")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 8760.0));
  cmd->add_option("--migrate-s", f->migrate_s,
                  "--gpu: restart cost of a small job tessera moves off held hosts")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{86400}));
  cmd->add_option("--span-slowdown", f->span_slowdown,
                  "--gpu: run-time factor of a job spread over more NVLink domains than it needs")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 100.0));
  cmd->callback([f] { Run(*f); });
}

}  // namespace tessera::cli
