// A real Head on 127.0.0.1 port 0, with agents played by the test: a frozen agent (a socket
// that accepts connections and never answers), a fake agent log server, and hosts that
// heartbeat over HTTP. Checks that log reads never hold the head's I/O threads, that follows
// end and leave no thread or socket behind, and that list-then-watch misses nothing and
// repeats nothing (issue 17, points 1, 7, 8 and `worker=1abc`); and that heads side by side seed
// the ports they hand to workers each on their own.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "api/head.h"
#include "api/head_tls.h"
#include "api/host_certs.h"
#include "net/duplex_client.h"
#include "net/http_client.h"
#include "net/http_server.h"
#include "pki/pki.h"
#include "protocol/credential.h"

namespace tessera::api {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;
using net::Method;
using SteadyClock = std::chrono::steady_clock;

class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "tessera-head-test-XXXXXX").string();
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

bool WaitUntil(const std::function<bool()>& condition, std::chrono::milliseconds timeout = 30s) {
  const auto deadline = SteadyClock::now() + timeout;
  while (!condition()) {
    if (SteadyClock::now() > deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

size_t CountEntries(const char* dir) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}
size_t ThreadCount() { return CountEntries("/proc/self/task"); }
size_t OpenFdCount() { return CountEntries("/proc/self/fd"); }

// What a SIGSTOPped agent looks like from the head: the kernel completes connections into the
// listen backlog, and nobody ever reads a request or answers it.
class FrozenAgent {
 public:
  FrozenAgent() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), len) == 0 && ::listen(fd_, 512) == 0 &&
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0)
      port_ = ntohs(a.sin_port);
  }
  ~FrozenAgent() { ::close(fd_); }
  uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

// An agent's log server: a plain read answers "line 1\nline 2\n"; a follow sends "line 1" and
// stays open until CloseFollows().
class FakeAgentLogs {
 public:
  FakeAgentLogs() {
    net::ServerOptions o;
    server_ = std::make_unique<net::HttpServer>(o);
    Status handled =
        server_->Handle(Method::kGet, "/logs/{path...}", [this](const net::Request& r) {
          if (r.Query("follow").value_or("") != "true")
            return net::Response::Text(200, "line 1\nline 2\n");
          return net::Response::Stream([this](std::shared_ptr<net::StreamWriter> w) {
            w->Write("line 1\n");
            std::lock_guard lock(mu_);
            follows_.push_back(std::move(w));
          });
        });
    EXPECT_TRUE(handled.ok()) << handled.ToString();
    Status started = server_->Start();
    EXPECT_TRUE(started.ok()) << started.ToString();
  }
  ~FakeAgentLogs() { server_->Stop(); }
  uint16_t port() const { return server_->port(); }
  int open_follows() {
    std::lock_guard lock(mu_);
    return static_cast<int>(
        std::count_if(follows_.begin(), follows_.end(), [](auto& w) { return w->IsOpen(); }));
  }
  void CloseFollows() {
    std::lock_guard lock(mu_);
    for (auto& w : follows_) w->Close();
    follows_.clear();
  }

 private:
  std::unique_ptr<net::HttpServer> server_;
  std::mutex mu_;
  std::vector<std::shared_ptr<net::StreamWriter>> follows_;
};

class HeadHardeningTest : public ::testing::Test {
 protected:
  void StartHead(HeadOptions options = {}) {
    options.state_dir = dir_.path() + "/state";
    plain_ = options.plain_http;
    head_ = std::make_unique<Head>(options);
    Status started = head_->Start();
    ASSERT_TRUE(started.ok()) << started.ToString();
  }
  void TearDown() override {
    if (head_) head_->Stop();
  }

