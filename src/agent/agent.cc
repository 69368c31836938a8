// Agent's core: start and shutdown, registration, the heartbeat and watch threads, and
// Reconcile. The log server is in log_server.cc; flags and RunAgent are in run_agent.cc.
#include "agent/agent.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "agent/host_credential.h"
#include "agent/logfmt.h"
#include "common/json_limits.h"
#include "ha/head_follower.h"
#include "net/http_client.h"
#include "net/http_server.h"
#include "pki/pki.h"
#include "protocol/credential.h"

namespace tessera::agent {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Whether this agent may give a worker the normal priority back after lowering it (root, or
// RLIMIT_NICE allowing nice 0). Without that, start-up priority is not applied at all: a group
// lowered once would serve below normal for good.
bool AgentCanRestoreNice() {
  if (::geteuid() == 0) return true;
  struct rlimit limit {};
  return ::getrlimit(RLIMIT_NICE, &limit) == 0 &&
         (limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= 20);
}

// Sets the niceness of every thread of every process in the worker's process group (its pid:
// workers run in their own session). "" or why not.
std::string AgentSetGroupNice(pid_t group, int nice) {
  if (::setpriority(PRIO_PGRP, static_cast<id_t>(group), nice) == 0) return "";
  return std::strerror(errno);
}

// The message of a head's error reply ({"error": "...", "field": ...}), or the start of the
// body when it is not one.
std::string HeadError(const std::string& body) {
  auto parsed = ParseJson(body, "head reply");  // bounded: nesting, repeated keys
  nlohmann::json j = parsed.ok() ? std::move(*parsed) : nlohmann::json();
  if (j.is_object()) {
    auto error = j.find("error");
    if (error != j.end() && error->is_string()) return error->get<std::string>();
  }
  return body.substr(0, 200);
}

// A 403 that says the host is revoked (the head's words for it, docs/security.md "Host
// certificates"), rather than a join token or certificate the head will never take.
bool RegistrationRefusedAsRevoked(const std::string& body) {
  return HeadError(body).find("' is revoked (") != std::string::npos;
}

// The name the head will register the host under; `name` itself when the rule refuses it
// (Start() then fails with the rule's error).
std::string NormalizedOrAsGiven(const std::string& name) {
  auto normalized = protocol::NormalizeHostName(name);
  return normalized.ok() ? *normalized : name;
}

}  // namespace

Agent::Agent(AgentOptions options, std::unique_ptr<DeviceDiscovery> devices)
    : options_(std::move(options)),
      name_(NormalizedOrAsGiven(options_.name)),
      devices_(std::move(devices)),
      launcher_(options_.launcher),
      fence_(options_.fence_ms) {}

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
  return options_.state_dir + "/logs/" + key.job + "/" + std::to_string(key.uid) + "/" +
         std::to_string(key.attempt) + "/worker-" + std::to_string(key.rank) + ".log";
}

std::string Agent::ProgressPath(const WorkerKey& key) const {
  return options_.state_dir + "/progress/" + key.job + "/" + std::to_string(key.uid) + "/" +
         std::to_string(key.attempt) + "/worker-" + std::to_string(key.rank) + ".jsonl";
}

Agent::TlsPaths Agent::WorkerTlsPaths(const WorkerKey& key) const {
  const std::string dir = options_.state_dir + "/tls/" + key.job + "/" + std::to_string(key.uid) +
                          "/" + std::to_string(key.attempt) + "/";
  const std::string worker = dir + "worker-" + std::to_string(key.rank);
  return {worker + ".crt", worker + ".key", dir + "ca.crt"};
}

Status Agent::WriteWorkerTls(const Assignment& a) const {
  if (!a.tls) return Status::Ok();
  const TlsPaths paths = WorkerTlsPaths(a.key);
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::path(paths.cert).parent_path();
  std::filesystem::create_directories(dir, ec);
  if (ec) return Unavailable("TLS files: cannot create " + dir.string() + ": " + ec.message());
  // The certificate and the CA are public, but they sit beside the key: one mode for all three.
  TESSERA_RETURN_IF_ERROR(pki::WriteKeyFile(paths.cert, a.tls->cert_pem));
  TESSERA_RETURN_IF_ERROR(pki::WriteKeyFile(paths.key, a.tls->key_pem));
  return pki::WriteKeyFile(paths.ca, a.tls->ca_pem);
}

