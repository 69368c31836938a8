#include "proxy/dispatcher.h"

#include <gtest/gtest.h>

#include <map>

namespace tessera::proxy {
namespace {

std::vector<Endpoint> Replicas(int n) {
  std::vector<Endpoint> out;
  for (int i = 0; i < n; ++i)
    out.push_back({i, 1, "127.0.0.1", static_cast<uint16_t>(9000 + i), ""});
  return out;
}

TEST(DispatcherTest, PowerOfTwoChoicesPicksTheLessLoadedOfTwoDrawsFromTheSeed) {
  Dispatcher d(100);
  Rng rng(1);
  EXPECT_TRUE(d.SetEndpoints(Replicas(3), 10, rng).empty());
  std::vector<int> load(3, 0);
  for (RequestId id = 1; id <= 9; ++id) {
    auto a = d.Admit(id, rng);
    ASSERT_EQ(a.outcome, Dispatcher::Outcome::kGranted);
    ++load[static_cast<size_t>(a.endpoint.replica)];
  }
  // The naive model: replay the same draws; the less loaded of the pair wins, a tie the first.
  Rng model_rng(1);
  std::vector<int> model(3, 0);
  for (int i = 0; i < 9; ++i) {
    const size_t x = model_rng.Uniform(3);
    size_t y = model_rng.Uniform(2);
    if (y >= x) ++y;
    ++model[model[y] < model[x] ? y : x];
  }
  EXPECT_EQ(load, model);
}

TEST(DispatcherTest, TheSameSeedReplaysTheSameChoices) {
  auto run = [](uint64_t seed) {
    Dispatcher d(100);
    Rng rng(seed);
    EXPECT_TRUE(d.SetEndpoints(Replicas(5), 3, rng).empty());
    std::vector<int> picks;
    for (RequestId id = 1; id <= 12; ++id) {
      auto a = d.Admit(id, rng);
      picks.push_back(a.outcome == Dispatcher::Outcome::kGranted ? a.endpoint.replica : -1);
      if (id % 3 == 0) {
        EXPECT_TRUE(d.Release(a.endpoint.Key(), rng).empty());
      }
    }
    return picks;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

TEST(DispatcherTest, TheMostLoadedReplicaNeverWinsAPair) {
  Dispatcher d(100);
  Rng rng(3);
  ASSERT_TRUE(d.SetEndpoints(Replicas(3), 100, rng).empty());
  // Drive loads apart, then check every choice against the current loads.
  for (RequestId id = 1; id <= 200; ++id) {
    DispatchLoad before = d.Load();
    int max_load = 0;
    for (const auto& [r, n] : before.per_replica) max_load = std::max(max_load, n);
    int distinct_max = 0;
    for (const auto& [r, n] : before.per_replica) distinct_max += n == max_load;
    auto a = d.Admit(id, rng);
    if (a.outcome != Dispatcher::Outcome::kGranted) break;
    if (distinct_max == 1) {
      EXPECT_LT(before.per_replica[a.endpoint.replica], max_load);
    }
  }
}

TEST(DispatcherTest, NoReplicaEverHoldsMoreThanMaxOngoingUnderRandomOperations) {
  Dispatcher d(1000);
  Rng rng(11), ops(12);
  ASSERT_TRUE(d.SetEndpoints(Replicas(4), 2, rng).empty());
  std::map<RequestId, std::string> granted;  // request -> key
  std::vector<RequestId> queued;
  RequestId next = 0;
  for (int step = 0; step < 2000; ++step) {
    const uint64_t op = ops.Uniform(10);
    std::vector<Grant> grants;
    if (op < 5) {
      auto a = d.Admit(++next, rng);
      if (a.outcome == Dispatcher::Outcome::kGranted) granted[next] = a.endpoint.Key();
      if (a.outcome == Dispatcher::Outcome::kQueued) queued.push_back(next);
    } else if (op < 9 && !granted.empty()) {
      auto it = std::next(granted.begin(), static_cast<long>(ops.Uniform(granted.size())));
      grants = d.Release(it->second, rng);
      granted.erase(it);
    } else if (!queued.empty()) {
      d.Cancel(queued.front());
      queued.erase(queued.begin());
    }
    for (const Grant& g : grants) {
      // FIFO: the grant goes to the oldest request still waiting.
      ASSERT_FALSE(queued.empty());
      EXPECT_EQ(g.request, queued.front());
      queued.erase(queued.begin());
      granted[g.request] = g.endpoint.Key();
    }
    std::map<std::string, int> per_key;
    for (const auto& [r, key] : granted) ++per_key[key];
    for (const auto& [key, n] : per_key) ASSERT_LE(n, 2) << key << " at step " << step;
    ASSERT_EQ(d.queued(), queued.size());
    // Work-conserving: nobody waits while a slot is free.
    if (!queued.empty()) {
      ASSERT_EQ(granted.size(), 8u);
    }
  }
}

TEST(DispatcherTest, FullReplicasQueueInFifoOrderUpToTheBoundThenReject) {
  Dispatcher d(2);
  Rng rng(5);
  ASSERT_TRUE(d.SetEndpoints(Replicas(1), 1, rng).empty());
  auto first = d.Admit(1, rng);
  ASSERT_EQ(first.outcome, Dispatcher::Outcome::kGranted);
  EXPECT_EQ(d.Admit(2, rng).outcome, Dispatcher::Outcome::kQueued);
  EXPECT_EQ(d.Admit(3, rng).outcome, Dispatcher::Outcome::kQueued);
  EXPECT_EQ(d.Admit(4, rng).outcome, Dispatcher::Outcome::kRejected);
  EXPECT_EQ(d.Load().queued, 2);
  EXPECT_EQ(d.Load().in_flight, 1);
  EXPECT_EQ(d.Load().refused, 1u) << "the rejected request 4";

  auto g = d.Release(first.endpoint.Key(), rng);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].request, 2u);
  // A newcomer does not overtake request 3, even with a slot about to free.
  EXPECT_EQ(d.Admit(5, rng).outcome, Dispatcher::Outcome::kQueued);
  g = d.Release(first.endpoint.Key(), rng);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].request, 3u);
  EXPECT_TRUE(d.Cancel(5));
  EXPECT_FALSE(d.Cancel(5));
  EXPECT_EQ(d.Load().refused, 2u) << "request 4 rejected, request 5 cancelled while queued";
  EXPECT_TRUE(d.Release(first.endpoint.Key(), rng).empty());
  EXPECT_EQ(d.Load().in_flight, 0);
}