  net::ClientOptions ClientOptions(const std::string& token) const {
    net::ClientOptions o;
    o.port = static_cast<uint16_t>(head_->port());
    if (!plain_) o.tls = net::ClientTlsOptions{dir_.path() + "/state/ca.crt", "", "", ""};
    o.bearer_token = token;
    o.read_timeout = 20s;
    return o;
  }
  // One request on a fresh connection (callable from any thread).
  net::Response Call(Method method, const std::string& target, const Json& body = nullptr,
                     bool as_agent = false) const {
    net::HttpClient client(ClientOptions(as_agent ? head_->join_token() : head_->admin_token()));
    auto r = client.Request(method, target, body.is_null() ? "" : body.dump());
    EXPECT_TRUE(r.ok()) << target << ": " << r.status().ToString();
    return r.ok() ? *r : net::Response::Error(599, r.status().message());
  }
  Json Get(const std::string& target) const {
    net::Response r = Call(Method::kGet, target);
    EXPECT_EQ(r.status, 200) << target << ": " << r.body;
    return Json::parse(r.body, nullptr, false);
  }
  void Apply(const Json& doc) const {
    net::Response r = Call(Method::kPost, "/api/v1/apply", doc);
    EXPECT_TRUE(r.status == 200 || r.status == 201) << r.body;
  }
  static Json PriorityClass(const std::string& name, int value = 1) {
    return {{"apiVersion", "tessera/v1"},
            {"kind", "PriorityClass"},
            {"metadata", {{"name", name}}},
            {"value", value}};
  }

  static std::string HostName(int slice, int w) {
    return "s" + std::to_string(slice) + "-w" + std::to_string(w);
  }
  // Two v6e 4x4 slices of four hosts each, whose agents' log servers are all at `agent_port`.
  void RegisterTwoSlices(uint16_t agent_port) const {
    for (int s = 0; s < 2; ++s)
      for (int w = 0; w < 4; ++w) {
        const Json registration = {
            {"name", HostName(s, w)},
            {"generation", "v6e"},
            {"chips", 4},
            {"address", "127.0.0.1"},
            {"agentPort", agent_port},
            {"slice", {{"name", "slice-" + std::to_string(s)}, {"topology", "4x4"}, {"worker", w}}},
            {"credential", protocol::Sha256Hex(HostName(s, w))}};  // the host's own
        net::Response r = Call(Method::kPost, "/api/v1/agents/register", registration, true);
        ASSERT_EQ(r.status, 200) << r.body;
      }
  }
  // Creates a one-slice job and waits until it is placed; returns its workers' hosts.
  std::set<std::string> PlaceJob(const std::string& name) const {
    const Json job = {{"apiVersion", "tessera/v1"},
                      {"kind", "TrainJob"},
                      {"metadata", {{"name", name}}},
                      {"spec",
                       {{"accelerator", "v6e"},
                        {"topology", "4x4"},
                        {"slices", 1},
                        {"template", {{"command", {"python3", "train.py"}}}}}}};
    net::Response created = Call(Method::kPost, "/api/v1/jobs", job);
    EXPECT_EQ(created.status, 201) << created.body;
    std::set<std::string> hosts;
    EXPECT_TRUE(WaitUntil([&] {
      const Json j = Get("/api/v1/jobs/" + name);
      hosts.clear();
      for (const Json& w : j["status"].value("workers", Json::array()))
        hosts.insert(w.value("host", ""));
      return hosts.size() == 4;
    })) << "job "
        << name << " was not placed";
    return hosts;
  }

  TempDir dir_;
  std::unique_ptr<Head> head_;
  // The head serves plain HTTP: the fake agents here hold no host certificate (their log
  // servers are plain, and agents' calls are authorised by the join token and the host
  // credential alone), as with --plain-http. Host certificates: host_certs_test and
  // tests/integration/test_host_certs.py.
  bool plain_ = false;
};

