#include "placement/gpu_domains.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

GpuFacts Tray(const std::string& uuid, const std::string& clique,
              const std::string& state = "Completed", const std::string& status = "Success") {
  return GpuFacts{uuid, 189471, true, "cluster-a", clique, state, status};
}

GpuHostFacts TrayHost(const std::string& name, const std::string& clique) {
  GpuHostFacts h{name, {}, ""};
  for (int i = 0; i < 4; ++i) h.gpus.push_back(Tray(name + "-gpu" + std::to_string(i), clique));
  return h;
}

GpuHostFacts HgxHost(const std::string& name, int64_t memory_mib) {
  GpuHostFacts h{name, {}, ""};
  for (int i = 0; i < 8; ++i)
    h.gpus.push_back(
        GpuFacts{name + "-gpu" + std::to_string(i), memory_mib, false, "", "", "", ""});
  return h;
}

TEST(GpuDomains, HostsOfOneCliqueFormOneDomain) {
  auto d = FormGpuDomains({TrayHost("t1", "1"), TrayHost("t0", "1"), TrayHost("t2", "2"),
                           GpuHostFacts{"cpu-only", {}, ""}});
  ASSERT_EQ(d.size(), 3u);  // the host without GPUs has no domain
  EXPECT_EQ(d[0].domain, "cluster-a/1");
  EXPECT_EQ(d[1].domain, "cluster-a/1");
  EXPECT_EQ(d[2].domain, "cluster-a/2");
  for (const auto& h : d) {
    EXPECT_TRUE(h.clique && h.nvlink_ready) << h.host;
    EXPECT_TRUE(h.system == GpuSystem::kGb200Nvl72) << h.host;
    EXPECT_EQ(h.reason, "");
  }
}

TEST(GpuDomains, SameCliqueIdOnAnotherClusterIsAnotherDomain) {
  GpuHostFacts other = TrayHost("t9", "1");
  for (auto& g : other.gpus) g.cluster_uuid = "cluster-b";
  auto d = FormGpuDomains({TrayHost("t0", "1"), other});
  EXPECT_NE(d[0].domain, d[1].domain);
}

TEST(GpuDomains, DisagreeingGpusMakeASingleHostDomainAndSayWhy) {
  GpuHostFacts h = TrayHost("t3", "1");
  h.gpus[2].clique_id = "7";
  auto d = FormGpuDomains({h});
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].domain, "host/t3");
  EXPECT_FALSE(d[0].clique);
  EXPECT_FALSE(d[0].nvlink_ready);
  EXPECT_NE(d[0].reason.find("disagree on the NVLink clique"), std::string::npos) << d[0].reason;
  EXPECT_NE(d[0].reason.find("t3-gpu2 cluster-a/7"), std::string::npos) << d[0].reason;
}

TEST(GpuDomains, AGpuNotFabricAttachedMakesASingleHostDomainAndSaysWhy) {
  GpuHostFacts progress = TrayHost("t4", "1");
  progress.gpus[1].state = "In Progress";
  GpuHostFacts failed = TrayHost("t5", "1");
  failed.gpus[0].status = "Failure";
  GpuHostFacts missing = TrayHost("t6", "1");
  missing.gpus[3].has_fabric = false;
  auto d = FormGpuDomains({progress, failed, missing});
  ASSERT_EQ(d.size(), 3u);
  for (const auto& h : d) {
    EXPECT_EQ(h.domain, "host/" + h.host);
    EXPECT_FALSE(h.nvlink_ready) << h.host;
  }
  EXPECT_NE(d[0].reason.find("t4-gpu1 is not NVLink-attached (fabric state 'In Progress'"),
            std::string::npos)
      << d[0].reason;
  EXPECT_NE(d[1].reason.find("status 'Failure'"), std::string::npos) << d[1].reason;
  EXPECT_NE(d[2].reason.find("t6-gpu3 is not NVLink-attached (fabric N/A)"), std::string::npos)
      << d[2].reason;
}

TEST(GpuDomains, HgxHostsAreTheirOwnReadyDomainAndTheSystemFollowsMemoryOrLabel) {
  GpuHostFacts labelled = HgxHost("h2", 81559);
  labelled.system_label = "H200";
  GpuHostFacts odd = HgxHost("odd", 81559);
  odd.gpus.resize(2);
  GpuHostFacts bad_label = HgxHost("bad", 81559);
  bad_label.system_label = "a100";
  auto d = FormGpuDomains({HgxHost("h0", 81559), HgxHost("h1", 143771), labelled, odd, bad_label});
  ASSERT_EQ(d.size(), 5u);
  EXPECT_TRUE(d[0].system == GpuSystem::kH100) << d[0].system.has_value();
  EXPECT_TRUE(d[1].system == GpuSystem::kH200) << d[1].system.has_value();
  EXPECT_TRUE(d[2].system == GpuSystem::kH200) << d[2].system.has_value();
  EXPECT_EQ(d[0].domain, "host/h0");
  EXPECT_TRUE(d[0].nvlink_ready);
  EXPECT_EQ(d[0].reason, "");
  EXPECT_FALSE(d[3].system.has_value());
  EXPECT_NE(d[3].reason.find("2 GPUs match no GPU system"), std::string::npos) << d[3].reason;
  EXPECT_FALSE(d[4].system.has_value());
  EXPECT_NE(d[4].reason.find("'a100' is not a GPU system; valid: h100, h200, gb200-nvl72"),
            std::string::npos)
      << d[4].reason;
}

TEST(GpuDomains, TheFleetViewOrdersDomainsThenHostsByNameAndPlansInOneClique) {
  GpuHostFacts broken = TrayHost("a-broken", "1");
  broken.gpus[0].state = "In Progress";
  auto d = FormGpuDomains({TrayHost("t1", "2"), TrayHost("t0", "2"), TrayHost("s1", "1"),
                           TrayHost("s0", "1"), broken, HgxHost("h0", 81559)});
  std::vector<GpuHostUse> use(d.size(), GpuHostUse{4, true});
  use[2].free_gpus = 0;  // s1 is taken
  GpuFleetView v = MakeGpuFleetView(GpuSystem::kGb200Nvl72, d, use);
  EXPECT_EQ(v.domain_names,
            (std::vector<std::string>{"cluster-a/1", "cluster-a/2", "host/a-broken"}));
  EXPECT_EQ(v.host_names, (std::vector<std::string>{"s0", "s1", "t0", "t1", "a-broken"}));
  ASSERT_EQ(v.fleet.hosts.size(), 5u);
  EXPECT_EQ(v.fleet.hosts[1].free_gpus, 0);
  EXPECT_FALSE(v.fleet.hosts[4].nvlink_ready);
  // Two trays in one clique: only clique 2 has two free trays; the broken tray is never used.
  GpuPlacement p = PlanGpu(v.fleet, {8, {DomainRule::kRequired, 0}}, GpuPolicy::kTessera);
  ASSERT_TRUE(p.placed) << p.message;
  EXPECT_EQ(v.host_names[p.hosts[0]], "t0");
  EXPECT_EQ(v.host_names[p.hosts[1]], "t1");
  GpuPlacement three = PlanGpu(v.fleet, {12, {DomainRule::kRequired, 0}}, GpuPolicy::kTessera);
  EXPECT_FALSE(three.placed);
}

}  // namespace
}  // namespace tessera
