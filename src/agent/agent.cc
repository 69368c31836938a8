#include "agent/agent.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "net/http_client.h"
#include "net/http_server.h"

namespace tessera::agent {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Reads up to `max` bytes of `path` from `offset`. Empty at or past the end.
std::string ReadFrom(const std::string& path, uint64_t offset, size_t max) {
  std::string out;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  out.resize(max);
  size_t got = 0;
  while (got < max) {
    ssize_t n = ::pread(fd, out.data() + got, max - got, static_cast<off_t>(offset + got));
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  out.resize(got);
  return out;
}

std::optional<int64_t> ParseInt(std::string_view text) {
  int64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

// The message of a head's error reply ({"error": "...", "field": ...}), or the start of the
// body when it is not one.
std::string HeadError(const std::string& body) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) {
    auto error = j.find("error");
    if (error != j.end() && error->is_string()) return error->get<std::string>();
  }
  return body.substr(0, 200);
}

// The name the head will register the host under; `name` itself when the rule refuses it
// (Start() then fails with the rule's error).
std::string NormalizedOrAsGiven(const std::string& name) {
  auto normalized = protocol::NormalizeHostName(name);
  return normalized.ok() ? *normalized : name;
}

std::string Quote(const std::string& s) {
  if (s.find_first_of(" \"=") == std::string::npos && !s.empty()) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

Agent::Agent(AgentOptions options, std::unique_ptr<DeviceDiscovery> devices)
    : options_(std::move(options)),
      name_(NormalizedOrAsGiven(options_.name)),
      devices_(std::move(devices)),
      launcher_(options_.launcher) {}

Agent::~Agent() { Shutdown(); }

void Agent::Log(const std::string& event, const std::string& fields) const {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char ts[32];
  std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
  std::ostringstream line;
  line << ts << " " << event << " host=" << name_;
  if (!fields.empty()) line << " " << fields;
  line << "\n";
  std::cerr << line.str() << std::flush;
}

std::string Agent::LogPath(const WorkerKey& key) const {
  return options_.state_dir + "/logs/" + key.job + "/" + std::to_string(key.attempt) + "/worker-" +
         std::to_string(key.rank) + ".log";
}

std::string Agent::ProgressPath(const WorkerKey& key) const {
  return options_.state_dir + "/progress/" + key.job + "/" + std::to_string(key.attempt) +
         "/worker-" + std::to_string(key.rank) + ".jsonl";
}

Status Agent::Start() {
  // The head registers the normalised name; the agent uses the same one in its URLs.
  auto name = protocol::NormalizeHostName(options_.name);
  if (!name.ok()) return name.status();
  auto generation = ParseGeneration(options_.generation);
  if (!generation.ok()) return InvalidArgument("generation: " + generation.status().message());
  generation_ = *generation;
  if (options_.state_dir.empty()) return InvalidArgument("state_dir: must be set");
  if (options_.head_port == 0) return InvalidArgument("head_port: must be set");
  if (!devices_) return InvalidArgument("devices: no device discovery given");
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (started_) return FailedPrecondition("agent already started");
    started_ = true;
  }
  std::error_code ec;
  std::filesystem::create_directories(options_.state_dir, ec);
  if (ec) return Unavailable("state dir " + options_.state_dir + ": " + ec.message());
  auto devices = devices_->Discover();
  if (!devices.ok()) return devices.status();
  discovered_ = *devices;

  net::ServerOptions server_options;
  server_options.bind_address = options_.listen_address;
  server_options.port = options_.port;
  server_options.auth.tokens = {options_.join_token};
  server_ = std::make_unique<net::HttpServer>(server_options);
  TESSERA_RETURN_IF_ERROR(server_->Handle(
      net::Method::kGet, "/logs/{job}/{attempt}/{rank}", [this](const net::Request& request) {
        const std::string& job = request.params.at("job");
        auto attempt = ParseInt(request.params.at("attempt"));
        auto rank = ParseInt(request.params.at("rank"));
        if (!IsSafeName(job) || !attempt || !rank || *attempt < 0 || *rank < 0 ||
            *attempt > 1'000'000'000 || *rank > 1'000'000'000) {
          return net::Response::Error(404, "no such worker log", "path");
        }
        WorkerKey key{job, static_cast<int>(*attempt), static_cast<int>(*rank)};
        const std::string path = LogPath(key);
        if (!std::filesystem::exists(path)) {
          return net::Response::Error(404, "no log for worker " + key.ToString(), "path");
        }
        uint64_t offset = 0;
        if (auto text = request.Query("offset")) {
          auto value = ParseInt(*text);
          if (!value || *value < 0) {
            return net::Response::Error(400, "offset: must be an integer >= 0", "offset");
          }
          offset = static_cast<uint64_t>(*value);
        }
        if (request.Query("follow").value_or("") == "true") {
          net::Response response = net::Response::Stream(
              [this, path, offset, key](std::shared_ptr<net::StreamWriter> writer) {
                std::lock_guard<std::mutex> lock(mu_);
                followers_.push_back(LogFollower{std::move(writer), path, offset, key});
              });
          response.content_type = "text/plain; charset=utf-8";
          return response;
        }
        constexpr size_t kMaxBytes = 16 << 20;
        std::string body = ReadFrom(path, offset, kMaxBytes);
        net::Response response = net::Response::Text(200, body);
        response.content_type = "text/plain; charset=utf-8";
        response.headers["X-Next-Offset"] = std::to_string(offset + body.size());
        return response;
      }));
  TESSERA_RETURN_IF_ERROR(server_->Start());

  net::ClientOptions client_options;
  client_options.host = options_.head_host;
  client_options.port = options_.head_port;
  client_options.bearer_token = options_.join_token;
  client_options.connect_timeout = options_.request_timeout;
  client_options.read_timeout = options_.request_timeout;
  client_ = std::make_unique<net::HttpClient>(client_options);

  if (!options_.warm.python.empty() && options_.warm.size > 0) {
    WarmPoolOptions warm = options_.warm;
    if (warm.log_path.empty()) warm.log_path = options_.state_dir + "/warm/warm.log";
    warm_pool_ = std::make_unique<WarmPool>(
        std::move(warm), options_.launcher,
        [this](const std::string& event, const std::string& fields) { Log(event, fields); });
    TESSERA_RETURN_IF_ERROR(warm_pool_->Start());
  }

  Log("agent.started",
      "logPort=" + std::to_string(server_->port()) + " head=" + options_.head_host + ":" +
          std::to_string(options_.head_port) + " chips=" + std::to_string(discovered_.size()));
  main_thread_ = std::thread([this] { MainLoop(); });
  log_thread_ = std::thread([this] { LogLoop(); });
  return Status::Ok();
}

void Agent::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    if (watch_client_ != nullptr) watch_client_->Cancel();
  }
  cv_.notify_all();
  if (client_) client_->Cancel();
  if (main_thread_.joinable()) main_thread_.join();
  if (watch_thread_.joinable()) watch_thread_.join();
  if (warm_pool_) warm_pool_->Shutdown();  // nothing is assigned any more: no refills either

  // Stop every worker at once, each with its own grace, then wait for all of them.
  struct Stopping {
    WorkerKey key;
    std::shared_ptr<WorkerProcess> process;
    milliseconds grace;
  };
  std::vector<Stopping> running;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [key, record] : workers_) {
      if (record.process && !record.process->exit_info()) {
        milliseconds grace(record.assignment.grace_ms);
        record.process->StopAsync(grace);
        running.push_back({key, record.process, grace});
      }
    }
  }
  for (const Stopping& s : running) {
    // StopAsync escalates to SIGKILL after the grace; then allow the kill time to land.
    if (!s.process->WaitFor(s.grace + options_.launcher.kill_timeout)) {
      Log("worker.stop_failed", "worker=" + s.key.ToString());
    } else {
      Log("worker.stopped", "worker=" + s.key.ToString() + " reason=shutdown");
    }
  }
  if (log_thread_.joinable()) log_thread_.join();
  if (server_) server_->Stop();
  std::lock_guard<std::mutex> lock(mu_);
  followers_.clear();
  workers_.clear();  // joins the monitor threads (every worker has exited)
}