// Issue 17, point 1: two log requests for a worker on a stopped agent used to hold both I/O
// threads for 30 s, so no heartbeat was answered and every host was lost.
TEST_F(HeadHardeningTest, LogRequestsToAFrozenAgentNeverStarveHeartbeats) {
  FrozenAgent frozen;
  ASSERT_NE(frozen.port(), 0);
  HeadOptions options;
  options.plain_http = true;  // fake agents without certificates (plain_)
  options.controller.lease_ms = 3000;
  options.logs.connect_timeout = 1s;
  options.logs.read_timeout = 3s;
  StartHead(options);
  RegisterTwoSlices(frozen.port());
  const std::set<std::string> job_hosts = PlaceJob("frozen");
  std::vector<std::string> healthy;
  for (int s = 0; s < 2; ++s)
    for (int w = 0; w < 4; ++w)
      if (!job_hosts.count(HostName(s, w))) healthy.push_back(HostName(s, w));
  ASSERT_EQ(healthy.size(), 4u);

  // The other slice's agents heartbeat every 200 ms throughout.
  std::atomic<bool> done{false};
  std::atomic<int64_t> slowest_ms{0};
  std::atomic<int> failed_beats{0}, beats{0};
  std::thread heartbeats([&] {
    net::HttpClient client(ClientOptions(head_->join_token()));
    while (!done) {
      for (const std::string& h : healthy) {
        const auto start = SteadyClock::now();
        auto r = client.Request(Method::kPost, "/api/v1/agents/" + h + "/heartbeat", "{}",
                                {{protocol::kHostCredentialHeader, protocol::Sha256Hex(h)}});
        const int64_t ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - start)
                .count();
        if (!r.ok() || r->status != 200) ++failed_beats;
        ++beats;
        if (ms > slowest_ms) slowest_ms = ms;
      }
      std::this_thread::sleep_for(200ms);
    }
  });

  // 50 log reads of the job's workers, all at once, while the agent never answers.
  constexpr int kRequests = 50;
  std::vector<net::Response> answers(kRequests);
  std::vector<int64_t> answer_ms(kRequests);
  std::vector<std::thread> readers;
  const auto burst = SteadyClock::now();
  for (int i = 0; i < kRequests; ++i)
    readers.emplace_back([&, i] {
      const auto start = SteadyClock::now();
      answers[i] = Call(Method::kGet, "/api/v1/jobs/frozen/logs?worker=" + std::to_string(i % 4));
      answer_ms[i] =
          std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - start).count();
    });
  for (auto& t : readers) t.join();
  // Keep heartbeating for two leases past the burst: a starved head would lose the hosts.
  std::this_thread::sleep_until(burst + 2 * std::chrono::milliseconds(options.controller.lease_ms));
  done = true;
  heartbeats.join();

  int refused = 0, proxied = 0;
  for (int i = 0; i < kRequests; ++i) {
    const net::Response& a = answers[i];
    if (a.status == 429) {
      ++refused;
      EXPECT_EQ(a.headers.count("Retry-After"), 1u) << a.body;
      EXPECT_NE(a.body.find("worker logs:"), std::string::npos) << a.body;
      EXPECT_LT(answer_ms[i], 2000) << "a refusal must come at once";
    } else {
      ++proxied;
      EXPECT_EQ(a.status, 200) << a.body;
      // The read gives up after the connect and read deadlines and says so in the text.
      EXPECT_NE(a.body.find("[tessera] cannot read the log of worker"), std::string::npos)
          << a.body;
      EXPECT_LT(answer_ms[i], 10'000);
    }
  }
  EXPECT_LE(proxied, 4 * 2) << "at most 4 reads per agent at a time (each holds >= 3 s)";
  EXPECT_GE(refused, kRequests - 4 * 2);
  EXPECT_EQ(failed_beats, 0);
  EXPECT_GT(beats, 20);
  EXPECT_LT(slowest_ms, 1000) << "a heartbeat waited behind log reads";
  const Json hosts = Get("/api/v1/hosts");
  for (const Json& h : hosts["items"]) {
    if (!job_hosts.count(h["metadata"]["name"])) {
      EXPECT_EQ(h["status"]["state"], "Ready") << h.dump();
    }
  }
  const Json events = Get("/api/v1/events");
  for (const Json& e : events["items"]) {
    if (e.value("reason", "") != "HostLost") continue;
    for (const std::string& h : healthy)
      EXPECT_NE(e.value("object", ""), "host/" + h) << "a healthy host was lost: " << e;
  }
}