Result<std::string> Agent::LoadOrCreateCredential() const {
  if (!options_.credential.empty()) {
    if (!protocol::IsValidCredential(options_.credential))
      return InvalidArgument("credential: must be 32..128 lower-case hex digits");
    return options_.credential;
  }
  const std::string path = options_.state_dir + "/credential";
  const std::string fix =
      "; delete the file to make a new credential (the head then refuses the host's name "
      "until an admin runs `tessera delete host " +
      name_ + "`)";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    char buffer[256];
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    // Owner only, also when it was created wider by hand.
    const bool restricted = ::fchmod(fd, 0600) == 0;
    ::close(fd);
    if (!restricted) return Unavailable(path + ": cannot set mode 0600: " + std::strerror(errno));
    std::string text(buffer, n > 0 ? static_cast<size_t>(n) : 0);
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    if (!protocol::IsValidCredential(text))
      return InvalidArgument(path + ": not a host credential (32..128 lower-case hex digits)" +
                             fix);
    return text;
  }
  if (errno != ENOENT) return Unavailable(path + ": " + std::strerror(errno) + fix);
  unsigned char raw[32];
  int random = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  const bool read_all =
      random >= 0 && ::read(random, raw, sizeof raw) == static_cast<ssize_t>(sizeof raw);
  if (random >= 0) ::close(random);
  if (!read_all) return Unavailable("/dev/urandom: cannot read random bytes for " + path);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string credential;
  for (unsigned char c : raw) {
    credential += kHex[c >> 4];
    credential += kHex[c & 0xf];
  }
  fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Unavailable(path + ": " + std::strerror(errno));
  const std::string line = credential + "\n";
  const bool written = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) &&
                       ::fsync(fd) == 0;
  ::close(fd);
  if (!written) return Unavailable(path + ": cannot write the host credential");
  return credential;
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
  // Owner only (also when it existed wider): workers' logs may print their env's secrets.
  std::filesystem::permissions(options_.state_dir, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::replace, ec);
  if (ec) {
    return Unavailable("state dir " + options_.state_dir + ": cannot set mode 0700: " +
                       ec.message() + "; run the agent as the directory's owner");
  }
  for (const SourceNote& note : options_.discovery_log) {
    Log("agent.discovery", "source=" + note.source +
                               " answered=" + (note.answered ? "true" : "false") + " reason=\"" +
                               note.reason + "\"");
  }
  auto devices = devices_->Discover();
  if (!devices.ok()) return devices.status();
  discovered_ = *devices;
  auto credential = LoadOrCreateCredential();
  if (!credential.ok()) return credential.status();
  credential_ = *credential;
  credential_header_ = {{protocol::kHostCredentialHeader, credential_}};

  if (options_.head_tls) host_cert_file_ = HostCertPath(options_.state_dir);
  TESSERA_RETURN_IF_ERROR(StartLogServer());
  std::filesystem::create_directories(options_.state_dir + "/fence", ec);
  if (ec) return Unavailable("state dir " + options_.state_dir + "/fence: " + ec.message());
  if (fence_.enabled()) contact_file_ = options_.state_dir + "/fence/contact";
  // The term and attempts an earlier run saw: refused below them from the first snapshot on.
  memory_file_ = options_.state_dir + "/fence/seen";
  auto memory = LoadFenceMemory(memory_file_);
  if (!memory.ok()) return memory.status();
  fence_.Remember(*memory);

  std::vector<std::pair<std::string, uint16_t>> heads = {{options_.head_host, options_.head_port}};
  heads.insert(heads.end(), options_.more_heads.begin(), options_.more_heads.end());
  // With several heads, one that does not answer within a quarter of the fence time (a frozen
  // leader) is given up for the next, so that another can answer before the agent fences.
  milliseconds timeout = options_.request_timeout;
  if (heads.size() > 1 && options_.fence_ms > 0)
    timeout = std::min(timeout, milliseconds(std::max<int64_t>(options_.fence_ms / 4, 250)));
  request_timeout_ = timeout;
  for (const auto& [host, port] : heads) heads_.push_back(host + ":" + std::to_string(port));
  MakeHeadClients();
  follower_.SetHeads(heads_);

  if (!options_.warm.python.empty() && options_.warm.size > 0) {
    WarmPoolOptions warm = options_.warm;
    if (warm.log_path.empty()) warm.log_path = options_.state_dir + "/warm/warm.log";
    warm_pool_ = std::make_unique<WarmPool>(
        std::move(warm), options_.launcher,
        [this](const std::string& event, const std::string& fields) { Log(event, fields); });
    TESSERA_RETURN_IF_ERROR(warm_pool_->Start());
  }
  if (!options_.warm.sdk_dir.empty()) {  // pools jobs ask for (spec.warmStart)
    JobWarmPoolsOptions pools;
    pools.sdk_dir = options_.warm.sdk_dir;
    pools.log_dir = options_.state_dir + "/warm";
    // Default 3 s (JobWarmPoolsOptions): a refill right after a restart competes for CPU with
    // the workers just handed out (bench/recovery/README.md, "Where the restart time goes").
    if (options_.warm.refill_delay.count() > 0) pools.refill_delay = options_.warm.refill_delay;
    job_pools_ = std::make_unique<JobWarmPools>(
        pools, options_.launcher,
        [this](const std::string& event, const std::string& fields) { Log(event, fields); });
  }

  Log(
      "agent.started", "logPort=" + std::to_string(server_->port()) + " head=" +
                           [this] {
                             std::string all;
                             for (const std::string& h : heads_)
                               all += (all.empty() ? "" : ",") + h;
                             return all;
                           }() +
                           " chips=" + std::to_string(discovered_.size()) +
                           " fenceTerm=" + std::to_string(fence_.term()));
  main_thread_ = std::thread([this] { MainLoop(); });
  log_thread_ = std::thread([this] { LogLoop(); });
  if (fence_.enabled()) fence_thread_ = std::thread([this] { FenceLoop(); });
  return Status::Ok();
}

