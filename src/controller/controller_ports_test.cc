// The ports the controller hands to workers (ports.cc), through its public API on two v6e 4x4
// slices whose hosts share 127.0.0.1, as a local cluster's do: heads seeded differently hand out
// different ports (the head seeds each start on its own, api/head.cc); a port the probe says is
// taken on the machine is never handed out; the live workloads of one head never share a port,
// even in a crowded range; a probe that says everything is taken still lets a job start.
#include <gtest/gtest.h>

#include <set>
#include <utility>

#include "controller/controller_test_util.h"

namespace tessera::controller {
namespace {

class PortsTest : public ControllerTest {
 protected:
  // A fresh store and a controller with `options` on it, with the two slices registered.
  void StartWith(ControllerOptions options) {
    store_ = OpenMemoryStore();
    ASSERT_NE(store_, nullptr);
    c_ = std::make_unique<Controller>(*store_, clock_, std::move(options));
    ASSERT_TRUE(c_->Load().ok());
    RegisterTwoSlices();
  }
  // The master port of a new one-slice job (it starts at once on the idle cluster).
  int StartJob(const std::string& name) {
    Ok(c_->CreateJob(JobDoc(name, 1)));
    EXPECT_EQ(Phase(name), "Starting");
    return Ok(c_->GetJob(name))["status"]["masterPort"].get<int>();
  }
  static ControllerOptions Seeded(uint64_t seed) {
    ControllerOptions o;
    o.seed = seed;
    return o;
  }
};

TEST_F(PortsTest, HeadsWithTheirOwnSeedsHandOutDifferentPorts) {
  StartWith(Seeded(1));
  const int first = StartJob("a");
  StartWith(Seeded(1));
  EXPECT_EQ(StartJob("a"), first);  // one seed, one sequence: why each head needs its own
  StartWith(Seeded(0x9e3779b97f4a7c15ull));
  const int other = StartJob("a");
  EXPECT_NE(other, first);
  EXPECT_NE(other + 1, first);  // nor the JAX ports
  EXPECT_NE(other, first + 1);
  for (int port : {first, other}) {
    EXPECT_GE(port, 20000);
    EXPECT_LT(port + 1, 20000 + 12768);
  }
}

TEST_F(PortsTest, APortTakenOnTheMachineIsNeverHandedOut) {
  StartWith(Seeded(1));
  const int unprobed = StartJob("a");
  // Another cluster's worker holds the port seed 1 would give as the JAX port.
  ControllerOptions o = Seeded(1);
  std::set<std::pair<std::string, int>> asked;
  o.port_taken = [&asked, unprobed](const std::string& address, int port) {
    asked.insert({address, port});
    return port == unprobed + 1;
  };
  StartWith(o);
  const int port = StartJob("a");
  EXPECT_NE(port, unprobed + 1);
  EXPECT_NE(port + 1, unprobed + 1);
  EXPECT_TRUE(asked.count({"127.0.0.1", unprobed + 1}));  // probed where worker 0 listens
  EXPECT_TRUE(asked.count({"127.0.0.1", port}));
  EXPECT_TRUE(asked.count({"127.0.0.1", port + 1}));
}

TEST_F(PortsTest, LiveJobsOfOneHeadNeverShareAPortInACrowdedRange) {
  // Five ports: two jobs' (MASTER_PORT, JAX port) pairs fit only if the second avoids the first.
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    ControllerOptions o = Seeded(seed);
    o.port_range_size = 5;
    StartWith(o);
    const int a = StartJob("a");
    const int b = StartJob("b");
    const std::set<int> ports = {a, a + 1, b, b + 1};
    EXPECT_EQ(ports.size(), 4u) << "seed " << seed << ": " << a << ", " << b;
    EXPECT_GE(*ports.begin(), 20000);
    EXPECT_LT(*ports.rbegin(), 20005);
  }
}

TEST_F(PortsTest, AProbeThatSaysEverythingIsTakenStillLetsAJobStart) {
  ControllerOptions o = Seeded(1);
  int probes = 0;
  o.port_taken = [&probes](const std::string&, int) {
    ++probes;
    return true;
  };
  StartWith(o);
  const int port = StartJob("a");
  EXPECT_GE(port, 20000);
  EXPECT_LT(port + 1, 20000 + 12768);
  EXPECT_GT(probes, 0);
}

}  // namespace
}  // namespace tessera::controller
