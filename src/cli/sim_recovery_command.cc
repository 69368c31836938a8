// `tessera sim-recovery`: one large training job for weeks of simulated time under a Poisson
// interruption process, through the head's TrainLifecycle, with disk-only checkpoints against
// in-memory peer checkpoints, per cost profile; effective training time beside the Young/Daly
// bound. The engine is pure (src/sim/recovery_sim.h); this file parses flags, runs it once per
// (profile, tier) and writes the reports.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "sim/recovery_report.h"
#include "sim/recovery_sim.h"

namespace tessera::cli {
namespace {

struct SimRecoveryFlags {
  sim::RecoverySimOptions base;
  std::string costs = "measured,published";
  std::string tiers = "disk,memory";
  // Cost overrides applied to every profile; NaN: the profile's own figure.
  static constexpr double kUnset = std::numeric_limits<double>::quiet_NaN();
  double detect_s = kUnset, schedule_s = kUnset, start_s = kUnset, disk_save_s = kUnset,
         disk_restore_s = kUnset, memory_snapshot_s = kUnset, memory_replicate_s = kUnset,
         memory_restore_s = kUnset, disk_persist_s = kUnset;
  double goal_ettr = 0.97;
  double goal_gap_points = 1;
  std::string output = "text";
  std::string json;
};

std::vector<std::string> SplitNonEmpty(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

// The engine names option fields ("costs.disk_save_s must ..."); the user knows flags.
std::string FlagNamed(const std::string& message) {
  const size_t space = message.find(' ');
  std::string field = message.substr(0, space);
  if (field.rfind("costs.", 0) == 0) field = field.substr(6);
  for (char& ch : field)
    if (ch == '_') ch = '-';
  return "--" + field + (space == std::string::npos ? "" : message.substr(space));
}

sim::RecoveryCosts WithOverrides(sim::RecoveryCosts c, const SimRecoveryFlags& f) {
  bool changed = false;
  auto set = [&](double flag, double& field) {
    if (!std::isnan(flag)) {  // a bad value is applied and refused by the validation
      field = flag;
      changed = true;
    }
  };
  set(f.detect_s, c.detect_s);
  set(f.schedule_s, c.schedule_s);
  set(f.start_s, c.start_s);
  set(f.disk_save_s, c.disk_save_s);
  set(f.disk_restore_s, c.disk_restore_s);
  set(f.memory_snapshot_s, c.memory_snapshot_s);
  set(f.memory_replicate_s, c.memory_replicate_s);
  set(f.memory_restore_s, c.memory_restore_s);
  set(f.disk_persist_s, c.disk_persist_s);
  if (changed) c.name += "+";  // the report must not pass overridden figures off as the profile's
  return c;
}

void Run(const SimRecoveryFlags& f) {
  std::vector<sim::RecoverySimOptions> runs;
  const auto profiles = SplitNonEmpty(f.costs);
  const auto tiers = SplitNonEmpty(f.tiers);
  if (profiles.empty()) throw CommandError("--costs: give measured, published or both");
  if (tiers.empty()) throw CommandError("--tier: give disk, memory or both");
  for (const std::string& p : profiles) {
    auto costs = sim::CostProfile(p);
    if (!costs.ok()) throw CommandError("--costs: " + costs.status().message());
    for (const std::string& t : tiers) {
      auto tier = sim::ParseCheckpointTier(t);
      if (!tier.ok()) throw CommandError("--tier: " + tier.status().message());
      sim::RecoverySimOptions o = f.base;
      o.costs = WithOverrides(*costs, f);
      o.tier = *tier;
      if (Status st = sim::ValidateRecoverySimOptions(o); !st.ok())
        throw CommandError(FlagNamed(st.message()));
      runs.push_back(o);
    }
  }
  std::vector<sim::RecoverySimResult> results;
  const auto t0 = std::chrono::steady_clock::now();
  for (const sim::RecoverySimOptions& o : runs) {
    auto r = sim::RunRecoverySim(o);
    if (!r.ok()) throw CommandError(r.status().message(), 1);
    results.push_back(*std::move(r));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double gap = f.goal_gap_points / 100;
  if (f.output == "json")
    sim::WriteRecoveryJson(std::cout, results, f.goal_ettr, gap);
  else
    sim::WriteRecoveryText(std::cout, results, f.goal_ettr, gap);
  if (!f.json.empty()) {
    std::ofstream out(f.json);
    if (!out) throw CommandError("--json: cannot write " + f.json, 1);
    sim::WriteRecoveryJson(out, results, f.goal_ettr, gap);
    if (!out.flush()) throw CommandError("--json: writing " + f.json + " failed", 1);
  }
  // Wall time goes to stderr so stdout stays reproducible.
  std::cout.flush();
  std::fprintf(stderr, "simulated %zu run(s) in %.2f s\n", results.size(), seconds);
}

}  // namespace

void AddSimRecoveryCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "sim-recovery",
      "Simulate one large training job under interruptions for weeks, disk-only against "
      "in-memory peer checkpoints, and compare its effective training time with the "
      "Young/Daly bound (docs/elastic.md, \"Pod scale\")");
  auto f = std::make_shared<SimRecoveryFlags>();
  sim::RecoverySimOptions& o = f->base;
  cmd->add_option("--chips", o.chips, "chips of the job")->capture_default_str();
  cmd->add_option("--days", o.days, "simulated days")->capture_default_str();
  cmd->add_option("--seed", o.seed, "seed of the interruption process")->capture_default_str();
  cmd->add_option("--costs", f->costs,
                  "cost profiles, comma list: measured (this machine, bench/README.md), "
                  "published (Llama 3 storage figures, docs/elastic.md)")
      ->capture_default_str();
  cmd->add_option("--tier", f->tiers, "checkpoint tiers, comma list: disk, memory")
      ->capture_default_str();
  cmd->add_option("--interruptions-per-chip-day", o.interruptions_per_chip_day,
                  "interruption rate per chip (default Llama 3: 466 in 54 days on 16,384 GPUs)")
      ->capture_default_str();
  cmd->add_option("--step-s", o.step_s, "time of one training step")->capture_default_str();
  cmd->add_option("--chips-per-host", o.chips_per_host)->capture_default_str();
  cmd->add_option("--hosts-per-slice", o.hosts_per_slice,
                  "hosts swapped together when one fails (an Ironwood cube: 16)")
      ->capture_default_str();
  cmd->add_option("--spare-slices", o.spare_slices, "healthy slices standing by")
      ->capture_default_str();
  cmd->add_option("--repair-hours", o.repair_hours, "a failed slice is back after this long")
      ->capture_default_str();
  cmd->add_option("--interval-steps", o.interval_steps,
                  "steps between checkpoints of the tier; 0 = Young/Daly sqrt(2 C M)")
      ->capture_default_str();
  cmd->add_option("--disk-every-snapshots", o.disk_every_snapshots,
                  "memory tier: persist every k-th snapshot to disk in the background; 0 = the "
                  "disk's Young/Daly interval")
      ->capture_default_str();
  cmd->add_option("--peer-loss-share", o.peer_loss_share,
                  "share of interruptions that take the failed host's peer down too")
      ->capture_default_str();
  cmd->add_option("--detect-s", f->detect_s, "override: failure -> noticed");
  cmd->add_option("--schedule-s", f->schedule_s, "override: noticed -> placed");
  cmd->add_option("--start-s", f->start_s, "override: placed -> workers ready to restore");
  cmd->add_option("--disk-save-s", f->disk_save_s, "override: blocking disk checkpoint");
  cmd->add_option("--disk-restore-s", f->disk_restore_s, "override: disk restore");
  cmd->add_option("--memory-snapshot-s", f->memory_snapshot_s,
                  "override: blocking copy to host memory");
  cmd->add_option("--memory-replicate-s", f->memory_replicate_s,
                  "override: background copy to the peer");
  cmd->add_option("--memory-restore-s", f->memory_restore_s, "override: restore from the peer");
  cmd->add_option("--disk-persist-s", f->disk_persist_s,
                  "override: memory tier, background persist to disk");
  cmd->add_option("--goal-ettr", f->goal_ettr, "goal: effective training time at least this")
      ->capture_default_str();
  cmd->add_option("--goal-gap-points", f->goal_gap_points,
                  "goal: within this many points of the bound")
      ->capture_default_str();
  cmd->add_option("-o,--output", f->output, "text or json")->check(CLI::IsMember({"text", "json"}));
  cmd->add_option("--json", f->json, "also write the JSON report to FILE");
  cmd->callback([f] { Run(*f); });
}

}  // namespace tessera::cli
