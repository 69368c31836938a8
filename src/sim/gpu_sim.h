// The GPU domain simulation (`tessera sim --gpu ...`): a GPU trace replayed natively on NVLink
// domains, once per placement policy, with the same queue for all of them.
//
// Every policy places through the GPU domain planner (placement/gpu_planner.h): tessera (best
// fit inside domains), slurm-block (Slurm topology/block's rule: the smallest block level that
// fits, then best fit), first-fit (topology-blind). The queue is the same for all: jobs in
// submission order, each pass starting every job that fits now (backfill without
// reservations). tessera adds what the head does for a blocked gang: it holds the hosts the
// oldest waiting whole-host job would take (the ones with the fewest GPUs in use by small
// jobs), lets no other job onto them, and moves the small jobs off them when they all fit
// elsewhere (checkpoint and restart, `migrate_s` each), so the big job starts at once.
//
// A job's rule: `auto` is required (one clique) for jobs of at most one domain and preferred
// for larger ones; or one rule for every whole-host job. first-fit ignores rules, so its
// clique-spanning jobs show what ignoring cliques costs; spanning jobs run `span_slowdown`
// times longer.
//
// Pure: no I/O, clocks or threads; the CLI opens the trace. Same inputs, same result (hash).
// Thread-safety: functions of their arguments.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "common/status.h"
#include "placement/gpu_planner.h"
#include "sim/workload.h"

namespace tessera::sim {

struct GpuSimOptions {
  GpuSystem system = GpuSystem::kH100;
  int domains = 1;  // h100/h200: hosts (each its own domain)
  GpuPolicy policy = GpuPolicy::kTessera;
  std::optional<DomainRuleSpec> rule;  // empty: auto (required up to a domain, else preferred)
  bool defrag = true;                  // tessera: hold hosts for the oldest blocked big job
                                       // and move small jobs off them
  int64_t migrate_s = 300;             // a moved job's restart cost (checkpoint, start, restore)
  double span_slowdown = 1.0;          // run-time factor of a job over more domains than needed
};

struct GpuClassStats {
  std::string name;   // "small", "domain", "multi-domain"
  std::string sizes;  // "1-4 GPUs"
  int64_t jobs = 0;
  double p50_wait_h = 0, p95_wait_h = 0, mean_wait_h = 0;
};

struct GpuSimResult {
  std::string policy;
  int64_t jobs = 0;
  int64_t never_placed = 0;  // larger than the fleet (or a domain, when required)
  std::vector<GpuClassStats> classes;
  GpuClassStats overall;
  int64_t spanned = 0;        // jobs over more domains than their size needs
  int64_t migrations = 0;     // small jobs moved (tessera)
  double migrated_gpu_h = 0;  // GPU-hours lost to moves
  double utilisation = 0;     // GPU-seconds held by jobs / (GPUs x first submit .. last end)
  int64_t makespan_s = 0;
  uint64_t hash = 0;  // over every start (job, time, hosts): same input, same hash
};

Result<GpuSimResult> RunGpuSimulation(const Workload& workload, const GpuSimOptions& options);

struct GpuComparison {
  std::string cluster;   // "gb200-nvl72: 8 domains x 18 hosts x 4 GPUs = 576 GPUs"
  std::string workload;  // the trace's source
  std::string command;   // the rule, migrate cost, slowdown
  std::vector<GpuSimResult> runs;
};
void WriteGpuText(std::ostream& out, const GpuComparison& c);
void WriteGpuJson(std::ostream& out, const GpuComparison& c);

}  // namespace tessera::sim
