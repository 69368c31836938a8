// The pure part of `tessera up --netns` (netns.cc runs it): the names and addresses of one
// cluster's network namespaces, the iproute2 commands that make and remove them, the hosts file
// each namespace sees, and the record `up` keeps in <state-dir>/netns.json so that `down`, or a
// later `up`, removes everything it made. No I/O: cli_core_test.
//
// One cluster owns one id in 0..511 and, with it, the /24 198.(18 + id / 256).(id % 256).0 of
// 198.18.0.0/15 (RFC 2544's benchmarking range, routed nowhere), the bridge `tsbr<id>` holding
// .1 for the root namespace (the CLI and the router reach the hosts through it), and one
// namespace `tessera-<id>-<n>` per member: n = 0 the head at .2, n >= 1 the agents from .3 on,
// each joined to the bridge by the veth `tsv<id>-<n>` (its far end is `eth0` in the namespace).
// Nothing gets a default route, so nothing leaves the machine.
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"

namespace tessera::cli {

inline constexpr int kNetnsIds = 512;        // /24s in 198.18.0.0/15
inline constexpr int kNetnsMaxAgents = 252;  // .3 to .254

struct NetnsMember {
  std::string name;     // "head", or the agent's host name
  std::string ns;       // tessera-<id>-<n>
  std::string veth;     // tsv<id>-<n>, the root namespace's end
  std::string address;  // 198.18.x.y
};

struct NetnsPlan {
  int id = 0;
  std::string bridge;          // tsbr<id>
  std::string bridge_address;  // .1 of the /24
  std::string owner;           // the state directory: the bridge's alias says "tessera <owner>"
  std::vector<NetnsMember> members;  // [0] the head, then the agents in the order given

  const NetnsMember* Find(const std::string& name) const;
};

// The plan of cluster `id` for `agents` (their host names). InvalidArgument when the id is out of
// 0..511 or there are more than kNetnsMaxAgents agents (the message says how many fit).
Result<NetnsPlan> PlanNetns(int id, const std::string& owner,
                            const std::vector<std::string>& agents);

// The alias `up` gives its bridge; a leftover is "provably ours" when its bridge carries it.
std::string NetnsBridgeAlias(const std::string& owner);

// Whether `id` is free as far as this machine shows: no link of that bridge's name, and no IPv4
// address of the root namespace in that /24 (another user of 198.18.0.0/15). `up` still claims
// the id by creating the bridge, which fails when a concurrent `up` made it first.
bool NetnsIdLooksFree(int id, const std::set<std::string>& links,
                      const std::vector<std::string>& ipv4_addresses);
// The order `up` tries ids in: from a hash of the owner on, so two state directories rarely race
// for the same id.
std::vector<int> NetnsIdOrder(const std::string& owner);

// `ip` argument lists, run in order. BridgeCommands: create the claimed bridge's address, alias
// and state (the bridge itself is made first, alone, to claim the id). MemberCommands: one
// namespace, its veth, its address, lo and eth0 up.
std::vector<std::vector<std::string>> NetnsBridgeCommands(const NetnsPlan& plan);
std::vector<std::vector<std::string>> NetnsMemberCommands(const NetnsPlan& plan,
                                                          const NetnsMember& m);

// /etc/netns/<ns>/hosts for member `m` (`ip netns exec` shows it as /etc/hosts): every member's
// name at its address, and this machine's `hostname` at m's own, so a library that binds to the
// address its host name resolves to (gloo does) binds to the namespace's address.
std::string NetnsHostsFile(const NetnsPlan& plan, const NetnsMember& m,
                           const std::string& hostname);

// netns.json, and back. ParseNetnsRecord refuses a record whose names or addresses are not the
// ones PlanNetns gives for its id (a hand-edited or foreign file is never acted on).
nlohmann::json NetnsRecord(const NetnsPlan& plan);
Result<NetnsPlan> ParseNetnsRecord(const nlohmann::json& record);

}  // namespace tessera::cli
