// Helpers shared by the admission tests: small pods, queues and workloads.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "admission/admission.h"

namespace tessera::testing {

inline Inventory Pod(int blocks, int cubes_per_block) {
  auto inv = Inventory::MakePod({Generation::k7x, blocks, cubes_per_block});
  EXPECT_TRUE(inv.ok()) << inv.status().ToString();
  return *inv;
}

inline ClusterQueueSpec Queue(std::string name, int64_t nominal, std::string cohort = "") {
  ClusterQueueSpec q;
  q.name = std::move(name);
  q.cohort = std::move(cohort);
  q.quotas = {ResourceQuota{Generation::k7x, nominal, std::nullopt, std::nullopt, std::nullopt}};
  return q;
}

inline Workload Job(uint64_t id, std::string queue, Shape shape, int32_t priority = 0,
                    int num_slices = 1) {
  Workload w;
  w.id = WorkloadId(id);
  w.name = "job-" + std::to_string(id);
  w.local_queue = std::move(queue);
  w.priority = priority;
  w.request = SliceRequest{Generation::k7x, shape, num_slices};
  w.creation_order = static_cast<int64_t>(id);
  return w;
}

// A snapshot whose LocalQueues are named after their ClusterQueues.
inline Snapshot MakeSnapshot(Inventory inv, std::vector<ClusterQueueSpec> queues) {
  Snapshot s{std::move(inv), std::move(queues), {}, {}, std::nullopt};
  for (const auto& q : s.cluster_queues) s.local_queues.push_back({q.name, q.name});
  return s;
}

// Adds `w` as running on `hosts` (or wherever the planner puts it).
inline void AddRunning(Snapshot& s, Workload w, const std::vector<HostId>& hosts = {},
                       WorkloadState state = WorkloadState::kRunning) {
  if (hosts.empty()) {
    SlicePlanner planner;
    PlanResult plan = planner.Plan(s.inventory, w.request);
    ASSERT_TRUE(plan.placed()) << plan.message;
    ASSERT_TRUE(ApplyPlan(s.inventory, OwnerOf(w.id), plan).ok());
  } else {
    ASSERT_TRUE(s.inventory.Reserve(OwnerOf(w.id), hosts).ok());
  }
  w.state = state;
  s.workloads.push_back(std::move(w));
}

// Hosts of cube `cube` at local indices [from, to).
inline std::vector<HostId> CubeHosts(const Inventory& inv, int cube, int from = 0, int to = 16) {
  std::vector<HostId> out;
  for (int i = from; i < to; ++i) out.push_back(inv.cubes()[cube].hosts[i]);
  return out;
}

inline const PendingStatus* FindPending(const AdmissionCycle& c, uint64_t id) {
  for (const auto& p : c.pending)
    if (p.workload == WorkloadId(id)) return &p;
  return nullptr;
}

inline bool Admitted(const AdmissionCycle& c, uint64_t id) {
  for (const auto& a : c.admissions)
    if (a.workload == WorkloadId(id)) return true;
  return false;
}

}  // namespace tessera::testing
