#include "cli/gpu_up_plan.h"

#include <gtest/gtest.h>

#include "agent/nvidia_smi.h"
#include "codec/manifest.h"
#include "placement/gpu_domains.h"

namespace tessera::cli {
namespace {

// What the head makes of the hosts: their nvidia-smi output parsed by the agent's parser, then
// formed into domains.
std::vector<GpuHostDomain> Domains(const std::vector<GpuUpHost>& hosts) {
  std::vector<GpuHostFacts> facts;
  for (const GpuUpHost& h : hosts) {
    auto gpus = agent::ParseNvidiaSmiXml(h.nvidia_smi);
    EXPECT_TRUE(gpus.ok()) << h.name << ": " << gpus.status().ToString();
    GpuHostFacts f{h.name, {}, ""};
    if (!gpus.ok()) continue;
    for (const protocol::DiscoveredGpu& g : *gpus) {
      GpuFacts gf{g.uuid, g.memory_mib, g.fabric.has_value(), "", "", "", ""};
      if (g.fabric) {
        gf.cluster_uuid = g.fabric->cluster_uuid;
        gf.clique_id = g.fabric->clique_id;
        gf.state = g.fabric->state;
        gf.status = g.fabric->status;
      }
      f.gpus.push_back(gf);
    }
    facts.push_back(f);
  }
  return FormGpuDomains(facts);
}

TEST(GpuUp, Gb200DomainsAreCliquesOfTrays) {
  auto hosts = GpuUpHosts({"gb200-nvl72", 2, 3, 0});
  ASSERT_TRUE(hosts.ok()) << hosts.status().ToString();
  ASSERT_EQ(hosts->size(), 6u);
  EXPECT_EQ((*hosts)[0].name, "nvl72-00-t00");
  EXPECT_EQ((*hosts)[5].name, "nvl72-01-t02");
  EXPECT_EQ((*hosts)[0].topology, "2x2");
  auto d = Domains(*hosts);
  ASSERT_EQ(d.size(), 6u);
  for (int i = 0; i < 6; ++i) {
    EXPECT_TRUE(d[i].system == GpuSystem::kGb200Nvl72) << d[i].system.has_value();
    EXPECT_TRUE(d[i].clique && d[i].nvlink_ready) << d[i].reason;
    EXPECT_EQ(d[i].domain, d[i / 3 * 3].domain);
  }
  EXPECT_NE(d[0].domain, d[3].domain);
  // Every GPU uuid is distinct across the cluster.
  std::set<std::string> uuids;
  for (const auto& h : *hosts) {
    auto gpus = agent::ParseNvidiaSmiXml(h.nvidia_smi);
    ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
    for (const protocol::DiscoveredGpu& g : *gpus) uuids.insert(g.uuid);
  }
  EXPECT_EQ(uuids.size(), 24u);
  EXPECT_EQ(GpuUpHosts({"gb200-nvl72", 1, 0, 0})->size(), 18u);  // a whole rack by default
}

TEST(GpuUp, HgxHostsAreTheirOwnDomains) {
  auto hosts = GpuUpHosts({"h200", 0, 0, 3});
  ASSERT_TRUE(hosts.ok()) << hosts.status().ToString();
  ASSERT_EQ(hosts->size(), 3u);
  EXPECT_EQ((*hosts)[2].name, "hgx-02");
  EXPECT_EQ((*hosts)[0].topology, "2x4");
  auto d = Domains(*hosts);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_TRUE(d[0].system == GpuSystem::kH200)
      << d[0].system.has_value();  // by memory: the agent's label is not needed
  EXPECT_EQ(d[1].domain, "host/hgx-01");
  EXPECT_TRUE(d[1].nvlink_ready);
}

TEST(GpuUp, WrongFlagsNameTheFlag) {
  const std::pair<GpuUpSpec, std::string> bad[] = {
      {{"a100", 1, 0, 0}, "--gpu: "},
      {{"gb200-nvl72", 0, 0, 0}, "--domains: "},
      {{"gb200-nvl72", 9, 0, 0}, "--domains: "},
      {{"gb200-nvl72", 1, 19, 0}, "--trays: "},
      {{"gb200-nvl72", 1, 0, 4}, "--hosts: "},
      {{"h100", 0, 0, 0}, "--hosts: "},
      {{"h100", 2, 0, 2}, "--domains: "},
  };
  for (const auto& [spec, field] : bad) {
    auto r = GpuUpHosts(spec);
    ASSERT_FALSE(r.ok()) << field;
    EXPECT_EQ(r.status().message().rfind(field, 0), 0u) << r.status().message();
  }
}

TEST(GpuUp, TheDemoJobParses) {
  for (const GpuUpSpec& spec : {GpuUpSpec{"gb200-nvl72", 2, 0, 0},
                                GpuUpSpec{"gb200-nvl72", 2, 1, 0}, GpuUpSpec{"h100", 0, 0, 2}}) {
    auto doc = codec::ParseDocument(GpuDemoJobYaml(spec));
    ASSERT_TRUE(doc.ok()) << doc.status().ToString();
    auto job = codec::ParseTrainJob(*doc);
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    ASSERT_TRUE(job->gpu.has_value());
    EXPECT_EQ(job->gpu->hosts, 2);
    EXPECT_EQ(job->gpu->rule.rule, spec.trays == 1 || spec.system == "h100"
                                       ? DomainRule::kPreferred
                                       : DomainRule::kRequired);
  }
}

}  // namespace
}  // namespace tessera::cli
