// The GPU domain simulation (`tessera sim --gpu ...`): a GPU trace replayed natively on NVLink
// domains, once per placement policy, with the same queue for all of them.
//
// Every policy places through the GPU domain planner (placement/gpu_planner.h): tessera (best
// fit inside domains), slurm-block (Slurm topology/block's rule: the smallest block level that
// fits, then best fit), first-fit (topology-blind). The queue is the same for all: jobs in
// submission order, each pass starting every job that fits now (backfill without
// reservations). tessera adds what the head does for a blocked gang, EASY backfill on held
// hosts: the oldest waiting jobs the hold applies to (`hold_for`, up to `holds` of them) each
// get a reservation, once `hold_when` lets them go before the smaller jobs queued earlier: the
// hosts that drain soonest (the least of their jobs' latest end) and the time they will all
// be free. Another job may start on held hosts only if it ends by that time. Both times come
// from estimates, not run times (`estimates`: time limits, else the run times of the jobs
// finished so far), as a scheduler would know them. A job that runs past its estimate can so
// make a held job start after its reservation time (`late_holds`). GpuEstimate::kTrue uses the
// real run times instead, an oracle kept for comparison. When the small jobs on some hosts all fit
// elsewhere and the reservation is more than `migrate_s` away, tessera moves them off instead
// (checkpoint and restart, `migrate_s` each) and the held job starts at once. A job backfilled
// on held hosts that still runs there when the time it was to end by has come is preempted
// (`reclaim`), as Slurm's time limit would stop it, and is not backfilled on that hold again.
//
// tessera also queues by least attained service (`las_levels_s`, Tiresias' discretized LAS):
// jobs that have run past fewer levels go first, and a waiting job that does not fit preempts
// running jobs that have run past more (checkpoint, requeue, restart at `migrate_s`), so a long
// job cannot keep hosts from the jobs that arrive after it. No run time is needed to do so.
// Whole-domain jobs are stopped last: only when stopping smaller ones makes no room, and not
// again within `preempt_exempt_s` of their restart.
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
#include <string_view>
#include <vector>

#include "common/status.h"
#include "placement/gpu_planner.h"
#include "sim/workload.h"

