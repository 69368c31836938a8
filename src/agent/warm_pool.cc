#include "agent/warm_pool.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

namespace tessera::agent {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
using std::chrono::milliseconds;

int64_t NowMs() {
  return std::chrono::duration_cast<milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string RealPath(const std::string& path) {
  std::error_code ec;
  auto real = std::filesystem::canonical(path, ec);
  return ec ? std::string() : real.string();
}

// Variables the interpreter (or the C library, or a preloaded module) reads once at start-up:
// a warm process has the agent's values, so a worker whose environment changes one of them
// must start cold. PYTHONPATH, PYTHONUNBUFFERED and PYTHONDONTWRITEBYTECODE are applied by
// tessera._warm at handoff; PYTHONBREAKPOINT is read when breakpoint() is called.
bool IsStartupVariable(const std::string& name) {
  static const std::set<std::string> kApplied = {"PYTHONPATH", "PYTHONUNBUFFERED",
                                                 "PYTHONDONTWRITEBYTECODE", "PYTHONBREAKPOINT"};
  if (kApplied.count(name) != 0) return false;
  for (const char* prefix : {"PYTHON", "LD_", "MALLOC_", "LC_"}) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  return name == "LANG";
}

// Waits until `fd` is ready for `events` or `deadline` passes; false on timeout or error.
bool PollUntil(int fd, short events, Clock::time_point deadline) {
  while (true) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    if (left < 0) return false;
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1'000'000)));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

std::string Join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : sep) + p;
  return out;
}

}  // namespace

WarmPool::WarmPool(WarmPoolOptions options, LauncherOptions launcher, WarmPoolLog log)
    : options_(std::move(options)), launcher_(std::move(launcher)), log_(std::move(log)) {}

WarmPool::~WarmPool() { Shutdown(); }

std::map<std::string, std::string> WarmPool::WarmEnvironment() const {
  LaunchSpec spec;
  spec.env = options_.env;
  std::map<std::string, std::string> env = launcher_.WorkerEnvironment(spec);
  auto it = env.find("PYTHONPATH");
  env["PYTHONPATH"] =
      options_.sdk_dir + (it == env.end() || it->second.empty() ? std::string() : ":" + it->second);
  return env;
}

Status WarmPool::Start() {
  if (options_.size < 0) return InvalidArgument("warm pool size: must be >= 0");
  const char* path = std::getenv("PATH");
  python_ =
      FindExecutable(options_.python, path != nullptr ? path : launcher_.options().default_path);
  if (python_.empty()) {
    return InvalidArgument("warm python: " + options_.python + " is not an executable file");
  }
  python_real_ = RealPath(python_);
  if (!std::filesystem::exists(options_.sdk_dir + "/tessera/_warm.py")) {
    return InvalidArgument("warm sdk dir: '" + options_.sdk_dir +
                           "' holds no tessera/_warm.py (give the repository's python/ directory)");
  }
  warm_env_ = WarmEnvironment();
  argv_ = {python_, "-m", "tessera._warm"};
  if (!options_.preload.empty()) {
    argv_.push_back("--preload");
    argv_.push_back(Join(options_.preload, ","));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (started_) return FailedPrecondition("warm pool already started");
  if (!options_.log_path.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(options_.log_path).parent_path(), ec);
    log_fd_ = ::open(options_.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  }
  if (log_fd_ < 0) log_fd_ = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (log_fd_ < 0 || ::pipe2(wake_fds_, O_CLOEXEC | O_NONBLOCK) != 0) {
    return Unavailable(std::string("warm pool: ") + std::strerror(errno));
  }
  started_ = true;
  next_spawn_ = Clock::now();
  thread_ = std::thread([this] { Run(); });
  return Status::Ok();
}

void WarmPool::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_ || stopping_) return;
    stopping_ = true;
  }
  Wake();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  for (int fd : wake_fds_) {
    if (fd >= 0) ::close(fd);
  }
  wake_fds_[0] = wake_fds_[1] = -1;
  if (log_fd_ >= 0) ::close(log_fd_);
  log_fd_ = -1;
}

void WarmPool::Wake() {
  char byte = 1;
  ssize_t ignored = ::write(wake_fds_[1], &byte, 1);
  (void)ignored;
}

int WarmPool::ready() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(
      std::count_if(idle_.begin(), idle_.end(), [](const Idle& i) { return i.ready; }));
}

std::vector<pid_t> WarmPool::idle_pids() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<pid_t> out;
  for (const Idle& i : idle_) out.push_back(i.pid);
  return out;
}

int64_t WarmPool::handed_out() const {
  std::lock_guard<std::mutex> lock(mu_);
  return handed_out_;
}

