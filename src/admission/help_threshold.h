// When a large waiting workload gets help (a reservation, and moves by defragmentation): once it
// has waited longer than the small workloads have been waiting lately, times a factor.
//
// Helping a large workload early costs the small ones: the reserved chips drain, and once it
// runs it holds a cube or more through whatever comes next. A fixed delay ("help after 36 h")
// is right for one load and wrong for another. This threshold follows the load instead: it is
// `factor` times a quantile of the waits of the last `window` small workloads to start (all
// waits, including the zero ones), and at least `floor_s`. When the cluster is busy the small
// workloads wait long, so a large one is helped only once it has waited far longer; when it is
// quiet it is helped soon. With no small start seen yet the threshold is `floor_s`.
//
// Who counts, the same in the simulator's `easy` admission (sim/easy_scheduler.cc) and the
// head's EASY pass (controller/easy_scheduling.cc): a workload of fewer than reserve_min_chips
// chips (one that never reserves) is small; its wait is from its submission (the simulator's
// submit time, the head's job creation) to a start by the pass, and each such start is counted
// (AddStart). A larger workload is helped once its own wait since submission reaches the
// threshold taken at the start of the pass (Helps).
//
// Pure: waits are arguments. Thread-safety: none (one per scheduler).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>

#include "common/status.h"

namespace tessera {

struct HelpThresholdOptions {
  double factor = 0;       // 0: off (the threshold is floor_s); at most kMaxFactor
  double quantile = 0.95;  // of the recent small waits, in [0, 1]
  size_t window = 256;     // the last this many small starts, in [1, kMaxWindow]
  int64_t floor_s = 0;     // the threshold is never below this

  static constexpr double kMaxFactor = 1000;
  static constexpr size_t kMaxWindow = size_t{1} << 20;
};

// An error naming the field (as `flag_prefix` + "factor", e.g. "--help-factor") and its valid
// range, or Ok. The command-line flags of `tessera sim` and `tessera head` are checked with it.
Status ValidateHelpThreshold(const HelpThresholdOptions& options,
                             const std::string& flag_prefix = "--help-");

class HelpThreshold {
 public:
  explicit HelpThreshold(const HelpThresholdOptions& options = {}) : o_(options) {}

  // A small workload started after waiting `wait_s` (negative counts as 0).
  void AddSmallStart(int64_t wait_s);
  // A workload of `chips` started after waiting `wait_s`: counted if it is small.
  void AddStart(int64_t chips, int64_t reserve_min_chips, int64_t wait_s) {
    if (IsSmall(chips, reserve_min_chips)) AddSmallStart(wait_s);
  }
  static bool IsSmall(int64_t chips, int64_t reserve_min_chips) {
    return chips < reserve_min_chips;
  }
  // How long a large workload waits before it is helped.
  int64_t Seconds() const;
  // Whether a large workload that has waited `waited_s` is helped now.
  bool Helps(int64_t waited_s) const { return waited_s >= Seconds(); }

  size_t recent() const { return waits_.size(); }

 private:
  HelpThresholdOptions o_;
  std::deque<int64_t> waits_;  // the last o_.window small waits, oldest first
};

}  // namespace tessera