Status Agent::fatal_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fatal_;
}

bool Agent::registered() const {
  std::lock_guard<std::mutex> lock(mu_);
  return registered_;
}

uint16_t Agent::port() const { return server_ ? server_->port() : 0; }

int64_t Agent::revision() const {
  std::lock_guard<std::mutex> lock(mu_);
  return revision_;
}

std::vector<WorkerReport> Agent::Workers() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<WorkerReport> out;
  for (const auto& [key, record] : workers_) out.push_back(ReportLocked(key, record));
  return out;
}

bool Agent::SleepUntil(Clock::time_point deadline, bool wake_on_exit) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_until(lock, deadline, [&] { return stopping_ || (wake_on_exit && wake_); });
  return !stopping_;
}

bool Agent::RegisterWithRetry() {
  milliseconds backoff = options_.backoff_initial;
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return false;
    }
    protocol::Registration r;
    r.name = name_;
    r.generation = generation_;
    r.chips = static_cast<int>(discovered_.size());
    r.address = options_.address;
    r.agent_port = server_->port();
    r.slice = options_.slice;
    r.cube = options_.cube;
    r.labels = options_.labels;
    r.devices = discovered_;
    auto response = client_->Request(net::Method::kPost, "/api/v1/agents/register",
                                     protocol::RegistrationJson(r));
    if (response.ok() && response->status == 200) {
      auto reply = protocol::ParseRegisterReply(response->body);
      if (reply.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        heartbeat_interval_ms_ = reply->heartbeat_interval_ms;
        registered_ = true;
        reregister_ = false;
        Log("agent.registered",
            "heartbeatIntervalMs=" + std::to_string(reply->heartbeat_interval_ms));
        return true;
      }
      Log("agent.register_failed", "error=" + Quote(reply.status().message()));
    } else if (response.ok() && (response->status == 401 || response->status == 403)) {
      std::lock_guard<std::mutex> lock(mu_);
      fatal_ = FailedPrecondition("the head refused the join token (HTTP " +
                                  std::to_string(response->status) + "): check --join-token-file");
      Log("agent.register_refused", "status=" + std::to_string(response->status));
      return false;
    } else if (response.ok() &&
               (response->status == 400 || response->status == 409 || response->status == 422)) {
      // The head refused what the agent says about itself (name, membership, chips): the same
      // request would be refused again, so give up with the head's reason instead of retrying.
      const std::string error = HeadError(response->body);
      std::lock_guard<std::mutex> lock(mu_);
      fatal_ = InvalidArgument("the head refused the registration (HTTP " +
                               std::to_string(response->status) + "): " + error);
      Log("agent.register_refused",
          "status=" + std::to_string(response->status) + " error=" + Quote(error));
      return false;
    } else {
      Log("agent.register_failed",
          "error=" +
              Quote(response.ok() ? "HTTP " + std::to_string(response->status) + " " +
                                        response->body.substr(0, 200)
                                  : response.status().message()) +
              " retryInMs=" + std::to_string(backoff.count()));
    }
    if (!SleepUntil(Clock::now() + backoff, false)) return false;
    backoff = std::min(backoff * 2, options_.backoff_max);
  }
}

