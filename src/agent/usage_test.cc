// UsageSampler (agent/usage.h): /proc/PID/stat lines as the kernel writes them, and the CPU and
// memory of a real process group.
#include "agent/usage.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>

namespace tessera::agent {
namespace {

TEST(ParseProcStatTest, ReadsGroupTicksAndResidentPagesOfARecordedLine) {
  // /proc/1/stat of this machine's init, recorded.
  const std::string line =
      "1 (process_api) S 0 0 0 0 -1 4194560 774276 1397263951 0 184317 15166 44686 8590962 "
      "2639026 10 -10 41 0 16 54677504 2931 18446744073709551615 1 1 0 0 0 0 0 4096 1256 0 0 "
      "0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n";
  ProcStat stat;
  ASSERT_TRUE(ParseProcStat(line, stat));
  EXPECT_EQ(stat.pgrp, 0);
  EXPECT_EQ(stat.ticks, 15166u + 44686u);
  EXPECT_EQ(stat.rss_pages, 2931);
}

TEST(ParseProcStatTest, ACommandNameWithSpacesAndParenthesesIsSkippedWhole) {
  const std::string line =
      "4242 (py (worker) 3) S 4200 4242 4200 0 -1 4194304 99 0 0 0 7 5 0 0 20 0 1 0 6978766 "
      "3133440 344 18446744073709551615 0\n";
  ProcStat stat;
  ASSERT_TRUE(ParseProcStat(line, stat));
  EXPECT_EQ(stat.pgrp, 4242);
  EXPECT_EQ(stat.ticks, 12u);
  EXPECT_EQ(stat.rss_pages, 344);
}

TEST(ParseProcStatTest, ALineCutShortOrNotNumericIsRefusedAndLeavesTheOutputAlone) {
  ProcStat stat;
  stat.pgrp = 7;
  EXPECT_FALSE(ParseProcStat("", stat));
  EXPECT_FALSE(ParseProcStat("12 (no close paren S 1 2 3", stat));
  // Cut after field 15: no resident set size.
  EXPECT_FALSE(ParseProcStat("12 (a) S 1 12 1 0 -1 0 0 0 0 0 3 4", stat));
  // A group id that is not a number.
  EXPECT_FALSE(ParseProcStat(
      "12 (a) S 1 x 1 0 -1 0 0 0 0 0 3 4 0 0 20 0 1 0 1 1 5 18446744073709551615", stat));
  EXPECT_EQ(stat.pgrp, 7);
}

// A child in a process group of its own that spins until killed.
pid_t StartSpinningGroup() {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    volatile uint64_t spin = 0;
    for (;;) spin = spin + 1;
  }
  // Also from the parent, so the group exists before Sample() looks (no race with the child).
  ::setpgid(pid, pid);
  return pid;
}

TEST(UsageSamplerTest, CountsTheCpuAndMemoryOfTheGivenGroupsOnly) {
  const pid_t child = StartSpinningGroup();
  ASSERT_GT(child, 0);
  UsageSampler sampler;
  const Usage first = sampler.Sample({child});
  EXPECT_EQ(first.cpu_percent, 0.0) << "the first sample has nothing to compare with";
  EXPECT_GT(first.memory_bytes, 0);
  // Wait (on the condition, up to 60 s on a loaded machine) for the child's CPU to show.
  Usage later;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  do {
    ::usleep(50 * 1000);
    later = sampler.Sample({child});
  } while (later.cpu_percent <= 0 && std::chrono::steady_clock::now() < deadline);
  EXPECT_GT(later.cpu_percent, 0.0);
  EXPECT_GT(later.memory_bytes, 0);

  UsageSampler other;
  const Usage none = other.Sample({-1});  // no process is in group -1
  EXPECT_EQ(none.memory_bytes, 0);
  EXPECT_EQ(other.Sample({}).memory_bytes, 0);

  ::kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
}

}  // namespace
}  // namespace tessera::agent
