// `tessera plan`: fill a pod with a stream of slice requests until nothing fits, once per
// placement policy on the same stream, and compare what each could allocate.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "placement/saturation.h"

namespace tessera::cli {
namespace {

struct PlanFlags {
  std::string generation = "7x";
  int blocks = 9;
  int cubes_per_block = 16;
  std::string fleet;  // 2D: "4x4:16,8x8:4" = 16 slices of 4x4 and 4 of 8x8
  std::string mix = "2x2x2:4,2x2x4:3,2x4x4:2,4x4x4:2,4x4x8:1";
  std::string policies = "first-fit,tightest-fit,tessera";
  uint64_t seed = 1;
  double churn = 0.4;
  int down_hosts = 0;  // hosts marked down (chosen by the seed) before the run
  std::string output = "text";
};

std::vector<std::string> SplitKeepingEmpty(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    out.push_back(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

Inventory BuildInventory(const PlanFlags& f, Generation g) {
  if (Info(g).rank == 3) {
    auto inv = Inventory::MakePod({g, f.blocks, f.cubes_per_block});
    if (!inv.ok()) throw CommandError(inv.status().message());
    return *inv;
  }
  if (f.fleet.empty())
    throw CommandError(
        "--fleet: a 2D generation needs its fixed slices, e.g. --fleet 4x4:16,8x8:4");
  auto counted = ParseShapeMix(g, f.fleet);
  if (!counted.ok()) throw CommandError("--fleet: " + counted.status().message());
  FleetSpec spec{g, {}};
  for (const auto& [shape, count] : *counted)
    for (int i = 0; i < static_cast<int>(count); ++i) spec.slices.push_back(shape);
  auto inv = Inventory::MakeFleet(spec);
  if (!inv.ok()) throw CommandError("--fleet: " + inv.status().message());
  return *inv;
}

void Run(const PlanFlags& f) {
  auto g = ParseGeneration(f.generation);
  if (!g.ok()) throw CommandError("--generation: " + g.status().message());
  auto mix = ParseShapeMix(*g, f.mix);
  if (!mix.ok()) throw CommandError("--mix: " + mix.status().message());
  if (!(f.churn >= 0 && f.churn < 1)) throw CommandError("--churn: must be in [0, 1)");
  std::vector<PlannerOptions> policies;
  for (const std::string& name : SplitKeepingEmpty(f.policies)) {
    auto p = PlannerOptions::Named(name);
    if (!p.ok()) throw CommandError("--policies: " + p.status().message());
    p->mix = *mix;
    policies.push_back(*p);
  }
  Inventory inv = BuildInventory(f, *g);
  if (f.down_hosts < 0 || f.down_hosts > static_cast<int>(inv.hosts().size()))
    throw CommandError("--down-hosts: must be between 0 and the " +
                       std::to_string(inv.hosts().size()) + " hosts of the cluster");
  Rng down_rng(f.seed ^ 0x5EEDD0A11ull);
  for (int marked = 0; marked < f.down_hosts;) {
    const HostId h(static_cast<uint32_t>(down_rng.Uniform(inv.hosts().size())));
    if (inv.host(h).health == Health::kDown) continue;
    if (Status s = inv.SetHealth(h, Health::kDown); !s.ok()) throw CommandError(s.message());
    ++marked;
  }

  std::vector<SaturationResult> results;
  for (const auto& p : policies)
    results.push_back(RunToSaturation(SlicePlanner(p), inv, {f.seed, f.churn, 1'000'000}));

  if (f.output == "json") {
    nlohmann::json j = {{"generation", GenerationName(*g)},
                        {"totalChips", inv.total_chips()},
                        {"seed", f.seed},
                        {"churn", f.churn},
                        {"downHosts", f.down_hosts},
                        {"mix", f.mix},
                        {"policies", nlohmann::json::array()}};
    if (inv.is_3d()) j["cubes"] = inv.cubes().size();
    for (const auto& r : results)
      j["policies"].push_back({{"policy", r.policy},
                               {"requests", r.requests},
                               {"placed", r.placed},
                               {"rejected", r.rejected},
                               {"firstRejectedShape", r.failed_shape},
                               {"allocatedAtFirstRejection", r.first_failure_chips},
                               {"departed", r.departed},
                               {"allocatedChips", r.allocated_chips},
                               {"utilization", double(r.allocated_chips) / double(r.total_chips)},
                               {"fragmentation", r.fragmentation},
                               {"largestFree", r.largest_free},
                               {"saturated", r.saturated}});
    std::cout << j.dump(2) << "\n";
    return;
  }
  std::printf("tessera plan: %s, %lld chips", std::string(GenerationName(*g)).c_str(),
              static_cast<long long>(inv.total_chips()));
  if (inv.is_3d())
    std::printf(" in %zu cubes (%d blocks of %d)", inv.cubes().size(), f.blocks, f.cubes_per_block);
  std::printf(
      "\nmix %s, churn %.2f, %d hosts down, seed %llu: the same request stream for every "
      "policy\n\n",
      f.mix.c_str(), f.churn, f.down_hosts, static_cast<unsigned long long>(f.seed));
  std::printf("%-14s %7s %8s %17s %17s %14s  %s\n", "policy", "placed", "rejected",
              "first rejection", "saturation", "fragmentation", "largest free box at saturation");
  for (const auto& r : results) {
    const double total = static_cast<double>(r.total_chips);
    std::printf("%-14s %7lld %8lld %9lld %6.1f%% %9lld %6.1f%% %14.3f  %s%s\n", r.policy.c_str(),
                static_cast<long long>(r.placed), static_cast<long long>(r.rejected),
                static_cast<long long>(r.first_failure_chips),
                100.0 * static_cast<double>(r.first_failure_chips) / total,
                static_cast<long long>(r.allocated_chips),
                100.0 * static_cast<double>(r.allocated_chips) / total, r.fragmentation,
                r.largest_free.c_str(), r.saturated ? "" : " (not saturated)");
  }
  std::printf(
      "\nrejected: requests turned away because no free box of their shape existed;\n"
      "fragmentation: free chips no shape of the mix can use, weighted by the mix "
      "(docs/placement.md).\n");
}

}  // namespace

void AddPlanCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "plan", "Fill a pod with requests from a shape mix until nothing fits, per placement policy");
  auto f = std::make_shared<PlanFlags>();
  cmd->add_option("--generation", f->generation, "accelerator generation")->capture_default_str();
  cmd->add_option("--blocks", f->blocks, "3D: optical-switch blocks in the pod")
      ->capture_default_str();
  cmd->add_option("--cubes-per-block", f->cubes_per_block, "3D: 4x4x4 cubes per block")
      ->capture_default_str();
  cmd->add_option("--fleet", f->fleet, "2D: fixed slices as shape:count,...");
  cmd->add_option("--mix", f->mix, "request shapes as shape:weight,...")->capture_default_str();
  cmd->add_option("--policies", f->policies, "first-fit, tightest-fit, tessera")
      ->capture_default_str();
  cmd->add_option("--seed", f->seed, "random seed for the request stream")->capture_default_str();
  cmd->add_option("--churn", f->churn, "chance of a departure before each arrival")
      ->capture_default_str();
  cmd->add_option("--down-hosts", f->down_hosts, "hosts marked down before the run")
      ->capture_default_str();
  cmd->add_option("-o,--output", f->output, "text or json")->check(CLI::IsMember({"text", "json"}));
  cmd->callback([f] { Run(*f); });
}

}  // namespace tessera::cli
