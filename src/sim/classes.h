// Where the waiting falls: waiting time, JCT and preemptions split by size class and by
// priority class, with counts (the report's "by class" tables).
//
// Size classes, from the slice a job asks for (after the shape map's rounding):
//   one host     one slice of at most one host's chips (4 on every generation modelled here)
//   sub-cube     one slice of more than a host and fewer than a cube's 64 chips
//   cube         one slice of exactly 64 chips (a 4x4x4 cube on 3D; an 8x8 pool on 2D)
//   super-slice  one slice of more than 64 chips (whole cubes joined by optical switches)
//   multi-slice  two or more slices
// A 3D slice of 64 chips or more needs whole cubes; these are the jobs that starve behind
// backfilled small ones, and what defragmentation is for.
//
// Pure: functions of their arguments. Thread-safety: values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/scheduler.h"

namespace tessera::sim {

enum class SizeClass { kOneHost, kSubCube, kCube, kSuperSlice, kMultiSlice };
inline constexpr int kSizeClasses = 5;
// "one host", "sub-cube", "cube", "super-slice", "multi-slice".
const char* SizeClassName(SizeClass c);
SizeClass SizeClassOf(const SimJob& job);
// The job needs whole cubes: one slice of a cube or more (cube, super-slice), or a
// multi-slice job whose slices are cubes or more.
bool NeedsWholeCubes(const SimJob& job);

// One class's figures. Waits are over the class's jobs that started; JCT over those that
// finished; percentiles by nearest rank, as the run's own.
struct ClassStats {
  std::string name;     // "cube", "priority 1"
  int64_t jobs = 0;     // in the class (never-placeable ones included)
  int64_t started = 0;  // ran at least once
  int64_t finished = 0;
  int64_t preemptions = 0;     // of the class's jobs
  int64_t preempted_jobs = 0;  // jobs preempted at least once
  double wait_p50_s = 0, wait_p95_s = 0, wait_p99_s = 0, wait_mean_s = 0;
  double jct_p50_s = 0, jct_p95_s = 0, jct_mean_s = 0;
};

// Per job what the split needs. first_start_s and finish_s are -1 when it did not happen.
struct JobTimes {
  int64_t submit_s = 0;
  int64_t first_start_s = -1;
  int64_t finish_s = -1;
  int preemptions = 0;
};

// Figures of the jobs named by `members` (indexes into `times`).
ClassStats Summarize(std::string name, const std::vector<JobTimes>& times,
                     const std::vector<size_t>& members);
// Every size class that has a job, in the order of SizeClass.
std::vector<ClassStats> BySize(const std::vector<SimJob>& jobs, const std::vector<JobTimes>& times);
// The jobs that need whole cubes (NeedsWholeCubes), named "cube or larger": the class issue 16's
// goal is about, across cube, super-slice and multi-slice. jobs == 0 when there is none.
ClassStats WholeCubes(const std::vector<SimJob>& jobs, const std::vector<JobTimes>& times);
// Every priority that has a job, highest first, named "priority N".
std::vector<ClassStats> ByPriority(const std::vector<SimJob>& jobs,
                                   const std::vector<JobTimes>& times);

}  // namespace tessera::sim