void Agent::MainLoop() {
  if (!RegisterWithRetry()) return;
  watch_thread_ = std::thread([this] { WatchLoop(); });
  auto next = Clock::now();
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_until(lock, next, [&] { return stopping_ || wake_; });
      if (stopping_) return;
      wake_ = false;
      next = Clock::now() + milliseconds(heartbeat_interval_ms_);
    }
    SendHeartbeat();
    bool reregister;
    {
      std::lock_guard<std::mutex> lock(mu_);
      reregister = reregister_;
    }
    if (reregister && !RegisterWithRetry()) return;
  }
}

WorkerReport Agent::ReportLocked(const WorkerKey& key, const WorkerRecord& record) const {
  WorkerReport report;
  report.key = key;
  report.error = record.error;
  std::optional<ExitInfo> exit = record.exit;
  if (record.process) {
    report.pid = record.process->pid();
    report.started_at_ms = record.process->started_at_ms();
    exit = record.process->exit_info();
  }
  if (exit) {
    report.state = WorkerState::kExited;
    report.exit_code = exit->exit_code;
    report.signal = exit->signal;
    report.finished_at_ms = exit->finished_at_ms;
    if (!record.process) report.started_at_ms = exit->finished_at_ms;
  }
  return report;
}

void Agent::RememberExitLocked(const WorkerReport& report) {
  if (remembered_.emplace(report.key, report).second) remembered_order_.push_back(report.key);
  while (remembered_order_.size() > options_.max_remembered_exits) {
    remembered_.erase(remembered_order_.front());
    remembered_order_.erase(remembered_order_.begin());
  }
}

bool Agent::WorkerDoneLocked(const WorkerKey& key) const {
  auto it = workers_.find(key);
  if (it == workers_.end()) return true;
  return !it->second.process || it->second.process->exit_info().has_value();
}