void Agent::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    if (watch_client_ != nullptr) watch_client_->Cancel();
    if (channel_ != nullptr) channel_->Cancel();
  }
  ack_cv_.notify_all();
  cv_.notify_all();
  {
    std::lock_guard<std::mutex> lock(clients_mu_);
    for (auto& client : clients_) client->Cancel();
  }
  if (main_thread_.joinable()) main_thread_.join();
  if (watch_thread_.joinable()) watch_thread_.join();
  if (fence_thread_.joinable()) fence_thread_.join();
  if (warm_pool_) warm_pool_->Shutdown();  // nothing is assigned any more: no refills either
  if (job_pools_) {
    std::lock_guard<std::mutex> pools(pools_mu_);
    job_pools_->Shutdown();
  }

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
  decltype(workers_) workers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    followers_.clear();
    workers.swap(workers_);
  }
  // Destroying them joins their monitor threads (every worker has exited), outside mu_: an
  // exit callback may still be waiting for it.
  workers.clear();
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
  size_t quick_tries = 0;  // heads tried without a backoff since the last one
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
    r.credential = credential_;
    r.fence_ms = options_.fence_ms;
    r.discovered = options_.discovered;
    // A registration refused while the host is revoked waits here for an admin to readmit
    // it, its certificate expiring meanwhile: renewed with the join token once readmitted.
    RenewHostCertIfDue();
    const int64_t sent_ms = MonotonicNowMs();
    const size_t head = follower_.current();
    auto response = HeadClient().Request(net::Method::kPost, "/api/v1/agents/register",
                                         protocol::RegistrationJson(r));
    if (response.ok() && response->status == 200) {
      auto reply = protocol::ParseRegisterReply(response->body);
      if (reply.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        heartbeat_interval_ms_ = reply->heartbeat_interval_ms;
        registered_ = true;
        ContactLocked(sent_ms);
        reregister_ = false;
        Log("agent.registered",
            "heartbeatIntervalMs=" + std::to_string(reply->heartbeat_interval_ms));
        return true;
      }
      Log("agent.register_failed", "error=" + LogfmtValue(reply.status().message()));
    } else if (response.ok() && response->status == 403 &&
               RegistrationRefusedAsRevoked(response->body)) {
      // Not fatal: the host was deleted (so the head answered a heartbeat 404) and revoked; an
      // admin may readmit it (tessera delete hostrevocation), as the heartbeats' 403 waits for.
      Log("agent.register_revoked", "error=" + LogfmtValue(HeadError(response->body)) +
                                        " retryInMs=" + std::to_string(backoff.count()));
    } else if (response.ok() && (response->status == 401 || response->status == 403)) {
      std::lock_guard<std::mutex> lock(mu_);
      fatal_ = FailedPrecondition("the head refused the join token or the host certificate (HTTP " +
                                  std::to_string(response->status) +
                                  "): " + HeadError(response->body) + "; check --join-token-file");
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
          "status=" + std::to_string(response->status) + " error=" + LogfmtValue(error));
      return false;
    } else {
      const std::string answer = response.ok() ? "HTTP " + std::to_string(response->status) + " " +
                                                     response->body.substr(0, 200)
                                               : response.status().message();
      Log("agent.register_failed",
          "error=" + LogfmtValue(answer) + " retryInMs=" + std::to_string(backoff.count()));
      // Another head may lead: try it at once, the whole backoff only once round the list.
      if ((!response.ok() || response->status == 503) && HeadFailed(head, answer) &&
          ++quick_tries < heads_.size()) {
        continue;
      }
    }
    quick_tries = 0;
    if (!SleepUntil(Clock::now() + backoff, false)) return false;
    backoff = std::min(backoff * 2, options_.backoff_max);
  }
}