void WarmPool::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    if (static_cast<int>(idle_.size()) < options_.size && Clock::now() >= next_spawn_) {
      SpawnLocked();
      continue;
    }
    std::vector<pollfd> fds = {{wake_fds_[0], POLLIN, 0}};
    std::vector<pid_t> pids = {0};
    for (const Idle& i : idle_) {
      fds.push_back({i.fd, POLLIN, 0});
      pids.push_back(i.pid);
    }
    int timeout_ms = -1;
    if (static_cast<int>(idle_.size()) < options_.size) {
      auto left = std::chrono::duration_cast<milliseconds>(next_spawn_ - Clock::now()).count();
      timeout_ms = static_cast<int>(std::clamp<int64_t>(left + 1, 0, 60'000));
    }
    lock.unlock();
    ::poll(fds.data(), fds.size(), timeout_ms);
    lock.lock();
    if (fds[0].revents != 0) {
      char drain[64];
      while (::read(wake_fds_[0], drain, sizeof drain) > 0) {
      }
    }
    for (size_t k = 1; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      // Handed out meanwhile (its fd may even have been reused): match by pid.
      auto it = std::find_if(idle_.begin(), idle_.end(),
                             [&](const Idle& i) { return i.pid == pids[k] && i.fd == fds[k].fd; });
      if (it != idle_.end() && !ReadIdleLocked(*it)) idle_.erase(it);
    }
  }
  for (Idle& i : idle_) ReapLocked(i, "shutdown");
  idle_.clear();
}

void WarmPool::SpawnLocked() {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    if (log_) log_("warm.spawn_failed", std::string("error=socketpair:") + std::strerror(errno));
    backoff_ = std::min(std::max(backoff_ * 2, options_.respawn_backoff_initial),
                        options_.respawn_backoff_max);
    next_spawn_ = Clock::now() + backoff_;
    return;
  }
  SpawnSpec spawn;
  spawn.program = python_;
  spawn.argv = argv_;
  spawn.env = warm_env_;
  spawn.working_dir = "/";  // nothing on sys.path[0] may shadow the preloaded modules
  spawn.stdin_fd = sv[1];
  spawn.output_fd = log_fd_;
  spawn.die_with_parent = true;  // spawned on the pool's thread, which lives as long as the pool
  Result<pid_t> pid = SpawnInNewSession(spawn);
  ::close(sv[1]);
  if (!pid.ok()) {
    ::close(sv[0]);
    if (log_) log_("warm.spawn_failed", "error=\"" + pid.status().message() + "\"");
    backoff_ = std::min(std::max(backoff_ * 2, options_.respawn_backoff_initial),
                        options_.respawn_backoff_max);
    next_spawn_ = Clock::now() + backoff_;
    return;
  }
  ::fcntl(sv[0], F_SETFL, ::fcntl(sv[0], F_GETFL) | O_NONBLOCK);
  Idle idle;
  idle.pid = *pid;
  idle.fd = sv[0];
  idle.started = Clock::now();
  idle_.push_back(std::move(idle));
  if (log_) log_("warm.spawned", "pid=" + std::to_string(*pid));
}

