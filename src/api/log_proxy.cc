#include "api/log_proxy.h"

#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "net/http_client.h"

namespace tessera::api {

struct LogProxy::State {
  explicit State(LogProxyOptions o) : options(std::move(o)) {}

  const LogProxyOptions options;
  mutable std::mutex mu;
  bool stopping = false;
  int total = 0;
  std::map<std::string, int> per_agent;  // "address:port" -> reads in progress
  struct Running {
    std::thread thread;
    std::shared_ptr<net::HttpClient> client;
  };
  uint64_t next_id = 0;
  std::map<uint64_t, Running> running;
  // Threads that have returned from their work; joined by the next Serve() or by Stop(), so
  // a finished read leaves nothing behind for long and nothing joins on an I/O thread for
  // longer than a thread takes to exit.
  std::vector<std::thread> finished;

  void Release(const std::string& agent) {
    std::lock_guard lock(mu);
    --total;
    if (--per_agent[agent] == 0) per_agent.erase(agent);
  }
};

namespace {

// Copies the log from the agent to the client until either end stops.
void Copy(net::HttpClient& client, net::StreamWriter& writer, const LogProxy::Source& source,
          LogProxy::Mode mode) {
  const std::string target =
      source.path + (mode == LogProxy::Mode::kFollow ? "?follow=true" : "?offset=0");
  const Status read = client.Stream(net::Method::kGet, target, [&](std::string_view line) {
    return writer.Write(std::string(line) + "\n");
  });
  if (!read.ok() && writer.IsOpen())
    writer.Write("[tessera] cannot read the log of " + source.worker +
                 " from its agent: " + read.message() + "\n");
  writer.Close();
}

net::Response Busy(int status, std::string message) {
  net::Response out = net::Response::Error(status, message, "worker");
  out.headers["Retry-After"] = "1";
  return out;
}

}  // namespace

LogProxy::LogProxy(LogProxyOptions options) : state_(std::make_shared<State>(std::move(options))) {}

LogProxy::~LogProxy() { Stop(); }

int LogProxy::active() const {
  std::lock_guard lock(state_->mu);
  return state_->total;
}

net::Response LogProxy::Serve(const Source& source, Mode mode) {
  State& s = *state_;
  const std::string agent = source.address + ":" + std::to_string(source.port);
  std::vector<std::thread> done;
  {
    std::lock_guard lock(s.mu);
    done.swap(s.finished);
    if (s.stopping) return Busy(503, "worker logs: the head is stopping");
    if (s.total >= s.options.max_total)
      return Busy(503, "worker logs: " + std::to_string(s.total) +
                           " log reads are in progress, the most the head allows; retry shortly");
    int& from_agent = s.per_agent[agent];
    if (from_agent >= s.options.max_per_agent) {
      const std::string message = "worker logs: " + std::to_string(from_agent) +
                                  " log reads from the agent at " + agent +
                                  " are in progress, the most the head allows per agent; retry "
                                  "shortly (is that agent slow or stopped?)";
      if (from_agent == 0) s.per_agent.erase(agent);
      return Busy(429, message);
    }
    ++from_agent;
    ++s.total;
  }
  for (std::thread& t : done) t.join();  // they have returned: each join is immediate

  // The read counts against the caps until the last holder (the response, then the thread)
  // lets go of it, whichever way the read ends.
  std::shared_ptr<void> slot(nullptr, [state = state_, agent](void*) { state->Release(agent); });
  net::Response out = net::Response::Stream(
      [state = state_, slot, source, mode](std::shared_ptr<net::StreamWriter> writer) {
        net::ClientOptions o;
        o.host = source.address;
        o.port = source.port;
        o.bearer_token =
            source.bearer_token.empty() ? state->options.bearer_token : source.bearer_token;
        o.connect_timeout = state->options.connect_timeout;
        if (state->options.tls) {
          o.tls = state->options.tls;
          o.tls->server_name = source.server_name;
        }
        o.read_timeout = state->options.read_timeout;
        o.stream_idle_timeout =
            mode == Mode::kRead ? state->options.read_timeout : std::chrono::milliseconds(0);
        auto client = std::make_shared<net::HttpClient>(o);
        // The client went away (or the server stops): abandon the agent's side at once.
        writer->OnClose([client] { client->Cancel(); });
        std::lock_guard lock(state->mu);
        if (state->stopping) {
          writer->Write("[tessera] the head is stopping\n");
          writer->Close();
          return;
        }
        const uint64_t id = state->next_id++;
        State::Running& r = state->running[id];
        r.client = client;
        // Started under the lock, so the thread's last step (moving itself to `finished`) finds
        // its entry.
        r.thread = std::thread([state, id, slot, client, writer, source, mode]() mutable {
          Copy(*client, *writer, source, mode);
          slot.reset();
          client.reset();
          writer.reset();
          std::lock_guard done_lock(state->mu);
          auto it = state->running.find(id);
          if (it == state->running.end()) return;  // Stop() took it and joins it
          state->finished.push_back(std::move(it->second.thread));
          state->running.erase(it);
        });
      });
  out.content_type = "text/plain; charset=utf-8";
  return out;
}

void LogProxy::Stop() {
  State& s = *state_;
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(s.mu);
    s.stopping = true;
    for (auto& [id, r] : s.running) {
      r.client->Cancel();
      threads.push_back(std::move(r.thread));
    }
    s.running.clear();
    for (std::thread& t : s.finished) threads.push_back(std::move(t));
    s.finished.clear();
  }
  for (std::thread& t : threads)
    if (t.joinable()) t.join();
}

}  // namespace tessera::api
