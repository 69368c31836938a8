// FenceMemory: what an agent's fencing has seen, kept across a restart of the agent
// (docs/ha.md "Fencing"). The highest head term and the newest attempt per workload uid are
// written to <state_dir>/fence/seen whenever either grows, before anything of the snapshot that
// raised them is applied, so a restarted agent still refuses a deposed head's snapshot or an
// older attempt instead of accepting any term until it hears one.
//
// The file is text, replaced whole (a temporary file, fsync, rename, fsync of the directory):
//
//   tessera-agent-fence 1
//   term 42
//   attempt 17 3        (uid attempt; one line per uid)
//
// Thread-safety: free functions; the agent calls them under its mutex.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "common/status.h"

namespace tessera::agent {

struct FenceMemory {
  uint64_t term = 0;
  std::map<uint64_t, int> newest_attempt;  // by workload uid
  friend bool operator==(const FenceMemory&, const FenceMemory&) = default;
};

// Writes `memory` to `path` atomically. Unavailable naming the path when it cannot.
Status SaveFenceMemory(const std::string& path, const FenceMemory& memory);

// Reads `path`; an empty FenceMemory when it does not exist (a new agent). InvalidArgument
// naming the path, the line and the fix when the file is not one SaveFenceMemory wrote;
// Unavailable when it cannot be read.
Result<FenceMemory> LoadFenceMemory(const std::string& path);

}  // namespace tessera::agent
