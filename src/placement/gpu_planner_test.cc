#include "placement/gpu_planner.h"

#include <gtest/gtest.h>

#include <set>

#include "common/rng.h"
#include "placement/gpu_naive_planner.h"

namespace tessera {
namespace {

GpuRequest GpuReq(int gpus, std::string_view rule = "required") {
  auto spec = ParseDomainRule(rule);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  return GpuRequest{gpus, spec.ok() ? *spec : DomainRuleSpec{}};
}

// Takes `count` whole hosts of domain `d` (lowest ids first) out of the fleet.
void GpuTakeHosts(GpuFleet& f, int d, int count) {
  for (GpuHostState& h : f.hosts) {
    if (count == 0) break;
    if (h.domain == d && h.free_gpus == f.gpus_per_host()) {
      h.free_gpus = 0;
      --count;
    }
  }
}

TEST(DomainRule, ParsesAndNamesTheField) {
  EXPECT_EQ(ParseDomainRule("required")->rule, DomainRule::kRequired);
  EXPECT_EQ(ParseDomainRule("preferred")->rule, DomainRule::kPreferred);
  auto seg = ParseDomainRule("segment:4");
  ASSERT_TRUE(seg.ok());
  EXPECT_EQ(seg->rule, DomainRule::kSegment);
  EXPECT_EQ(seg->segment_hosts, 4);
  EXPECT_EQ(seg->ToString(), "segment:4");
  for (std::string_view bad :
       {"", "Required", "segment", "segment:", "segment:0", "segment:x", "segment:4x", "block"}) {
    auto r = ParseDomainRule(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().message().rfind("domain: ", 0), 0u) << r.status().message();
    EXPECT_NE(r.status().message().find("required, preferred, segment:K"), std::string::npos);
  }
  EXPECT_FALSE(ParseGpuPolicy("best-fit").ok());
  EXPECT_EQ(*ParseGpuPolicy("slurm-block"), GpuPolicy::kSlurmBlock);
}

TEST(GpuPlanner, SmallJobsGoOnTheFullestHost) {
  GpuFleet f = GpuFleet::Make(GpuSystem::kH100, 4);
  f.hosts[2].free_gpus = 3;
  f.hosts[3].free_gpus = 5;
  auto p = PlanGpu(f, GpuReq(2), GpuPolicy::kTessera);
  ASSERT_TRUE(p.placed) << p.message;
  EXPECT_EQ(p.hosts, std::vector<int>{2});
  EXPECT_EQ(p.gpus_per_host, 2);
  EXPECT_EQ(PlanGpu(f, GpuReq(4), GpuPolicy::kTessera).hosts, std::vector<int>{3});
  EXPECT_EQ(PlanGpu(f, GpuReq(2), GpuPolicy::kFirstFit).hosts, std::vector<int>{0});
  f.hosts[0].free_gpus = f.hosts[1].free_gpus = 0;
  f.hosts[2].free_gpus = f.hosts[3].free_gpus = 1;
  auto none = PlanGpu(f, GpuReq(2), GpuPolicy::kTessera);
  EXPECT_FALSE(none.placed);
  EXPECT_EQ(none.reason, GpuNoFit::kNotEnoughHosts);
  EXPECT_NE(none.message.find("no host has 2 free GPUs"), std::string::npos) << none.message;
}

TEST(GpuPlanner, RequiredTakesTheBestFitDomainAndKeepsWholeDomainsFree) {
  GpuFleet f = GpuFleet::Make(GpuSystem::kGb200Nvl72, 3);
  GpuTakeHosts(f, 1, 10);                                // domain 1 has 8 free trays
  auto p = PlanGpu(f, GpuReq(32), GpuPolicy::kTessera);  // 8 trays
  ASSERT_TRUE(p.placed) << p.message;
  EXPECT_EQ(p.domains, std::vector<int>{1});
  EXPECT_EQ(p.hosts.size(), 8u);
  EXPECT_FALSE(p.spans());
  EXPECT_EQ(PlanGpu(f, GpuReq(32), GpuPolicy::kSlurmBlock).domains, std::vector<int>{1});
  // First fit is blind: it starts at domain 0.
  EXPECT_EQ(PlanGpu(f, GpuReq(32), GpuPolicy::kFirstFit).domains, std::vector<int>{0});
}

TEST(GpuPlanner, RequiredSkipsHostsWhoseFabricIsNotReadyAndSaysWhy) {
  GpuFleet f = GpuFleet::Make(GpuSystem::kGb200Nvl72, 1);
  f.hosts[5].nvlink_ready = false;
  f.hosts[6].nvlink_ready = false;
  auto p = PlanGpu(f, GpuReq(72), GpuPolicy::kTessera);
  EXPECT_FALSE(p.placed);
  EXPECT_EQ(p.not_ready_skipped, 2);
  EXPECT_NE(p.message.find("2 free hosts left out: their GPUs' NVLink fabric is not ready"),
            std::string::npos)
      << p.message;
  auto ok = PlanGpu(f, GpuReq(64), GpuPolicy::kTessera);
  ASSERT_TRUE(ok.placed) << ok.message;
  for (int h : ok.hosts) EXPECT_TRUE(f.hosts[h].nvlink_ready) << h;
  // Preferred may use them, after the ready ones.
  EXPECT_TRUE(PlanGpu(f, GpuReq(72, "preferred"), GpuPolicy::kTessera).placed);
}

TEST(GpuPlanner, RequiredLargerThanADomainNeverFits) {
  GpuFleet f = GpuFleet::Make(GpuSystem::kGb200Nvl72, 4);
  auto p = PlanGpu(f, GpuReq(76), GpuPolicy::kTessera);  // 19 trays
  EXPECT_FALSE(p.placed);
  EXPECT_EQ(p.reason, GpuNoFit::kNeverFits);
  EXPECT_NE(p.message.find("use domain: preferred or segment:K"), std::string::npos) << p.message;
  auto pref = PlanGpu(f, GpuReq(76, "preferred"), GpuPolicy::kTessera);
  ASSERT_TRUE(pref.placed) << pref.message;
  EXPECT_EQ(pref.domains.size(), 2u);
  EXPECT_EQ(pref.min_domains, 2);
}

TEST(GpuPlanner, PreferredSpillsOverTheFewestDomains) {
  GpuFleet f = GpuFleet::Make(GpuSystem::kGb200Nvl72, 4);
  GpuTakeHosts(f, 0, 12);  // 6 free
  GpuTakeHosts(f, 1, 8);   // 10 free
  GpuTakeHosts(f, 2, 14);  // 4 free
  GpuTakeHosts(f, 3, 15);  // 3 free
  auto p = PlanGpu(f, GpuReq(13 * 4, "preferred"), GpuPolicy::kTessera);
  ASSERT_TRUE(p.placed) << p.message;
  // 10 from domain 1, then the 3 left from the tightest domain that holds 3: domain 3.
  EXPECT_EQ(p.domains, (std::vector<int>{1, 3}));
  EXPECT_TRUE(p.spans());
  // Ranks run domain by domain.
  for (size_t i = 1; i < p.hosts.size(); ++i) {
    EXPECT_LE(f.hosts[p.hosts[i - 1]].domain, f.hosts[p.hosts[i]].domain);
  }
  auto req = PlanGpu(f, GpuReq(13 * 4, "required"), GpuPolicy::kTessera);
  EXPECT_FALSE(req.placed);
  EXPECT_EQ(req.reason, GpuNoFit::kNoDomainFits);
}

TEST(GpuPlanner, SegmentsStayInsideOneDomainEach) {
  GpuFleet f = GpuFleet::Make(GpuSystem::kGb200Nvl72, 3);
  GpuTakeHosts(f, 0, 11);  // 7 free: one segment of 4
  GpuTakeHosts(f, 1, 13);  // 5 free: one segment of 4
  GpuTakeHosts(f, 2, 15);  // 3 free: none
  auto p = PlanGpu(f, GpuReq(32, "segment:4"), GpuPolicy::kTessera);
  ASSERT_TRUE(p.placed) << p.message;
  ASSERT_EQ(p.hosts.size(), 8u);
  for (int s = 0; s < 2; ++s) {
    for (int i = 1; i < 4; ++i) {
      EXPECT_EQ(f.hosts[p.hosts[s * 4 + i]].domain, f.hosts[p.hosts[s * 4]].domain);
    }
  }
  EXPECT_FALSE(PlanGpu(f, GpuReq(48, "segment:4"), GpuPolicy::kTessera).placed);
  auto bad = PlanGpu(f, GpuReq(20, "segment:4"), GpuPolicy::kTessera);  // 5 hosts
  EXPECT_EQ(bad.reason, GpuNoFit::kInvalidRequest);
  EXPECT_NE(bad.message.find("does not divide the job's 5 hosts"), std::string::npos);
}

TEST(GpuPlanner, SlurmTakesTheSmallestBlockLevelThatFits) {
  GpuFleet f = GpuFleet::Make(GpuSystem::kGb200Nvl72, 4);
  GpuTakeHosts(f, 0, 10);  // 8
  GpuTakeHosts(f, 1, 10);  // 8
  GpuTakeHosts(f, 2, 6);   // 12
  GpuTakeHosts(f, 3, 6);   // 12
  // 14 trays: no domain; level 1 blocks {0,1} (16 free) and {2,3} (24): best fit {0,1}.
  auto s = PlanGpu(f, GpuReq(56, "preferred"), GpuPolicy::kSlurmBlock);
  ASSERT_TRUE(s.placed) << s.message;
  EXPECT_EQ(s.domains, (std::vector<int>{0, 1}));
  // Tessera spills over the roomiest domains: 12 + 2.
  auto t = PlanGpu(f, GpuReq(56, "preferred"), GpuPolicy::kTessera);
  ASSERT_TRUE(t.placed) << t.message;
  EXPECT_EQ(t.domains.size(), 2u);
  EXPECT_EQ(t.domains[0], 0);  // the 2 left go to the tightest domain that holds them
}

TEST(GpuPlanner, ApplyAndRelease) {
  GpuFleet f = GpuFleet::Make(GpuSystem::kH200, 2);
  auto p = PlanGpu(f, GpuReq(3), GpuPolicy::kTessera);
  ASSERT_TRUE(ApplyGpuPlacement(f, p).ok());
  EXPECT_EQ(f.hosts[p.hosts[0]].free_gpus, 5);
  ReleaseGpuPlacement(f, p);
  EXPECT_EQ(f.hosts[p.hosts[0]].free_gpus, 8);
  GpuPlacement none;
  EXPECT_FALSE(ApplyGpuPlacement(f, none).ok());
}

// Checks a plan against the rules, the fleet and the exhaustive model.
void GpuCheckPlan(const GpuFleet& f, const GpuRequest& r, GpuPolicy policy,
                  const std::vector<bool>& avoid, const GpuPlacement& p, uint64_t seed) {
  SCOPED_TRACE("seed " + std::to_string(seed) + " gpus " + std::to_string(r.gpus) + " rule " +
               r.rule.ToString() + " policy " + std::string(GpuPolicyName(policy)));
  const int g = f.gpus_per_host();
  const GpuNaiveAnswer naive = NaiveGpuFit(f, r, avoid);
  const int n = (r.gpus + g - 1) / g;
  if (policy == GpuPolicy::kFirstFit) {
    int open = 0;
    for (size_t h = 0; h < f.hosts.size(); ++h) {
      const bool ok = f.hosts[h].usable && (avoid.empty() || !avoid[h]);
      if (ok && (r.gpus < g ? f.hosts[h].free_gpus >= r.gpus : f.hosts[h].free_gpus == g)) ++open;
    }
    EXPECT_EQ(p.placed, r.gpus < g ? open > 0 : open >= n);
  } else {
    ASSERT_EQ(p.placed, naive.fits) << p.message;
  }
  if (!p.placed) {
    EXPECT_FALSE(p.message.empty());
    return;
  }
  ASSERT_EQ(static_cast<int>(p.hosts.size()), r.gpus < g ? 1 : n);
  std::set<int> seen;
  for (size_t i = 0; i < p.hosts.size(); ++i) {
    const int h = p.hosts[i];
    EXPECT_TRUE(seen.insert(h).second) << "host " << h << " twice";
    EXPECT_TRUE(f.hosts[h].usable);
    if (!avoid.empty()) {
      EXPECT_FALSE(avoid[h]) << "avoided host " << h;
    }
    EXPECT_GE(f.hosts[h].free_gpus, p.gpus_per_host);
    if (i > 0) {
      const int a = p.hosts[i - 1];
      EXPECT_TRUE(f.hosts[a].domain < f.hosts[h].domain ||
                  (f.hosts[a].domain == f.hosts[h].domain && a < h))
          << "ranks not ordered by domain and host";
    }
  }
  if (policy == GpuPolicy::kFirstFit) return;
  if (r.gpus < g) {
    if (policy == GpuPolicy::kTessera) {
      EXPECT_EQ(f.hosts[p.hosts[0]].free_gpus, naive.best_fit_room);
    }
    return;
  }
  if (r.rule.rule != DomainRule::kPreferred) {
    for (int h : p.hosts) EXPECT_TRUE(f.hosts[h].nvlink_ready) << "host " << h;
  }
  if (r.rule.rule == DomainRule::kRequired) {
    EXPECT_EQ(p.domains.size(), 1u);
  }
  if (r.rule.rule == DomainRule::kSegment) {
    const int k = r.rule.segment_hosts;
    for (size_t s = 0; s < p.hosts.size(); s += k) {
      for (int i = 1; i < k; ++i) {
        EXPECT_EQ(f.hosts[p.hosts[s + i]].domain, f.hosts[p.hosts[s]].domain) << "segment split";
      }
    }
  }
  if (naive.best_fit_room >= 0) {
    // One domain holds it: both domain-aware policies use one, the best fit.
    ASSERT_EQ(p.domains.size(), 1u);
  }
  if (policy == GpuPolicy::kTessera) {
    EXPECT_EQ(static_cast<int>(p.domains.size()), naive.fewest_domains);
  }
}

// Random fleets under random take/release/health steps; every plan of every policy checked
// against the rules and the exhaustive model.
TEST(GpuPlannerProperty, AgreesWithTheNaiveModel) {
  const std::vector<std::string_view> rules = {"required",  "preferred", "segment:1",
                                               "segment:2", "segment:3", "segment:4"};
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    Rng rng(seed);
    const GpuSystem sys = seed % 3 == 0 ? GpuSystem::kH100 : GpuSystem::kGb200Nvl72;
    const int domains = sys == GpuSystem::kH100 ? 2 + static_cast<int>(rng.Uniform(10))
                                                : 1 + static_cast<int>(rng.Uniform(6));
    GpuFleet f = GpuFleet::Make(sys, domains);
    const int g = f.gpus_per_host();
    for (int step = 0; step < 80; ++step) {
      // Change the fleet: take or free GPUs, flip health or fabric readiness.
      for (int k = 0; k < 3; ++k) {
        GpuHostState& h = f.hosts[rng.Uniform(f.hosts.size())];
        switch (rng.Uniform(5)) {
          case 0:
            h.free_gpus = 0;
            break;
          case 1:
            h.free_gpus = g;
            break;
          case 2:
            h.free_gpus = static_cast<int>(rng.Uniform(g + 1));
            break;
          case 3:
            h.usable = rng.Uniform(8) != 0;
            break;
          default:
            h.nvlink_ready = rng.Uniform(6) != 0;
            break;
        }
      }
      std::vector<bool> avoid;
      if (rng.Uniform(3) == 0) {
        avoid.assign(f.hosts.size(), false);
        for (size_t h = 0; h < f.hosts.size(); ++h) avoid[h] = rng.Uniform(5) == 0;
      }
      const int max_hosts = std::min<int>(static_cast<int>(f.hosts.size()), 40);
      const int gpus = rng.Uniform(3) == 0 ? 1 + static_cast<int>(rng.Uniform(g))
                                           : g * (1 + static_cast<int>(rng.Uniform(max_hosts)));
      GpuRequest r = GpuReq(gpus, rules[rng.Uniform(rules.size())]);
      if (r.rule.rule == DomainRule::kSegment && ((gpus + g - 1) / g) % r.rule.segment_hosts != 0) {
        r.rule = DomainRuleSpec{DomainRule::kPreferred, 0};
      }
      for (GpuPolicy pol : {GpuPolicy::kTessera, GpuPolicy::kSlurmBlock, GpuPolicy::kFirstFit}) {
        const GpuPlacement p = PlanGpu(f, r, pol, avoid);
        GpuCheckPlan(f, r, pol, avoid, p, seed);
        EXPECT_EQ(PlanGpu(f, r, pol, avoid).hosts, p.hosts) << "same input, same plan";
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

}  // namespace
}  // namespace tessera
