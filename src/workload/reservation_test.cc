// ReservationLifecycle (reservation.h) through its public steps, and InsideReservation: what a
// reservation becomes on each input, what the driver must do, and which hosts a workload inside
// it may plan on.
#include "workload/reservation.h"

#include <gtest/gtest.h>

#include "placement/planner.h"

namespace tessera {
namespace {

SliceReservation Make(int64_t ttl_ms = 0) {
  SliceReservationSpec spec;
  spec.name = "pool";
  spec.accelerator = Generation::k7x;
  spec.topology = Shape::Of(2, 2, 2);
  spec.num_slices = 2;
  spec.ttl_ms = ttl_ms;
  return ReservationLifecycle::Create(spec, "{}", /*uid=*/9, /*now=*/100);
}

std::vector<ReservedSlice> TwoSlices() {
  return {{"pool-s0", {"h0", "h1"}}, {"pool-s1", {"h2", "h3"}}};
}

TEST(ReservationLifecycle, CreatedPendingThenReadyWithItsSlices) {
  SliceReservation r = Make();
  EXPECT_EQ(r.status.phase, ReservationPhase::kPending);
  EXPECT_FALSE(r.HoldsChips());
  EXPECT_EQ(r.chips(), 16);
  ReservationEffects e = ReservationLifecycle::Place(r, TwoSlices(), 1000);
  EXPECT_EQ(r.status.phase, ReservationPhase::kReady);
  EXPECT_EQ(r.status.slices, TwoSlices());
  EXPECT_EQ(r.status.ready_ms, 1000);
  EXPECT_EQ(r.status.expires_ms, 0);  // no ttl: held until deleted
  EXPECT_TRUE(e.persist);
  EXPECT_TRUE(e.schedule);  // jobs waiting for it may start
  ASSERT_EQ(e.events.size(), 1u);
  EXPECT_EQ(e.events[0].reason, "Ready");
}

TEST(ReservationLifecycle, SetPendingPersistsOnlyChanges) {
  SliceReservation r = Make();
  EXPECT_TRUE(ReservationLifecycle::SetPending(r, "NoFreeBox", "no box", 2, {}).persist);
  EXPECT_EQ(r.status.pending_reason, "NoFreeBox");
  EXPECT_EQ(r.status.queue_position, 2);
  EXPECT_TRUE(ReservationLifecycle::SetPending(r, "NoFreeBox", "no box", 2, {}).empty());
  const std::vector<WouldHelp> help = {{"trainjob/big", "cq", 0, 64, true}};
  EXPECT_TRUE(ReservationLifecycle::SetPending(r, "NoFreeBox", "no box", 2, help).persist);
  EXPECT_EQ(r.status.would_help, help);
  // Ready: a pending reason no longer applies.
  ReservationLifecycle::Place(r, TwoSlices(), 5);
  EXPECT_TRUE(ReservationLifecycle::SetPending(r, "NoFreeBox", "x", 1, {}).empty());
  EXPECT_EQ(r.status.phase, ReservationPhase::kReady);
}

TEST(ReservationLifecycle, TtlExpiresStopsUsersThenReleases) {
  SliceReservation r = Make(/*ttl_ms=*/60'000);
  ReservationLifecycle::Place(r, TwoSlices(), 1000);
  EXPECT_EQ(r.status.expires_ms, 61'000);
  EXPECT_TRUE(ReservationLifecycle::Tick(r, 60'999).empty());
  ReservationEffects e = ReservationLifecycle::Tick(r, 61'000);
  EXPECT_EQ(r.status.phase, ReservationPhase::kExpired);
  EXPECT_TRUE(e.stop_users);
  EXPECT_FALSE(e.release_chips);  // not while workloads inside may still run
  EXPECT_TRUE(r.status.releasing);
  EXPECT_TRUE(ReservationLifecycle::Tick(r, 70'000).empty());  // once
  e = ReservationLifecycle::UsersStopped(r, 62'000);
  EXPECT_TRUE(e.release_chips);
  EXPECT_TRUE(e.persist);
  EXPECT_FALSE(e.remove);  // kept, Expired, until deleted
  EXPECT_FALSE(r.HoldsChips());
  EXPECT_EQ(r.status.phase, ReservationPhase::kExpired);
  EXPECT_TRUE(ReservationLifecycle::UsersStopped(r, 63'000).empty());  // idempotent
}

TEST(ReservationLifecycle, PendingReservationNeverExpires) {
  SliceReservation r = Make(/*ttl_ms=*/1000);
  EXPECT_TRUE(ReservationLifecycle::Tick(r, 1'000'000).empty());
  EXPECT_EQ(r.status.phase, ReservationPhase::kPending);
}

TEST(ReservationLifecycle, DeleteInUseIsRefusedNamingUsersUnlessForced) {
  SliceReservation r = Make();
  ReservationLifecycle::Place(r, TwoSlices(), 1000);
  auto refused = ReservationLifecycle::Delete(r, {"trainjob/a", "trainjob/b"}, false, 2000);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kConflict);
  EXPECT_NE(refused.status().message().find("trainjob/a, trainjob/b"), std::string::npos);
  EXPECT_NE(refused.status().message().find("--force"), std::string::npos);
  EXPECT_FALSE(r.status.deleting);  // nothing changed

  auto forced = ReservationLifecycle::Delete(r, {"trainjob/a"}, true, 2000);
  ASSERT_TRUE(forced.ok());
  EXPECT_TRUE(forced->stop_users);
  EXPECT_FALSE(forced->remove);
  EXPECT_FALSE(forced->release_chips);
  EXPECT_TRUE(r.status.deleting);
  // A second delete while stopping changes nothing.
  auto again = ReservationLifecycle::Delete(r, {"trainjob/a"}, false, 2100);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->empty());
  ReservationEffects done = ReservationLifecycle::UsersStopped(r, 2500);
  EXPECT_TRUE(done.remove);
  EXPECT_TRUE(done.release_chips);
}

TEST(ReservationLifecycle, DeleteUnusedRemovesAndReleasesAtOnce) {
  SliceReservation r = Make();
  ReservationLifecycle::Place(r, TwoSlices(), 1000);
  auto e = ReservationLifecycle::Delete(r, {}, false, 2000);
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e->remove);
  EXPECT_TRUE(e->release_chips);
  EXPECT_FALSE(e->stop_users);
  SliceReservation pending = Make();
  auto p = ReservationLifecycle::Delete(pending, {}, false, 2000);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->remove);
  EXPECT_FALSE(p->release_chips);  // it held nothing
}

TEST(ReservationLifecycle, EvictedStopsUsersThenWaitsAgain) {
  SliceReservation r = Make(/*ttl_ms=*/60'000);
  ReservationLifecycle::Place(r, TwoSlices(), 1000);
  ReservationEffects e = ReservationLifecycle::Evict(r, "preempted by trainjob/urgent", 2000);
  EXPECT_TRUE(e.stop_users);
  EXPECT_EQ(r.status.phase, ReservationPhase::kPending);
  EXPECT_EQ(r.status.reason, "Preempted");
  EXPECT_EQ(r.status.preemptions, 1);
  EXPECT_EQ(r.status.expires_ms, 0);
  EXPECT_TRUE(ReservationLifecycle::Evict(r, "again", 2100).empty());  // already releasing
  e = ReservationLifecycle::UsersStopped(r, 3000);
  EXPECT_TRUE(e.release_chips);
  EXPECT_FALSE(e.remove);
  EXPECT_FALSE(r.status.releasing);
  // Admitted again later: a fresh ttl from then.
  ReservationLifecycle::Place(r, TwoSlices(), 10'000);
  EXPECT_EQ(r.status.expires_ms, 70'000);
}

TEST(ReservationLifecycle, PhaseNamesRoundTrip) {
  for (ReservationPhase p : {ReservationPhase::kPending, ReservationPhase::kReady,
                             ReservationPhase::kRescheduling, ReservationPhase::kExpired}) {
    auto parsed = ParseReservationPhase(ReservationPhaseName(p));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, p);
  }
  auto bad = ParseReservationPhase("Held");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("Pending, Ready, Rescheduling, Expired"), std::string::npos)
      << bad.status().message();
}

TEST(ReservationLifecycle, UsersArePersistedOnlyWhenTheyChange) {
  SliceReservation r = Make();
  ReservationLifecycle::Place(r, TwoSlices(), 1000);
  EXPECT_TRUE(ReservationLifecycle::SetUsers(r, {}).empty());
  ReservationEffects e = ReservationLifecycle::SetUsers(r, {"trainjob/a", "service/b"});
  EXPECT_TRUE(e.persist);
  EXPECT_TRUE(e.events.empty());  // the document's change is what watchers see
  EXPECT_EQ(r.status.users, (std::vector<std::string>{"trainjob/a", "service/b"}));
  EXPECT_TRUE(ReservationLifecycle::SetUsers(r, {"trainjob/a", "service/b"}).empty());
  EXPECT_TRUE(ReservationLifecycle::SetUsers(r, {}).persist);
  EXPECT_TRUE(r.status.users.empty());
}

// A lost host breaks its slice: the reservation is Rescheduling and names the host, keeps the
// other slice, holds the broken slice's hosts until its workloads have stopped, and is Ready
// again, its ttl unchanged, once a whole slice replaces it.
TEST(ReservationLifecycle, ALostHostMakesItRescheduleThatSliceOnly) {
  SliceReservation r = Make(/*ttl_ms=*/600'000);
  ReservationLifecycle::Place(r, TwoSlices(), 1000);
  // A host outside it, or one lost while Pending, changes nothing.
  EXPECT_TRUE(ReservationLifecycle::HostsLost(r, {{"h9", "no heartbeat"}}, 2000).empty());
  ReservationEffects e =
      ReservationLifecycle::HostsLost(r, {{"h1", "no heartbeat for 5.5 s"}}, 2000);
  EXPECT_EQ(r.status.phase, ReservationPhase::kRescheduling);
  EXPECT_EQ(r.status.reason, "SliceLost");
  EXPECT_NE(r.status.message.find("host h1 of slice pool-s0 lost (no heartbeat for 5.5 s)"),
            std::string::npos)
      << r.status.message;
  EXPECT_NE(r.status.message.find("re-acquiring 1 whole 7x 2x2x2 slice, holding 1 of 2"),
            std::string::npos)
      << r.status.message;
  EXPECT_EQ(r.status.slices, (std::vector<ReservedSlice>{{"pool-s1", {"h2", "h3"}}}));
  ASSERT_EQ(r.status.lost_slices.size(), 1u);
  EXPECT_EQ(r.status.lost_slices[0].slice, (ReservedSlice{"pool-s0", {"h0", "h1"}}));
  EXPECT_EQ(r.status.lost_slices[0].host, "h1");
  EXPECT_TRUE(r.status.lost_slices[0].held);
  EXPECT_EQ(r.missing_slices(), 1);
  EXPECT_EQ(r.held_chips(), 8);
  EXPECT_TRUE(e.persist);
  EXPECT_TRUE(e.schedule);
  EXPECT_FALSE(e.stop_users);     // the workloads on it are stopped by their own recovery
  EXPECT_FALSE(e.release_chips);  // nothing released while they may still run there
  EXPECT_TRUE(e.release_hosts.empty());
  ASSERT_EQ(e.events.size(), 1u);
  EXPECT_TRUE(e.events[0].warning);
  EXPECT_EQ(e.events[0].reason, "SliceLost");
  // Told again (the next tick): nothing more.
  EXPECT_TRUE(ReservationLifecycle::HostsLost(r, {{"h1", "no heartbeat"}}, 3000).empty());

  // No free slice yet: the planner's reason, persisted once.
  e = ReservationLifecycle::WaitForSlices(r, "NoFreeSlice", "no whole free slice");
  EXPECT_TRUE(e.persist);
  EXPECT_EQ(r.status.pending_reason, "NoFreeSlice");
  EXPECT_NE(r.status.message.find("host h1"), std::string::npos) << r.status.message;
  EXPECT_NE(r.status.message.find(": no whole free slice"), std::string::npos);
  EXPECT_TRUE(ReservationLifecycle::WaitForSlices(r, "NoFreeSlice", "no whole free slice").empty());

  // Its workloads stopped: the broken slice's hosts (h0 healthy, h1 down) are released.
  e = ReservationLifecycle::LostSliceFreed(r, "pool-s0", 4000);
  EXPECT_EQ(e.release_hosts, (std::vector<std::string>{"h0", "h1"}));
  EXPECT_FALSE(e.release_chips);  // only those: pool-s1 stays held
  EXPECT_TRUE(e.schedule);
  ASSERT_EQ(r.status.lost_slices.size(), 1u);  // still named while Rescheduling
  EXPECT_FALSE(r.status.lost_slices[0].held);
  EXPECT_TRUE(ReservationLifecycle::LostSliceFreed(r, "pool-s0", 4100).empty());

  // Its ttl keeps counting while Rescheduling.
  EXPECT_TRUE(ReservationLifecycle::Tick(r, 5000).empty());
  e = ReservationLifecycle::Replace(r, {{"pool-s2", {"h4", "h5"}}}, 11'000);
  EXPECT_EQ(r.status.phase, ReservationPhase::kReady);
  EXPECT_EQ(r.status.reason, "Ready");
  EXPECT_TRUE(r.status.pending_reason.empty());
  EXPECT_EQ(r.status.slices.size(), 2u);
  EXPECT_EQ(r.status.slices[1], (ReservedSlice{"pool-s2", {"h4", "h5"}}));
  EXPECT_TRUE(r.status.lost_slices.empty());
  EXPECT_EQ(r.status.ready_ms, 1000);
  EXPECT_EQ(r.status.expires_ms, 601'000);
  EXPECT_NE(r.status.message.find("pool-s2 replacing lost pool-s0"), std::string::npos)
      << r.status.message;
  EXPECT_NE(r.status.message.find("expires in 590 s"), std::string::npos) << r.status.message;
  ASSERT_EQ(e.events.size(), 1u);
  EXPECT_EQ(e.events[0].reason, "SliceReplaced");
  EXPECT_TRUE(ReservationLifecycle::Replace(r, {{"pool-s3", {"h6", "h7"}}}, 12'000).empty());
}

TEST(ReservationLifecycle, ALostSliceStillInUseWhenReplacedIsReleasedLater) {
  SliceReservation r = Make();
  ReservationLifecycle::Place(r, TwoSlices(), 1000);
  ReservationLifecycle::HostsLost(r, {{"h2", "deleted"}, {"h0", "no heartbeat"}}, 2000);
  // Both slices broken: nothing held but the lost hosts; a pass finds two whole ones.
  EXPECT_EQ(r.missing_slices(), 2);
  EXPECT_FALSE(r.HoldsChips());
  EXPECT_EQ(r.status.lost_slices.size(), 2u);
  ReservationLifecycle::Replace(r, {{"pool-s2", {"h4", "h5"}}, {"pool-s3", {"h6", "h7"}}}, 3000);
  EXPECT_EQ(r.status.phase, ReservationPhase::kReady);
  EXPECT_EQ(r.status.lost_slices.size(), 2u);  // their workloads are still stopping
  ReservationEffects e = ReservationLifecycle::LostSliceFreed(r, "pool-s1", 4000);
  EXPECT_EQ(e.release_hosts, (std::vector<std::string>{"h2", "h3"}));
  ASSERT_EQ(r.status.lost_slices.size(), 1u);  // forgotten once replaced and released
  EXPECT_EQ(r.status.lost_slices[0].slice.name, "pool-s0");
  // Deleted meanwhile: everything it still holds is released, the lost slice's hosts too.
  auto deleted = ReservationLifecycle::Delete(r, {}, false, 5000);
  ASSERT_TRUE(deleted.ok());
  EXPECT_TRUE(deleted->release_chips);
}

TEST(ReservationLifecycle, ReschedulingExpiresAndIsPreemptedLikeReady) {
  SliceReservation r = Make(/*ttl_ms=*/10'000);
  ReservationLifecycle::Place(r, TwoSlices(), 1000);
  ReservationLifecycle::HostsLost(r, {{"h3", "no heartbeat"}}, 2000);
  ReservationEffects e = ReservationLifecycle::Tick(r, 11'000);
  EXPECT_EQ(r.status.phase, ReservationPhase::kExpired);
  EXPECT_TRUE(e.stop_users);
  // Being released: a further loss or a replacement changes nothing.
  EXPECT_TRUE(ReservationLifecycle::HostsLost(r, {{"h0", "no heartbeat"}}, 11'500).empty());
  EXPECT_TRUE(ReservationLifecycle::Replace(r, {{"pool-s2", {"h4", "h5"}}}, 11'500).empty());
  e = ReservationLifecycle::UsersStopped(r, 12'000);
  EXPECT_TRUE(e.release_chips);
  EXPECT_TRUE(r.status.slices.empty());
  EXPECT_TRUE(r.status.lost_slices.empty());

  SliceReservation p = Make();
  ReservationLifecycle::Place(p, TwoSlices(), 1000);
  ReservationLifecycle::HostsLost(p, {{"h3", "no heartbeat"}}, 2000);
  e = ReservationLifecycle::Evict(p, "preempted by trainjob/big", 3000);
  EXPECT_EQ(p.status.phase, ReservationPhase::kPending);
  EXPECT_TRUE(e.stop_users);
  EXPECT_TRUE(ReservationLifecycle::UsersStopped(p, 4000).release_chips);
  EXPECT_TRUE(p.status.lost_slices.empty());
}

// A workload inside a reservation plans only on its hosts that no other user holds, whatever is
// free elsewhere; and never on a host outside it.
TEST(InsideReservation, OnlyTheReservationsFreeHostsArePlannable) {
  auto inv = Inventory::MakePod(PodSpec{Generation::k7x, 1, 2});
  ASSERT_TRUE(inv.ok());
  SlicePlanner planner;
  PlanResult two = planner.Plan(*inv, {Generation::k7x, Shape::Of(2, 2, 2), 2});
  ASSERT_TRUE(two.placed()) << two.message;
  const OwnerId reservation(9);
  ASSERT_TRUE(ApplyPlan(*inv, reservation, two).ok());
  const std::vector<HostId> held = inv->HostsOf(reservation);
  ASSERT_EQ(held.size(), 4u);

  auto inside = InsideReservation(*inv, reservation, {});
  ASSERT_TRUE(inside.ok());
  EXPECT_EQ(inside->usable_chips(), 16);
  PlanResult one = planner.Plan(*inside, {Generation::k7x, Shape::Of(2, 2, 2), 1});
  ASSERT_TRUE(one.placed());
  for (HostId h : one.AllHosts())
    EXPECT_NE(std::find(held.begin(), held.end(), h), held.end()) << inv->HostName(h);
  // Larger than what it holds: no fit, although the rest of the pod is free.
  EXPECT_FALSE(planner.Plan(*inside, {Generation::k7x, Shape::Of(2, 4, 4), 1}).placed());

  // With one slice used by another workload, only the other slice is left.
  auto rest = InsideReservation(*inv, reservation, one.AllHosts());
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(rest->usable_chips(), 8);
  PlanResult second = planner.Plan(*rest, {Generation::k7x, Shape::Of(2, 2, 2), 1});
  ASSERT_TRUE(second.placed());
  for (HostId h : second.AllHosts()) {
    EXPECT_NE(std::find(held.begin(), held.end(), h), held.end());
    for (HostId used : one.AllHosts()) EXPECT_NE(h, used);
  }
  auto full = InsideReservation(*inv, reservation, held);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->usable_chips(), 0);
  // The cluster's own inventory is untouched.
  EXPECT_EQ(inv->HostsOf(reservation), held);
}

}  // namespace
}  // namespace tessera
