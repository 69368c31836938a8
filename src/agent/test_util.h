// Helpers shared by the agent tests: temporary directories, polling with a deadline, and a
// fake head (FakeHead) with the AgentOptions and devices the agent tests start agents with.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/agent.h"
#include "net/http_server.h"
#include "protocol/credential.h"

namespace tessera::agent::testing {

// A fresh directory under $TMPDIR, removed with everything in it at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "tessera-agent-test-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Polls `condition` every few milliseconds until it holds or `timeout` passes.
inline bool WaitUntil(const std::function<bool()>& condition,
                      std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void AppendFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::app);
  out << text;
}

// True while `pid` is a live process (not gone, not a zombie).
inline bool ProcessAlive(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(in, text)) return false;
  size_t close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return false;
  return text[close + 2] != 'Z' && text[close + 2] != 'X';
}

inline constexpr char kToken[] = "join-secret";

// A head that speaks the agent protocol and records what it hears.
class FakeHead {
 public:
  using json = nlohmann::json;

  // `channel`: it also serves the agent channel (docs/agent-protocol.md "Channel"), as a head
  // of this version does; without it the agent falls back to the watch and POSTs.
  explicit FakeHead(uint16_t port = 0, int64_t heartbeat_interval_ms = 50, bool channel = false)
      : heartbeat_interval_ms_(heartbeat_interval_ms) {
    net::ServerOptions options;
    options.port = port;
    options.auth.tokens = {kToken};
    server_ = std::make_unique<net::HttpServer>(options);
    EXPECT_TRUE(server_
                    ->Handle(net::Method::kPost, "/api/v1/agents/register",
                             [this](const net::Request& r) {
                               json body = json::parse(r.body);
                               std::lock_guard<std::mutex> lock(mu_);
                               registrations_.push_back(body);
                               if (refuse_status_ != 0) {
                                 return net::Response::Error(refuse_status_, refuse_error_);
                               }
                               known_ = true;
                               return net::Response::Json(
                                   200, json{{"host", body["name"]},
                                             {"heartbeatIntervalMs", heartbeat_interval_ms_},
                                             {"leaseMs", 5000}}
                                            .dump());
                             })
                    .ok());
    EXPECT_TRUE(server_
                    ->Handle(net::Method::kPost, "/api/v1/agents/{name}/heartbeat",
                             [this](const net::Request& r) {
                               std::lock_guard<std::mutex> lock(mu_);
                               names_.insert(r.params.at("name"));
                               credentials_.insert(r.Header(protocol::kHostCredentialHeader));
                               if (!known_) return net::Response::Error(404, "unknown host");
                               if (heartbeat_failure_ != 0)
                                 return net::Response::Error(heartbeat_failure_, "failing");
                               heartbeats_.push_back(json::parse(r.body));
                               ++posted_heartbeats_;
                               return net::Response::Json(200, SnapshotLocked());
                             })
                    .ok());
    EXPECT_TRUE(server_
                    ->Handle(net::Method::kGet, "/api/v1/agents/{name}/assignments",
                             [this](const net::Request& r) {
                               {
                                 std::lock_guard<std::mutex> lock(mu_);
                                 names_.insert(r.params.at("name"));
                                 credentials_.insert(r.Header(protocol::kHostCredentialHeader));
                               }
                               return net::Response::Stream(
                                   [this](std::shared_ptr<net::StreamWriter> w) {
                                     std::lock_guard<std::mutex> lock(mu_);
                                     ++watch_connects_;
                                     w->Write(SnapshotLocked() + "\n");
                                     writers_.push_back(std::move(w));
                                   });
                             })
                    .ok());
    if (channel) {
      EXPECT_TRUE(server_
                      ->Handle(net::Method::kGet, "/api/v1/agents/{name}/channel",
                               [this](const net::Request& r) {
                                 {
                                   std::lock_guard<std::mutex> lock(mu_);
                                   names_.insert(r.params.at("name"));
                                   credentials_.insert(r.Header(protocol::kHostCredentialHeader));
                                 }
                                 auto writer =
                                     std::make_shared<std::shared_ptr<net::StreamWriter>>();
                                 net::Response out = net::Response::Stream(
                                     [this, writer](std::shared_ptr<net::StreamWriter> w) {
                                       std::lock_guard<std::mutex> lock(mu_);
                                       ++channel_connects_;
                                       w->Write(SnapshotLocked() + "\n");
                                       writers_.push_back(w);
                                       *writer = std::move(w);
                                     });
                                 out.on_client_line = [this, writer](std::string_view line) {
                                   const size_t space = line.find(' ');
                                   const std::string seq(line.substr(0, space));
                                   std::lock_guard<std::mutex> lock(mu_);
                                   int status = 200;
                                   std::string body = SnapshotLocked();
                                   if (!known_ || heartbeat_failure_ != 0) {
                                     status = known_ ? heartbeat_failure_ : 404;
                                     body = R"({"error":"failing"})";
                                   } else {
                                     heartbeats_.push_back(json::parse(line.substr(space + 1)));
                                   }
                                   (*writer)->Write("{\"ack\":" + seq +
                                                    ",\"status\":" + std::to_string(status) +
                                                    ",\"body\":" + body + "}\n");
                                 };
                                 return out;
                               })
                      .ok());
    }
    EXPECT_TRUE(server_->Start().ok());
  }
  ~FakeHead() { server_->Stop(); }
  // Channel connections opened, and heartbeats that came as POSTs (the rest came up a channel).
  int channel_connects() const {
    std::lock_guard<std::mutex> lock(mu_);
    return channel_connects_;
  }
  size_t posted_heartbeats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return posted_heartbeats_;
  }

  uint16_t port() const { return server_->port(); }

  void SetAssignments(std::vector<Assignment> assignments, std::vector<StopRequest> stop = {}) {
    std::lock_guard<std::mutex> lock(mu_);
    ++revision_;
    assignments_ = std::move(assignments);
    stop_ = std::move(stop);
    for (auto& w : writers_) w->Write(SnapshotLocked() + "\n");
  }
  // Ends every watch stream (as a head restart would); `revision` restarts the history.
  void DropStreams(std::optional<int64_t> revision = std::nullopt) {
    std::lock_guard<std::mutex> lock(mu_);
    if (revision) revision_ = *revision;
    for (auto& w : writers_) w->Close();
    writers_.clear();
  }
  // The head's term in every snapshot from now on (fencing; 0 = none, an older head).
  void SetTerm(uint64_t term) {
    std::lock_guard<std::mutex> lock(mu_);
    term_ = term;
  }
  // Heartbeats are answered `status` (e.g. 503: unreachable for the agent's fence) from now
  // on; 0 answers them again.
  void FailHeartbeats(int status) {
    std::lock_guard<std::mutex> lock(mu_);
    heartbeat_failure_ = status;
  }
  void ForgetHost() {
    std::lock_guard<std::mutex> lock(mu_);
    known_ = false;
  }
  // Registrations are answered `status` with `error` (the head's error reply) from now on;
  // 0 accepts them again.
  void RefuseRegistrations(int status, std::string error = "") {
    std::lock_guard<std::mutex> lock(mu_);
    refuse_status_ = status;
    refuse_error_ = std::move(error);
  }
  // The host names of the heartbeat and assignment URLs the agent used.
  std::set<std::string> names() const {
    std::lock_guard<std::mutex> lock(mu_);
    return names_;
  }
  // The X-Tessera-Host-Credential headers of the heartbeats and assignment reads.
  std::set<std::string> credentials() const {
    std::lock_guard<std::mutex> lock(mu_);
    return credentials_;
  }
  std::vector<json> registrations() const {
    std::lock_guard<std::mutex> lock(mu_);
    return registrations_;
  }
  std::vector<json> heartbeats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return heartbeats_;
  }
  int watch_connects() const {
    std::lock_guard<std::mutex> lock(mu_);
    return watch_connects_;
  }
  size_t heartbeat_count() const {
    std::lock_guard<std::mutex> lock(mu_);
    return heartbeats_.size();
  }
  // The workers of the newest heartbeat.
  json LastWorkers() const {
    std::lock_guard<std::mutex> lock(mu_);
    return heartbeats_.empty() ? json::array() : heartbeats_.back()["workers"];
  }
  // Every progress record received so far.
  std::vector<json> AllProgress() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<json> out;
    for (const json& h : heartbeats_) {
      for (const json& p : h["progress"]) out.push_back(p);
    }
    return out;
  }

 private:
  std::string SnapshotLocked() const {
    return protocol::AssignmentSnapshotJson(revision_, assignments_, stop_, term_);
  }

  const int64_t heartbeat_interval_ms_;
  std::unique_ptr<net::HttpServer> server_;
  mutable std::mutex mu_;
  bool known_ = true;
  int refuse_status_ = 0;
  std::string refuse_error_;
  std::set<std::string> names_;
  std::set<std::string> credentials_;
  int64_t revision_ = 1;
  std::vector<Assignment> assignments_;
  std::vector<StopRequest> stop_;
  std::vector<std::shared_ptr<net::StreamWriter>> writers_;
  std::vector<json> registrations_;
  std::vector<json> heartbeats_;
  int watch_connects_ = 0;
  int channel_connects_ = 0;
  size_t posted_heartbeats_ = 0;
  uint64_t term_ = 0;
  int heartbeat_failure_ = 0;
};

