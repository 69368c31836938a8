#include "agent/launcher.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace tessera::agent {
namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string ErrnoText(int err) { return std::strerror(err); }

// What the child reports through the exec pipe when it cannot exec.
struct ChildError {
  int stage;  // 1 = chdir, 2 = exec, 3 = dup2/setsid
  int err;
};

[[noreturn]] void ChildFail(int fd, int stage) {
  ChildError e{stage, errno};
  ssize_t ignored = ::write(fd, &e, sizeof e);
  (void)ignored;
  ::_exit(127);
}

}  // namespace

std::string FindExecutable(const std::string& program, const std::string& path_var) {
  if (program.find('/') != std::string::npos) {
    return ::access(program.c_str(), X_OK) == 0 ? program : "";
  }
  size_t start = 0;
  while (start <= path_var.size()) {
    size_t end = path_var.find(':', start);
    if (end == std::string::npos) end = path_var.size();
    std::string dir = path_var.substr(start, end - start);
    if (dir.empty()) dir = ".";
    std::string candidate = dir + "/" + program;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        ::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
    start = end + 1;
  }
  return "";
}

WorkerProcess::WorkerProcess(pid_t pid, int64_t started_at_ms, ExitCallback on_exit,
                             std::chrono::milliseconds kill_timeout)
    : pid_(pid),
      started_at_ms_(started_at_ms),
      on_exit_(std::move(on_exit)),
      kill_timeout_(kill_timeout) {}

std::shared_ptr<WorkerProcess> WorkerProcess::Watch(pid_t pid, int64_t started_at_ms,
                                                    ExitCallback on_exit,
                                                    std::chrono::milliseconds kill_timeout) {
  std::shared_ptr<WorkerProcess> process(
      new WorkerProcess(pid, started_at_ms, std::move(on_exit), kill_timeout));
  process->monitor_ = std::thread([p = process.get()] { p->Monitor(); });
  return process;
}

WorkerProcess::~WorkerProcess() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutting_down_ = true;
    if (!exit_) ::kill(-pid_, SIGKILL);
  }
  cv_.notify_all();
  if (escalation_.joinable()) {
    if (escalation_.get_id() == std::this_thread::get_id()) {
      escalation_.detach();
    } else {
      escalation_.join();
    }
  }
  if (monitor_.joinable()) {
    // The exit callback may drop the last reference on the monitor thread itself.
    if (monitor_.get_id() == std::this_thread::get_id()) {
      monitor_.detach();
    } else {
      monitor_.join();
    }
  }
}

void WorkerProcess::Monitor() {
  // Wait for the leader without reaping it, so its pid (the group id) cannot be reused while
  // the rest of the group is killed.
  siginfo_t info{};
  while (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOWAIT) != 0 &&
         errno == EINTR) {
  }
  ::kill(-pid_, SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  ExitInfo exit;
  exit.finished_at_ms = NowMs();
  if (WIFEXITED(status)) {
    exit.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    exit.signal = WTERMSIG(status);
    exit.exit_code = 128 + exit.signal;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    exit_ = exit;
  }
  cv_.notify_all();
  // A copy: the callback may drop the last reference, which destroys on_exit_.
  ExitCallback callback = on_exit_;
  if (callback) callback(exit);
}

std::optional<ExitInfo> WorkerProcess::exit_info() const {
  std::lock_guard<std::mutex> lock(mu_);
  return exit_;
}

std::optional<ExitInfo> WorkerProcess::WaitFor(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return exit_.has_value(); });
  return exit_;
}

Status WorkerProcess::Signal(int sig) {
  std::lock_guard<std::mutex> lock(mu_);
  if (exit_) return FailedPrecondition("worker " + std::to_string(pid_) + " has exited");
  if (::kill(-pid_, sig) != 0) {
    return Unavailable("kill(-" + std::to_string(pid_) + "): " + ErrnoText(errno));
  }
  return Status::Ok();
}

bool WorkerProcess::stopping() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stopping_;
}

Status WorkerProcess::Stop(std::chrono::milliseconds grace) {
  std::unique_lock<std::mutex> lock(mu_);
  if (exit_) return Status::Ok();
  stopping_ = true;
  kill_deadline_ = std::chrono::steady_clock::now() + grace;
  ::kill(-pid_, grace.count() <= 0 ? SIGKILL : SIGTERM);
  if (!cv_.wait_for(lock, grace, [&] { return exit_.has_value(); })) {
    ::kill(-pid_, SIGKILL);
    if (!cv_.wait_for(lock, kill_timeout_, [&] { return exit_.has_value(); })) {
      return Unavailable("worker " + std::to_string(pid_) + " survived SIGKILL for " +
                         std::to_string(kill_timeout_.count()) + " ms");
    }
  }
  return Status::Ok();
}

void WorkerProcess::StopAsync(std::chrono::milliseconds grace) {
  std::lock_guard<std::mutex> lock(mu_);
  if (exit_) return;
  const auto deadline = std::chrono::steady_clock::now() + std::max(grace, decltype(grace)(0));
  if (stopping_) {
    if (deadline < kill_deadline_) {
      kill_deadline_ = deadline;
      cv_.notify_all();  // the escalation thread waits for the new deadline
    }
    return;
  }
  stopping_ = true;
  kill_deadline_ = deadline;
  ::kill(-pid_, grace.count() <= 0 ? SIGKILL : SIGTERM);
  escalation_ = std::thread([this] { Escalate(); });
}

