// UsageSampler: CPU and memory of the worker processes on this host, read from /proc.
//
// A worker is its whole process group, so Sample() sums every process whose group id is one
// of the given ones (children and grandchildren of the worker included). CPU is the share of
// one core used since the previous sample (200 = two busy cores); memory is resident bytes.
//
// Thread-safety: none; one owner calls Sample().
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <set>

#include "protocol/wire.h"

namespace tessera::agent {

using protocol::Usage;

class UsageSampler {
 public:
  Usage Sample(const std::set<pid_t>& process_groups);

 private:
  bool has_previous_ = false;
  uint64_t previous_ticks_ = 0;
  std::chrono::steady_clock::time_point previous_time_;
};

}  // namespace tessera::agent