// Options for an agent "host-1" (v6e, worker 1 of a 4x4 slice) of the head at `head_port`,
// with short backoffs and log polling.
inline AgentOptions Options(const TempDir& dir, uint16_t head_port, std::string token = kToken) {
  AgentOptions o;
  o.head_port = head_port;
  o.join_token = std::move(token);
  o.name = "host-1";
  o.state_dir = dir.path() + "/state";
  o.generation = "v6e";
  o.slice = SliceMembership{"slice-000", "4x4", 1};
  o.labels = {{"pool", "a"}};
  o.backoff_initial = std::chrono::milliseconds(20);
  o.backoff_max = std::chrono::milliseconds(200);
  o.log_poll_interval = std::chrono::milliseconds(10);
  return o;
}

inline std::unique_ptr<DeviceDiscovery> SliceDevices() {
  auto d = EmulatedDevices::ForSliceWorker(Generation::kV6e, Shape::Of(4, 4), 1);
  EXPECT_TRUE(d.ok());
  return std::make_unique<EmulatedDevices>(*d);
}

// The repository's python/ directory: the first parent of the test binary that holds
// python/tessera/ (every preset builds inside the repository, build/<preset>/src/agent/). Not
// from __FILE__: ccache's base_dir (CMakeLists.txt) compiles with paths relative to the build
// directory, which the test, run from another directory, cannot resolve.
inline std::string SdkDir() {
  std::error_code error;
  std::filesystem::path dir = std::filesystem::read_symlink("/proc/self/exe", error);
  for (; !error && dir.has_relative_path(); dir = dir.parent_path())
    if (std::filesystem::exists(dir / "python" / "tessera")) return (dir / "python").string();
  ADD_FAILURE() << "no python/tessera/ above the test binary: build inside the repository";
  return "python";
}

}  // namespace tessera::agent::testing
