#include "placement/saturation.h"

#include <charconv>

namespace tessera {

SaturationResult RunToSaturation(const SlicePlanner& planner, const Inventory& start,
                                 const SaturationOptions& options) {
  Inventory inv = start;
  Rng rng(options.seed);
  const ShapeMix& mix = planner.options().mix;
  double total_weight = 0;
  for (const auto& sw : mix) total_weight += sw.weight;

  SaturationResult r;
  r.policy = planner.options().Name();
  r.total_chips = inv.total_chips();
  std::vector<OwnerId> running;
  auto anything_fits = [&] {
    for (const auto& sw : mix)
      if (planner.Plan(inv, {inv.generation(), sw.shape, 1}).placed()) return true;
    return false;
  };
  uint64_t next_owner = 1;
  for (int64_t step = 0; step < options.max_steps; ++step) {
    // Both draws happen every step so the arrival stream is the same for every policy.
    const bool depart = rng.UniformDouble() < options.churn;
    const uint64_t victim = rng.Next();
    double pick = rng.UniformDouble() * total_weight;
    if (depart && !running.empty()) {
      const size_t i = victim % running.size();
      inv.Release(running[i]);
      running[i] = running.back();
      running.pop_back();
      ++r.departed;
    }
    const Shape* shape = &mix.back().shape;
    for (const auto& sw : mix) {
      if (pick < sw.weight) {
        shape = &sw.shape;
        break;
      }
      pick -= sw.weight;
    }
    ++r.requests;
    PlanResult plan = planner.Plan(inv, {inv.generation(), *shape, 1});
    if (plan.placed()) {
      const OwnerId owner(next_owner++);
      if (ApplyPlan(inv, owner, plan).ok()) {
        running.push_back(owner);
        ++r.placed;
        continue;
      }
    }
    ++r.rejected;
    if (r.failed_shape.empty()) {
      r.failed_shape = shape->ToString();
      r.first_failure_chips = inv.owned_chips();
    }
    if (!anything_fits()) {
      r.saturated = true;
      break;
    }
  }
  r.allocated_chips = inv.owned_chips();
  r.fragmentation = planner.Fragmentation(inv);
  r.largest_free = planner.LargestFree(inv);
  return r;
}

Result<ShapeMix> ParseShapeMix(Generation g, std::string_view text) {
  ShapeMix mix;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string_view entry = text.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    const std::string where = "mix entry '" + std::string(entry) + "'";
    if (entry.empty()) return InvalidArgument("mix: empty entry; write shape:weight,...");
    size_t colon = entry.find(':');
    auto shape = ParseShape(entry.substr(0, colon));
    if (!shape.ok()) return InvalidArgument(where + ": " + shape.status().message());
    Status valid = ValidateShape(g, *shape);
    if (!valid.ok()) return InvalidArgument(where + ": " + valid.message());
    double weight = 1;
    if (colon != std::string_view::npos) {
      std::string_view w = entry.substr(colon + 1);
      auto [ptr, ec] = std::from_chars(w.data(), w.data() + w.size(), weight);
      if (ec != std::errc() || ptr != w.data() + w.size() || !(weight > 0) || weight > 1e9)
        return InvalidArgument(where + ": weight '" + std::string(w) +
                               "' must be a positive number");
    }
    mix.push_back({*shape, weight});
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return mix;
}

}  // namespace tessera
