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
#include <string_view>

#include "protocol/wire.h"

namespace tessera::agent {

using protocol::Usage;

// The fields of one /proc/PID/stat line that Sample() adds up.
struct ProcStat {
  pid_t pgrp = 0;         // field 5
  uint64_t ticks = 0;     // utime + stime (fields 14 and 15)
  int64_t rss_pages = 0;  // field 24
};

// Parses a /proc/PID/stat line (proc(5)); false when it is cut short or a field read is not a
// number. The command name may hold spaces and parentheses.
bool ParseProcStat(std::string_view text, ProcStat& out);

class UsageSampler {
 public:
  Usage Sample(const std::set<pid_t>& process_groups);

 private:
  bool has_previous_ = false;
  uint64_t previous_ticks_ = 0;
  std::chrono::steady_clock::time_point previous_time_;
};

}  // namespace tessera::agent
