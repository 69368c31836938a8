// The agent's log server: GET /logs/<job>/<uid>/<attempt>/<rank> (from an offset, or followed
// until the worker exits) and the thread that feeds the followed logs. Part of Agent
// (agent.h); the rest of the class is in agent.cc.
#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <filesystem>
#include <optional>
#include <string_view>

#include "agent/agent.h"
#include "common/text.h"
#include "net/http_server.h"
#include "protocol/credential.h"

namespace tessera::agent {
namespace {

using Clock = std::chrono::steady_clock;

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

// All of `text` as an integer; nullopt when it is not one.
}  // namespace

Status Agent::StartLogServer() {
  net::ServerOptions server_options;
  server_options.bind_address = options_.listen_address;
  server_options.port = options_.port;
  // Only this host's log token (derived from its credential), which the head reads its logs
  // with: the join token opens no agent's logs, and no other host's token opens these.
  server_options.auth.tokens = {protocol::LogTokenFromHash(protocol::CredentialHash(credential_))};
  // With an https:// head the log server serves HTTPS with the host certificate
  // (host_credential.h), which the head's log proxy verifies; it starts once the agent holds
  // one (ServeLogs, from the main loop).
  if (!host_cert_file_.empty()) {
    net::ServerTlsOptions tls;
    tls.cert_chain_file = host_cert_file_;
    tls.key_file = host_cert_file_;
    server_options.tls = tls;
  }
  server_ = std::make_unique<net::HttpServer>(server_options);
  TESSERA_RETURN_IF_ERROR(server_->Handle(
      net::Method::kGet, "/logs/{job}/{uid}/{attempt}/{rank}", [this](const net::Request& request) {
        const std::string& job = request.params.at("job");
        auto uid = ParseInt(request.params.at("uid"));
        auto attempt = ParseInt(request.params.at("attempt"));
        auto rank = ParseInt(request.params.at("rank"));
        if (!IsSafeName(job) || !uid || !attempt || !rank || *uid < 1 ||
            static_cast<uint64_t>(*uid) > protocol::kMaxUid || *attempt < 0 || *rank < 0 ||
            *attempt > 1'000'000'000 || *rank > 1'000'000'000) {
          return net::Response::Error(404, "no such worker log", "path");
        }
        WorkerKey key{job, static_cast<int>(*attempt), static_cast<int>(*rank),
                      static_cast<uint64_t>(*uid)};
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
  return host_cert_file_.empty() ? ServeLogs() : Status::Ok();
}

Status Agent::ServeLogs() {
  TESSERA_RETURN_IF_ERROR(server_->Start());
  if (host_cert_file_.empty()) {
    // docs/security.md "What stays plain": a --plain-http head reads logs here over HTTP.
    Log("agent.log_server_plain_http",
        "port=" + std::to_string(server_->port()) +
            " note=\"plain HTTP (no TLS, the head is http://): worker logs cross the network "
            "readable\"");
  } else {
    Log("agent.log_server_https", "port=" + std::to_string(server_->port()));
  }
  return Status::Ok();
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

}  // namespace tessera::agent
