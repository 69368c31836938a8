#include "workload/train_job.h"

#include <algorithm>
#include <array>

#include "workload/phase_names.h"

namespace tessera {
namespace {

constexpr std::array<const char*, 7> kJobPhaseNames = {
    "Pending", "Starting", "Running", "Restarting", "Terminating", "Succeeded", "Failed"};
static_assert(kJobPhaseNames.size() == static_cast<size_t>(JobPhase::kFailed) + 1,
              "one name per JobPhase; kFailed is the last phase");
constexpr std::array<const char*, 4> kWorkerPhaseNames = {"Pending", "Running", "Succeeded",
                                                          "Failed"};

}  // namespace

const char* JobPhaseName(JobPhase phase) { return kJobPhaseNames[static_cast<size_t>(phase)]; }

Result<JobPhase> ParseJobPhase(std::string_view name) {
  return ParsePhaseName<JobPhase>(kJobPhaseNames, name, "status.phase");
}

std::span<const JobPhase> AllJobPhases() {
  static constexpr auto kAll = [] {
    std::array<JobPhase, kJobPhaseNames.size()> all{};
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<JobPhase>(i);
    return all;
  }();
  return kAll;
}

const char* WorkerPhaseName(WorkerPhase phase) {
  return kWorkerPhaseNames[static_cast<size_t>(phase)];
}

Result<WorkerPhase> ParseWorkerPhase(std::string_view name) {
  return ParsePhaseName<WorkerPhase>(kWorkerPhaseNames, name, "status.workers[].state");
}

bool TrainJob::OnHost(const std::string& host) const {
  return std::any_of(status.workers.begin(), status.workers.end(),
                     [&](const auto& kv) { return kv.second.host == host; });
}

std::pair<int, int> TrainJob::SizeRange() const {
  if (status.restart_min > 0)
    return {status.restart_min, std::max(status.restart_min, status.restart_max)};
  return {spec.min_slices, spec.max_slices};
}

}  // namespace tessera