// Issue 17, point 7: every abandoned `logs -f` used to keep a thread and a socket for the
// head's lifetime.
TEST_F(HeadHardeningTest, FollowsEndWithTheirClientOrTheLogAndLeaveNothingBehind) {
  FakeAgentLogs agent;
  HeadOptions options;
  options.plain_http = true;  // fake agents without certificates (plain_)
  StartHead(options);
  RegisterTwoSlices(agent.port());
  PlaceJob("follow");
  // A plain read through the proxy (and back to idle) before the baseline is taken.
  net::Response plain = Call(Method::kGet, "/api/v1/jobs/follow/logs?worker=1");
  EXPECT_EQ(plain.status, 200);
  EXPECT_EQ(plain.body, "line 1\nline 2\n");
  size_t idle_threads = 0, idle_fds = 0;
  ASSERT_TRUE(WaitUntil([&] {
    idle_threads = ThreadCount();
    idle_fds = OpenFdCount();
    std::this_thread::sleep_for(200ms);
    return ThreadCount() == idle_threads && OpenFdCount() == idle_fds;
  }));
  auto back_to_idle = [&] {
    return WaitUntil([&] { return ThreadCount() <= idle_threads && OpenFdCount() <= idle_fds; });
  };

  // Abandoned by their clients: 5 rounds of 4 (the most one agent serves at a time).
  for (int round = 0; round < 5; ++round) {
    std::vector<std::thread> clients;
    std::atomic<int> first_lines{0};
    for (int i = 0; i < 4; ++i)
      clients.emplace_back([&, i] {
        net::HttpClient client(ClientOptions(head_->admin_token()));
        Status s = client.Stream(Method::kGet,
                                 "/api/v1/jobs/follow/logs?follow=true&worker=" + std::to_string(i),
                                 [&](std::string_view line) {
                                   if (line == "line 1") ++first_lines;
                                   return false;  // hang up after the first line
                                 });
        EXPECT_TRUE(s.ok()) << s.ToString();
      });
    for (auto& t : clients) t.join();
    EXPECT_EQ(first_lines, 4);
    ASSERT_TRUE(back_to_idle()) << "round " << round << ": threads " << ThreadCount() << " (idle "
                                << idle_threads << "), fds " << OpenFdCount() << " (idle "
                                << idle_fds << ")";
    EXPECT_TRUE(WaitUntil([&] { return agent.open_follows() == 0; }))
        << "the head kept reading from the agent after its client left";
  }

  // Ended by the agent (the worker's log is closed): the client's stream ends cleanly.
  std::vector<std::string> lines;
  std::thread follower([&] {
    net::HttpClient client(ClientOptions(head_->admin_token()));
    Status s = client.Stream(Method::kGet, "/api/v1/jobs/follow/logs?follow=true&worker=0",
                             [&](std::string_view line) {
                               lines.emplace_back(line);
                               return true;
                             });
    EXPECT_TRUE(s.ok()) << s.ToString();
  });
  ASSERT_TRUE(WaitUntil([&] { return agent.open_follows() == 1; }));
  agent.CloseFollows();
  follower.join();
  EXPECT_EQ(lines, std::vector<std::string>{"line 1"});
  EXPECT_TRUE(back_to_idle()) << "threads " << ThreadCount() << " (idle " << idle_threads
                              << "), fds " << OpenFdCount() << " (idle " << idle_fds << ")";
}

TEST_F(HeadHardeningTest, WorkerMustBeAWholeNumber) {
  StartHead();
  for (const char* bad : {"1abc", "-1", "", "0x1", "%201", "1.0", "99999999999"}) {
    net::Response r = Call(Method::kGet, std::string("/api/v1/jobs/j/logs?worker=") + bad);
    EXPECT_EQ(r.status, 400) << bad;
    EXPECT_EQ(Json::parse(r.body, nullptr, false).value("field", ""), "worker") << r.body;
  }
  // A good rank gets past the check (and finds no job).
  EXPECT_EQ(Call(Method::kGet, "/api/v1/jobs/j/logs?worker=0").status, 404);
}