void Agent::SendHeartbeat() {
  Heartbeat heartbeat;
  std::set<pid_t> groups;
  {
    std::lock_guard<std::mutex> lock(mu_);
    heartbeat.revision = revision_;
    // Progress first, so an exited worker's last lines travel with (or before) its exit.
    for (auto& [key, record] : workers_) {
      if (!record.tailer || pending_progress_.size() >= options_.max_progress_batch) continue;
      std::vector<ProgressRecord> records;
      record.tailer->Read(options_.max_progress_batch - pending_progress_.size(), records);
      for (ProgressRecord& r : records) pending_progress_.push_back({key, std::move(r)});
    }
    heartbeat.progress = pending_progress_;
    for (auto it = workers_.begin(); it != workers_.end();) {
      WorkerReport report = ReportLocked(it->first, it->second);
      if (!it->second.assigned && report.state == WorkerState::kExited) {
        // Stopped because it was unassigned, and now gone: the head no longer asks about it.
        RememberExitLocked(report);
        it = workers_.erase(it);
        continue;
      }
      if (report.state == WorkerState::kRunning) groups.insert(static_cast<pid_t>(report.pid));
      heartbeat.workers.push_back(std::move(report));
      ++it;
    }
  }
  heartbeat.usage = usage_.Sample(groups);
  const std::string target = "/api/v1/agents/" + name_ + "/heartbeat";
  auto response = client_->Request(net::Method::kPost, target, protocol::HeartbeatJson(heartbeat));
  if (!response.ok()) {
    Log("agent.heartbeat_failed", "error=" + Quote(response.status().message()));
    return;
  }
  if (response->status == 404) {
    Log("agent.heartbeat_unknown_host", "action=reregister");
    std::lock_guard<std::mutex> lock(mu_);
    reregister_ = true;
    return;
  }
  if (response->status != 200) {
    Log("agent.heartbeat_failed", "status=" + std::to_string(response->status) +
                                      " body=" + Quote(response->body.substr(0, 200)));
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Acknowledged: drop what was sent (more may have been appended since: keep that).
    pending_progress_.erase(
        pending_progress_.begin(),
        pending_progress_.begin() + static_cast<std::ptrdiff_t>(std::min(
                                        heartbeat.progress.size(), pending_progress_.size())));
  }
  if (response->body.empty()) return;
  auto snapshot = protocol::ParseAssignmentSnapshot(response->body);
  if (!snapshot.ok()) {
    Log("agent.heartbeat_bad_reply", "error=" + Quote(snapshot.status().message()));
    return;
  }
  Reconcile(*snapshot, false);
}

void Agent::WatchLoop() {
  milliseconds backoff = options_.backoff_initial;
  const std::string target = "/api/v1/agents/" + name_ + "/assignments?watch=true";
  while (true) {
    net::ClientOptions client_options;
    client_options.host = options_.head_host;
    client_options.port = options_.head_port;
    client_options.bearer_token = options_.join_token;
    client_options.connect_timeout = options_.request_timeout;
    client_options.read_timeout = options_.request_timeout;
    client_options.stream_idle_timeout = milliseconds(0);
    net::HttpClient client(client_options);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      watch_client_ = &client;
    }
    bool first = true;
    Status status = client.Stream(net::Method::kGet, target, [&](std::string_view line) {
      if (line.empty()) return true;
      auto snapshot = protocol::ParseAssignmentSnapshot(line);
      if (!snapshot.ok()) {
        Log("agent.watch_bad_snapshot", "error=" + Quote(snapshot.status().message()));
        return true;
      }
      if (first) Log("agent.watch_connected", "revision=" + std::to_string(snapshot->revision));
      Reconcile(*snapshot, first);
      first = false;
      backoff = options_.backoff_initial;
      return true;
    });
    {
      std::lock_guard<std::mutex> lock(mu_);
      watch_client_ = nullptr;
      if (stopping_) return;
    }
    Log("agent.watch_ended",
        "status=" + Quote(status.ToString()) + " retryInMs=" + std::to_string(backoff.count()));
    if (!SleepUntil(Clock::now() + backoff, false)) return;
    backoff = std::min(backoff * 2, options_.backoff_max);
  }
}

