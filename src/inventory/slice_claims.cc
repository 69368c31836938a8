#include "inventory/slice_claims.h"

#include <algorithm>
#include <map>
#include <set>

namespace tessera {
namespace {

// ResolveAccelerator's messages start with the field it read; the claim's fields are named
// as the registration names them.
std::string ClaimField(const std::string& message) {
  for (const auto& [from, to] :
       {std::pair<std::string, std::string>{"accelerator: ", "discovered.acceleratorType: "},
        {"topology: ", "discovered.topology: "}})
    if (message.rfind(from, 0) == 0) return to + message.substr(from.size());
  return "discovered.acceleratorType: " + message;
}

std::string Claimed(const SliceClaim& c) {
  return c.accelerator_type + " " + c.topology + " worker " + std::to_string(c.worker);
}

std::string JoinInts(const std::vector<int>& v) {
  std::string out;
  for (int i : v) out += (out.empty() ? "" : ", ") + std::to_string(i);
  return out;
}

}  // namespace

Result<SliceTopology> ResolveClaim(const SliceClaim& claim) {
  auto topo = ResolveAccelerator(claim.accelerator_type, claim.topology);
  if (!topo.ok()) return InvalidArgument(ClaimField(topo.status().message()));
  return topo;
}

Status ValidateClaim(const HostSpec& host, const SliceClaim& claim) {
  auto topo = ResolveClaim(claim);
  if (!topo.ok()) return topo.status();
  if (topo->generation() != host.generation)
    return InvalidArgument("discovered.acceleratorType: '" + claim.accelerator_type + "' is " +
                           std::string(GenerationName(topo->generation())) +
                           " but the host registers as " +
                           std::string(GenerationName(host.generation)));
  if (claim.slice.empty()) return InvalidArgument("discovered.sliceName: required");
  if (!host.slice) return Status::Ok();
  if (host.slice->name != claim.slice)
    return InvalidArgument("discovered.sliceName: '" + claim.slice + "' but slice.name is '" +
                           host.slice->name + "'");
  auto shape = ParseShape(host.slice->topology);
  if (!shape.ok() || *shape != topo->shape())
    return InvalidArgument("discovered.topology: '" + claim.topology + "' but slice.topology is '" +
                           host.slice->topology + "'");
  if (host.slice->worker != claim.worker)
    return InvalidArgument("discovered.workerId: " + std::to_string(claim.worker) +
                           " but slice.worker is " + std::to_string(host.slice->worker));
  return Status::Ok();
}

Result<ClaimVerdict> CheckSliceClaim(const std::string& host, const SliceClaim& claim,
                                     const std::vector<ClaimHolder>& others) {
  auto topo = ResolveClaim(claim);
  if (!topo.ok()) return topo.status();
  if (claim.worker < 0 || claim.worker >= topo->hosts())
    return InvalidArgument("discovered.workerId: " + std::to_string(claim.worker) + " but " +
                           claim.accelerator_type + " " + topo->shape().ToString() + " has " +
                           std::to_string(topo->hosts()) + " hosts (workers 0.." +
                           std::to_string(topo->hosts() - 1) + ")");
  const auto mine = ParseAccelerator(claim.accelerator_type);
  ClaimVerdict verdict;
  for (const ClaimHolder& other : others) {
    if (other.host == host || other.claim.slice != claim.slice) continue;
    auto theirs = ResolveClaim(other.claim);
    if (!theirs.ok()) continue;  // stored by an older head; the roster shows it as unknown
    const auto their_type = ParseAccelerator(other.claim.accelerator_type);
    const bool type_differs = theirs->generation() != topo->generation() ||
                              (mine.ok() && their_type.ok() && mine->chips > 0 &&
                               their_type->chips > 0 && mine->chips != their_type->chips);
    const std::string both = "host " + host + " claims " + Claimed(claim) + " of slice " +
                             claim.slice + ", but host " + other.host + " of that slice claims " +
                             Claimed(other.claim);
    if (type_differs)
      return FailedPrecondition("discovered.acceleratorType: " + both +
                                "; the hosts of one slice must agree (is one of them in another "
                                "slice of the same name?)");
    if (theirs->shape() != topo->shape())
      return FailedPrecondition("discovered.topology: " + both +
                                "; the hosts of one slice must agree");
    if (other.claim.worker != claim.worker) continue;
    if (!other.lost)
      return AlreadyExists("discovered.workerId: host " + host + " claims worker " +
                           std::to_string(claim.worker) + " of slice " + claim.slice +
                           ", which live host " + other.host +
                           " holds; stop one of the two agents, or if " + other.host +
                           " was replaced, delete it (`tessera delete host " + other.host + "`)");
    if (verdict.replaces.empty()) verdict.replaces = other.host;
  }
  return verdict;
}

std::vector<SliceRoster> SliceRosters(const std::vector<ClaimHolder>& holders) {
  std::map<std::string, std::vector<const ClaimHolder*>> by_slice;
  for (const ClaimHolder& h : holders) by_slice[h.claim.slice].push_back(&h);
  std::vector<SliceRoster> out;
  for (const auto& [name, members] : by_slice) {
    SliceRoster r;
    r.slice = name;
    r.accelerator_type = members.front()->claim.accelerator_type;
    r.topology = members.front()->claim.topology;
    if (auto topo = ResolveClaim(members.front()->claim); topo.ok()) r.workers = topo->hosts();
    std::set<int> live, lost;
    for (const ClaimHolder* m : members) (m->lost ? lost : live).insert(m->claim.worker);
    for (int w = 0; w < r.workers; ++w) {
      if (live.count(w)) continue;
      (lost.count(w) ? r.lost : r.missing).push_back(w);
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::string RosterGaps(const SliceRoster& r) {
  if (r.workers == 0) return "topology " + r.topology + " is not one of " + r.accelerator_type;
  std::string out;
  if (!r.missing.empty())
    out = "worker" + std::string(r.missing.size() > 1 ? "s " : " ") + JoinInts(r.missing) +
          " missing";
  if (!r.lost.empty())
    out += (out.empty() ? "" : "; ") + std::string("worker") + (r.lost.size() > 1 ? "s " : " ") +
           JoinInts(r.lost) + " lost";
  return out;
}

}  // namespace tessera