void Agent::MakeHeadClients() {
  std::vector<std::pair<std::string, uint16_t>> heads = {{options_.head_host, options_.head_port}};
  heads.insert(heads.end(), options_.more_heads.begin(), options_.more_heads.end());
  std::vector<std::unique_ptr<net::HttpClient>> clients;
  for (const auto& [host, port] : heads) {
    net::ClientOptions client_options;
    client_options.host = host;
    client_options.port = port;
    client_options.tls = HeadTls(true);
    client_options.bearer_token = options_.join_token;
    client_options.connect_timeout = request_timeout_;
    client_options.read_timeout = request_timeout_;
    clients.push_back(std::make_unique<net::HttpClient>(client_options));
  }
  std::lock_guard<std::mutex> lock(clients_mu_);
  clients_.swap(clients);
}

void Agent::MainLoop() {
  if (!EnsureHostCert()) return;
  if (!host_cert_file_.empty()) {
    MakeHeadClients();  // now with the certificate
    Status serving = ServeLogs();
    if (!serving.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      fatal_ = serving;
      Log("agent.log_server_failed", "error=" + LogfmtValue(serving.message()));
      return;
    }
  }
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
    RenewHostCertIfDue();
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
  // Workers forgotten below are destroyed after mu_ is released: ~WorkerProcess joins its
  // monitor thread, whose exit callback takes mu_.
  std::vector<std::shared_ptr<WorkerProcess>> forgotten;
  bool exit_held_back = false;  // an exit waits for its worker's last lines: beat again soon
  {
    std::lock_guard<std::mutex> lock(mu_);
    CheckFenceLocked();  // resumed from a freeze: fence before reporting anything
    heartbeat.revision = revision_;
    heartbeat.term = fence_.term();
    heartbeat.refused = fence_.TakeRefusals();
    // Progress first, so an exited worker's last lines travel with (or before) its exit. The
    // exits are looked at before the files are read: a worker seen exited has written its
    // last line, so a read that then catches up has every line (progress_drained). A worker
    // that exits after this look, or whose lines did not fit this batch, is reported running
    // once more and its exit goes in the next heartbeat, sent at once.
    if (job_pools_) {
      // Not while a launch is handing a warm process over: the next beat prunes.
      std::unique_lock<std::mutex> pools(pools_mu_, std::try_to_lock);
      if (pools.owns_lock()) job_pools_->Prune();
    }
    std::set<WorkerKey> exited_before_read;
    for (const auto& [key, record] : workers_)
      if (WorkerDoneLocked(key)) exited_before_read.insert(key);
    for (auto& [key, record] : workers_) {
      if (!record.tailer || pending_progress_.size() >= options_.max_progress_batch) continue;
      std::vector<ProgressRecord> records;
      record.tailer->Read(options_.max_progress_batch - pending_progress_.size(), records);
      for (ProgressRecord& r : records) pending_progress_.push_back({key, std::move(r)});
      if (exited_before_read.count(key) && record.tailer->caught_up())
        record.progress_drained = true;
    }
    heartbeat.progress = pending_progress_;
    for (auto it = workers_.begin(); it != workers_.end();) {
      WorkerReport report = ReportLocked(it->first, it->second);
      if (report.state == WorkerState::kExited && it->second.tailer &&
          !it->second.progress_drained) {
        report = WorkerReport{};  // its exit waits for its last lines
        report.key = it->first;
        report.pid = it->second.process ? it->second.process->pid() : 0;
        report.started_at_ms = it->second.process ? it->second.process->started_at_ms() : 0;
        exit_held_back = true;
      }
      if (!it->second.assigned && report.state == WorkerState::kExited) {
        // Stopped because it was unassigned, and now gone: the head no longer asks about it.
        RememberExitLocked(report);
        forgotten.push_back(std::move(it->second.process));
        it = workers_.erase(it);
        continue;
      }
      if (report.state == WorkerState::kRunning && !WorkerDoneLocked(it->first))
        groups.insert(static_cast<pid_t>(report.pid));
      heartbeat.workers.push_back(std::move(report));
      ++it;
    }
  }
  heartbeat.usage = usage_.Sample(groups);
  const int64_t sent_ms = MonotonicNowMs();
  const size_t head = follower_.current();
  auto response = DeliverHeartbeat(protocol::HeartbeatJson(heartbeat));
  if (!response.ok() || response->status != 200) {
    std::lock_guard<std::mutex> lock(mu_);
    fence_.Restore(std::move(heartbeat.refused));  // not delivered: in the next heartbeat
  }
  if (!response.ok()) {
    Log("agent.heartbeat_failed", "error=" + LogfmtValue(response.status().message()));
    // The next heartbeat (an interval later, so that heads naming each other during a
    // failover are not tried in a tight loop) goes to the next head or the named leader.
    HeadFailed(head, response.status().message());
    return;
  }
  if (response->status == 503 && HeadFailed(head, response->body)) return;
  if (response->status == 404) {
    Log("agent.heartbeat_unknown_host", "action=reregister");
    std::lock_guard<std::mutex> lock(mu_);
    reregister_ = true;
    return;
  }
  if (response->status != 200) {
    Log("agent.heartbeat_failed", "status=" + std::to_string(response->status) +
                                      " body=" + LogfmtValue(response->body.substr(0, 200)));
    return;
  }
  bool stale_reply = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ContactLocked(sent_ms);
    stale_reply = fenced_;  // answered, but only after the fence time: a newer beat follows
    // Acknowledged: drop what was sent (more may have been appended since: keep that).
    pending_progress_.erase(
        pending_progress_.begin(),
        pending_progress_.begin() + static_cast<std::ptrdiff_t>(std::min(
                                        heartbeat.progress.size(), pending_progress_.size())));
    if (exit_held_back) wake_ = true;  // the main loop sends the next heartbeat at once
  }
  if (response->body.empty() || stale_reply) return;
  auto snapshot = protocol::ParseAssignmentSnapshot(response->body);
  if (!snapshot.ok()) {
    Log("agent.heartbeat_bad_reply", "error=" + LogfmtValue(snapshot.status().message()));
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    // A revision new since the last reply is the watch's to apply; one the last reply carried
    // too is applied here (again, if the watch did: what was refused while fenced starts now).
    const bool settled = snapshot->revision == reply_revision_;
    reply_revision_ = snapshot->revision;
    if (watch_live_ && !settled) return;
  }
  Reconcile(*snapshot, false, /*wait=*/false);
}