void WorkerProcess::Escalate() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!exit_ && !shutting_down_) {
    if (std::chrono::steady_clock::now() >= kill_deadline_) {
      ::kill(-pid_, SIGKILL);
      return;
    }
    const auto deadline = kill_deadline_;
    cv_.wait_until(lock, deadline, [&] {
      return exit_.has_value() || shutting_down_ || kill_deadline_ != deadline;
    });
  }
}

ProcessLauncher::ProcessLauncher(LauncherOptions options) : options_(std::move(options)) {}

std::map<std::string, std::string> ProcessLauncher::WorkerEnvironment(
    const LaunchSpec& spec) const {
  std::map<std::string, std::string> env;
  for (const std::string& name : options_.inherited_env) {
    if (const char* value = std::getenv(name.c_str())) env[name] = value;
  }
  for (const auto& [name, value] : spec.env) env[name] = value;
  if (env.find("PATH") == env.end()) env["PATH"] = options_.default_path;
  if (!spec.progress_path.empty()) env["TESSERA_PROGRESS_FILE"] = spec.progress_path;
  return env;
}

Result<pid_t> SpawnInNewSession(const SpawnSpec& spec) {
  // Everything the child needs is prepared here: between fork and exec only async-signal-safe
  // calls are allowed.
  std::vector<std::string> env_strings;
  env_strings.reserve(spec.env.size());
  for (const auto& [name, value] : spec.env) env_strings.push_back(name + "=" + value);
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = spec.argv;
  std::vector<char*> argv;
  for (std::string& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  const char* dir = spec.working_dir.empty() ? nullptr : spec.working_dir.c_str();
  const char* program = spec.program.c_str();
  const int stdin_fd = spec.stdin_fd;
  const int output_fd = spec.output_fd;
  const bool die_with_parent = spec.die_with_parent;
  const pid_t parent = ::getpid();

  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return Unavailable("pipe2: " + ErrnoText(errno));
  pid_t pid = ::fork();
  if (pid == 0) {
    // Child.
    const int err_fd = pipe_fds[1];
    sigset_t all;
    sigemptyset(&all);
    ::sigprocmask(SIG_SETMASK, &all, nullptr);
    for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGCHLD}) ::signal(sig, SIG_DFL);
    if (::setsid() < 0) ChildFail(err_fd, 3);
    if (die_with_parent) {
      if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) ChildFail(err_fd, 3);
      if (::getppid() != parent) ::_exit(127);  // the parent is already gone
    }
    if (::dup2(stdin_fd, 0) < 0 || ::dup2(output_fd, 1) < 0 || ::dup2(output_fd, 2) < 0) {
      ChildFail(err_fd, 3);
    }
    // Descriptors a library opened without O_CLOEXEC must not reach the child either.
    ::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC);
    if (dir != nullptr && ::chdir(dir) != 0) ChildFail(err_fd, 1);
    ::execve(program, argv.data(), envp.data());
    ChildFail(err_fd, 2);
  }
  const int fork_errno = errno;
  ::close(pipe_fds[1]);
  if (pid < 0) {
    ::close(pipe_fds[0]);
    return Unavailable("fork: " + ErrnoText(fork_errno));
  }

  ChildError child_error{};
  ssize_t n;
  while ((n = ::read(pipe_fds[0], &child_error, sizeof child_error)) < 0 && errno == EINTR) {
  }
  ::close(pipe_fds[0]);
  if (n > 0) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    switch (child_error.stage) {
      case 1:
        return Unavailable("workingDir " + spec.working_dir + ": " + ErrnoText(child_error.err));
      case 2:
        return NotFound("command: exec " + spec.program + ": " + ErrnoText(child_error.err));
      default:
        return Unavailable("worker setup: " + ErrnoText(child_error.err));
    }
  }
  // The exec succeeded: setsid has run, so the process group exists.
  return pid;
}

Result<std::shared_ptr<WorkerProcess>> ProcessLauncher::Launch(
    const LaunchSpec& spec, WorkerProcess::ExitCallback on_exit) {
  if (spec.command.empty() || spec.command[0].empty()) {
    return InvalidArgument("command: must name a program");
  }
  if (spec.log_path.empty()) return InvalidArgument("log_path: must be set");
  SpawnSpec spawn;
  spawn.env = WorkerEnvironment(spec);
  spawn.program = FindExecutable(spec.command[0], spawn.env.at("PATH"));
  if (spawn.program.empty()) {
    return NotFound("command: " + spec.command[0] + " is not an executable file" +
                    (spec.command[0].find('/') == std::string::npos
                         ? " in PATH=" + spawn.env.at("PATH")
                         : std::string()));
  }
  spawn.argv = spec.command;
  spawn.working_dir = spec.working_dir;

  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(spec.log_path).parent_path(), ec);
  if (!spec.progress_path.empty()) {
    std::filesystem::create_directories(std::filesystem::path(spec.progress_path).parent_path(),
                                        ec);
  }
  int log_fd = ::open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    return Unavailable("log file " + spec.log_path + ": " + ErrnoText(errno));
  }
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0) {
    int err = errno;
    ::close(log_fd);
    return Unavailable("/dev/null: " + ErrnoText(err));
  }
  spawn.stdin_fd = null_fd;
  spawn.output_fd = log_fd;
  const int64_t started_at_ms = NowMs();
  Result<pid_t> pid = SpawnInNewSession(spawn);
  ::close(log_fd);
  ::close(null_fd);
  if (!pid.ok()) return pid.status();
  return WorkerProcess::Watch(*pid, started_at_ms, std::move(on_exit), options_.kill_timeout);
}

}  // namespace tessera::agent
