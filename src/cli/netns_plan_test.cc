#include "cli/netns_plan.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace tessera::cli {
namespace {

TEST(PlanNetns, NamesAndAddressesCarryTheClusterId) {
  auto plan = PlanNetns(5, "/s", {"slice-000-w0", "slice-000-w1"});
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->bridge, "tsbr5");
  EXPECT_EQ(plan->bridge_address, "198.18.5.1");
  ASSERT_EQ(plan->members.size(), 3u);
  EXPECT_EQ(plan->members[0].name, "head");
  EXPECT_EQ(plan->members[0].ns, "tessera-5-0");
  EXPECT_EQ(plan->members[0].veth, "tsv5-0");
  EXPECT_EQ(plan->members[0].address, "198.18.5.2");
  EXPECT_EQ(plan->members[2].ns, "tessera-5-2");
  EXPECT_EQ(plan->members[2].address, "198.18.5.4");
  ASSERT_NE(plan->Find("slice-000-w1"), nullptr);
  EXPECT_EQ(plan->Find("slice-000-w1")->veth, "tsv5-2");
  EXPECT_EQ(plan->Find("nobody"), nullptr);
}

// Every id's names fit the kernel's 15-character interface names, and every address lies in
// 198.18.0.0/15, with no two ids sharing a /24, bridge or namespace.
TEST(PlanNetns, EveryIdStaysInsideTheBenchmarkingRangeAndApart) {
  std::vector<std::string> agents;
  for (int i = 0; i < kNetnsMaxAgents; ++i) agents.push_back("h" + std::to_string(i));
  std::set<std::string> bridges, subnets, namespaces;
  for (int id = 0; id < kNetnsIds; ++id) {
    auto plan = PlanNetns(id, "/s", agents);
    ASSERT_TRUE(plan.ok()) << id;
    EXPECT_LE(plan->bridge.size(), 15u);
    EXPECT_TRUE(bridges.insert(plan->bridge).second);
    const std::string& a = plan->bridge_address;
    EXPECT_TRUE(a.rfind("198.18.", 0) == 0 || a.rfind("198.19.", 0) == 0) << a;
    EXPECT_TRUE(subnets.insert(a.substr(0, a.rfind('.'))).second) << a;
    for (const NetnsMember& m : plan->members) {
      EXPECT_LE(m.veth.size(), 15u) << m.veth;
      EXPECT_TRUE(namespaces.insert(m.ns).second) << m.ns;
      EXPECT_EQ(m.address.substr(0, m.address.rfind('.')), a.substr(0, a.rfind('.')));
      const int last = std::stoi(m.address.substr(m.address.rfind('.') + 1));
      EXPECT_GE(last, 2);
      EXPECT_LE(last, 254);
    }
  }
}

TEST(PlanNetns, RefusesWhatDoesNotFit) {
  EXPECT_FALSE(PlanNetns(-1, "/s", {}).ok());
  EXPECT_FALSE(PlanNetns(kNetnsIds, "/s", {}).ok());
  auto big = PlanNetns(0, "/s", std::vector<std::string>(kNetnsMaxAgents + 1, "h"));
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("at most 252"), std::string::npos);
}

TEST(NetnsIds, AnIdIsTakenByItsBridgeOrByAnAddressInItsSubnet) {
  EXPECT_TRUE(NetnsIdLooksFree(7, {"lo", "eth0", "tsbr70"}, {"127.0.0.1", "198.18.70.1"}));
  EXPECT_FALSE(NetnsIdLooksFree(7, {"tsbr7"}, {}));
  EXPECT_FALSE(NetnsIdLooksFree(7, {}, {"198.18.7.200"}));
  EXPECT_FALSE(NetnsIdLooksFree(263, {}, {"198.19.7.1"}));
}

TEST(NetnsIds, TheOrderVisitsEveryIdOnceAndRepeats) {
  std::vector<int> order = NetnsIdOrder("/tmp/a/state");
  EXPECT_EQ(order, NetnsIdOrder("/tmp/a/state"));
  std::sort(order.begin(), order.end());
  for (int i = 0; i < kNetnsIds; ++i) EXPECT_EQ(order[i], i);
  EXPECT_NE(NetnsIdOrder("/tmp/a/state").front(), NetnsIdOrder("/tmp/b/state").front());
}

TEST(NetnsCommands, TheMemberGetsItsAddressOnItsOwnSideOfTheVeth) {
  auto plan = PlanNetns(3, "/s", {"w0"});
  ASSERT_TRUE(plan.ok());
  const auto cmds = NetnsMemberCommands(*plan, plan->members[1]);
  ASSERT_FALSE(cmds.empty());
  EXPECT_EQ(cmds[0], (std::vector<std::string>{"netns", "add", "tessera-3-1"}));
  const std::vector<std::string> addr = {"netns", "exec",          "tessera-3-1", "ip",  "addr",
                                         "add",   "198.18.3.3/24", "dev",         "eth0"};
  EXPECT_NE(std::find(cmds.begin(), cmds.end(), addr), cmds.end());
  // No default route anywhere: nothing leaves the machine.
  for (const auto& c : cmds) EXPECT_EQ(std::find(c.begin(), c.end(), "default"), c.end());
  const auto bridge = NetnsBridgeCommands(*plan);
  EXPECT_EQ(bridge[0],
            (std::vector<std::string>{"link", "set", "dev", "tsbr3", "alias", "tessera /s"}));
}

TEST(NetnsHostsFile, EveryMemberByNameAndThisMachineAtTheMembersOwnAddress) {
  auto plan = PlanNetns(9, "/s", {"w0", "w1"});
  ASSERT_TRUE(plan.ok());
  const std::string hosts = NetnsHostsFile(*plan, plan->members[2], "vm");
  EXPECT_NE(hosts.find("198.18.9.4 vm\n"), std::string::npos);
  EXPECT_NE(hosts.find("198.18.9.2 head\n"), std::string::npos);
  EXPECT_NE(hosts.find("198.18.9.3 w0\n"), std::string::npos);
  EXPECT_NE(hosts.find("198.18.9.4 w1\n"), std::string::npos);
  EXPECT_NE(hosts.find("127.0.0.1 localhost\n"), std::string::npos);
}

TEST(NetnsRecord, RoundTripsAndRefusesForeignOrEditedRecords) {
  auto plan = PlanNetns(11, "/state", {"w0", "w1"});
  ASSERT_TRUE(plan.ok());
  auto back = ParseNetnsRecord(NetnsRecord(*plan));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(NetnsRecord(*back), NetnsRecord(*plan));

  nlohmann::json edited = NetnsRecord(*plan);
  edited["members"][1]["ns"] = "someone-elses";
  EXPECT_FALSE(ParseNetnsRecord(edited).ok());
  edited = NetnsRecord(*plan);
  edited["bridge"] = "eth0";
  EXPECT_FALSE(ParseNetnsRecord(edited).ok());
  EXPECT_FALSE(ParseNetnsRecord(nlohmann::json::array()).ok());
  EXPECT_FALSE(ParseNetnsRecord({{"id", 1}}).ok());
}

}  // namespace
}  // namespace tessera::cli