Result<net::Response> Agent::DeliverHeartbeat(const std::string& json) {
  uint64_t seq = 0, run = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (channel_ != nullptr) {
      seq = ++channel_seq_;
      run = channel_run_;
      channel_acks_[seq] = std::nullopt;
      if (!channel_->Send(std::to_string(seq) + " " + json)) {
        channel_acks_.erase(seq);
        seq = 0;
      }
    }
  }
  if (seq == 0) {
    return HeadClient().Request(net::Method::kPost, "/api/v1/agents/" + name_ + "/heartbeat", json,
                                credential_header_);
  }
  // The channel carries it: the keep-alive connection of registration is not needed.
  HeadClient().Disconnect();
  std::unique_lock<std::mutex> lock(mu_);
  const bool answered = ack_cv_.wait_for(lock, request_timeout_, [&] {
    return stopping_ || channel_run_ != run || channel_acks_[seq].has_value();
  });
  std::optional<net::Response> ack = std::move(channel_acks_[seq]);
  channel_acks_.erase(seq);
  if (ack) return *std::move(ack);
  if (!answered && channel_ != nullptr && channel_run_ == run) channel_->Cancel();  // hung
  return Unavailable(heads_[follower_.current()] +
                     ": channel: " + (answered ? "closed" : "no acknowledgement") +
                     " of heartbeat " + std::to_string(seq));
}

void Agent::OnChannelLine(std::string_view line, bool& first, milliseconds& backoff) {
  if (line.empty()) return;
  if (line.starts_with("{\"ack\"")) {
    const nlohmann::json ack = nlohmann::json::parse(line, nullptr, false);
    if (!ack.is_object() || !ack.contains("ack") || !ack["ack"].is_number_unsigned() ||
        !ack.contains("status") || !ack["status"].is_number_integer()) {
      Log("agent.channel_bad_ack", "line=" + LogfmtValue(std::string(line.substr(0, 200))));
      return;
    }
    net::Response answer;
    answer.status = ack["status"].get<int>();
    if (ack.contains("body") && !ack["body"].is_null()) answer.body = ack["body"].dump();
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = channel_acks_.find(ack["ack"].get<uint64_t>());
      if (it == channel_acks_.end()) return;  // its heartbeat gave up waiting
      it->second = std::move(answer);
    }
    ack_cv_.notify_all();
    return;
  }
  auto snapshot = protocol::ParseAssignmentSnapshot(line);
  if (!snapshot.ok()) {
    Log("agent.watch_bad_snapshot", "error=" + LogfmtValue(snapshot.status().message()));
    return;
  }
  if (first) Log("agent.channel_connected", "revision=" + std::to_string(snapshot->revision));
  Reconcile(*snapshot, first);
  if (first) {
    std::lock_guard<std::mutex> lock(mu_);
    watch_live_ = true;
  }
  first = false;
  backoff = options_.backoff_initial;
}

