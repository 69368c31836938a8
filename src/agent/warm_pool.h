// WarmPool: Python interpreters started ahead of time, each with the framework modules already
// imported, that become workers when an assignment for that interpreter arrives.
//
// Starting a PyTorch worker is mostly `import torch` (1.5 s or more per process on a small
// host), and a restart after a failure pays it again. The pool keeps `size` processes running
// `<python> -m tessera._warm --preload <modules>` (python/tessera/_warm.py), each the leader of
// its own session and process group, killed by the kernel if the pool's thread (and so the
// agent) dies. Each is connected to the pool by a Unix socket on its fd 0. When TryLaunch gets
// an assignment whose command is `<python> SCRIPT ...` or `<python> -m MODULE ...` (command[0]
// resolving to the same file as the pool's interpreter) and whose environment leaves the
// interpreter's start-up settings alone, it hands a ready process the assignment (argv, the
// whole worker environment, working directory, log file) over that socket, waits for its
// acknowledgement, and returns it as a WorkerProcess: the same pid, process group, stop and
// usage handling as a cold-started worker. The pool then starts a replacement in the
// background. Protocol and limits: docs/agent-protocol.md, "Warm workers".
//
// Ownership: the Agent owns the pool; destroying it (or Shutdown) kills the idle processes.
// Processes handed out belong to their WorkerProcess. Thread-safety: every public method may be
// called from any thread. The pool's own thread starts, reads and reaps the idle processes.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agent/launcher.h"
#include "common/status.h"

namespace tessera::agent {

struct WarmPoolOptions {
  // The interpreter to keep warm; "" = no pool. A path, or a name looked up in the agent's PATH.
  std::string python;
  // Modules imported before a process reports ready (e.g. {"torch"}); none = a bare interpreter.
  std::vector<std::string> preload;
  // Ready-or-starting processes kept. 0 = no pool.
  int size = 1;
  // Directory holding the `tessera` package (the repository's python/ directory); put first on
  // the warm processes' PYTHONPATH so `-m tessera._warm` is found.
  std::string sdk_dir;
  // The idle processes' stdout and stderr (preload errors land here), appended; "" = /dev/null.
  std::string log_path;
  // How long a handed-over process may take to acknowledge before the pool kills it and the
  // caller launches cold.
  std::chrono::milliseconds handoff_timeout{5'000};
  // A process that exits before it is ready is replaced after this, doubling up to the max.
  std::chrono::milliseconds respawn_backoff_initial{1'000};
  std::chrono::milliseconds respawn_backoff_max{60'000};
  // A replacement for a handed-out process is started this long after the handoff, so that its
  // imports do not compete for CPU with the worker that just started.
  std::chrono::milliseconds refill_delay{0};
  // Variables added to the warm processes' environment (a job's own, for the pool a job asked
  // for with spec.warmStart: job_warm_pools.h), as an assignment's env is to a worker's.
  std::map<std::string, std::string> env;
};

// Structured log lines: an event name and "k=v ..." fields.
using WarmPoolLog = std::function<void(const std::string& event, const std::string& fields)>;

class WarmPool {
 public:
  // `launcher` computes the worker environment (its inherited variables are the warm
  // processes' environment too) and supplies the kill timeout.
  WarmPool(WarmPoolOptions options, LauncherOptions launcher, WarmPoolLog log = {});
  // Shutdown().
  ~WarmPool();
  WarmPool(const WarmPool&) = delete;
  WarmPool& operator=(const WarmPool&) = delete;

  // Resolves the interpreter and starts the pool's thread, which starts the processes.
  // InvalidArgument if the interpreter is not an executable file, size < 0, or sdk_dir holds no
  // tessera/_warm.py. Call once.
  Status Start();
  // Kills the idle processes and waits for them. Idempotent. Processes already handed out are
  // not touched.
  void Shutdown();

  // Why `spec` cannot run in a warm process ("" if it can): the command is not the pool's
  // interpreter with a script or -m module, or the environment changes a start-up setting.
  std::string Unsuitable(const LaunchSpec& spec) const;

  // Runs `spec` in a ready warm process. null (and OK) when the pool cannot serve it: no pool,
  // Unsuitable, no process ready, or the process failed before acknowledging (it is killed);
  // the caller then launches cold. The same errors as ProcessLauncher::Launch when the
  // working directory or log file cannot be used (the process consumed is killed). Returns
  // once the process has acknowledged; its exit is reported as for a cold worker.
  Result<std::shared_ptr<WorkerProcess>> TryLaunch(const LaunchSpec& spec,
                                                   WorkerProcess::ExitCallback on_exit = {});

  // Processes that have reported ready and wait for an assignment.
  int ready() const;
  // Pids of the idle processes (starting or ready).
  std::vector<pid_t> idle_pids() const;
  // Warm processes handed out so far.
  int64_t handed_out() const;
  // The environment every warm process starts with.
  std::map<std::string, std::string> WarmEnvironment() const;

 private:
  struct Idle {
    pid_t pid = 0;
    int fd = -1;  // the pool's end of the socket (non-blocking)
    bool ready = false;
    std::string buffer;  // bytes read, not yet a full line
    std::chrono::steady_clock::time_point started;
  };

  void Run();
  void SpawnLocked();
  // Reads what `idle` sent; false once it has exited (it is then reaped).
  bool ReadIdleLocked(Idle& idle);
  void ReapLocked(Idle& idle, const std::string& why);
  void Wake();

  const WarmPoolOptions options_;
  const ProcessLauncher launcher_;
  const WarmPoolLog log_;
  std::string python_;       // as resolved in the agent's PATH
  std::string python_real_;  // realpath, compared with each command[0]
  std::map<std::string, std::string> warm_env_;
  std::vector<std::string> argv_;

  mutable std::mutex mu_;
  std::vector<Idle> idle_;
  bool stopping_ = false;
  bool started_ = false;
  int64_t handed_out_ = 0;
  std::chrono::milliseconds backoff_{0};
  std::chrono::steady_clock::time_point next_spawn_;
  int wake_fds_[2] = {-1, -1};
  int log_fd_ = -1;
  std::thread thread_;
};

}  // namespace tessera::agent