TEST(DispatcherTest, WhileGroupsStartTheQueueBoundIsForTheCapacityToCome) {
  Dispatcher d(4);
  Rng rng(7);
  ASSERT_TRUE(d.SetEndpoints(Replicas(2), 1, rng).empty());
  EXPECT_EQ(d.QueueBound(), 4u);
  d.SetStarting(1);  // 2 ready + 1 starting: 4 * 3 / 2
  EXPECT_EQ(d.QueueBound(), 6u);
  ASSERT_EQ(d.Admit(1, rng).outcome, Dispatcher::Outcome::kGranted);
  ASSERT_EQ(d.Admit(2, rng).outcome, Dispatcher::Outcome::kGranted);
  for (RequestId id = 3; id <= 8; ++id)
    EXPECT_EQ(d.Admit(id, rng).outcome, Dispatcher::Outcome::kQueued) << id;
  EXPECT_EQ(d.Admit(9, rng).outcome, Dispatcher::Outcome::kRejected);
  // The group is ready: a third replica takes the queue's head; the bound is 4 again, so the
  // 5 still waiting stay queued but a newcomer is refused.
  d.SetStarting(0);
  auto g = d.SetEndpoints(Replicas(3), 1, rng);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].request, 3u);
  EXPECT_EQ(d.QueueBound(), 4u);
  EXPECT_EQ(d.Load().queued, 5);
  EXPECT_EQ(d.Admit(10, rng).outcome, Dispatcher::Outcome::kRejected);
  // None ready, two starting: the bound is for two replicas.
  Dispatcher cold(4);
  cold.SetStarting(2);
  EXPECT_EQ(cold.QueueBound(), 8u);
  cold.SetStarting(-3);
  EXPECT_EQ(cold.QueueBound(), 4u);
}