bool WarmPool::ReadIdleLocked(Idle& idle) {
  char buf[4096];
  while (true) {
    ssize_t n = ::recv(idle.fd, buf, sizeof buf, 0);
    if (n > 0) {
      idle.buffer.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    ReapLocked(idle, "exited while idle");  // end of file: the process is gone
    return false;
  }
  size_t nl;
  while ((nl = idle.buffer.find('\n')) != std::string::npos) {
    json line = json::parse(idle.buffer.substr(0, nl), nullptr, /*allow_exceptions=*/false);
    idle.buffer.erase(0, nl + 1);
    if (line.is_object() && line.value("ready", false)) {
      idle.ready = true;
      backoff_ = milliseconds(0);
      if (log_) {
        auto ms = std::chrono::duration_cast<milliseconds>(Clock::now() - idle.started).count();
        log_("warm.ready", "pid=" + std::to_string(idle.pid) + " startMs=" + std::to_string(ms));
      }
    }
  }
  return true;
}

void WarmPool::ReapLocked(Idle& idle, const std::string& why) {
  ::close(idle.fd);
  ::kill(-idle.pid, SIGKILL);
  int status = 0;
  while (::waitpid(idle.pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (why == "shutdown") return;
  std::string how = WIFEXITED(status) ? "exitCode=" + std::to_string(WEXITSTATUS(status))
                                      : "signal=" + std::to_string(WTERMSIG(status));
  if (log_) {
    log_("warm.exited", "pid=" + std::to_string(idle.pid) + " " + how + " ready=" +
                            (idle.ready ? "true" : "false") + " log=" + options_.log_path);
  }
  if (idle.ready) {
    next_spawn_ = Clock::now();
  } else {
    // It never got ready (a preload that fails, say): do not spin.
    backoff_ = std::min(std::max(backoff_ * 2, options_.respawn_backoff_initial),
                        options_.respawn_backoff_max);
    next_spawn_ = Clock::now() + backoff_;
  }
}

std::string WarmPool::Unsuitable(const LaunchSpec& spec) const {
  if (python_real_.empty()) return "no warm pool";
  const std::vector<std::string>& c = spec.command;
  if (c.size() < 2) return "not a script or -m module";
  if (c[1] == "-m") {
    if (c.size() < 3 || c[2].empty() || c[2][0] == '-') return "-m without a module";
  } else if (c[1].empty() || c[1][0] == '-') {
    return "interpreter options";
  }
  const std::map<std::string, std::string> env = launcher_.WorkerEnvironment(spec);
  const std::string program = FindExecutable(c[0], env.at("PATH"));
  if (program.empty() || RealPath(program) != python_real_) return "another program";
  std::set<std::string> names;
  for (const auto& [name, value] : env) names.insert(name);
  for (const auto& [name, value] : warm_env_) names.insert(name);
  for (const std::string& name : names) {
    if (!IsStartupVariable(name)) continue;
    auto a = env.find(name);
    auto b = warm_env_.find(name);
    const bool same =
        (a == env.end()) == (b == warm_env_.end()) && (a == env.end() || a->second == b->second);
    if (!same) return "env " + name + " differs from the warm interpreter's";
  }
  return "";
}

Result<std::shared_ptr<WorkerProcess>> WarmPool::TryLaunch(const LaunchSpec& spec,
                                                           WorkerProcess::ExitCallback on_exit) {
  if (spec.log_path.empty()) return InvalidArgument("log_path: must be set");
  if (Unsuitable(spec) != "") return std::shared_ptr<WorkerProcess>();
  const int64_t started_at_ms = NowMs();
  Idle taken;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_ || stopping_) return std::shared_ptr<WorkerProcess>();
    auto it = std::find_if(idle_.begin(), idle_.end(), [](const Idle& i) { return i.ready; });
    if (it == idle_.end()) return std::shared_ptr<WorkerProcess>();
    taken = std::move(*it);
    idle_.erase(it);
    ++handed_out_;
    next_spawn_ = std::max(next_spawn_, Clock::now() + options_.refill_delay);
  }
  Wake();  // the pool's thread forgets the fd and schedules the replacement

  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(spec.log_path).parent_path(), ec);
  if (!spec.progress_path.empty()) {
    std::filesystem::create_directories(std::filesystem::path(spec.progress_path).parent_path(),
                                        ec);
  }
  const std::string message = json{{"command", spec.command},
                                   {"env", launcher_.WorkerEnvironment(spec)},
                                   {"workingDir", spec.working_dir},
                                   {"logPath", spec.log_path}}
                                  .dump(-1, ' ', false, json::error_handler_t::replace) +
                              "\n";
  const auto deadline = Clock::now() + options_.handoff_timeout;
  auto give_up = [&](const std::string& why) {
    ::close(taken.fd);
    ::kill(-taken.pid, SIGKILL);
    while (::waitpid(taken.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    if (log_)
      log_("warm.handoff_failed", "pid=" + std::to_string(taken.pid) + " error=\"" + why + "\"");
  };
  size_t sent = 0;
  while (sent < message.size()) {
    ssize_t n = ::send(taken.fd, message.data() + sent, message.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (!PollUntil(taken.fd, POLLOUT, deadline)) {
        give_up("timed out sending the assignment");
        return std::shared_ptr<WorkerProcess>();
      }
    } else {
      give_up(std::string("send: ") + std::strerror(errno));
      return std::shared_ptr<WorkerProcess>();
    }
  }
  std::string reply = taken.buffer;
  while (reply.find('\n') == std::string::npos) {
    char buf[4096];
    ssize_t n = ::recv(taken.fd, buf, sizeof buf, 0);
    if (n > 0) {
      reply.append(buf, static_cast<size_t>(n));
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (!PollUntil(taken.fd, POLLIN, deadline)) {
        give_up("no acknowledgement within " + std::to_string(options_.handoff_timeout.count()) +
                " ms");
        return std::shared_ptr<WorkerProcess>();
      }
    } else {
      give_up("exited before acknowledging");
      return std::shared_ptr<WorkerProcess>();
    }
  }
  json ack = json::parse(reply.substr(0, reply.find('\n')), nullptr, /*allow_exceptions=*/false);
  if (!ack.is_object() || !ack.value("ok", false)) {
    std::string error = ack.is_object() && ack.contains("error") && ack["error"].is_string()
                            ? ack["error"].get<std::string>()
                            : "bad acknowledgement";
    ::close(taken.fd);
    ::kill(-taken.pid, SIGKILL);
    while (::waitpid(taken.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    if (ack.is_object() && ack.value("cold", false)) {
      // A preloaded module read a variable this assignment changes: start it cold instead.
      if (log_)
        log_("warm.handoff_refused",
             "pid=" + std::to_string(taken.pid) + " error=\"" + error + "\"");
      return std::shared_ptr<WorkerProcess>();
    }
    return Unavailable(error);
  }
  ::close(taken.fd);
  return WorkerProcess::Watch(taken.pid, started_at_ms, std::move(on_exit),
                              launcher_.options().kill_timeout);
}

}  // namespace tessera::agent
