// PrefillPairing: the topology-aware pick (same slice first, then the fewest queued prompt
// tokens, then the lower replica), the queued-token accounting and the handoff counts.
#include "proxy/disagg_pairing.h"

#include <gtest/gtest.h>

namespace tessera::proxy {
namespace {

Endpoint At(int replica, uint16_t port, std::string slice) {
  Endpoint e;
  e.replica = replica;
  e.address = "127.0.0.1";
  e.port = port;
  e.slice = std::move(slice);
  return e;
}

TEST(PrefillPairingTest, PrefersAPrefillReplicaOnTheDecodeReplicasSlice) {
  PrefillPairing p;
  p.SetEndpoints({At(0, 9000, "cube-a"), At(1, 9001, "cube-b")});
  auto pick = p.Choose(At(0, 8000, "cube-b"), 100);
  ASSERT_TRUE(pick);
  EXPECT_EQ(pick->endpoint.port, 9001);
  EXPECT_TRUE(pick->same_slice);
  // Busier, but still on the same slice: locality wins over load.
  pick = p.Choose(At(0, 8000, "cube-b"), 100);
  ASSERT_TRUE(pick);
  EXPECT_EQ(pick->endpoint.port, 9001);
  // A decode replica on a slice without a prefill replica: the least loaded elsewhere.
  pick = p.Choose(At(1, 8001, "cube-c"), 10);
  ASSERT_TRUE(pick);
  EXPECT_EQ(pick->endpoint.port, 9000);
  EXPECT_FALSE(pick->same_slice);
  EXPECT_EQ(p.counts().same_slice, 2u);
  EXPECT_EQ(p.counts().other_slice, 1u);
}

TEST(PrefillPairingTest, AmongEqualCandidatesTheFewestQueuedTokensThenTheLowerReplica) {
  PrefillPairing p;
  p.SetEndpoints({At(0, 9000, "x"), At(1, 9001, "y"), At(2, 9002, "z")});
  auto a = p.Choose(At(0, 8000, "w"), 500);
  auto b = p.Choose(At(0, 8000, "w"), 200);
  auto c = p.Choose(At(0, 8000, "w"), 100);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(a->endpoint.replica, 0);  // all empty: the lowest index
  EXPECT_EQ(b->endpoint.replica, 1);
  EXPECT_EQ(c->endpoint.replica, 2);
  auto d = p.Choose(At(0, 8000, "w"), 1);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->endpoint.replica, 2);  // 100 queued is the least
  EXPECT_EQ(p.QueuedPromptTokens(), 801);
  EXPECT_EQ(p.QueuedByReplica().at(2), 101);
  EXPECT_EQ(p.PendingByReplica().at(2), 2);
  p.Done(a->ticket);
  p.Done(a->ticket);  // idempotent
  EXPECT_EQ(p.QueuedPromptTokens(), 301);
  EXPECT_EQ(p.PendingPicks(), 3);
  auto e = p.Choose(At(0, 8000, "w"), 1);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->endpoint.replica, 0);  // freed
  for (auto* pick : {&b, &c, &d, &e}) p.Done((*pick)->ticket);
  EXPECT_EQ(p.QueuedPromptTokens(), 0);
  EXPECT_EQ(p.PendingPicks(), 0);
}

TEST(PrefillPairingTest, NoPrefillReplicaAndAnUnknownSliceAreCounted) {
  PrefillPairing p;
  EXPECT_FALSE(p.Choose(At(0, 8000, "a"), 10));
  EXPECT_EQ(p.counts().no_prefill, 1u);
  p.SetEndpoints({At(0, 9000, "")});
  auto pick = p.Choose(At(0, 8000, ""), 10);  // slices unknown: never "same"
  ASSERT_TRUE(pick);
  EXPECT_FALSE(pick->same_slice);
  // A replica that left keeps its charge until Done, without breaking the sums.
  p.SetEndpoints({});
  EXPECT_EQ(p.QueuedPromptTokens(), 10);
  p.Done(pick->ticket);
  EXPECT_EQ(p.QueuedPromptTokens(), 0);
}