// The agent channel (docs/agent-protocol.md "Channel"): heartbeats up, one acknowledgement
// each (the answer POST .../heartbeat would give, refusals included), and the host's
// assignment snapshots down, a new assignment at once, all on one connection.
TEST_F(HeadHardeningTest, AgentChannelCarriesHeartbeatsAndAssignmentsOnOneConnection) {
  HeadOptions options;
  options.plain_http = true;  // fake agents without certificates (plain_)
  StartHead(options);
  for (int w = 0; w < 4; ++w) {
    const Json registration = {{"name", HostName(0, w)},
                               {"generation", "v6e"},
                               {"chips", 4},
                               {"slice", {{"name", "slice-0"}, {"topology", "4x4"}, {"worker", w}}},
                               {"credential", protocol::Sha256Hex(HostName(0, w))}};
    ASSERT_EQ(Call(Method::kPost, "/api/v1/agents/register", registration, true).status, 200);
  }
  const std::string host = HostName(0, 0);
  const net::Headers credential = {{"X-Tessera-Host-Credential", protocol::Sha256Hex(host)}};

  // Another host's credential: refused before the stream opens.
  net::DuplexClient impostor(ClientOptions(head_->join_token()));
  const Status refused =
      impostor.Run(Method::kGet, "/api/v1/agents/" + host + "/channel",
                   {{"X-Tessera-Host-Credential", protocol::Sha256Hex(HostName(0, 1))}}, {},
                   [](std::string_view) { return true; });
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition) << refused.ToString();

  net::DuplexClient channel(ClientOptions(head_->join_token()));
  std::map<uint64_t, Json> acks;
  std::vector<Json> snapshots;
  std::thread job_maker;
  auto assigned = [&] { return !snapshots.empty() && !snapshots.back()["assignments"].empty(); };
  const Status ended = channel.Run(
      Method::kGet, "/api/v1/agents/" + host + "/channel", credential,
      [&] {
        EXPECT_TRUE(channel.Send(R"(1 {"revision": -1})"));
        EXPECT_TRUE(channel.Send(R"(2 {"workers": 5})"));  // refused, naming the field
        EXPECT_TRUE(channel.Send("not-a-number {}"));
      },
      [&](std::string_view line) {
        Json j = Json::parse(line, nullptr, false);
        EXPECT_TRUE(j.is_object()) << line;
        if (j.contains("ack")) {
          acks[j["ack"].get<uint64_t>()] = j;
        } else {
          snapshots.push_back(j);
        }
        // Once the three acknowledgements are in, a job is placed on the slice: its
        // assignment must come down the open channel without another heartbeat.
        if (acks.size() == 3 && !job_maker.joinable())
          job_maker = std::thread([this] { PlaceJob("chan"); });
        return !assigned();
      });
  if (job_maker.joinable()) job_maker.join();
  ASSERT_TRUE(ended.ok()) << ended.ToString();
  ASSERT_EQ(acks.size(), 3u);
  EXPECT_EQ(acks[1]["status"], 200);
  EXPECT_TRUE(acks[1]["body"].contains("revision")) << acks[1].dump();
  EXPECT_EQ(acks[2]["status"], 400);
  EXPECT_EQ(acks[2]["body"]["field"], "workers") << acks[2].dump();
  EXPECT_EQ(acks[0]["status"], 400);
  EXPECT_EQ(acks[0]["body"]["field"], "channel") << acks[0].dump();
  ASSERT_GE(snapshots.size(), 2u);  // the current one on connecting, then the assignment
  EXPECT_TRUE(snapshots.front()["assignments"].empty());
  ASSERT_TRUE(assigned());
  EXPECT_EQ(snapshots.back()["assignments"][0]["job"], "chan");

  // After the host is deleted, a heartbeat up a channel opened before is refused (404).
  const std::string idle = HostName(1, 0);
  const Json registration = {{"name", idle},
                             {"generation", "v6e"},
                             {"chips", 4},
                             {"slice", {{"name", "slice-1"}, {"topology", "4x4"}, {"worker", 0}}},
                             {"credential", protocol::Sha256Hex(idle)}};
  ASSERT_EQ(Call(Method::kPost, "/api/v1/agents/register", registration, true).status, 200);
  net::DuplexClient second(ClientOptions(head_->join_token()));
  std::optional<Json> late_ack;
  const Status after = second.Run(
      Method::kGet, "/api/v1/agents/" + idle + "/channel",
      {{"X-Tessera-Host-Credential", protocol::Sha256Hex(idle)}},
      [&] {
        EXPECT_EQ(Call(Method::kDelete, "/api/v1/hosts/" + idle).status, 200);
        EXPECT_TRUE(second.Send("7 {}"));
      },
      [&](std::string_view line) {
        Json j = Json::parse(line, nullptr, false);
        if (j.contains("ack")) late_ack = j;
        return !late_ack.has_value();
      });
  ASSERT_TRUE(after.ok()) << after.ToString();
  ASSERT_TRUE(late_ack.has_value());
  EXPECT_EQ((*late_ack)["status"], 404) << late_ack->dump();
}

