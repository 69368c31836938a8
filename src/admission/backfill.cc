#include "admission/backfill.h"

#include <algorithm>
#include <numeric>

namespace tessera {
namespace {

// Holds reserved hosts in Blocked(): far from the ids of workloads and of the victim search's
// fences (preemption.cc counts down from kInvalid - 1).
const OwnerId kReservationOwner(OwnerId::kInvalid / 2);

int64_t Duration(int64_t expected_s, const BackfillOptions& options) {
  return expected_s > 0 ? expected_s : std::max<int64_t>(1, options.default_duration_s);
}

}  // namespace

int64_t ExpectedEnd(const BackfillRunning& r, int64_t now_s, const BackfillOptions& options) {
  return std::max(now_s, r.start_s + Duration(r.expected_s, options));
}

Reservation Reserve(const Inventory& inv, const PlanHead& plan, int64_t head_chips,
                    const std::vector<BackfillRunning>& running, int64_t now_s,
                    const BackfillOptions& options) {
  Reservation out;
  std::vector<size_t> order(running.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::vector<int64_t> end(running.size());
  for (size_t i = 0; i < running.size(); ++i) end[i] = ExpectedEnd(running[i], now_s, options);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return end[a] < end[b]; });

  Inventory scratch = inv;
  auto try_plan = [&](int64_t at) {
    if (scratch.usable_chips() < head_chips) return false;
    PlanResult p = plan(scratch);
    if (!p.placed()) return false;
    out.made = true;
    out.start_s = at;
    out.plan = std::move(p);
    return true;
  };
  bool placed = try_plan(now_s);
  for (size_t k = 0; k < order.size() && !placed;) {
    // Release every workload ending at this instant, then plan once.
    const int64_t at = end[order[k]];
    bool released = false;
    for (; k < order.size() && end[order[k]] == at; ++k)
      for (OwnerId o : running[order[k]].owners) released = scratch.Release(o) > 0 || released;
    if (released) placed = try_plan(at);
  }
  if (!out.made) return out;
  out.hosts = out.plan.AllHosts();
  std::sort(out.hosts.begin(), out.hosts.end());
  for (HostId h : out.hosts) out.cubes.push_back(inv.host(h).cube);
  std::sort(out.cubes.begin(), out.cubes.end());
  out.cubes.erase(std::unique(out.cubes.begin(), out.cubes.end()), out.cubes.end());
  return out;
}

Result<Inventory> Blocked(const Inventory& inv, const Reservation& reservation) {
  Inventory out = inv;
  if (!reservation.made) return out;
  std::vector<HostId> free;
  for (HostId h : reservation.hosts)
    if (out.host(h).usable()) free.push_back(h);
  if (!free.empty()) {
    const Status s = out.Reserve(kReservationOwner, free);
    if (!s.ok()) return s;
  }
  return out;
}

bool EndsBefore(const Reservation& reservation, int64_t now_s, int64_t expected_s,
                const BackfillOptions& options) {
  if (!reservation.made) return true;
  return now_s + Duration(expected_s, options) <= reservation.start_s;
}

}  // namespace tessera