TEST(PrefillPairingTest, DecodesAnswersAreCountedByWhereItPrefilled) {
  PrefillPairing p;
  for (const char* v : {"remote", "remote", "local", "fallback:timeout", "fallback:unreachable",
                        "fallback:timeout", "", "fallback:Bad Reason!!"})
    p.Outcome(v);
  const PairingCounts& c = p.counts();
  EXPECT_EQ(c.remote, 2u);
  EXPECT_EQ(c.local, 1u);
  EXPECT_EQ(c.fallback, 4u);
  EXPECT_EQ(c.fallback_reasons.at("timeout"), 2u);
  EXPECT_EQ(c.fallback_reasons.at("unreachable"), 1u);
  EXPECT_EQ(c.fallback_reasons.at("adeason"), 1u);  // only [a-z_] kept for the metric label
  EXPECT_EQ(c.unreported, 1u);
}

// The head's document of a disaggregated Service: requests go to the decode role (even when it
// is not the first), the prefill role's ready endpoints are kept, each with its slice.
TEST(PrefillPairingTest, AServiceDocumentWithPrefillAndDecodeRoles) {
  const char* doc = R"({
    "metadata": {"name": "llm"},
    "spec": {"roles": [
      {"name": "p", "disaggregation": "prefill", "maxOngoingRequests": 3},
      {"name": "d", "disaggregation": "decode", "maxOngoingRequests": 7}]},
    "status": {
      "roles": [{"name": "p", "replicas": [{"replica": 0, "slice": "cube-1"},
                                           {"replica": 1, "slice": "cube-2"}]},
                {"name": "d", "replicas": [{"replica": 0, "slice": "cube-2"}]}],
      "endpoints": [
        {"role": "p", "replica": 0, "address": "10.0.0.1", "port": 9000, "ready": true},
        {"role": "p", "replica": 1, "address": "10.0.0.2", "port": 9000, "ready": false},
        {"role": "d", "replica": 0, "address": "10.0.0.3", "port": 8000, "ready": true}]}})";
  auto view = ParseServiceDocument(doc);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_EQ(view->role, "d");
  EXPECT_EQ(view->max_ongoing_requests, 7);
  EXPECT_EQ(view->prefill_role, "p");
  ASSERT_EQ(view->endpoints.size(), 1u);
  EXPECT_EQ(view->endpoints[0].slice, "cube-2");
  ASSERT_EQ(view->prefill_endpoints.size(), 1u);  // the unready one is left out
  EXPECT_EQ(view->prefill_endpoints[0].address, "10.0.0.1");
  EXPECT_EQ(view->prefill_endpoints[0].slice, "cube-1");
  // A plain Service: no prefill role, the first role in front, as before.
  auto plain = ParseServiceDocument(R"({"metadata": {"name": "s"},
      "spec": {"roles": [{"name": "a"}, {"name": "b"}]}})");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->role, "a");
  EXPECT_TRUE(plain->prefill_role.empty());
}

TEST(PrefillPairingTest, StaticEndpointsOfADisaggregatedService) {
  auto views = ParseStaticEndpoints(R"({"services": [{"name": "llm", "role": "decode",
      "endpoints": [{"address": "127.0.0.1", "port": 8001, "slice": "a"}],
      "prefillEndpoints": [{"address": "127.0.0.1", "port": 8002, "slice": "a"},
                           {"address": "127.0.0.1", "port": 8003}]}]})");
  ASSERT_TRUE(views.ok()) << views.status().ToString();
  ASSERT_EQ(views->size(), 1u);
  EXPECT_EQ((*views)[0].prefill_role, "prefill");
  EXPECT_EQ((*views)[0].endpoints[0].slice, "a");
  ASSERT_EQ((*views)[0].prefill_endpoints.size(), 2u);
  EXPECT_EQ((*views)[0].prefill_endpoints[1].replica, 1);
  auto bad = ParseStaticEndpoints(R"({"services": [{"name": "x", "prefillRole": "p",
      "endpoints": []}]})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("services[0].prefillRole: set only with prefillEndpoints"),
            std::string::npos)
      << bad.status().message();
  bad = ParseStaticEndpoints(R"({"services": [{"name": "x", "endpoints": [],
      "prefillEndpoints": [{"address": "h"}]}]})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("prefillEndpoints[0].port"), std::string::npos)
      << bad.status().message();
}

}  // namespace
}  // namespace tessera::proxy
