// Slice claims: what a host says of the fixed slice it belongs to (a provisioned TPU VM slice
// or GKE TPU node pool that its agent discovered, or a declared 2D slice), the head's checks of
// one claim against the others before it accepts the host, and each slice's roster (which
// worker ids have a host, which are missing or lost).
//
// A fixed slice is the provider's: tessera places a job on all of it or not at all, and it is
// placeable only when every worker id of its topology has a live host (SliceRoster::complete).
//
// Pure: values in, values or a Status out; no I/O. Thread-safety: stateless functions.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "inventory/host_spec.h"
#include "topology/topology.h"

namespace tessera {

// One host's claim. accelerator_type is what discovery read ("v5p-16", "v5litepod-16"); a
// declared 2D slice (an emulated host's --slice/--topology) claims its generation's name
// ("v6e") so both kinds are checked alike.
struct SliceClaim {
  std::string slice;             // the slice's name
  std::string accelerator_type;  // "v5p-16", or a generation name for a declared slice
  std::string topology;          // "2x2x2", "4x4"
  int worker = 0;                // TPU_WORKER_ID
  friend bool operator==(const SliceClaim&, const SliceClaim&) = default;
};

// A registered host and its claim.
struct ClaimHolder {
  std::string host;
  SliceClaim claim;
  bool lost = false;
};

// The slice a claim names: ResolveAccelerator(accelerator_type, topology). InvalidArgument
// "discovered.acceleratorType: ..." for a type tessera does not know, "discovered.topology:
// ..." for a shape the type does not have (v5p-16 is 2x2x2, not 2x2x4).
Result<SliceTopology> ResolveClaim(const SliceClaim& claim);

// Checks that a host's discovered claim agrees with the membership it registered (the agent
// derives one from the other; a registration that does not is refused): the generation, and
// for a 2D host its slice's name, topology and worker. InvalidArgument naming the field.
Status ValidateClaim(const HostSpec& host, const SliceClaim& claim);

// What accepting a claim does besides registering the host.
struct ClaimVerdict {
  // The Lost host of the slice whose worker id the newcomer takes ("" when none): a machine
  // that replaces a lost one (a recreated TPU VM keeps its worker number) takes its place.
  std::string replaces;
};

// Checks `claim` of `host` against the claims of the other registered hosts (`others` may
// include `host` itself, which is skipped: an agent registering again).
//  - InvalidArgument: the claim alone is wrong (ResolveClaim), or its worker is not in
//    0..hosts-1 ("discovered.workerId: ...").
//  - FailedPrecondition: another host of the slice claims another accelerator type or
//    topology; the message names the field, both claims and the other host.
//  - AlreadyExists: a live host of the slice holds the worker id; the message names both.
// A Lost holder of the worker id is not a conflict: the verdict says the newcomer replaces it.
Result<ClaimVerdict> CheckSliceClaim(const std::string& host, const SliceClaim& claim,
                                     const std::vector<ClaimHolder>& others);

// Who holds the workers of one slice.
struct SliceRoster {
  std::string slice;
  std::string accelerator_type;  // the first holder's, as written
  std::string topology;
  int workers = 0;           // hosts the topology has
  std::vector<int> missing;  // worker ids no registered host claims, ascending
  std::vector<int> lost;     // worker ids whose host is Lost, ascending
  bool complete() const { return workers > 0 && missing.empty() && lost.empty(); }
};

// One roster per slice named by `holders`, ascending by slice name. The shape is the first
// holder's (CheckSliceClaim keeps the holders of a slice in agreement). A slice whose claim does
// not resolve (only stored data from an older head could hold one) has workers = 0 and is never
// complete.
std::vector<SliceRoster> SliceRosters(const std::vector<ClaimHolder>& holders);

// "workers 1, 3 missing; worker 2 lost" (for get hosts and explain); "" when complete.
std::string RosterGaps(const SliceRoster& roster);

}  // namespace tessera