Status Agent::RunChannel(size_t head, milliseconds& backoff) {
  net::ClientOptions client_options;
  client_options.host = options_.head_host;
  client_options.port = options_.head_port;
  if (head > 0) std::tie(client_options.host, client_options.port) = options_.more_heads[head - 1];
  client_options.tls = HeadTls(true);
  client_options.bearer_token = options_.join_token;
  client_options.connect_timeout = options_.request_timeout;
  net::DuplexClient client(client_options);
  bool first = true;
  const Status status = client.Run(
      net::Method::kGet, "/api/v1/agents/" + name_ + "/channel", credential_header_,
      [&] {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) return client.Cancel();
        channel_ = &client;
      },
      [&](std::string_view line) {
        OnChannelLine(line, first, backoff);
        return true;
      });
  {
    std::lock_guard<std::mutex> lock(mu_);
    channel_ = nullptr;
    ++channel_run_;
    watch_live_ = false;
  }
  ack_cv_.notify_all();
  return status;
}

void Agent::WatchLoop() {
  milliseconds backoff = options_.backoff_initial;
  const std::string target = "/api/v1/agents/" + name_ + "/assignments?watch=true";
  while (true) {
    const size_t head = follower_.current();
    bool use_channel;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      use_channel = !channel_unsupported_;
    }
    if (use_channel) {
      const Status status = RunChannel(head, backoff);
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) return;
      }
      // A head older than the channel answers 404 "no route": the watch and POSTs instead.
      if (status.code() == StatusCode::kNotFound &&
          status.message().find("no route") != std::string::npos) {
        Log("agent.channel_unsupported",
            "head=" + LogfmtValue(heads_[head]) + " action=watch_and_post");
        std::lock_guard<std::mutex> lock(mu_);
        channel_unsupported_ = true;
        continue;
      }
      Log("agent.channel_ended", "status=" + LogfmtValue(status.ToString()) +
                                     " retryInMs=" + std::to_string(backoff.count()));
      if (status.code() == StatusCode::kUnavailable && HeadFailed(head, status.message()))
        backoff = options_.backoff_initial;
      if (!SleepUntil(Clock::now() + backoff, false)) return;
      backoff = std::min(backoff * 2, options_.backoff_max);
      continue;
    }
    net::ClientOptions client_options;
    client_options.host = options_.head_host;
    client_options.port = options_.head_port;
    if (head > 0)
      std::tie(client_options.host, client_options.port) = options_.more_heads[head - 1];
    client_options.tls = HeadTls(true);  // the file as it is now: a renewed one once renewed
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
    Status status = client.Stream(
        net::Method::kGet, target,
        [&](std::string_view line) {
          if (line.empty()) return true;
          auto snapshot = protocol::ParseAssignmentSnapshot(line);
          if (!snapshot.ok()) {
            Log("agent.watch_bad_snapshot", "error=" + LogfmtValue(snapshot.status().message()));
            return true;
          }
          if (first) Log("agent.watch_connected", "revision=" + std::to_string(snapshot->revision));
          Reconcile(*snapshot, first);
          if (first) {
            std::lock_guard<std::mutex> lock(mu_);
            watch_live_ = true;
          }
          first = false;
          backoff = options_.backoff_initial;
          return true;
        },
        {}, credential_header_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      watch_client_ = nullptr;
      watch_live_ = false;
      if (stopping_) return;
    }
    Log("agent.watch_ended", "status=" + LogfmtValue(status.ToString()) +
                                 " retryInMs=" + std::to_string(backoff.count()));
    if (status.code() == StatusCode::kUnavailable && HeadFailed(head, status.message())) {
      backoff = options_.backoff_initial;  // another head: no reason to wait long
    }
    if (!SleepUntil(Clock::now() + backoff, false)) return;
    backoff = std::min(backoff * 2, options_.backoff_max);
  }
}

bool Agent::HeadFailed(size_t index, std::string_view answer) {
  const std::optional<ha::HeadFollower::Switch> moved = follower_.Failed(index, answer);
  if (!moved) return false;  // nowhere else to go, or another thread already moved on
  Log("agent.head_switched", moved->Describe(heads_));
  return true;
}

namespace {
// The exit reported for a worker that could not be started (exit code 127, as a shell's).
ExitInfo NeverStarted() {
  ExitInfo exit;
  exit.exit_code = 127;
  exit.finished_at_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  return exit;
}
}  // namespace

