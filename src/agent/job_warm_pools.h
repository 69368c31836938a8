// JobWarmPools: warm interpreters a job asked for in its spec (spec.warmStart.preload), kept
// by the agent for that job's restarts.
//
// The head sets TESSERA_WARM_PRELOAD (a comma list of modules) in the environment of every
// worker of a job with spec.warmStart, and of every process of a Service role with warmStart. When
// such a worker starts here, the agent keeps a warm pool (warm_pool.h) of one interpreter for it:
// `command[0]` with those modules imported, in the job's environment less the variables that change
// with every attempt (rank, ports, a Service process's PORT, TESSERA_*, TPU_*, MEGASCALE_*, JAX_*),
// so modules that read the environment at import see the job's values; one that read a variable the
// attempt changes refuses the handoff and the worker starts cold (python/tessera/_warm.py). The
// first attempt normally starts cold (the pool is created with it); the next attempt of the job on
// this host finds a ready process.
//
// Pools are keyed by (interpreter, modules, job environment) and shared by jobs that agree on
// all three. At most `max_pools` are kept: the least recently used one is shut down to make
// room, and a pool unused for `idle_timeout` is shut down by Prune().
//
// Thread-safety: none; the agent calls it under its own lock.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "agent/launcher.h"
#include "agent/warm_pool.h"

namespace tessera::agent {

inline constexpr char kWarmPreloadVar[] = "TESSERA_WARM_PRELOAD";

struct JobWarmPoolsOptions {
  std::string sdk_dir;  // the repository's python/ directory; "" = no job pools
  std::string log_dir;  // each pool's idle processes log to <log_dir>/<n>.log
  int max_pools = 2;
  std::chrono::milliseconds idle_timeout{std::chrono::minutes(10)};
  // WarmPoolOptions::refill_delay. 3 s: the replacement's imports wait until the workers
  // just handed out are past their start (bench/recovery/README.md).
  std::chrono::milliseconds refill_delay{3'000};
};

class JobWarmPools {
 public:
  JobWarmPools(JobWarmPoolsOptions options, LauncherOptions launcher, WarmPoolLog log = {});
  ~JobWarmPools();

  // For a spec whose env names modules in TESSERA_WARM_PRELOAD: runs it in a ready process of
  // its pool (creating the pool when there is none; the caller then launches cold this time).
  // null and OK when there is no ready process, the spec asks for no preload, or the pool
  // cannot serve it; the same errors as WarmPool::TryLaunch otherwise.
  Result<std::shared_ptr<WorkerProcess>> TryLaunch(const LaunchSpec& spec,
                                                   WorkerProcess::ExitCallback on_exit);
  // Shuts down pools unused for idle_timeout.
  void Prune();
  void Shutdown();
  size_t size() const { return pools_.size(); }
  // Processes ready in every pool.
  int ready() const;

  // The environment a job's pool starts with: `env` less the per-attempt variables.
  static std::map<std::string, std::string> JobEnvironment(
      const std::map<std::string, std::string>& env);
  // The modules of a TESSERA_WARM_PRELOAD value; InvalidArgument naming the bad entry.
  static Result<std::vector<std::string>> ParsePreload(const std::string& value);

 private:
  struct Entry {
    std::unique_ptr<WarmPool> pool;
    std::chrono::steady_clock::time_point last_used;
  };

  const JobWarmPoolsOptions options_;
  const LauncherOptions launcher_;
  const WarmPoolLog log_;
  std::map<std::string, Entry> pools_;  // by key: python, modules, job environment
  int created_ = 0;
};

}  // namespace tessera::agent
