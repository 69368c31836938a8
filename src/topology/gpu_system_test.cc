#include "topology/gpu_system.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

TEST(GpuSystem, NamesRoundTripInAnyCase) {
  for (GpuSystem s : AllGpuSystems()) {
    auto parsed = ParseGpuSystem(GpuSystemName(s));
    ASSERT_TRUE(parsed.ok()) << GpuSystemName(s) << ": " << parsed.status().ToString();
    EXPECT_EQ(*parsed, s);
  }
  EXPECT_EQ(*ParseGpuSystem("GB200-NVL72"), GpuSystem::kGb200Nvl72);
  EXPECT_EQ(*ParseGpuSystem("H100"), GpuSystem::kH100);
}

TEST(GpuSystem, Facts) {
  EXPECT_EQ(Info(GpuSystem::kH100).gpus_per_host, 8);
  EXPECT_EQ(Info(GpuSystem::kH100).hosts_per_domain, 1);
  EXPECT_EQ(Info(GpuSystem::kH200).gpus_per_domain(), 8);
  EXPECT_EQ(Info(GpuSystem::kGb200Nvl72).gpus_per_host, 4);
  EXPECT_EQ(Info(GpuSystem::kGb200Nvl72).hosts_per_domain, 18);
  EXPECT_EQ(Info(GpuSystem::kGb200Nvl72).gpus_per_domain(), 72);
}

TEST(GpuSystem, UnknownNamesListTheValidOnes) {
  for (std::string_view bad : {"", "a100", "gb200", "h100 ", "nvl72", "v6e"}) {
    auto parsed = ParseGpuSystem(bad);
    ASSERT_FALSE(parsed.ok()) << "'" << bad << "' parsed";
    const std::string& m = parsed.status().message();
    EXPECT_EQ(m.rfind("gpu: ", 0), 0u) << m;
    EXPECT_NE(m.find("h100, h200, gb200-nvl72"), std::string::npos) << m;
  }
}

TEST(GpuSystem, HostsForGpusRoundsUpToWholeHosts) {
  EXPECT_EQ(*HostsForGpus(GpuSystem::kH100, 1), 1);
  EXPECT_EQ(*HostsForGpus(GpuSystem::kH100, 8), 1);
  EXPECT_EQ(*HostsForGpus(GpuSystem::kH100, 9), 2);
  EXPECT_EQ(*HostsForGpus(GpuSystem::kGb200Nvl72, 64), 16);
  EXPECT_EQ(*HostsForGpus(GpuSystem::kGb200Nvl72, 72), 18);
  EXPECT_EQ(*HostsForGpus(GpuSystem::kGb200Nvl72, 73), 19);
  auto zero = HostsForGpus(GpuSystem::kH100, 0);
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("gpus: 0 must be at least 1"), std::string::npos);
}

}  // namespace
}  // namespace tessera
