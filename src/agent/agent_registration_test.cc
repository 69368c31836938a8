// Joining the head: registration (retried, refused, redone for an unknown host), the
// normalised host name, and the flags of `tessera agent` (MakeAgentSetup, RunAgent).
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "agent/agent.h"
#include "agent/test_util.h"
#include "net/http_client.h"
#include "protocol/credential.h"

namespace tessera::agent {
namespace {

using nlohmann::json;
using testing::FakeHead;
using testing::Options;
using testing::SdkDir;
using testing::SliceDevices;
using testing::TempDir;
using testing::WaitUntil;

TEST(AgentTest, RegistersOnceTheHeadAppearsWithDevicesAndLabels) {
  TempDir dir;
  // Reserve a port, free it, and start the agent against it before the head is up.
  uint16_t port;
  {
    FakeHead probe;
    port = probe.port();
  }
  Agent agent(Options(dir, port), SliceDevices());
  ASSERT_TRUE(agent.Start().ok());
  EXPECT_FALSE(agent.registered());
  FakeHead head(port);
  ASSERT_TRUE(WaitUntil([&] { return agent.registered(); }));
  json r = head.registrations().at(0);
  EXPECT_EQ(r["name"], "host-1");
  EXPECT_EQ(r["generation"], "v6e");
  EXPECT_EQ(r["chips"], 4);
  EXPECT_EQ(r["address"], "127.0.0.1");
  EXPECT_EQ(r["agentPort"], agent.port());
  EXPECT_EQ(r["slice"], (json{{"name", "slice-000"}, {"topology", "4x4"}, {"worker", 1}}));
  EXPECT_FALSE(r.contains("cube"));
  EXPECT_EQ(r["labels"], (json{{"pool", "a"}}));
  // Worker 1 of a 4x4 slice holds chips x in 2..3, y in 0..1.
  EXPECT_EQ(r["devices"], json::parse(R"([{"index":0,"coords":[2,0,0]},
      {"index":1,"coords":[3,0,0]},{"index":2,"coords":[2,1,0]},{"index":3,"coords":[3,1,0]}])"));
  ASSERT_TRUE(WaitUntil([&] { return head.heartbeat_count() >= 3; }));
  EXPECT_EQ(head.heartbeats().back()["workers"], json::array());
}

TEST(AgentTest, AnUnknownHostReregisters) {
  TempDir dir;
  FakeHead head;
  Agent agent(Options(dir, head.port()), SliceDevices());
  ASSERT_TRUE(agent.Start().ok());
  ASSERT_TRUE(WaitUntil([&] { return head.heartbeat_count() >= 1; }));
  head.ForgetHost();
  ASSERT_TRUE(WaitUntil([&] { return head.registrations().size() == 2; }));
  size_t seen = head.heartbeat_count();
  ASSERT_TRUE(WaitUntil([&] { return head.heartbeat_count() > seen; }));
}

// A deleted host (its channel's heartbeats answered 404) whose registration is then refused
// as revoked waits for an admin to readmit it, as its refused heartbeats would: not fatal
// (test_host_certs.py, the revoked host registering again, found the agent ended here).
TEST(AgentTest, ARegistrationRefusedAsRevokedIsRetriedUntilTheHostIsReadmitted) {
  TempDir dir;
  FakeHead head(0, 50, /*channel=*/true);
  Agent agent(Options(dir, head.port()), SliceDevices());
  ASSERT_TRUE(agent.Start().ok());
  ASSERT_TRUE(WaitUntil([&] { return head.channel_connects() == 1; }));
  head.RefuseRegistrations(403,
                           "host 'host-1' is revoked (tessera delete host); its certificate is "
                           "refused until a cluster admin lifts the revocation");
  head.ForgetHost();
  ASSERT_TRUE(WaitUntil([&] { return head.registrations().size() >= 3; }))
      << "the agent did not retry a registration refused as revoked";
  EXPECT_TRUE(agent.fatal_error().ok()) << agent.fatal_error().ToString();
  head.RefuseRegistrations(0);  // readmitted
  const size_t seen = head.heartbeat_count();
  ASSERT_TRUE(WaitUntil([&] { return head.heartbeat_count() > seen + 2; }));
  EXPECT_TRUE(agent.fatal_error().ok()) << agent.fatal_error().ToString();
}

TEST(AgentTest, TheHostCredentialIsKeptOwnerOnlyAndSentWithEveryCallAndAfterARestart) {
  TempDir dir;
  FakeHead head;
  std::string first;
  {
    Agent agent(Options(dir, head.port()), SliceDevices());
    ASSERT_TRUE(agent.Start().ok());
    ASSERT_TRUE(WaitUntil([&] { return head.heartbeat_count() >= 2; }));
    first = agent.credential();
    EXPECT_TRUE(protocol::IsValidCredential(first));
    EXPECT_EQ(first.size(), 64u);  // 256 bits
    EXPECT_EQ(head.registrations().at(0)["credential"], first);
    ASSERT_TRUE(WaitUntil([&] { return head.credentials().count(first) == 1; }));
    const std::string path = dir.path() + "/state/credential";
    EXPECT_EQ(testing::ReadFile(path), first + "\n");
    const auto perms = std::filesystem::status(path).permissions();
    EXPECT_EQ(perms & std::filesystem::perms::all,
              std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  }
  // The same state directory, a new agent process: the same credential, so the head lets it
  // register the host again.
  Agent again(Options(dir, head.port()), SliceDevices());
  ASSERT_TRUE(again.Start().ok());
  ASSERT_TRUE(WaitUntil([&] { return head.registrations().size() == 2; }));
  EXPECT_EQ(again.credential(), first);
  EXPECT_EQ(head.registrations().at(1)["credential"], first);
  // Only that credential was ever sent (heartbeats, assignment watch).
  ASSERT_TRUE(WaitUntil([&] { return head.heartbeat_count() >= 4; }));
  EXPECT_EQ(head.credentials(), (std::set<std::string>{first}));

  // Another state directory is another host identity.
  TempDir other;
  Agent stranger(Options(other, head.port()), SliceDevices());
  ASSERT_TRUE(stranger.Start().ok());
  EXPECT_NE(stranger.credential(), first);

  // A damaged credential file stops the agent at start, saying what to do.
  TempDir broken;
  std::filesystem::create_directories(broken.path() + "/state");
  testing::AppendFile(broken.path() + "/state/credential", "not hex\n");
  Agent damaged(Options(broken, head.port()), SliceDevices());
  Status started = damaged.Start();
  EXPECT_EQ(started.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(started.message().find("tessera delete host host-1"), std::string::npos)
      << started.ToString();
}

TEST(AgentTest, AWrongJoinTokenIsFatalAndTheLogServerRequiresTheToken) {
  TempDir dir;
  FakeHead head;
  Agent agent(Options(dir, head.port(), "wrong-token"), SliceDevices());
  ASSERT_TRUE(agent.Start().ok());
  ASSERT_TRUE(WaitUntil([&] { return !agent.fatal_error().ok(); }));
  EXPECT_EQ(agent.fatal_error().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(agent.fatal_error().message().find("join token"), std::string::npos);
  EXPECT_FALSE(agent.registered());
  EXPECT_TRUE(head.registrations().empty());

  net::ClientOptions o;
  o.port = agent.port();
  net::HttpClient anonymous(o);
  auto response = anonymous.Request(net::Method::kGet, "/logs/a/1/0/0");
  ASSERT_TRUE(response.ok());
  EXPECT_EQ(response->status, 401);
}

TEST(AgentTest, ARegistrationTheHeadRefusesEndsTheAgentWithTheHeadsReasonNotARetry) {
  TempDir dir;
  FakeHead head;
  head.RefuseRegistrations(422, "slice.worker: worker 1 of slice-000 is already host host-0");
  AgentSetup setup;
  setup.options = Options(dir, head.port());
  setup.devices = SliceDevices();
  // RunAgent, as `tessera agent` runs it (a non-OK Status there is exit status 1), in a thread
  // of its own: it blocks SIGTERM in the thread that calls it.
  std::atomic<bool> returned{false};
  Status result;
  std::thread runner([&] {
    result = RunAgent(std::move(setup));
    returned = true;
  });
  const bool stopped = WaitUntil([&] { return returned.load(); });
  if (!stopped) ::pthread_kill(runner.native_handle(), SIGTERM);  // still retrying: end it
  runner.join();
  ASSERT_TRUE(stopped) << "the agent kept retrying a registration refused with HTTP 422";
  EXPECT_EQ(result.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(result.message().find("HTTP 422"), std::string::npos) << result.message();
  EXPECT_NE(result.message().find("slice.worker: worker 1 of slice-000 is already host host-0"),
            std::string::npos)
      << result.message();
  // RunAgent has returned, so the agent and its threads are gone: this count is final.
  EXPECT_EQ(head.registrations().size(), 1u);
}

TEST(AgentTest, BadRequestAndConflictAtRegistrationAreFatalToo) {
  for (int status : {400, 409}) {
    SCOPED_TRACE(status);
    TempDir dir;
    FakeHead head;
    head.RefuseRegistrations(status, "name: refused");
    Agent agent(Options(dir, head.port()), SliceDevices());
    ASSERT_TRUE(agent.Start().ok());
    ASSERT_TRUE(WaitUntil([&] { return !agent.fatal_error().ok(); }));
    agent.Shutdown();  // joins the threads: no registration can follow
    EXPECT_EQ(agent.fatal_error().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(agent.fatal_error().message().find("name: refused"), std::string::npos);
    EXPECT_FALSE(agent.registered());
    EXPECT_EQ(head.registrations().size(), 1u);
  }
}

TEST(AgentTest, ServerErrorsAtRegistrationAreRetriedUntilAccepted) {
  TempDir dir;
  FakeHead head;
  head.RefuseRegistrations(503, "store: unavailable");
  Agent agent(Options(dir, head.port()), SliceDevices());
  ASSERT_TRUE(agent.Start().ok());
  ASSERT_TRUE(WaitUntil([&] { return head.registrations().size() >= 3; }));
  EXPECT_TRUE(agent.fatal_error().ok());
  EXPECT_FALSE(agent.registered());
  head.RefuseRegistrations(0);
  ASSERT_TRUE(WaitUntil([&] { return agent.registered(); }));
  EXPECT_TRUE(agent.fatal_error().ok());
}

TEST(AgentTest, TheAgentUsesTheNormalisedNameTheHeadRegisters) {
  TempDir dir;
  FakeHead head;
  AgentOptions options = Options(dir, head.port());
  options.name = "Host-1.Example.COM";
  Agent agent(options, SliceDevices());
  ASSERT_TRUE(agent.Start().ok());
  ASSERT_TRUE(WaitUntil([&] { return head.heartbeat_count() >= 1 && head.watch_connects() >= 1; }));
  EXPECT_EQ(head.registrations().at(0)["name"], "host-1.example.com");
  EXPECT_EQ(head.names(), (std::set<std::string>{"host-1.example.com"}));
}

TEST(AgentTest, StartRefusesANameTheHeadWouldRefuse) {
  TempDir dir;
  FakeHead head;
  AgentOptions options = Options(dir, head.port());
  options.name = "host_1";
  Agent agent(options, SliceDevices());
  Status started = agent.Start();
  EXPECT_EQ(started.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(started.message().rfind("name: 'host_1' contains '_'", 0), 0u) << started.message();
  EXPECT_TRUE(head.registrations().empty());
}

// ----- flags -----

class FlagsTest : public ::testing::Test {
 protected:
  FlagsTest() {
    token_file_ = dir_.path() + "/token";
    testing::AppendFile(token_file_, "  secret\n");
    flags_.head = "http://127.0.0.1:7600";
    flags_.join_token_file = token_file_;
    flags_.name = "h0";
    flags_.state_dir = dir_.path() + "/s";
    flags_.generation = "v6e";
    flags_.slice = "slice-000";
    flags_.topology = "4x4";
    flags_.worker = "3";
    flags_.devices = "emulated";  // no discovery: agent_discovery_test covers it
  }
  // The message of the error MakeAgentSetup gives for `flags`, or "" when it accepts them.
  std::string Error(const AgentFlags& flags) {
    auto setup = MakeAgentSetup(flags);
    if (setup.ok()) return "";
    EXPECT_EQ(setup.status().code(), StatusCode::kInvalidArgument);
    return setup.status().message();
  }
  TempDir dir_;
  std::string token_file_;
  AgentFlags flags_;
};

TEST_F(FlagsTest, AValidSliceHost) {
  flags_.labels = {"zone=a", "tier=gold"};
  auto setup = MakeAgentSetup(flags_);
  ASSERT_TRUE(setup.ok()) << setup.status().ToString();
  EXPECT_EQ(setup->options.head_port, 7600);
  EXPECT_EQ(setup->options.join_token, "secret");
  EXPECT_EQ(setup->options.slice->worker, 3);
  EXPECT_EQ(setup->options.labels.at("tier"), "gold");
  auto devices = setup->devices->Discover();
  ASSERT_TRUE(devices.ok());
  EXPECT_EQ(devices->at(0).coords, (Coord{2, 2, 0}));
}

TEST_F(FlagsTest, TheNameIsNormalisedAsTheHeadWillRegisterIt) {
  AgentFlags f = flags_;
  f.name = "Node-1.Example.COM";
  f.state_dir = "";
  auto setup = MakeAgentSetup(f);
  ASSERT_TRUE(setup.ok()) << setup.status().ToString();
  EXPECT_EQ(setup->options.name, "node-1.example.com");
  EXPECT_EQ(std::filesystem::path(setup->options.state_dir).filename(), "agent-node-1.example.com");
  f.name = "node_1";
  EXPECT_EQ(Error(f).rfind("--name: 'node_1' contains '_'", 0), 0u) << Error(f);
  EXPECT_NE(Error(f).find("--name NAME"), std::string::npos) << Error(f);
}

TEST_F(FlagsTest, AValidCubeHost) {
  AgentFlags f = flags_;
  f.slice = f.topology = f.worker = "";
  f.generation = "7x";
  f.cube = "cube-000";
  f.block = "block-00";
  f.coord = "1,0,3";
  auto setup = MakeAgentSetup(f);
  ASSERT_TRUE(setup.ok()) << setup.status().ToString();
  auto devices = setup->devices->Discover();
  ASSERT_TRUE(devices.ok());
  ASSERT_EQ(devices->size(), 4u);
  EXPECT_EQ(devices->at(3).coords, (Coord{3, 1, 3}));
}

TEST_F(FlagsTest, EachErrorNamesItsFlag) {
  auto check = [&](AgentFlags f, const std::string& flag) {
    std::string error = Error(f);
    EXPECT_EQ(error.rfind(flag + ":", 0), 0u) << "want " << flag << ", got: " << error;
  };
  AgentFlags f = flags_;
  f.head = "127.0.0.1:7600";
  check(f, "--head");
  f = flags_;
  f.head = "http://127.0.0.1:99999";
  check(f, "--head");
  f = flags_;
  f.join_token_file = dir_.path() + "/missing";
  check(f, "--join-token-file");
  f = flags_;
  f.name = "a/b";
  check(f, "--name");
  f = flags_;
  f.port = "x";
  check(f, "--port");
  f = flags_;
  f.generation = "v9";
  check(f, "--generation");
  f = flags_;
  f.topology = "3x3";
  check(f, "--topology");
  f = flags_;
  f.worker = "4";
  check(f, "--worker");
  f = flags_;
  f.chips = "8";
  check(f, "--chips");
  f = flags_;
  f.labels = {"novalue"};
  check(f, "--label");
  f = flags_;
  f.cube = "c";
  check(f, "--cube");
  f = flags_;
  f.slice = "";
  check(f, "--slice");
  f = flags_;
  f.slice = f.topology = f.worker = "";
  f.generation = "v4";
  f.cube = "c";
  f.block = "b";
  f.coord = "2,0,0";
  check(f, "--coord");
  f.coord = "1,1";
  check(f, "--coord");
  f = flags_;
  f.warm_preload = "torch";
  check(f, "--warm-preload");
  f.warm_python = dir_.path() + "/no-python";
  check(f, "--warm-python");
  f.warm_python = "/usr/bin/python3";
  f.warm_pool = "x";
  check(f, "--warm-pool");
  f.warm_pool = "1";
  f.warm_sdk_dir = dir_.path();
  check(f, "--warm-sdk-dir");
  f.warm_preload = "torch;rm";
  check(f, "--warm-preload");
  f.warm_preload = "torch";
  f.warm_sdk_dir = "";
  f.warm_refill_delay_ms = "-1";
  check(f, "--warm-refill-delay-ms");
}

TEST_F(FlagsTest, WarmPoolFlags) {
  AgentFlags f = flags_;
  auto setup = MakeAgentSetup(f);
  ASSERT_TRUE(setup.ok());
  EXPECT_EQ(setup->options.warm.python, "");  // off by default
  f.warm_python = "/usr/bin/python3";
  f.warm_preload = "torch,numpy";
  f.warm_pool = "2";
  f.warm_sdk_dir = SdkDir();
  f.warm_refill_delay_ms = "2500";
  setup = MakeAgentSetup(f);
  ASSERT_TRUE(setup.ok()) << setup.status().ToString();
  EXPECT_EQ(setup->options.warm.python, "/usr/bin/python3");
  EXPECT_EQ(setup->options.warm.preload, (std::vector<std::string>{"torch", "numpy"}));
  EXPECT_EQ(setup->options.warm.size, 2);
  EXPECT_EQ(setup->options.warm.refill_delay, std::chrono::milliseconds(2500));
  EXPECT_TRUE(std::filesystem::exists(setup->options.warm.sdk_dir + "/tessera/_warm.py"));
}

}  // namespace
}  // namespace tessera::agent
