// TrainLifecycle: waiting for fences (docs/ha.md "Fencing"). An agent that cannot reach a head
// stops its training workers once its fence time has passed since it last heard from one. When
// an attempt is stopped while some of its workers are on lost hosts (which cannot confirm
// anything), the stop holds the job's chips until each such host's fence is over, so the
// replacement attempt can never run beside a worker of the old one. The deadline is an input
// (ClusterView::FencedAtMs); nothing here reads a clock.
#include <algorithm>
#include <cstdio>

#include "workload/train_lifecycle.h"

namespace tessera {
namespace {

std::string SecondsText(int64_t ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(std::max<int64_t>(ms, 0)) / 1000.0);
  return buf;
}

// "waiting 9.8 s more for hosts a, b to fence ..." for the job's status message.
std::string WaitText(const TrainJob& job, int64_t now) {
  std::string hosts;
  int64_t until = 0;
  for (const auto& [host, deadline] : job.runtime.fencing) {
    hosts += (hosts.empty() ? "" : ", ") + host;
    until = std::max(until, deadline);
  }
  return "waiting " + SecondsText(until - now) + " more for the agent of lost host " + hosts +
         " to fence its workers (its fence time since it was last heard of) before a replacement "
         "attempt may start";
}

}  // namespace

void TrainLifecycle::HoldForFences(TrainJob& job, const ClusterView& cluster, int64_t now,
                                   Effects& effects) const {
  job.runtime.fencing.clear();
  for (const auto& [rank, w] : job.status.workers) {
    if (!MayRun(w.phase) || !cluster.HostLost(w.host)) continue;
    const int64_t deadline = cluster.FencedAtMs(w.host);
    if (deadline <= now) continue;
    int64_t& until = job.runtime.fencing[w.host];
    until = std::max(until, deadline);
  }
  if (job.runtime.fencing.empty()) return;
  const std::string wait = WaitText(job, now);
  job.status.message += "; " + wait;
  effects.events.push_back({false, "WaitingForFence", wait});
}

Effects TrainLifecycle::LostWhileStopping(TrainJob& job, const std::string& host,
                                          const ClusterView& cluster, int64_t now) const {
  Effects e;
  if (!job.status.stopping || !job.runtime.unconfirmed.erase(host)) return e;
  const int64_t deadline = cluster.FencedAtMs(host);
  if (deadline > now) {
    int64_t& until = job.runtime.fencing[host];
    until = std::max(until, deadline);
    const std::string wait = WaitText(job, now);
    job.status.message += "; " + wait;
    e.events.push_back({false, "WaitingForFence", wait});
    e.persist = true;
    return e;
  }
  if (job.runtime.unconfirmed.empty() && job.runtime.fencing.empty()) FinishStopping(job, now, e);
  return e;
}

Effects TrainLifecycle::CheckFences(TrainJob& job, int64_t now) const {
  Effects e;
  auto& fencing = job.runtime.fencing;
  if (!job.status.stopping || fencing.empty()) return e;
  std::string over;
  for (auto it = fencing.begin(); it != fencing.end();) {
    if (it->second > now) {
      ++it;
      continue;
    }
    over += (over.empty() ? "" : ", ") + it->first;
    it = fencing.erase(it);
  }
  if (over.empty()) return e;
  e.events.push_back({false, "Fenced",
                      "the fence time of lost host " + over +
                          " is over: its agent has stopped the attempt's workers"});
  if (job.runtime.unconfirmed.empty() && fencing.empty())
    FinishStopping(job, now, e);
  else
    e.persist = true;
  return e;
}

}  // namespace tessera
