#include "sim/classes.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace tessera::sim {
namespace {

constexpr int64_t kHostChips = 4;
constexpr int64_t kCubeChips = 64;

// Nearest rank over a sorted vector, as the run's own percentiles.
double Rank(const std::vector<int64_t>& sorted, double q) {
  if (sorted.empty()) return 0;
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return static_cast<double>(sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1]);
}

double Mean(const std::vector<int64_t>& v) {
  if (v.empty()) return 0;
  double sum = 0;
  for (int64_t x : v) sum += static_cast<double>(x);
  return sum / static_cast<double>(v.size());
}

}  // namespace

const char* SizeClassName(SizeClass c) {
  switch (c) {
    case SizeClass::kOneHost:
      return "one host";
    case SizeClass::kSubCube:
      return "sub-cube";
    case SizeClass::kCube:
      return "cube";
    case SizeClass::kSuperSlice:
      return "super-slice";
    case SizeClass::kMultiSlice:
      return "multi-slice";
  }
  return "unknown";
}

SizeClass SizeClassOf(const SimJob& job) {
  if (job.request.num_slices > 1) return SizeClass::kMultiSlice;
  if (job.slice_chips <= kHostChips) return SizeClass::kOneHost;
  if (job.slice_chips < kCubeChips) return SizeClass::kSubCube;
  if (job.slice_chips == kCubeChips) return SizeClass::kCube;
  return SizeClass::kSuperSlice;
}

bool NeedsWholeCubes(const SimJob& job) { return job.slice_chips >= kCubeChips; }

ClassStats Summarize(std::string name, const std::vector<JobTimes>& times,
                     const std::vector<size_t>& members) {
  ClassStats s;
  s.name = std::move(name);
  std::vector<int64_t> waits, jcts;
  for (size_t i : members) {
    const JobTimes& t = times[i];
    ++s.jobs;
    s.preemptions += t.preemptions;
    if (t.preemptions > 0) ++s.preempted_jobs;
    if (t.first_start_s >= 0) {
      ++s.started;
      waits.push_back(t.first_start_s - t.submit_s);
    }
    if (t.finish_s >= 0) {
      ++s.finished;
      jcts.push_back(t.finish_s - t.submit_s);
    }
  }
  std::sort(waits.begin(), waits.end());
  std::sort(jcts.begin(), jcts.end());
  s.wait_p50_s = Rank(waits, 0.50);
  s.wait_p95_s = Rank(waits, 0.95);
  s.wait_p99_s = Rank(waits, 0.99);
  s.wait_mean_s = Mean(waits);
  s.jct_p50_s = Rank(jcts, 0.50);
  s.jct_p95_s = Rank(jcts, 0.95);
  s.jct_mean_s = Mean(jcts);
  return s;
}

std::vector<ClassStats> BySize(const std::vector<SimJob>& jobs,
                               const std::vector<JobTimes>& times) {
  std::vector<std::vector<size_t>> members(kSizeClasses);
  for (size_t i = 0; i < jobs.size() && i < times.size(); ++i)
    members[static_cast<size_t>(SizeClassOf(jobs[i]))].push_back(i);
  std::vector<ClassStats> out;
  for (int c = 0; c < kSizeClasses; ++c)
    if (!members[c].empty())
      out.push_back(Summarize(SizeClassName(static_cast<SizeClass>(c)), times, members[c]));
  return out;
}

ClassStats WholeCubes(const std::vector<SimJob>& jobs, const std::vector<JobTimes>& times) {
  std::vector<size_t> members;
  for (size_t i = 0; i < jobs.size() && i < times.size(); ++i)
    if (NeedsWholeCubes(jobs[i])) members.push_back(i);
  return Summarize("cube or larger", times, members);
}

std::vector<ClassStats> ByPriority(const std::vector<SimJob>& jobs,
                                   const std::vector<JobTimes>& times) {
  std::map<int, std::vector<size_t>, std::greater<>> members;
  for (size_t i = 0; i < jobs.size() && i < times.size(); ++i)
    members[jobs[i].spec.priority].push_back(i);
  std::vector<ClassStats> out;
  for (const auto& [prio, m] : members)
    out.push_back(Summarize("priority " + std::to_string(prio), times, m));
  return out;
}

}  // namespace tessera::sim