std::optional<Agent::PendingStart> Agent::PrepareStartLocked(const ParsedAssignment& parsed) {
  const Assignment& a = parsed.assignment;
  if (!parsed.error.empty()) {
    WorkerRecord record;
    record.assignment = a;
    record.error = parsed.error;
    record.exit = NeverStarted();
    wake_ = true;
    Log("worker.start_failed",
        "worker=" + a.key.ToString() + " error=" + LogfmtValue(parsed.error));
    workers_.emplace(a.key, std::move(record));
    return std::nullopt;
  }
  PendingStart start;
  start.assignment = a;
  LaunchSpec& spec = start.spec;
  spec.command = a.command;
  spec.env = a.env;
  spec.working_dir = a.working_dir;
  spec.log_path = LogPath(a.key);
  spec.progress_path = ProgressPath(a.key);
  if (fence_.enabled() && FencePolicyFor(KindOf(a)) == FenceAction::kStop) {
    // The SDK's watchdog: the worker exits once this file is older than the fence time,
    // also when the agent itself is frozen (python/tessera/worker.py).
    spec.env["TESSERA_AGENT_CONTACT_FILE"] = contact_file_;
    spec.env["TESSERA_FENCE_MS"] = std::to_string(fence_.fence_ms());
  }
  if (a.tls) {  // a replica leader: its files are written by Launch, outside the lock
    const TlsPaths tls = WorkerTlsPaths(a.key);
    spec.env["TESSERA_TLS_CERT"] = tls.cert;
    spec.env["TESSERA_TLS_KEY"] = tls.key;
    spec.env["TESSERA_CA_FILE"] = tls.ca;
  }
  return start;
}

Agent::WorkerRecord Agent::Launch(PendingStart start) {
  const LaunchSpec& spec = start.spec;
  WorkerRecord record;
  record.assignment = std::move(start.assignment);
  const std::string worker = record.assignment.key.ToString();
  // A fresh progress file: a stale one would report steps this worker never made.
  std::error_code ec;
  std::filesystem::remove(spec.progress_path, ec);
  if (Status tls = WriteWorkerTls(record.assignment); !tls.ok()) {
    record.error = tls.message();
    record.exit = NeverStarted();
    Log("worker.start_failed", "worker=" + worker + " error=" + LogfmtValue(record.error));
    return record;
  }
  auto on_exit = [this](const ExitInfo&) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      wake_ = true;
    }
    cv_.notify_all();
  };
  // A warm process if one is ready for this command; the ordinary launch otherwise.
  Result<std::shared_ptr<WorkerProcess>> process = std::shared_ptr<WorkerProcess>();
  if (job_pools_) {
    std::lock_guard<std::mutex> pools(pools_mu_);
    process = job_pools_->TryLaunch(spec, on_exit);  // spec.warmStart
  }
  if (warm_pool_ && process.ok() && *process == nullptr)
    process = warm_pool_->TryLaunch(spec, on_exit);
  const bool warm = process.ok() && *process != nullptr;
  if (process.ok() && !warm) process = launcher_.Launch(spec, on_exit);
  if (!process.ok()) {
    record.error = process.status().message();
    record.exit = NeverStarted();
    Log("worker.start_failed", "worker=" + worker + " error=" + LogfmtValue(record.error));
    return record;
  }
  record.process = *process;
  record.tailer = std::make_unique<ProgressTailer>(spec.progress_path);
  ApplyNice(record, record.assignment.nice);
  Log("worker.started", "worker=" + worker + " pid=" + std::to_string(record.process->pid()) +
                            " warm=" + (warm ? "true" : "false"));
  return record;
}

void Agent::ApplyNice(WorkerRecord& record, int nice) {
  // The niceness the worker's processes have now (0 at launch), and the one asked for.
  if (nice == record.nice || !record.process || record.process->exit_info()) return;
  static const bool can_restore = AgentCanRestoreNice();
  const std::string worker = record.assignment.key.ToString();
  if (!can_restore) return;  // see AgentCanRestoreNice: the worker keeps the normal priority
  if (std::string why = AgentSetGroupNice(record.process->pid(), nice); !why.empty()) {
    Log("worker.nice_failed",
        "worker=" + worker + " nice=" + std::to_string(nice) + " error=" + LogfmtValue(why));
    return;
  }
  record.nice = nice;
  record.assignment.nice = nice;
  Log("worker.nice", "worker=" + worker + " nice=" + std::to_string(nice));
}

void Agent::RenewWorkerTlsLocked(WorkerRecord& record, const ParsedAssignment& parsed) {
  // The head renewed a running leader's certificate: its files are replaced in place (the
  // replica loads them again for new connections).
  const Assignment& a = parsed.assignment;
  if (!parsed.error.empty() || !a.tls || record.assignment.tls == a.tls || !record.process ||
      record.process->exit_info())
    return;
  if (Status written = WriteWorkerTls(a); !written.ok()) {
    Log("worker.tls_renew_failed",
        "worker=" + a.key.ToString() + " error=" + LogfmtValue(written.message()));
    return;
  }
  record.assignment.tls = a.tls;
  Log("worker.tls_renewed", "worker=" + a.key.ToString());
}

