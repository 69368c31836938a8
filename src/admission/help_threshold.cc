#include "admission/help_threshold.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

namespace tessera {
namespace {

std::string Number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

Status ValidateHelpThreshold(const HelpThresholdOptions& o, const std::string& flag_prefix) {
  // Written so that NaN fails each check.
  if (!(o.factor >= 0 && o.factor <= HelpThresholdOptions::kMaxFactor))
    return InvalidArgument(flag_prefix + "factor: " + Number(o.factor) +
                           " is not in [0, 1000] (0: off; e.g. 4)");
  if (!(o.quantile >= 0 && o.quantile <= 1))
    return InvalidArgument(flag_prefix + "quantile: " + Number(o.quantile) +
                           " is not in [0, 1] (e.g. 0.8)");
  if (o.window < 1 || o.window > HelpThresholdOptions::kMaxWindow)
    return InvalidArgument(flag_prefix + "window: " +
                           // a negative value given for the unsigned flag has wrapped around
                           std::to_string(static_cast<int64_t>(o.window)) +
                           " is not in [1, 1048576] (small starts; e.g. 64)");
  if (o.floor_s < 0)
    return InvalidArgument(flag_prefix + "floor: " + std::to_string(o.floor_s) +
                           " s is negative (0: no floor)");
  return Status::Ok();
}

void HelpThreshold::AddSmallStart(int64_t wait_s) {
  if (o_.factor <= 0 || o_.window == 0) return;
  waits_.push_back(std::max<int64_t>(0, wait_s));
  while (waits_.size() > o_.window) waits_.pop_front();
}

int64_t HelpThreshold::Seconds() const {
  if (o_.factor <= 0 || waits_.empty()) return std::max<int64_t>(0, o_.floor_s);
  std::vector<int64_t> sorted(waits_.begin(), waits_.end());
  const double q = std::clamp(o_.quantile, 0.0, 1.0);
  // Nearest rank: the smallest wait with at least q of the waits at or below it.
  size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(rank - 1),
                   sorted.end());
  const double t = o_.factor * static_cast<double>(sorted[rank - 1]);
  return std::max<int64_t>(o_.floor_s, static_cast<int64_t>(std::llround(t)));
}

}  // namespace tessera