TEST(DispatcherTest, WithoutReadyReplicasRequestsWaitAndNewReplicasTakeThem) {
  Dispatcher d(10);
  Rng rng(2);
  EXPECT_EQ(d.Admit(1, rng).outcome, Dispatcher::Outcome::kQueued);
  EXPECT_EQ(d.Admit(2, rng).outcome, Dispatcher::Outcome::kQueued);
  auto g = d.SetEndpoints(Replicas(1), 1, rng);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].request, 1u);
  g = d.SetEndpoints(Replicas(2), 1, rng);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].request, 2u);
  EXPECT_EQ(g[0].endpoint.replica, 1);
}

TEST(DispatcherTest, ADepartedReplicaKeepsItsSlotsUntilReleased) {
  Dispatcher d(10);
  Rng rng(4);
  ASSERT_TRUE(d.SetEndpoints(Replicas(2), 1, rng).empty());
  auto a = d.Admit(1, rng);
  auto b = d.Admit(2, rng);
  ASSERT_EQ(a.outcome, Dispatcher::Outcome::kGranted);
  ASSERT_EQ(b.outcome, Dispatcher::Outcome::kGranted);
  // Replica 1 leaves routing while its request runs.
  ASSERT_TRUE(d.SetEndpoints(Replicas(1), 1, rng).empty());
  EXPECT_EQ(d.Load().in_flight, 2);
  EXPECT_EQ(d.Load().per_replica.size(), 1u);
  const Endpoint gone = a.endpoint.replica == 1 ? a.endpoint : b.endpoint;
  const Endpoint kept = a.endpoint.replica == 1 ? b.endpoint : a.endpoint;
  EXPECT_EQ(d.Admit(3, rng).outcome, Dispatcher::Outcome::kQueued);
  // Its release frees nothing routable; the kept replica's does.
  EXPECT_TRUE(d.Release(gone.Key(), rng).empty());
  auto g = d.Release(kept.Key(), rng);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].request, 3u);
  EXPECT_EQ(d.Load().in_flight, 1);
}

TEST(DispatcherTest, ARetryAvoidsTheFailedReplicaUnlessItIsTheOnlyOneFree) {
  Dispatcher d(10);
  Rng rng(9);
  ASSERT_TRUE(d.SetEndpoints(Replicas(2), 5, rng).empty());
  const std::string failed = Replicas(2)[0].Key();
  for (RequestId id = 1; id <= 4; ++id) {
    auto a = d.Admit(id, rng, failed);
    ASSERT_EQ(a.outcome, Dispatcher::Outcome::kGranted);
    EXPECT_EQ(a.endpoint.replica, 1);
  }
  auto last = d.Admit(5, rng, failed);
  EXPECT_EQ(last.endpoint.replica, 1);
  // Replica 1 is full now: the avoided replica is better than waiting.
  auto fallback = d.Admit(6, rng, failed);
  ASSERT_EQ(fallback.outcome, Dispatcher::Outcome::kGranted);
  EXPECT_EQ(fallback.endpoint.replica, 0);
}

TEST(DispatcherTest, DuplicateEndpointsCountOnce) {
  Dispatcher d(10);
  Rng rng(1);
  std::vector<Endpoint> twice = Replicas(1);
  twice.push_back(twice[0]);
  ASSERT_TRUE(d.SetEndpoints(twice, 1, rng).empty());
  EXPECT_EQ(d.endpoints().size(), 1u);
  EXPECT_EQ(d.Admit(1, rng).outcome, Dispatcher::Outcome::kGranted);
  EXPECT_EQ(d.Admit(2, rng).outcome, Dispatcher::Outcome::kQueued);
}

}  // namespace
}  // namespace tessera::proxy