void Agent::StartWorkerLocked(const ParsedAssignment& parsed) {
  const Assignment& a = parsed.assignment;
  WorkerRecord record;
  record.assignment = a;
  auto fail = [&](const std::string& error) {
    record.error = error;
    ExitInfo exit;
    exit.exit_code = 127;
    exit.finished_at_ms = std::chrono::duration_cast<milliseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
    record.exit = exit;
    wake_ = true;
    Log("worker.start_failed", "worker=" + a.key.ToString() + " error=" + Quote(error));
  };
  if (!parsed.error.empty()) {
    fail(parsed.error);
  } else {
    LaunchSpec spec;
    spec.command = a.command;
    spec.env = a.env;
    spec.working_dir = a.working_dir;
    spec.log_path = LogPath(a.key);
    spec.progress_path = ProgressPath(a.key);
    // A fresh progress file: a stale one would report steps this worker never made.
    std::error_code ec;
    std::filesystem::remove(spec.progress_path, ec);
    auto on_exit = [this](const ExitInfo&) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        wake_ = true;
      }
      cv_.notify_all();
    };
    // A warm process if one is ready for this command; the ordinary launch otherwise.
    Result<std::shared_ptr<WorkerProcess>> process = std::shared_ptr<WorkerProcess>();
    if (warm_pool_) process = warm_pool_->TryLaunch(spec, on_exit);
    const bool warm = process.ok() && *process != nullptr;
    if (process.ok() && !warm) process = launcher_.Launch(spec, on_exit);
    if (!process.ok()) {
      fail(process.status().message());
    } else {
      record.process = *process;
      record.tailer = std::make_unique<ProgressTailer>(spec.progress_path);
      Log("worker.started", "worker=" + a.key.ToString() +
                                " pid=" + std::to_string(record.process->pid()) +
                                " warm=" + (warm ? "true" : "false"));
    }
  }
  workers_.emplace(a.key, std::move(record));
}

void Agent::Reconcile(const AssignmentSnapshot& snapshot, bool from_new_stream) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    if (snapshot.revision < revision_ && !from_new_stream) return;  // stale
    revision_ = snapshot.revision;
    for (const std::string& error : snapshot.unreadable) {
      Log("agent.assignment_unreadable", "error=" + Quote(error));
    }
    // A "stop" entry replaces the grace of the withdrawn workers of its job and attempt.
    std::map<std::pair<std::string, int>, int64_t> stop_grace;
    for (const StopRequest& stop : snapshot.stop) {
      auto [it, added] = stop_grace.emplace(std::make_pair(stop.job, stop.attempt), stop.grace_ms);
      if (!added) it->second = std::min(it->second, stop.grace_ms);
    }
    bool withdrew = false;
    std::set<WorkerKey> wanted;
    for (const ParsedAssignment& parsed : snapshot.assignments) {
      const WorkerKey& key = parsed.assignment.key;
      if (!wanted.insert(key).second) continue;  // a duplicate in one snapshot
      auto it = workers_.find(key);
      if (it != workers_.end()) {
        it->second.assigned = true;  // running or exited already: adopt, never restart
        continue;
      }
      auto old = remembered_.find(key);
      if (old != remembered_.end()) {
        // It ran and exited before: report that exit again instead of starting it.
        WorkerRecord record;
        record.assignment = parsed.assignment;
        ExitInfo exit;
        exit.exit_code = old->second.exit_code;
        exit.signal = old->second.signal;
        exit.finished_at_ms = old->second.finished_at_ms;
        record.exit = exit;
        record.error = old->second.error;
        workers_.emplace(key, std::move(record));
        wake_ = true;
        continue;
      }
      StartWorkerLocked(parsed);
    }
    for (auto it = workers_.begin(); it != workers_.end();) {
      WorkerRecord& record = it->second;
      if (wanted.count(it->first) != 0) {
        ++it;
        continue;
      }
      if (record.assigned) withdrew = true;
      record.assigned = false;
      if (record.process && !record.process->exit_info()) {
        int64_t grace_ms = record.assignment.grace_ms;
        auto stop = stop_grace.find({it->first.job, it->first.attempt});
        if (stop != stop_grace.end()) grace_ms = stop->second;
        if (!record.process->stopping() || grace_ms < record.stop_grace_ms) {
          Log("worker.stopping", "worker=" + it->first.ToString() +
                                     " graceMs=" + std::to_string(grace_ms) +
                                     (stop != stop_grace.end() ? " from=stop" : ""));
          record.stop_grace_ms = grace_ms;
          // Keeps the earliest deadline: a shorter grace hurries a stop already under way.
          record.process->StopAsync(milliseconds(grace_ms));
        }
        ++it;
        continue;
      }
      RememberExitLocked(ReportLocked(it->first, record));
      it = workers_.erase(it);
    }
    // Every withdrawn worker already gone: tell the head now rather than at the next beat, so
    // it can release the chips and start the next attempt (a worker still stopping wakes the
    // heartbeat itself when it exits).
    if (withdrew && std::none_of(workers_.begin(), workers_.end(), [](const auto& entry) {
          return !entry.second.assigned && entry.second.process &&
                 !entry.second.process->exit_info();
        })) {
      wake_ = true;
    }
  }
  cv_.notify_all();
}