namespace tessera::sim {

// Which waiting jobs tessera holds hosts for.
enum class GpuHoldFor {
  kWholeHost,    // every job of a whole host or more
  kLarge,        // more than half a domain: the domain class and larger
  kDomainClass,  // more than half a domain and at most one
};
std::string_view GpuHoldForName(GpuHoldFor h);  // "whole-host", "large", "domain"
Result<GpuHoldFor> ParseGpuHoldFor(std::string_view text);

// When a waiting job that `hold_for` names may get (or keep refreshing) its hold. A hold takes
// hosts the smaller jobs queued before it could start on, so it makes them wait longer.
enum class GpuHoldWhen {
  kAlways,  // whenever it does not fit: the held job goes before every older waiting job
  kFifo,    // only when no older waiting job is smaller: it goes before none
  // only when its wait in GPU-hours (wait x GPUs) is at least that of every older, smaller
  // waiting job: aging weighted by size (the default, chosen over the ITP and openb runs of
  // bench/README.md, "GPU domains")
  kGpuWait,
  // only when no older, smaller waiting job has waited as long as the p95 wait of the jobs
  // started so far: a hold never goes before a job already in the tail the overall p95 is
  // made of (what a scheduler knows at the time: the waits it has seen)
  kTail,
};
std::string_view GpuHoldWhenName(GpuHoldWhen h);  // "always", "fifo", "gpu-wait", "tail"
Result<GpuHoldWhen> ParseGpuHoldWhen(std::string_view text);

// What the scheduler takes a job's run time to be when it reserves hosts and backfills.
enum class GpuEstimate {
  // its time limit: the trace's expected duration, else GpuSimOptions::default_estimate_s; a
  // running job past it is expected to end now
  kLimit,
  // from the jobs finished so far (no constant): a job that has run a s (0 when it starts) is
  // expected to run the median run time of the finished jobs that ran at least a s, or 2a when
  // none did; the limit of kLimit before the first job ends or when the trace states one
  kHistory,
  kTrue,  // the real run time: an oracle no scheduler has, for comparison
};
std::string_view GpuEstimateName(GpuEstimate e);  // "default", "history", "true"
Result<GpuEstimate> ParseGpuEstimate(std::string_view text);

struct GpuSimOptions {
  GpuSystem system = GpuSystem::kH100;
  int domains = 1;  // h100/h200: hosts (each its own domain)
  GpuPolicy policy = GpuPolicy::kTessera;
  std::optional<DomainRuleSpec> rule;  // empty: auto (required up to a domain, else preferred)
  int holds = 1;                       // tessera: reservations at a time (0: none; at most 64)
  // kDomainClass: the default chosen over the ITP and openb traces (bench/README.md, "GPU
  // domains"); holding for larger jobs too drains hosts the small jobs need.
  GpuHoldFor hold_for = GpuHoldFor::kDomainClass;
  GpuHoldWhen hold_when = GpuHoldWhen::kGpuWait;
  // slurm-block and first-fit hold too, with the same EASY backfill and time limits (Slurm's
  // backfill scheduler); moves stay tessera's. false: they start what fits, nothing held.
  bool baseline_holds = false;
  // Run-time estimates (holds and backfill, every policy alike).
  // kHistory: the default, chosen over the ITP and openb runs of bench/README.md ("GPU domains")
  // against 24 h limits; it has no constant to tune.
  GpuEstimate estimates = GpuEstimate::kHistory;
  int64_t default_estimate_s = 24 * 3600;  // the limit of a job the trace gives none
  bool defrag = true;  // tessera: move small jobs off hosts a held job can then take
  // tessera: when moving cannot clear hosts for a job that may hold and its hosts drain more
  // than migrate_s away, preempt the small jobs on them instead (checkpoint, requeue in their
  // place in the queue, restart later at migrate_s; each job at most once) and start it now.
  bool preempt = false;
  // tessera: a job backfilled on held hosts starts on the promise to end by the hold's time (its
  // estimate). When that time comes and the held job has not started, the backfilled jobs
  // still running there are preempted (checkpoint, requeue, restart at migrate_s): the
  // reservation's owner takes its hosts back, as Slurm's backfill enforces the same promise
  // with time limits (it kills the job). false: they keep the hosts.
  bool reclaim = true;
  // tessera: discretized least-attained-service priority (Tiresias' multi-level feedback
  // queue), in seconds of run time, ascending; empty: off. A job's level is how many of these
  // it has run (0 while it has run less than the first); the queue goes by level, then
  // submission. A waiting job that does not fit preempts running jobs of a higher level that
  // have run longer than it when stopping them makes room, each time at the restart cost
  // migrate_s; a preempted job keeps what it ran and waits again at its level. The jobs
  // `hold_for` names (a whole domain's clique, the hardest to place again) yield only to jobs
  // at least as large, and only when stopping the other jobs makes no room.
  // One level at 24 h: the default, chosen over the ITP and openb runs of bench/README.md ("GPU
  // domains", "Least attained service") against none; 12 h and 48 h were close.
  std::vector<int64_t> las_levels_s = {24 * 3600};
  // A preempted job that has waited this many times the run time it has had goes back to level
  // 0 (Tiresias' starvation limit), so a long job preempted once is not held back by every job
  // that arrives after it. 0.25: chosen as las_levels_s was, over 0.1-100 (smaller limits met
  // more of the goal and preempt more).
  double las_starve_limit = 0.25;
  // A job of the `hold_for` class restarted after a preemption is not preempted by attained
  // service again before it has run this long since its restart (Slurm's PreemptExemptTime).
  // Without it a long whole-domain job past the last level is stopped again at each restart
  // while level-0 jobs of its size keep arriving: on mixed traces up to hundreds of times, its
  // wait growing by the starvation limit's share of its run each time. 8 h: chosen over 0, 4,
  // 8 and 24 h on the ITP, openb and mixed runs of bench/README.md; 0: none.
  int64_t preempt_exempt_s = 8 * 3600;
  int64_t migrate_s = 300;     // a moved job's restart cost (checkpoint, start, restore)
  double span_slowdown = 1.0;  // run-time factor of a job over more domains than needed
};

struct GpuClassStats {
  std::string name;   // "small", "domain", "multi-domain"
  std::string sizes;  // "1-4 GPUs"
  int64_t jobs = 0;
  double p50_wait_h = 0, p95_wait_h = 0, mean_wait_h = 0;
};

// Why the domain-class jobs in the tail (wait at or above the class's p95) waited: mean hours
// per job in each state, measured between scheduling passes. `fragmented` is the part of each
// during which the fleet had the job's GPUs free, only not on whole free hosts of one domain (so
// moving small jobs, not waiting, might have started it); the rest is waiting for GPUs.
struct GpuWaitCause {
  std::string state;  // "held", "yielding" (hold_when), "slot taken" (holds full), "unheld"
  double mean_h = 0;
  double fragmented_h = 0;
};

struct GpuSimResult {
  std::string policy;
  int64_t jobs = 0;
  int64_t never_placed = 0;  // larger than the fleet (or a domain, when required)
  std::vector<GpuClassStats> classes;
  GpuClassStats overall;
  int64_t spanned = 0;         // jobs over more domains than their size needs
  int64_t migrations = 0;      // small jobs moved (tessera)
  int64_t holds = 0;           // reservations made (tessera)
  int64_t backfilled = 0;      // jobs started on another job's held hosts, ending in time
  int64_t late_holds = 0;      // held jobs started after their first reservation time
  double migrated_gpu_h = 0;   // GPU-hours lost to moves
  int64_t preemptions = 0;     // small jobs preempted and requeued (tessera, `preempt`)
  int64_t reclaims = 0;        // of them: backfilled on held hosts and still running when due
  double preempted_gpu_h = 0;  // GPU-hours of their restart costs
  double utilisation = 0;      // GPU-seconds held by jobs / (GPUs x first submit .. last end)
  int64_t makespan_s = 0;
  std::vector<GpuWaitCause> domain_tail_waits;  // one entry per state, in the order above
  uint64_t hash = 0;  // over every start (job, time, hosts): same input, same hash
  // Per job of the workload, in its order (not written by the writers): when it started (-1:
  // never placed) and its first reservation time (-1: none).
  std::vector<int64_t> start_s;
  std::vector<int64_t> reserved_s;
};

Result<GpuSimResult> RunGpuSimulation(const Workload& workload, const GpuSimOptions& options);

// A lower bound for the goal's domain half: the domain-class jobs (more than half a domain and
// at most one) replayed with the fleet to themselves, every other job left out, each in one
// domain, started as they fit in submission order, nothing held, moved or preempted.
//
// Each such job takes more than half of its domain, so a domain runs at most one of them at a
// time, and any domain without one is wholly free here. So no scheduler that keeps each of these
// jobs in one domain, starts them in submission order and never stops one starts any of them
// sooner, whatever else it runs: when it starts one, fewer of the older ones still run than
// domains, and here they all started no later and end no later. Its p95 wait is then a floor
// for the class's p95 under such a scheduler. One that starts the class out of order (a
// smaller job where a larger older one does not fit, a backfill onto held hosts) or preempts
// it is not bound by it. `policy` is "domain class alone"; every option but the fleet
// (system, domains) and the estimates is ignored.
Result<GpuSimResult> RunDomainClassAlone(const Workload& workload, const GpuSimOptions& options);

struct GpuComparison {
  std::string cluster;   // "gb200-nvl72: 8 domains x 18 hosts x 4 GPUs = 576 GPUs"
  std::string workload;  // the trace's source
  std::string command;   // the rule, migrate cost, slowdown
  std::vector<GpuSimResult> runs;
  // RunDomainClassAlone's run, when the workload has domain-class jobs: the floor the writers
  // set beside slurm-block's domain p95.
  std::optional<GpuSimResult> domain_alone;
};
void WriteGpuText(std::ostream& out, const GpuComparison& c);
void WriteGpuJson(std::ostream& out, const GpuComparison& c);

}  // namespace tessera::sim
