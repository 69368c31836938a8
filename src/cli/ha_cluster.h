// `tessera up --ha`: a local HA control plane (docs/ha.md "A local HA cluster"): three etcd
// members, two or three heads on that etcd (each under a small supervisor that restarts it when
// it exits, as systemd would), and the agents given every head's address. On loopback ports, or
// under --netns each member in its own namespace at its own address (docs/netns.md).
// `tessera down` stops them; `tessera status` says who leads. cluster_command.cc calls these.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace tessera::cli {

struct HaUpFlags {
  bool ha = false;
  int heads = 3;     // --ha-heads: 2 or 3
  std::string etcd;  // --etcd: the etcd binary; "" = etcd on PATH
  int64_t election_lease_ms = 15'000;
  int64_t election_renew_ms = 10'000;
  int64_t election_retry_ms = 2'000;
  // Which of the above were given, for the conflicts check.
  bool heads_given = false, etcd_given = false, election_given = false;
  void Add(CLI::App* cmd);
};

// Refuses a conflicting combination with a message naming the flags: an --ha-only flag without
// --ha, --ha-heads outside 2..3, an election the heads would refuse, and under --ha an agent
// fence time (`fence_ms`; "" = `up` gives the agents the lease plus 5 s, up_plan.h) not
// longer than the election lease (agents would stop their training workers during every
// failover).
void CheckHaUpFlags(const HaUpFlags& flags, const std::string& fence_ms);

struct HaControlPlane {
  std::vector<std::string> head_urls;  // http://ADDRESS:PORT, one per head
  std::string leader_url;              // the one that leads once the plane is up
  nlohmann::json record;               // {"etcd": [pids], "heads": [pids], ...} for Down
};

// The names of the control plane's members, as `up --netns` plans a namespace for each: the
// heads "head", "head-1", "head-2" (the first is the plan's head) and the etcd members "etcd-0"
// to "etcd-2".
std::string HaHeadMember(int i);
std::string HaEtcdMember(int i);
// Every member but the first head, in the order --netns numbers them after it.
std::vector<std::string> HaExtraMembers(int heads);

// Where the members run. `address` gives a member's address ("127.0.0.1": every member on
// loopback, on ports found free; any other: the member's own, where the default ports are free:
// etcd 2379 and 2380, heads 8080). `spawn` starts a program as that member (in its namespace).
struct HaPlacement {
  std::function<std::string(const std::string& member)> address;
  std::function<pid_t(const std::string& member, const std::string& exe,
                      const std::vector<std::string>& args, const std::string& log)>
      spawn;
};

// Starts the etcd members and the heads under `dir` (logs in dir/logs, etcd data in dir/etcd,
// each head's state in dir/heads/N with one shared pair of tokens, copied to dir for the CLI),
// waits until the members are healthy and one head leads, and writes dir/head.json listing
// every head. `on_started` is told every process once it is started (cluster.json). Throws
// CommandError (after stopping what it started) naming the log to read.
// `head_flags` go to every head (--lease-ms ..., --backfill ...); each head gets --bind at its
// address.
HaControlPlane StartHaControlPlane(const HaUpFlags& flags, const std::string& exe,
                                   const std::string& dir,
                                   const std::vector<std::string>& head_flags,
                                   std::chrono::steady_clock::time_point deadline,
                                   const HaPlacement& placement,
                                   const std::function<void(const nlohmann::json&)>& on_started);

// Stops the heads, then the etcd members, of a record StartHaControlPlane returned. Returns how
// many processes were stopped.
int StopHaControlPlane(const nlohmann::json& record);

// `tessera status`: every head's role and term, who leads, and the etcd members' health.
void AddStatusCommand(CLI::App& app);

}  // namespace tessera::cli
