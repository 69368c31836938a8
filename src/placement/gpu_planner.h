// The GPU domain planner: where a GPU job goes among NVLink domains (cliques).
//
// A fleet is a list of hosts, each in one NVLink domain (the hosts whose GPUs report one
// `cliqueId`; on HGX H100/H200 each host is its own domain). A request asks for `gpus` GPUs:
// fewer than a host holds go on one host beside other jobs; otherwise whole hosts
// (ceil(gpus / gpus_per_host)) under a domain rule:
//   required   all hosts in one domain; only hosts whose GPUs are all NVLink-attached;
//   preferred  one domain if any has room, else the fewest domains (hosts not NVLink-attached
//              are used, after the attached ones);
//   segment K  groups of K hosts, each group inside one domain (Slurm's --segment, Kueue's
//              slice size), NVLink-attached hosts only; groups may share a domain.
// Three policies share these rules:
//   kTessera     best fit: the domain with the least room that fits (whole domains stay free
//                for big jobs); a spill takes the roomiest domains and best-fits the last one;
//                a small job goes on the fullest host that fits.
//   kSlurmBlock  Slurm topology/block: the smallest block level (2^L consecutive domains) with
//                one block that fits, then best fit among blocks of that level; a small job
//                goes in the fullest domain that has a host for it, then the fullest host there.
//   kFirstFit    topology-blind: the lowest host ids that fit, domains ignored (rules too:
//                the baseline that shows what ignoring cliques costs).
// "Does not fit" is an answer with a reason (GpuNoFit), not a Status. Ties break by id, so the
// same fleet and request always give the same plan.
//
// Pure: no I/O, clocks or threads. Thread-safety: stateless functions of their arguments.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "topology/gpu_system.h"

namespace tessera {

enum class DomainRule { kRequired, kPreferred, kSegment };
std::string_view DomainRuleName(DomainRule r);  // "required", "preferred", "segment"

// What a rule says in a manifest or a flag: "required", "preferred", "segment:4".
struct DomainRuleSpec {
  DomainRule rule = DomainRule::kRequired;
  int segment_hosts = 0;  // kSegment only: hosts per segment (>= 1)
  std::string ToString() const;
};
// Errors name the field (`domain`) and list the valid forms.
Result<DomainRuleSpec> ParseDomainRule(std::string_view text);

enum class GpuPolicy { kTessera, kSlurmBlock, kFirstFit };
std::string_view GpuPolicyName(GpuPolicy p);  // "tessera", "slurm-block", "first-fit"
Result<GpuPolicy> ParseGpuPolicy(std::string_view text);

struct GpuHostState {
  int domain = 0;            // index of its NVLink domain, 0 .. domains-1
  int free_gpus = 0;         // 0 .. gpus_per_host; a whole-host job needs them all
  bool usable = true;        // healthy and not held back (false: never chosen)
  bool nvlink_ready = true;  // every GPU's fabric Completed/Success (discovery)
};

struct GpuFleet {
  GpuSystem system = GpuSystem::kH100;
  int domains = 0;
  std::vector<GpuHostState> hosts;  // host id = index

  // `domains` domains of the system's hosts_per_domain hosts each, all free and ready; host ids
  // ascend domain by domain.
  static GpuFleet Make(GpuSystem system, int domains);
  int gpus_per_host() const { return Info(system).gpus_per_host; }
};

struct GpuRequest {
  int gpus = 1;
  DomainRuleSpec rule;
};

enum class GpuNoFit {
  kNone,
  kInvalidRequest,  // gpus < 1, segment not dividing the hosts, bad host state
  kNeverFits,       // the fleet is too small (or no domain is big enough) even when empty
  kNotEnoughHosts,  // not enough free hosts (or GPUs on one host) anywhere
  kNoDomainFits,    // enough free hosts, but no domain (or segment layout) holds them
};
std::string_view GpuNoFitName(GpuNoFit r);

struct GpuPlacement {
  bool placed = false;
  GpuNoFit reason = GpuNoFit::kNone;
  std::string message;        // the numbers behind the reason; empty when placed
  std::vector<int> hosts;     // ordered by domain, then id: rank order (segments consecutive)
  int gpus_per_host = 0;      // GPUs taken on each host (all of them for whole hosts)
  std::vector<int> domains;   // distinct domains used, ascending
  int min_domains = 1;        // the fewest domains this size could use in an empty fleet
  int not_ready_skipped = 0;  // free hosts left out because their fabric is not ready
  bool spans() const { return static_cast<int>(domains.size()) > min_domains; }
};

// Plans `request` on `fleet` with `policy`. `avoid` (empty, or one flag per host) marks hosts the
// plan must not use beside the unusable ones (tessera's hosts held for a waiting job).
GpuPlacement PlanGpu(const GpuFleet& fleet, const GpuRequest& request, GpuPolicy policy,
                     const std::vector<bool>& avoid = {});

// Takes the placement's GPUs from the fleet. FailedPrecondition when it did not place or a host
// lacks the GPUs.
Status ApplyGpuPlacement(GpuFleet& fleet, const GpuPlacement& placement);
// Gives them back (the caller passes a placement it applied).
void ReleaseGpuPlacement(GpuFleet& fleet, const GpuPlacement& placement);

}  // namespace tessera