void Agent::Reconcile(const AssignmentSnapshot& snapshot, bool from_new_stream, bool wait) {
  std::unique_lock<std::mutex> one_at_a_time(reconcile_mu_, std::defer_lock);
  if (wait) {
    one_at_a_time.lock();
  } else if (!one_at_a_time.try_lock()) {
    return;  // another Reconcile is launching workers; see Reconcile's comment in agent.h
  }
  // Destroyed after mu_ is released (see SendHeartbeat): a worker that exited a moment ago may
  // still be in its exit callback, waiting for mu_.
  std::vector<std::shared_ptr<WorkerProcess>> forgotten;
  std::vector<PendingStart> starts;  // launched once mu_ is released
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    CheckFenceLocked();
    const uint64_t newest_term = fence_.term();
    if (std::string why = fence_.CheckTerm(snapshot.term); !why.empty()) {
      RefuseLocked({snapshot.term, "", 0, 0, why});  // a replaced head: apply nothing of it
      return;
    }
    SaveFenceMemoryLocked();  // a newer term is on disk before anything of it is applied
    // A snapshot of a newer term is applied whatever its revision (a new head's history).
    if (snapshot.revision < revision_ && !from_new_stream && snapshot.term <= newest_term)
      return;  // stale
    revision_ = snapshot.revision;
    for (const std::string& error : snapshot.unreadable) {
      Log("agent.assignment_unreadable", "error=" + LogfmtValue(error));
    }
    // A "stop" entry replaces the grace of the withdrawn workers of its job (uid) and attempt.
    std::map<std::tuple<std::string, uint64_t, int>, int64_t> stop_grace;
    for (const StopRequest& stop : snapshot.stop) {
      auto [it, added] =
          stop_grace.emplace(std::make_tuple(stop.job, stop.uid, stop.attempt), stop.grace_ms);
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
        RenewWorkerTlsLocked(it->second, parsed);
        if (parsed.error.empty()) ApplyNice(it->second, parsed.assignment.nice);
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
      if (std::string why = fence_.CheckAttempt(key); !why.empty()) {
        RefuseLocked({snapshot.term, key.job, key.uid, key.attempt, why});
        continue;
      }
      SaveFenceMemoryLocked();  // a newer attempt is on disk before it is started
      if (fenced_ && FencePolicyFor(KindOf(parsed.assignment)) == FenceAction::kStop) {
        RefuseLocked({snapshot.term, key.job, key.uid, key.attempt,
                      "fenced: no head has answered a heartbeat for the fence time (" +
                          std::to_string(fence_.fence_ms()) +
                          " ms); training workers start once one answers"});
        continue;
      }
      if (std::optional<PendingStart> start = PrepareStartLocked(parsed))
        starts.push_back(std::move(*start));
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
        auto stop = stop_grace.find({it->first.job, it->first.uid, it->first.attempt});
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
      if (record.tailer && !record.progress_drained) {
        // Exited, but lines it wrote may be unread: the heartbeat reads them, then forgets it.
        wake_ = true;
        ++it;
        continue;
      }
      RememberExitLocked(ReportLocked(it->first, record));
      if (record.assignment.tls) {  // its key outlives no worker
        const TlsPaths tls = WorkerTlsPaths(it->first);
        std::error_code ignored;
        for (const std::string* file : {&tls.cert, &tls.key})
          std::filesystem::remove(*file, ignored);
      }
      forgotten.push_back(std::move(record.process));
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
  if (!starts.empty()) {
    std::vector<std::pair<WorkerKey, WorkerRecord>> started;
    for (PendingStart& start : starts) {
      WorkerKey key = start.assignment.key;
      started.emplace_back(std::move(key), Launch(std::move(start)));
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [key, record] : started) {
      // Exited already (its exit callback found no record to wake for), or never started.
      if (!record.process || record.process->exit_info()) wake_ = true;
      // Fenced while it was launched: a training worker is stopped as FenceLocked stops the
      // ones it found.
      if (fenced_ && record.process && !record.process->exit_info() &&
          FencePolicyFor(KindOf(record.assignment)) == FenceAction::kStop) {
        Log("worker.fenced", "worker=" + key.ToString() + " signal=SIGKILL");
        record.stop_grace_ms = 0;
        record.process->StopAsync(milliseconds(0));
        RefuseLocked({0, key.job, key.uid, key.attempt,
                      "fenced while it started; the training worker was stopped (SIGKILL)"});
      }
      workers_.emplace(key, std::move(record));
    }
  }
  cv_.notify_all();
}

}  // namespace tessera::agent
