// ProcessLauncher: starts one worker process per assignment and watches it until it is gone.
//
// A worker runs in its own session and process group (setsid), with an exact environment: the
// variables named in LauncherOptions::inherited_env are copied from the agent, then the
// assignment's env is applied on top, then TESSERA_PROGRESS_FILE is set to the file the agent
// tails. stdin is /dev/null; stdout and stderr are appended to the log file. No descriptor of
// the agent leaks into the worker (every fd is close-on-exec at the time of exec).
//
// Each WorkerProcess owns a monitor thread that waits for the group leader to exit, then kills
// whatever is left in its process group (a worker's processes do not outlive it), reaps the
// leader (no zombies), and records the exit. Stop() and StopAsync() signal the whole group:
// SIGTERM first, SIGKILL once the grace period is over (a grace of 0 is SIGKILL at once).
//
// WarmPool (warm_pool.h) hands assignments to pre-started interpreters instead; what it returns
// is the same WorkerProcess, watched and stopped the same way.
//
// Ownership: Launch() returns a shared WorkerProcess; destroying the last reference kills the
// group (SIGKILL) if it is still running and joins its threads. Thread-safety: every method of
// ProcessLauncher and WorkerProcess may be called from any thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace tessera::agent {

// How a worker ended. A normal exit has signal == 0 and exit_code = the status passed to
// exit(); a death by signal has signal = N and exit_code = 128 + N (the shell's convention),
// so "exit_code == 0" alone means success.
struct ExitInfo {
  int exit_code = 0;
  int signal = 0;
  int64_t finished_at_ms = 0;  // wall clock, milliseconds since the Unix epoch
};

struct LaunchSpec {
  std::vector<std::string> command;        // argv; command[0] is looked up in the worker's PATH
  std::map<std::string, std::string> env;  // added on top of the inherited variables
  std::string working_dir;                 // "" = the agent's current directory
  std::string log_path;                    // stdout+stderr, appended; parent dirs are created
  std::string progress_path;               // TESSERA_PROGRESS_FILE; "" = not set
};

struct LauncherOptions {
  // Variables copied from the agent's own environment when set there.
  std::vector<std::string> inherited_env = {
      "PATH",       "HOME",        "USER",     "LOGNAME",
      "SHELL",      "LANG",        "LANGUAGE", "LC_ALL",
      "LC_CTYPE",   "TZ",          "TMPDIR",   "PYTHONPATH",
      "PYTHONHOME", "VIRTUAL_ENV", "TERM",     "LD_LIBRARY_PATH",
  };
  // PATH given to workers when the agent has none and the assignment sets none.
  std::string default_path = "/usr/local/bin:/usr/bin:/bin";
  // Stop(): how long to wait for the group leader after SIGKILL before giving up.
  std::chrono::milliseconds kill_timeout{10'000};
};

class WorkerProcess {
 public:
  using ExitCallback = std::function<void(const ExitInfo&)>;

  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  pid_t pid() const { return pid_; }  // also the process group id
  int64_t started_at_ms() const { return started_at_ms_; }

  // The exit, once the leader has exited and been reaped; nullopt while it runs.
  std::optional<ExitInfo> exit_info() const;
  // Waits up to `timeout` for the exit. nullopt if it is still running.
  std::optional<ExitInfo> WaitFor(std::chrono::milliseconds timeout) const;

  // Sends `sig` to the whole process group. FailedPrecondition once the worker has exited.
  Status Signal(int sig);

  // SIGTERM to the group; after `grace` SIGKILL to the group; returns once the leader is
  // reaped. OK if the worker had already exited. Unavailable if it survives SIGKILL for
  // LauncherOptions::kill_timeout (a process stuck in the kernel).
  Status Stop(std::chrono::milliseconds grace);
  // The same, without waiting: SIGTERM now, SIGKILL after `grace` from a background thread
  // (grace <= 0: SIGKILL now, no SIGTERM). Repeated calls keep the earliest deadline, so a
  // later call with a shorter grace hurries a stop already under way. Watch exit_info() or the
  // exit callback.
  void StopAsync(std::chrono::milliseconds grace);
  // True once Stop or StopAsync has been called.
  bool stopping() const;

 private:
  friend class ProcessLauncher;
  friend class WarmPool;
  WorkerProcess(pid_t pid, int64_t started_at_ms, ExitCallback on_exit,
                std::chrono::milliseconds kill_timeout);
  // Takes over `pid` (a child of this process, leader of its own process group) and starts
  // its monitor thread.
  static std::shared_ptr<WorkerProcess> Watch(pid_t pid, int64_t started_at_ms,
                                              ExitCallback on_exit,
                                              std::chrono::milliseconds kill_timeout);
  void Monitor();
  void Escalate();

  const pid_t pid_;
  const int64_t started_at_ms_;
  const ExitCallback on_exit_;
  const std::chrono::milliseconds kill_timeout_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::optional<ExitInfo> exit_;
  bool stopping_ = false;
  std::chrono::steady_clock::time_point kill_deadline_;  // while stopping_
  bool shutting_down_ = false;  // the destructor runs: the escalation thread must end
  std::thread monitor_;
  std::thread escalation_;
};

// The absolute path of `program` (a path, or a name looked up in the colon list `path_var`);
// "" when it is not an executable file.
std::string FindExecutable(const std::string& program, const std::string& path_var);

// fork + exec in a new session and process group, for the launcher and the warm pool. Between
// fork and exec the child only makes async-signal-safe calls (the agent is multi-threaded).
struct SpawnSpec {
  std::string program;  // absolute path
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;  // exactly the child's environment
  std::string working_dir;                 // "" = stay
  int stdin_fd = -1;                       // dup2'ed onto 0
  int output_fd = -1;                      // dup2'ed onto 1 and 2
  // PR_SET_PDEATHSIG(SIGKILL): the child dies when the *thread* that spawned it exits, so
  // only spawn with this from a thread that lives as long as the process must.
  bool die_with_parent = false;
};
// The child's pid once it has exec'd. Unavailable if the working directory cannot be entered
// (message starts with "workingDir") or fork fails; NotFound if the exec fails. Nothing is left
// running on error. The caller's descriptors stay open.
Result<pid_t> SpawnInNewSession(const SpawnSpec& spec);

class ProcessLauncher {
 public:
  explicit ProcessLauncher(LauncherOptions options = {});
  const LauncherOptions& options() const { return options_; }

  // The environment a worker gets for `spec` (inherited + spec.env + progress file), sorted.
  std::map<std::string, std::string> WorkerEnvironment(const LaunchSpec& spec) const;

  // Starts the worker and returns once it has exec'd (its process group exists by then).
  // `on_exit` (may be empty) runs once, on the worker's monitor thread, after the worker has
  // been reaped and exit_info() is set. It must not block.
  // InvalidArgument for an empty command; NotFound if command[0] is not found or not
  // executable; Unavailable if the log file cannot be opened, the working directory cannot
  // be entered or fork fails. Nothing is left running on error.
  Result<std::shared_ptr<WorkerProcess>> Launch(const LaunchSpec& spec,
                                                WorkerProcess::ExitCallback on_exit = {});

 private:
  LauncherOptions options_;
};

}  // namespace tessera::agent
