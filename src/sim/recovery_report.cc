// Text and JSON writers of pod-scale recovery results (recovery_report.h).
#include "sim/recovery_report.h"

#include <cinttypes>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace tessera::sim {
namespace {

std::string Fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}
std::string Pct(double v) { return Fmt("%.2f%%", v * 100); }

bool MeetsGoal(const RecoverySimResult& r, double goal_ettr, double goal_gap) {
  return r.ettr >= goal_ettr && r.bound.efficiency - r.ettr <= goal_gap;
}

nlohmann::json CostsJson(const RecoveryCosts& c) {
  return {{"name", c.name},
          {"detectS", c.detect_s},
          {"scheduleS", c.schedule_s},
          {"startS", c.start_s},
          {"diskSaveS", c.disk_save_s},
          {"diskRestoreS", c.disk_restore_s},
          {"memorySnapshotS", c.memory_snapshot_s},
          {"memoryReplicateS", c.memory_replicate_s},
          {"memoryRestoreS", c.memory_restore_s},
          {"diskPersistS", c.disk_persist_s}};
}

}  // namespace

void WriteRecoveryText(std::ostream& out, const std::vector<RecoverySimResult>& runs,
                       double goal_ettr, double goal_gap) {
  if (runs.empty()) return;
  const RecoverySimOptions& o = runs.front().options;
  out << "pod-scale recovery: " << o.chips << " chips (" << runs.front().hosts << " hosts of "
      << o.chips_per_host << ", slices of " << o.hosts_per_slice << " hosts, " << o.spare_slices
      << " spare slices), " << Fmt("%g", o.days) << " days, step " << Fmt("%g", o.step_s)
      << " s, seed " << o.seed << "\n";
  out << "interruptions: " << Fmt("%.3g", o.interruptions_per_chip_day)
      << " per chip-day -> job MTBF " << Fmt("%.0f", runs.front().mtbf_s) << " s ("
      << Fmt("%.2f", runs.front().mtbf_s / 3600) << " h), peer loss share "
      << Fmt("%g", o.peer_loss_share) << ", repair " << Fmt("%g", o.repair_hours) << " h\n";
  out << "bound: Young/Daly interval sqrt(2 C M); E = tau / (M e^(D/M) (e^((tau+C)/M) - 1)) "
         "(C checkpoint, D downtime, M MTBF)\n\n";
  char line[400];
  std::snprintf(line, sizeof(line), "%-10s %-7s %8s %8s %7s %8s %8s %9s %6s %7s %6s %6s %s\n",
                "costs", "tier", "ETTR", "bound", "gap", "C s", "D s", "interval", "fails",
                "fallbk", "lost%", "ckpt%", "goal");
  out << line;
  for (const RecoverySimResult& r : runs) {
    const double interval_s = static_cast<double>(r.options.interval_steps) * r.options.step_s;
    std::snprintf(
        line, sizeof(line),
        "%-10s %-7s %8s %8s %7s %8.3f %8.2f %8.0fs %6" PRId64 " %7" PRId64 " %6.2f %6.2f %s\n",
        r.options.costs.name.c_str(), CheckpointTierName(r.options.tier), Pct(r.ettr).c_str(),
        Pct(r.bound.efficiency).c_str(), Fmt("%+.2f", (r.ettr - r.bound.efficiency) * 100).c_str(),
        r.bound.checkpoint_s, r.bound.downtime_s, interval_s, r.interruptions,
        r.options.tier == CheckpointTier::kMemory ? r.disk_restores : int64_t{0},
        r.lost_s / r.wall_s * 100, r.checkpoint_s / r.wall_s * 100,
        MeetsGoal(r, goal_ettr, goal_gap) ? "met" : "NOT met");
    out << line;
  }
  out << "\n(goal: ETTR >= " << Pct(goal_ettr) << " and within " << Fmt("%g", goal_gap * 100)
      << (goal_gap == 0.01 ? " point" : " points")
      << " of the bound; gap in points; lost% and ckpt% of wall time; downtime% = "
         "100 - ETTR - lost - ckpt)\n";
  for (const RecoverySimResult& r : runs)
    out << r.options.costs.name << "/" << CheckpointTierName(r.options.tier) << ": head attempts "
        << r.attempts << ", failures " << r.head_failures << ", steps lost " << r.head_steps_lost
        << " (engine " << r.steps_lost << "), mean time to recover "
        << Fmt("%.1f", r.head_mean_time_to_recover_s) << " s, goodput " << Pct(r.head_goodput)
        << "; restores memory " << r.memory_restores << " disk " << r.disk_restores
        << ", disk checkpoints " << r.disk_checkpoints << ", spare wait "
        << Fmt("%.0f", r.spare_wait_s) << " s, event hash " << std::hex << r.event_hash << std::dec
        << "\n";
}

void WriteRecoveryJson(std::ostream& out, const std::vector<RecoverySimResult>& runs,
                       double goal_ettr, double goal_gap) {
  nlohmann::json rows = nlohmann::json::array();
  for (const RecoverySimResult& r : runs) {
    const RecoverySimOptions& o = r.options;
    rows.push_back({
        {"costs", CostsJson(o.costs)},
        {"tier", CheckpointTierName(o.tier)},
        {"chips", o.chips},
        {"hosts", r.hosts},
        {"days", o.days},
        {"stepS", o.step_s},
        {"seed", o.seed},
        {"interruptionsPerChipDay", o.interruptions_per_chip_day},
        {"peerLossShare", o.peer_loss_share},
        {"spareSlices", o.spare_slices},
        {"intervalSteps", o.interval_steps},
        {"diskEverySnapshots", o.disk_every_snapshots},
        {"mtbfS", r.mtbf_s},
        {"wallS", r.wall_s},
        {"usefulS", r.useful_s},
        {"ettr", r.ettr},
        {"lostS", r.lost_s},
        {"checkpointS", r.checkpoint_s},
        {"downtimeS", r.downtime_s},
        {"spareWaitS", r.spare_wait_s},
        {"interruptions", r.interruptions},
        {"correlated", r.correlated},
        {"memoryRestores", r.memory_restores},
        {"diskRestores", r.disk_restores},
        {"steps", r.steps},
        {"stepsLost", r.steps_lost},
        {"checkpoints", r.checkpoints},
        {"diskCheckpoints", r.disk_checkpoints},
        {"bound",
         {{"checkpointS", r.bound.checkpoint_s},
          {"downtimeS", r.bound.downtime_s},
          {"mtbfS", r.bound.mtbf_s},
          {"intervalS", r.bound.interval_s},
          {"efficiency", r.bound.efficiency},
          {"firstOrder", r.bound.first_order}}},
        {"head",
         {{"attempts", r.attempts},
          {"failures", r.head_failures},
          {"stepsLost", r.head_steps_lost},
          {"meanTimeToRecoverS", r.head_mean_time_to_recover_s},
          {"goodput", r.head_goodput}}},
        {"goalMet", MeetsGoal(r, goal_ettr, goal_gap)},
        {"eventHash", r.event_hash},
    });
  }
  out << nlohmann::json{{"goal", {{"ettr", goal_ettr}, {"gapPoints", goal_gap * 100}}},
                        {"runs", rows}}
             .dump(2)
      << "\n";
}

}  // namespace tessera::sim
