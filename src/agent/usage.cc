#include "agent/usage.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace tessera::agent {

bool ParseProcStat(std::string_view text, ProcStat& out) {
  // The command name (field 2) may hold spaces and parentheses: parse after the last ')'.
  const size_t close = text.rfind(')');
  if (close == std::string_view::npos) return false;
  ProcStat stat;
  size_t at = close + 1;
  // Fields from 3 on: state(3) ppid(4) pgrp(5) ... utime(14) stime(15) ... rss(24).
  for (int field = 3; field <= 24; ++field) {
    while (at < text.size() && text[at] == ' ') ++at;
    const size_t end = text.find(' ', at);
    const std::string_view value =
        text.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at);
    if (value.empty()) return false;
    if (field == 5 || field == 14 || field == 15 || field == 24) {
      // Numbers of at most 20 digits; copied so strtoll stops at the field's end.
      char digits[24];
      if (value.size() >= sizeof(digits)) return false;
      value.copy(digits, value.size());
      digits[value.size()] = '\0';
      char* parsed_end = nullptr;
      const long long number = std::strtoll(digits, &parsed_end, 10);
      if (parsed_end != digits + value.size()) return false;
      if (field == 5) stat.pgrp = static_cast<pid_t>(number);
      if (field == 14 || field == 15) stat.ticks += static_cast<uint64_t>(number);
      if (field == 24) stat.rss_pages = number;
    }
    if (end == std::string_view::npos) {
      if (field < 24) return false;
      break;
    }
    at = end + 1;
  }
  out = stat;
  return true;
}

namespace {

// /proc/PID/stat into a buffer on the stack: one open, one read, no allocation. Every process on
// the machine is read at every sample (a worker's group is found only by its members' pgrp), so
// on a busy host this loop is most of an idle agent's CPU.
bool ReadProcStat(const char* pid, ProcStat& out) {
  char path[64];
  if (std::snprintf(path, sizeof(path), "/proc/%s/stat", pid) >= static_cast<int>(sizeof(path)))
    return false;
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  // A stat line is a few hundred bytes; the fields read end well inside 1 KiB even with a
  // 64-character command name.
  char buffer[1024];
  const ssize_t n = ::read(fd, buffer, sizeof(buffer));
  ::close(fd);
  if (n <= 0) return false;
  return ParseProcStat(std::string_view(buffer, static_cast<size_t>(n)), out);
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
