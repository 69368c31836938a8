// `tessera up --netns` on this machine (docs/netns.md): makes the network namespaces, veths and
// bridge that netns_plan.h plans, through iproute2's `ip`, records them in <state-dir>/netns.json
// before making them, and removes them again. Used by cluster_command.cc from one thread.
#pragma once

#include <string>
#include <vector>

#include "cli/netns_plan.h"

namespace tessera::cli {

// Why --netns cannot work here ("" = it can): not root, or no `ip` on PATH or in /usr/sbin,
// /sbin. The text names the fix.
std::string NetnsUnsupportedReason();

// Makes the namespaces of a cluster whose state is in `dir` and whose agents are `agents`:
// removes the leftovers `dir`'s netns.json proves are its own first (RemoveNetns), claims a free
// id, records the plan, then makes the bridge and one namespace per member, each with its hosts
// file. Throws CommandError naming the failing `ip` command; what it made by then is removed.
NetnsPlan MakeNetns(const std::string& dir, const std::vector<std::string>& agents);

// Removes what `dir`'s netns.json records: each namespace, veth and hosts file, then the bridge,
// but only while the bridge carries `dir`'s alias (else the id is someone else's by now and the
// record is dropped untouched). Returns how many namespaces it removed; prints what it could not
// remove (the record is kept then, for the next try). No record: 0.
int RemoveNetns(const std::string& dir, bool quiet);

// argv for running `args` inside member `ns`: {ip, "netns", "exec", ns, args...}.
std::vector<std::string> InNetns(const std::string& ns, const std::vector<std::string>& args);

}  // namespace tessera::cli