// With host certificates: a channel opened before `tessera delete host` answers its next
// heartbeat 403 naming the revocation, as a POST with that certificate is answered, and the
// head then closes it, so a revoked certificate keeps no connection. (A 404 here sent the agent
// to register again, whose 403 ended it: test_host_certs.py's revoked host never came back.)
TEST_F(HeadHardeningTest, AChannelOfARevokedHostIsAnsweredWithTheRevocationAndClosed) {
  StartHead();  // TLS, host certificates
  const std::string host = HostName(0, 0);
  const std::string state = dir_.path() + "/state/";
  auto ca = pki::ReadCa(state + kCaCertFile, state + kCaKeyFile);
  ASSERT_TRUE(ca.ok()) << ca.status().ToString();
  auto cert = pki::MakeClientCert(*ca, {HostIdentity(host), "host"});
  ASSERT_TRUE(cert.ok()) << cert.status().ToString();
  const std::string pem = dir_.path() + "/host.pem";
  ASSERT_TRUE(pki::WriteKeyFile(pem, cert->cert_pem + cert->key_pem).ok());
  net::ClientOptions as_host = ClientOptions(head_->join_token());
  as_host.tls->cert_file = pem;
  as_host.tls->key_file = pem;
  const Json registration = {{"name", host},
                             {"generation", "v6e"},
                             {"chips", 4},
                             {"slice", {{"name", "slice-0"}, {"topology", "4x4"}, {"worker", 0}}},
                             {"credential", protocol::Sha256Hex(host)}};
  {
    net::HttpClient client(as_host);
    auto registered = client.Request(Method::kPost, "/api/v1/agents/register", registration.dump());
    ASSERT_TRUE(registered.ok()) << registered.status().ToString();
    ASSERT_EQ(registered->status, 200) << registered->body;
  }
  // A channel the head left open would end idle, failing Run, rather than hang the test.
  net::ClientOptions channel_options = as_host;
  channel_options.stream_idle_timeout = 10s;
  net::DuplexClient channel(channel_options);
  std::vector<Json> acks;
  const Status ended = channel.Run(
      Method::kGet, "/api/v1/agents/" + host + "/channel",
      {{"X-Tessera-Host-Credential", protocol::Sha256Hex(host)}},
      [&] {
        EXPECT_TRUE(channel.Send("1 {}"));  // answered 200 before the deletion
      },
      [&](std::string_view line) {
        Json j = Json::parse(line, nullptr, false);
        if (!j.contains("ack")) return true;
        acks.push_back(j);
        if (acks.size() == 1) {
          EXPECT_EQ(Call(Method::kDelete, "/api/v1/hosts/" + host).status, 200);
          EXPECT_TRUE(channel.Send("2 {}"));
        }
        return true;  // until the head ends the response
      });
  ASSERT_TRUE(ended.ok()) << ended.ToString();  // the head ended the response
  ASSERT_EQ(acks.size(), 2u);
  EXPECT_EQ(acks[0]["status"], 200) << acks[0].dump();
  EXPECT_EQ(acks[1]["status"], 403) << acks[1].dump();
  EXPECT_NE(acks[1]["body"].value("error", "").find("is revoked"), std::string::npos)
      << acks[1].dump();
}