void Agent::LogLoop() {
  constexpr size_t kChunk = 256 * 1024;
  while (SleepUntil(Clock::now() + options_.log_poll_interval, false)) {
    std::vector<LogFollower> followers;
    {
      std::lock_guard<std::mutex> lock(mu_);
      followers.swap(followers_);
    }
    std::vector<LogFollower> keep;
    for (LogFollower& f : followers) {
      if (!f.writer->IsOpen()) continue;
      bool done;
      {
        std::lock_guard<std::mutex> lock(mu_);
        done = WorkerDoneLocked(f.key);  // checked before reading: nothing is missed
      }
      std::string bytes = ReadFrom(f.path, f.offset, kChunk);
      if (!bytes.empty()) {
        f.offset += bytes.size();
        if (!f.writer->Write(std::move(bytes))) continue;
        keep.push_back(std::move(f));
      } else if (done) {
        f.writer->Close();
      } else {
        keep.push_back(std::move(f));
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (LogFollower& f : keep) followers_.push_back(std::move(f));
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (LogFollower& f : followers_) f.writer->Close();
}

// ----- flags -----

namespace {

Result<Coord> ParseCoord(const std::string& text) {
  Coord c;
  int* parts[3] = {&c.x, &c.y, &c.z};
  size_t start = 0;
  for (int i = 0; i < 3; ++i) {
    size_t end = text.find(',', start);
    if ((i < 2) != (end != std::string::npos)) {
      return InvalidArgument("--coord: '" + text + "' must be x,y,z (three integers)");
    }
    if (end == std::string::npos) end = text.size();
    auto v = ParseInt(std::string_view(text).substr(start, end - start));
    if (!v || *v < 0 || *v > 1000) {
      return InvalidArgument("--coord: '" + text + "' must be x,y,z (three integers >= 0)");
    }
    *parts[i] = static_cast<int>(*v);
    start = end + 1;
  }
  return c;
}

Status ParseHead(const std::string& head, AgentOptions& options) {
  const std::string prefix = "http://";
  if (head.empty()) return InvalidArgument("--head: required, e.g. http://127.0.0.1:7600");
  if (head.rfind(prefix, 0) != 0) {
    return InvalidArgument("--head: '" + head +
                           "' must start with http:// (https is not supported yet)");
  }
  std::string rest = head.substr(prefix.size());
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.find('/') != std::string::npos) {
    return InvalidArgument("--head: '" + head + "' must be http://HOST:PORT with no path");
  }
  size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return InvalidArgument("--head: '" + head + "' must be http://HOST:PORT");
  }
  std::string host = rest.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  auto port = ParseInt(std::string_view(rest).substr(colon + 1));
  if (!port || *port < 1 || *port > 65535) {
    return InvalidArgument("--head: '" + head + "' has no valid port (1..65535)");
  }
  options.head_host = host;
  options.head_port = static_cast<uint16_t>(*port);
  return Status::Ok();
}

// The python/ directory of the checkout that holds the running binary (build/<preset>/bin/
// tessera), found by walking up from it; "" if there is none.
std::string FindSdkDir() {
  std::error_code ec;
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  for (auto dir = exe.parent_path(); !dir.empty(); dir = dir.parent_path()) {
    if (std::filesystem::exists(dir / "python" / "tessera" / "_warm.py", ec)) {
      return (dir / "python").string();
    }
    if (dir == dir.root_path()) break;
  }
  return "";
}

Status ParseWarmFlags(const AgentFlags& flags, WarmPoolOptions& warm) {
  if (flags.warm_python.empty()) {
    if (!flags.warm_preload.empty()) {
      return InvalidArgument("--warm-preload: needs --warm-python (the interpreter to keep warm)");
    }
    return Status::Ok();
  }
  const char* path = std::getenv("PATH");
  if (FindExecutable(flags.warm_python, path != nullptr ? path : "/usr/bin:/bin").empty()) {
    return InvalidArgument("--warm-python: '" + flags.warm_python + "' is not an executable file");
  }
  warm.python = flags.warm_python;
  std::stringstream modules(flags.warm_preload);
  for (std::string module; std::getline(modules, module, ',');) {
    if (module.empty()) continue;
    for (char c : module) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.') {
        return InvalidArgument("--warm-preload: '" + module + "' is not a module name");
      }
    }
    warm.preload.push_back(module);
  }
  auto size = ParseInt(flags.warm_pool);
  if (!size || *size < 0 || *size > 16) {
    return InvalidArgument("--warm-pool: '" + flags.warm_pool + "' must be 0..16");
  }
  warm.size = static_cast<int>(*size);
  auto delay = ParseInt(flags.warm_refill_delay_ms);
  if (!delay || *delay < 0 || *delay > 3'600'000) {
    return InvalidArgument("--warm-refill-delay-ms: '" + flags.warm_refill_delay_ms +
                           "' must be 0..3600000");
  }
  warm.refill_delay = std::chrono::milliseconds(*delay);
  warm.sdk_dir = flags.warm_sdk_dir.empty() ? FindSdkDir() : flags.warm_sdk_dir;
  if (warm.sdk_dir.empty() || !std::filesystem::exists(warm.sdk_dir + "/tessera/_warm.py")) {
    return InvalidArgument("--warm-sdk-dir: '" + warm.sdk_dir +
                           "' holds no tessera/_warm.py; give the repository's python/ directory");
  }
  warm.sdk_dir = std::filesystem::absolute(warm.sdk_dir).lexically_normal().string();
  while (warm.sdk_dir.size() > 1 && warm.sdk_dir.back() == '/') warm.sdk_dir.pop_back();
  return Status::Ok();
}

}  // namespace

