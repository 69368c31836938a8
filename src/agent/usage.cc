#include "agent/usage.h"

#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace tessera::agent {
namespace {

struct ProcStat {
  pid_t pgrp = 0;
  uint64_t ticks = 0;  // utime + stime
  int64_t rss_pages = 0;
};

bool ReadProcStat(const std::string& pid, ProcStat& out) {
  std::ifstream in("/proc/" + pid + "/stat");
  std::string text;
  if (!std::getline(in, text)) return false;
  // The command name (field 2) may hold spaces and parentheses: parse after the last ')'.
  size_t close = text.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream fields(text.substr(close + 1));
  std::string f;
  // Fields from 3 on: state(3) ppid(4) pgrp(5) ... utime(14) stime(15) ... rss(24).
  for (int i = 3; i <= 24 && (fields >> f); ++i) {
    if (i == 5) out.pgrp = static_cast<pid_t>(std::strtol(f.c_str(), nullptr, 10));
    if (i == 14 || i == 15) out.ticks += std::strtoull(f.c_str(), nullptr, 10);
    if (i == 24) {
      out.rss_pages = std::strtoll(f.c_str(), nullptr, 10);
      return true;
    }
  }
  return false;
}

}  // namespace

Usage UsageSampler::Sample(const std::set<pid_t>& process_groups) {
  Usage usage;
  uint64_t ticks = 0;
  const auto now = std::chrono::steady_clock::now();
  if (!process_groups.empty()) {
    if (DIR* dir = ::opendir("/proc")) {
      static const int64_t kPageBytes = ::sysconf(_SC_PAGESIZE);
      while (dirent* entry = ::readdir(dir)) {
        if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
        ProcStat stat;
        if (!ReadProcStat(entry->d_name, stat)) continue;
        if (process_groups.count(stat.pgrp) == 0) continue;
        ticks += stat.ticks;
        usage.memory_bytes += stat.rss_pages * kPageBytes;
      }
      ::closedir(dir);
    }
  }
  if (has_previous_) {
    const double seconds = std::chrono::duration<double>(now - previous_time_).count();
    static const double kTicksPerSecond = static_cast<double>(::sysconf(_SC_CLK_TCK));
    // Processes that exited since the last sample take their ticks with them: never negative.
    if (seconds > 0 && ticks > previous_ticks_) {
      usage.cpu_percent =
          static_cast<double>(ticks - previous_ticks_) / kTicksPerSecond / seconds * 100.0;
    }
  }
  has_previous_ = true;
  previous_ticks_ = ticks;
  previous_time_ = now;
  return usage;
}

}  // namespace tessera::agent