// Reads a watch stream on its own thread until `until` holds for a line.
class Watcher {
 public:
  Watcher(net::ClientOptions options, std::string target, std::function<bool(const Json&)> until)
      : thread_([this, options, target, until] {
          net::HttpClient client(options);
          status_ = client.Stream(Method::kGet, target, [&](std::string_view line) {
            Json j = Json::parse(line, nullptr, false);
            std::lock_guard lock(mu_);
            lines_.push_back(j);
            return !until(j);
          });
        }) {}
  ~Watcher() { Join(); }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  std::vector<Json> lines() {
    std::lock_guard lock(mu_);
    return lines_;
  }
  const Status& status() const { return status_; }

 private:
  std::mutex mu_;
  std::vector<Json> lines_;
  Status status_;
  std::thread thread_;
};

bool IsAdded(const Json& line, const std::string& name) {
  return line.value("type", "") == "ADDED" && line["object"]["metadata"].value("name", "") == name;
}

// Issue 17, point 8: a change between the list and the watch was lost.
TEST_F(HeadHardeningTest, WatchFromAListsVersionDeliversAChangeMadeInTheGapExactlyOnce) {
  StartHead();
  Apply(PriorityClass("before"));
  const Json list = Get("/api/v1/priorityclasses");
  const std::string version = list["metadata"].value("resourceVersion", "");
  ASSERT_FALSE(version.empty()) << list.dump();
  ASSERT_EQ(list["items"].size(), 1u);

  Apply(PriorityClass("gap"));  // after the list, before the watch

  Watcher watch(ClientOptions(head_->admin_token()),
                "/api/v1/priorityclasses?watch=true&resourceVersion=" + version,
                [](const Json& l) { return IsAdded(l, "after"); });
  ASSERT_TRUE(WaitUntil([&] {
    for (const Json& l : watch.lines())
      if (IsAdded(l, "gap")) return true;
    return false;
  }));
  Apply(PriorityClass("after"));
  watch.Join();
  ASSERT_TRUE(watch.status().ok()) << watch.status().ToString();
  const std::vector<Json> lines = watch.lines();
  ASSERT_EQ(lines.size(), 2u) << "only the two changes after the list: " << Json(lines).dump();
  EXPECT_TRUE(IsAdded(lines[0], "gap"));
  EXPECT_TRUE(IsAdded(lines[1], "after"));
  const uint64_t listed = std::stoull(version);
  const uint64_t gap = std::stoull(lines[0].value("resourceVersion", "0"));
  const uint64_t after = std::stoull(lines[1].value("resourceVersion", "0"));
  EXPECT_LT(listed, gap);
  EXPECT_LT(gap, after);
  // A later list is at least as new as every change it shows.
  EXPECT_GE(std::stoull(Get("/api/v1/priorityclasses")["metadata"].value("resourceVersion", "0")),
            after);
}