Result<AgentSetup> MakeAgentSetup(const AgentFlags& flags) {
  AgentSetup setup;
  AgentOptions& o = setup.options;
  TESSERA_RETURN_IF_ERROR(ParseHead(flags.head, o));

  if (flags.join_token_file.empty()) {
    return InvalidArgument("--join-token-file: required (a file holding the head's join token)");
  }
  {
    std::ifstream in(flags.join_token_file);
    if (!in) {
      return InvalidArgument("--join-token-file: cannot read " + flags.join_token_file);
    }
    std::stringstream text;
    text << in.rdbuf();
    std::string token = text.str();
    const char* space = " \t\r\n";
    token.erase(0, token.find_first_not_of(space) == std::string::npos
                       ? token.size()
                       : token.find_first_not_of(space));
    token.erase(token.find_last_not_of(space) + 1);
    if (token.empty()) {
      return InvalidArgument("--join-token-file: " + flags.join_token_file + " is empty");
    }
    o.join_token = token;
  }

  // The name the head will register (the protocol's one host-name rule), so that the URLs the
  // agent uses and its default state directory hold that name. An invalid one fails here, at
  // start, rather than as a registration the head refuses.
  std::string name = flags.name;
  if (name.empty()) {
    char buf[256] = {};
    if (::gethostname(buf, sizeof buf - 1) == 0) name = buf;
  }
  auto normalized = protocol::NormalizeHostName(name);
  if (!normalized.ok()) {
    return InvalidArgument(
        "--" + normalized.status().message() +
        (flags.name.empty() ? " (--name defaults to this machine's hostname)" : ""));
  }
  o.name = *normalized;
  o.state_dir = flags.state_dir.empty() ? "tessera-state/agent-" + o.name : flags.state_dir;
  o.state_dir = std::filesystem::absolute(o.state_dir).lexically_normal().string();
  while (o.state_dir.size() > 1 && o.state_dir.back() == '/') o.state_dir.pop_back();

  auto port = ParseInt(flags.port);
  if (!port || *port < 0 || *port > 65535) {
    return InvalidArgument("--port: '" + flags.port + "' must be 0..65535 (0 = any free port)");
  }
  o.port = static_cast<uint16_t>(*port);
  if (flags.address.empty()) return InvalidArgument("--address: must not be empty");
  o.address = flags.address;

  if (flags.generation.empty()) return InvalidArgument("--generation: required, e.g. v6e or 7x");
  auto generation = ParseGeneration(flags.generation);
  if (!generation.ok()) return InvalidArgument("--generation: " + generation.status().message());
  o.generation = std::string(GenerationName(*generation));
  const int rank = Info(*generation).rank;

  const bool has_slice = !flags.slice.empty() || !flags.topology.empty() || !flags.worker.empty();
  const bool has_cube = !flags.cube.empty() || !flags.block.empty() || !flags.coord.empty();
  if (has_slice && has_cube) {
    return InvalidArgument(
        "--cube: give either --slice/--topology/--worker or --cube/--block/--coord, not both");
  }
  if (rank == 2) {
    if (has_cube) {
      return InvalidArgument("--cube: " + o.generation +
                             " has fixed 2D slices; use --slice, --topology and --worker");
    }
    if (flags.slice.empty()) return InvalidArgument("--slice: required for " + o.generation);
    if (!IsSafeName(flags.slice)) {
      return InvalidArgument("--slice: '" + flags.slice + "' must be of [A-Za-z0-9._-]");
    }
    if (flags.topology.empty()) return InvalidArgument("--topology: required, e.g. 4x4");
    auto shape = ParseShape(flags.topology);
    if (!shape.ok()) return InvalidArgument("--topology: " + shape.status().message());
    auto worker = ParseInt(flags.worker.empty() ? "0" : flags.worker);
    if (!worker || *worker < 0 || *worker > 100000) {
      return InvalidArgument("--worker: '" + flags.worker + "' must be an integer >= 0");
    }
    auto devices = EmulatedDevices::ForSliceWorker(*generation, *shape, static_cast<int>(*worker));
    if (!devices.ok()) return InvalidArgument("--" + devices.status().message());
    o.slice = SliceMembership{flags.slice, shape->ToString(), static_cast<int>(*worker)};
    setup.devices = std::make_unique<EmulatedDevices>(*devices);
  } else {
    if (has_slice) {
      return InvalidArgument("--slice: " + o.generation +
                             " is built from cubes; use --cube, --block and --coord");
    }
    if (flags.cube.empty()) return InvalidArgument("--cube: required for " + o.generation);
    if (!IsSafeName(flags.cube)) {
      return InvalidArgument("--cube: '" + flags.cube + "' must be of [A-Za-z0-9._-]");
    }
    if (flags.block.empty()) return InvalidArgument("--block: required for " + o.generation);
    if (!IsSafeName(flags.block)) {
      return InvalidArgument("--block: '" + flags.block + "' must be of [A-Za-z0-9._-]");
    }
    if (flags.coord.empty()) return InvalidArgument("--coord: required, e.g. 0,1,3");
    auto coord = ParseCoord(flags.coord);
    if (!coord.ok()) return coord.status();
    auto devices = EmulatedDevices::ForCubeHost(*coord);
    if (!devices.ok()) return InvalidArgument("--" + devices.status().message());
    o.cube = CubeMembership{flags.cube, flags.block, *coord};
    setup.devices = std::make_unique<EmulatedDevices>(*devices);
  }
  const int host_chips = static_cast<EmulatedDevices*>(setup.devices.get())->chips();
  if (!flags.chips.empty()) {
    auto chips = ParseInt(flags.chips);
    if (!chips || *chips != host_chips) {
      return InvalidArgument("--chips: '" + flags.chips + "' does not match this host: it has " +
                             std::to_string(host_chips) + " chips");
    }
  }

  for (const std::string& label : flags.labels) {
    size_t eq = label.find('=');
    if (eq == std::string::npos || eq == 0) {
      return InvalidArgument("--label: '" + label + "' must be key=value");
    }
    o.labels[label.substr(0, eq)] = label.substr(eq + 1);
  }
  TESSERA_RETURN_IF_ERROR(ParseWarmFlags(flags, o.warm));
  return setup;
}

Status RunAgent(AgentSetup setup) {
  // SIGTERM and SIGINT are taken synchronously by this thread; every thread started from here
  // on inherits the blocked mask (workers get a clean one from the launcher).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  ::pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  Agent agent(std::move(setup.options), std::move(setup.devices));
  Status started = agent.Start();
  if (!started.ok()) return started;
  Status result;
  while (true) {
    timespec tick{0, 200 * 1000 * 1000};
    int sig = ::sigtimedwait(&signals, nullptr, &tick);
    if (sig == SIGTERM || sig == SIGINT) break;
    result = agent.fatal_error();
    if (!result.ok()) break;
  }
  agent.Shutdown();
  return result;
}

}  // namespace tessera::agent