TEST_F(HeadHardeningTest, WatchWithoutAVersionMissesNothingAndRepeatsNothingUnderWrites) {
  StartHead();
  constexpr int kObjects = 150;
  const std::string last = "p" + std::to_string(kObjects - 1);
  std::thread writer([&] {
    for (int i = 0; i < kObjects; ++i) Apply(PriorityClass("p" + std::to_string(i)));
  });
  // Watches start while the writer runs; each must see every object exactly once.
  std::vector<std::unique_ptr<Watcher>> watches;
  for (int i = 0; i < 8; ++i) {
    watches.push_back(std::make_unique<Watcher>(ClientOptions(head_->admin_token()),
                                                "/api/v1/priorityclasses?watch=true",
                                                [&](const Json& l) { return IsAdded(l, last); }));
    std::this_thread::sleep_for(std::chrono::milliseconds(5 * i));
  }
  writer.join();
  for (auto& w : watches) {
    w->Join();
    ASSERT_TRUE(w->status().ok()) << w->status().ToString();
    std::map<std::string, int> added;
    uint64_t previous = 0;
    for (const Json& l : w->lines()) {
      ASSERT_EQ(l.value("type", ""), "ADDED") << l.dump();
      ++added[l["object"]["metadata"].value("name", "")];
      const uint64_t v = std::stoull(l.value("resourceVersion", "0"));
      EXPECT_GE(v, previous) << "versions never go back";
      previous = v;
    }
    EXPECT_EQ(added.size(), static_cast<size_t>(kObjects));
    for (const auto& [name, n] : added) EXPECT_EQ(n, 1) << name << " arrived " << n << " times";
  }
}

TEST_F(HeadHardeningTest, AVersionTooOldOrNotAVersionIsRefused) {
  HeadOptions options;
  options.watch_history = 8;
  StartHead(options);
  const std::string version = Get("/api/v1/priorityclasses")["metadata"]["resourceVersion"];
  for (int i = 0; i < 20; ++i) Apply(PriorityClass("q" + std::to_string(i)));

  net::Response gone =
      Call(Method::kGet, "/api/v1/priorityclasses?watch=true&resourceVersion=" + version);
  EXPECT_EQ(gone.status, 410) << gone.body;
  EXPECT_NE(gone.body.find("list again"), std::string::npos) << gone.body;
  EXPECT_EQ(Json::parse(gone.body, nullptr, false).value("field", ""), "resourceVersion");
  const std::string hosts = Get("/api/v1/hosts")["metadata"]["resourceVersion"];
  EXPECT_GE(std::stoull(hosts), std::stoull(version) + 20) << "every change counts";

  // From the future, or from an earlier run of the head (below this run's first version).
  EXPECT_EQ(Call(Method::kGet, "/api/v1/priorityclasses?watch=true&resourceVersion=" +
                                   std::to_string(std::stoull(hosts) + 1))
                .status,
            410);
  EXPECT_EQ(Call(Method::kGet, "/api/v1/priorityclasses?watch=true&resourceVersion=5").status, 410);
  for (const char* bad : {"abc", "-1", "1x", ""}) {
    net::Response r =
        Call(Method::kGet, std::string("/api/v1/jobs?watch=true&resourceVersion=") + bad);
    EXPECT_EQ(r.status, 400) << bad << ": " << r.body;
    EXPECT_EQ(Json::parse(r.body, nullptr, false).value("field", ""), "resourceVersion");
  }
}

// Two heads on one machine seed their port pickers on their own (and say so in head.json), so
// their workers are not handed the same ports (controller/ports.cc); a given seed is used as is.
TEST(HeadPortSeed, EachStartHasItsOwnUnlessOneIsGiven) {
  TempDir dirs[3];
  std::vector<std::unique_ptr<Head>> heads;
  for (int i = 0; i < 3; ++i) {
    HeadOptions options;
    options.state_dir = dirs[i].path() + "/state";
    if (i == 2) options.port_seed = 42;
    heads.push_back(std::make_unique<Head>(options));
    ASSERT_TRUE(heads.back()->Start().ok());
    std::ifstream in(options.state_dir + "/head.json");
    const Json written = Json::parse(in, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(written.is_object());
    EXPECT_EQ(written.value("portSeed", uint64_t{0}), heads.back()->port_seed());
  }
  EXPECT_NE(heads[0]->port_seed(), heads[1]->port_seed());
  EXPECT_EQ(heads[2]->port_seed(), 42u);
  for (auto& head : heads) head->Stop();
}

}  // namespace
}  // namespace tessera::api
