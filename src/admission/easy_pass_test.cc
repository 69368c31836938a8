#include "admission/easy_pass.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "admission/test_util.h"
#include "common/rng.h"

namespace tessera {
namespace {

using testing::CubeHosts;
using testing::Pod;

SliceRequest Req(int x, int y, int z) { return {Generation::k7x, Shape::Of(x, y, z), 1}; }

EasyWaiting W(uint64_t id, SliceRequest request, int64_t expected_s) {
  return {WorkloadId(id), request, expected_s, "job-" + std::to_string(id), true, 0};
}

// Started at 0, never moved, movable.
EasyRunning Running(uint64_t id, SliceRequest request, int64_t expected_s, int64_t checkpoint_s) {
  EasyRunning r;
  r.id = WorkloadId(id);
  r.request = request;
  r.expected_s = expected_s;
  r.last_checkpoint_s = checkpoint_s;
  return r;
}

const PlanResult* StartOf(const EasyPassResult& r, uint64_t id) {
  for (const auto& [w, plan] : r.starts)
    if (w == WorkloadId(id)) return &plan;
  return nullptr;
}

const EasyWait* WaitOf(const EasyPassResult& r, uint64_t id) {
  for (const EasyWait& w : r.waiting)
    if (w.id == WorkloadId(id)) return &w;
  return nullptr;
}

// Two cubes; job 1 holds half of cube 0 (expected to end at 100), job 2 half of cube 1 (500).
struct HalfCubes {
  Inventory inv = Pod(1, 2);
  SlicePlanner planner;
  std::vector<EasyRunning> running;
  HalfCubes() {
    EXPECT_TRUE(inv.Reserve(OwnerOf(WorkloadId(1)), CubeHosts(inv, 0, 0, 8)).ok());
    EXPECT_TRUE(inv.Reserve(OwnerOf(WorkloadId(2)), CubeHosts(inv, 1, 0, 8)).ok());
    running = {Running(1, Req(2, 4, 4), 100, -1), Running(2, Req(2, 4, 4), 500, -1)};
  }
};

TEST(EasyPass, TheHeadReservesLongWorkWaitsShortWorkBackfills) {
  HalfCubes t;
  // 3: the 4x4x4 head (no whole cube free). 4: a 2x4x4 expected to run 1000 s, which would
  // delay the head's reservation of cube 0 (free at 100). 5: a 2x4x4 of 50 s, which ends first.
  const std::vector<EasyWaiting> line = {W(3, Req(4, 4, 4), 3600), W(4, Req(2, 4, 4), 1000),
                                         W(5, Req(2, 4, 4), 50)};
  const EasyPassResult r = RunEasyPass(t.inv, t.planner, line, t.running, 10, 0, {});
  ASSERT_EQ(r.starts.size(), 2u);
  const PlanResult* four = StartOf(r, 4);
  const PlanResult* five = StartOf(r, 5);
  ASSERT_NE(four, nullptr);
  ASSERT_NE(five, nullptr);
  for (HostId h : four->AllHosts()) EXPECT_EQ(t.inv.host(h).cube, t.inv.cubes()[1].id);
  for (HostId h : five->AllHosts()) EXPECT_EQ(t.inv.host(h).cube, t.inv.cubes()[0].id);
  const EasyWait* head = WaitOf(r, 3);
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(head->reason, "WaitingForReservation");
  EXPECT_NE(head->message.find("expected to start in 1m "), std::string::npos) << head->message;
  EXPECT_FALSE(r.defrag);
}

TEST(EasyPass, WithoutAnEstimateTheDefaultKeepsWorkOffTheReservedHosts) {
  HalfCubes t;
  t.inv.Release(OwnerOf(WorkloadId(2)));
  ASSERT_TRUE(t.inv.Reserve(OwnerOf(WorkloadId(2)), CubeHosts(t.inv, 1, 0, 16)).ok());
  t.running[1].request = Req(4, 4, 4);
  // Cube 1 is full; the head reserves cube 0 (free at 100); job 4 says nothing (default 24 h).
  const std::vector<EasyWaiting> line = {W(3, Req(4, 4, 4), 0), W(4, Req(2, 2, 1), 0)};
  const EasyPassResult r = RunEasyPass(t.inv, t.planner, line, t.running, 10, 0, {});
  EXPECT_TRUE(r.starts.empty());
  const EasyWait* w = WaitOf(r, 4);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->reason, "BehindReservation");
  EXPECT_NE(w->message.find("the default: no spec.expectedDuration"), std::string::npos)
      << w->message;
}

// A large workload that may not be helped yet (help_threshold.h) reserves nothing: the small
// one behind it starts on the half cube it would have reserved, and it says why it waits.
TEST(EasyPass, ALargeWorkloadNotYetHelpedReservesNothing) {
  HalfCubes t;
  t.inv.Release(OwnerOf(WorkloadId(2)));
  ASSERT_TRUE(t.inv.Reserve(OwnerOf(WorkloadId(2)), CubeHosts(t.inv, 1, 0, 16)).ok());
  t.running[1].request = Req(4, 4, 4);
  EasyWaiting head = W(3, Req(4, 4, 4), 0);
  head.may_help = false;
  const std::vector<EasyWaiting> line = {head, W(4, Req(2, 2, 1), 0)};
  EasyPassOptions o;
  o.defrag = true;
  const EasyPassResult r = RunEasyPass(t.inv, t.planner, line, t.running, 10, 1 << 30, o);
  ASSERT_EQ(r.starts.size(), 1u);
  const PlanResult* four = StartOf(r, 4);
  ASSERT_NE(four, nullptr);
  for (HostId h : four->AllHosts()) EXPECT_EQ(t.inv.host(h).cube, t.inv.cubes()[0].id);
  EXPECT_FALSE(r.defrag);
  const EasyWait* w = WaitOf(r, 3);
  ASSERT_NE(w, nullptr);
  EXPECT_NE(w->reason, "WaitingForReservation");
  EXPECT_NE(w->message.find("help threshold"), std::string::npos) << w->message;
  // Allowed, the same line reserves cube 0 and job 4 waits behind it.
  head.may_help = true;
  const EasyPassResult helped =
      RunEasyPass(t.inv, t.planner, {head, line[1]}, t.running, 10, 1 << 30, o);
  EXPECT_TRUE(helped.starts.empty());
  ASSERT_NE(WaitOf(helped, 3), nullptr);
  EXPECT_EQ(WaitOf(helped, 3)->reason, "WaitingForReservation");
}

TEST(EasyPass, ABlockedSmallJobReservesNothingClassicEasyDoes) {
  HalfCubes t;
  t.inv.Release(OwnerOf(WorkloadId(1)));
  t.inv.Release(OwnerOf(WorkloadId(2)));
  std::vector<HostId> most;  // all of cube 0 but the host column x = y = 0 (a 2x2x4's room)
  for (int i = 0; i < 16; ++i)
    if (i % 4 != 0) most.push_back(t.inv.cubes()[0].hosts[i]);
  ASSERT_TRUE(t.inv.Reserve(OwnerOf(WorkloadId(1)), most).ok());
  ASSERT_TRUE(t.inv.Reserve(OwnerOf(WorkloadId(2)), CubeHosts(t.inv, 1, 0, 16)).ok());
  t.running[1].request = Req(4, 4, 4);
  // 16 chips free in cube 0. Job 3 (32 chips) is blocked; job 4 (16 chips, no estimate) fits.
  const std::vector<EasyWaiting> line = {W(3, Req(2, 4, 4), 0), W(4, Req(2, 2, 4), 0)};
  EasyPassResult r = RunEasyPass(t.inv, t.planner, line, t.running, 10, 0, {});
  ASSERT_NE(StartOf(r, 4), nullptr);  // job 3 is under a cube's worth: it reserves nothing
  ASSERT_NE(WaitOf(r, 3), nullptr);
  EXPECT_NE(WaitOf(r, 3)->reason, "WaitingForReservation");
  EasyPassOptions classic;
  classic.reserve_min_chips = 0;
  r = RunEasyPass(t.inv, t.planner, line, t.running, 10, 0, classic);
  ASSERT_NE(WaitOf(r, 3), nullptr);
  EXPECT_EQ(WaitOf(r, 3)->reason, "WaitingForReservation");  // classic EASY: it reserves
}

// Two cubes, one 2x2x1 job in each: 120 chips free, no whole cube. Job 1 checkpointed at 7100,
// job 2 at 7150 (at 7200 they would lose 4 chips x 100 s and 4 x 50 s).
struct OneJobPerCube {
  Inventory inv = Pod(1, 2);
  SlicePlanner planner;
  std::vector<EasyRunning> running = {Running(1, Req(2, 2, 1), 0, 7100),
                                      Running(2, Req(2, 2, 1), 0, 7150)};
  OneJobPerCube() {
    EXPECT_TRUE(inv.Reserve(OwnerOf(WorkloadId(1)), CubeHosts(inv, 0, 5, 6)).ok());
    EXPECT_TRUE(inv.Reserve(OwnerOf(WorkloadId(2)), CubeHosts(inv, 1, 9, 10)).ok());
  }
};

TEST(EasyPass, DefragMovesTheCheapestJobAndHoldsTheRoom) {
  const OneJobPerCube t;  // job 1 loses 4 chips x 100 s if moved, job 2 4 x 50
  const Inventory& inv = t.inv;
  const SlicePlanner& planner = t.planner;
  const std::vector<EasyRunning>& running = t.running;
  const std::vector<EasyWaiting> line = {W(3, Req(4, 4, 4), 0), W(4, Req(4, 4, 4), 0)};
  EasyPassOptions o;
  o.defrag = true;
  for (bool after : {true, false}) {
    SCOPED_TRACE(after ? "moves planned after the line" : "moves planned when the head is met");
    o.defrag_after_backfill = after;
    const EasyPassResult r = RunEasyPass(inv, planner, line, running, 7200, 1000, o);
    ASSERT_TRUE(r.defrag);
    EXPECT_EQ(r.defrag_for, WorkloadId(3));
    ASSERT_EQ(r.defrag->moves.size(), 1u);
    EXPECT_EQ(r.defrag->moves[0].workload, WorkloadId(2));  // the cheaper one
    EXPECT_EQ(r.defrag->lost_work_chip_s, 200);
    // The moved job goes to cube 0, already in use; the head takes cube 1.
    for (HostId h : r.defrag->moves[0].plan.AllHosts())
      EXPECT_EQ(inv.host(h).cube, inv.cubes()[0].id);
    for (HostId h : r.defrag->plan.AllHosts()) EXPECT_EQ(inv.host(h).cube, inv.cubes()[1].id);
    // Job 4 neither starts nor moves anything (one defragmentation per pass): it waits behind
    // the head's reservation, or reserves itself when the head's room was held at once.
    EXPECT_TRUE(r.starts.empty());
    ASSERT_NE(WaitOf(r, 4), nullptr);
    EXPECT_EQ(WaitOf(r, 4)->reason, after ? "BehindReservation" : "WaitingForReservation");
    EXPECT_EQ(WaitOf(r, 3), nullptr);
  }
  o.defrag_after_backfill = true;
  EasyPassResult r;

  // Without budget, or with defrag off, the head reserves and says why.
  r = RunEasyPass(inv, planner, line, running, 7200, 0, o);
  EXPECT_FALSE(r.defrag);
  ASSERT_NE(WaitOf(r, 3), nullptr);
  EXPECT_NE(WaitOf(r, 3)->message.find("budget"), std::string::npos) << WaitOf(r, 3)->message;
  r = RunEasyPass(inv, planner, line, running, 7200, 1000, {});
  EXPECT_FALSE(r.defrag);
  // A job moved within the hour does not move again: job 1 then.
  std::vector<EasyRunning> recent = running;
  recent[1].last_moved_s = 7000;
  r = RunEasyPass(inv, planner, line, recent, 7200, 1000, o);
  ASSERT_TRUE(r.defrag);
  ASSERT_EQ(r.defrag->moves.size(), 1u);
  EXPECT_EQ(r.defrag->moves[0].workload, WorkloadId(1));
}

// The same two cubes; behind the 4x4x4 head wait two short 2x4x4 jobs (64 chips together).
// Moves are planned on the chips the line leaves: both short jobs start, 56 chips are left and
// nothing moves. Planned when the head is met, the head's room is held first and only one of
// them starts.
TEST(EasyPass, MovesTakeOnlyTheChipsTheLineLeaves) {
  const OneJobPerCube t;
  const Inventory& inv = t.inv;
  const SlicePlanner& planner = t.planner;
  const std::vector<EasyRunning>& running = t.running;
  const std::vector<EasyWaiting> line = {W(3, Req(4, 4, 4), 0), W(4, Req(2, 4, 4), 100),
                                         W(5, Req(2, 4, 4), 100)};
  EasyPassOptions o;
  o.defrag = true;
  EasyPassResult r = RunEasyPass(inv, planner, line, running, 7200, 1000, o);
  EXPECT_FALSE(r.defrag);
  EXPECT_NE(StartOf(r, 4), nullptr);
  EXPECT_NE(StartOf(r, 5), nullptr);
  ASSERT_NE(WaitOf(r, 3), nullptr);
  EXPECT_EQ(WaitOf(r, 3)->reason, "WaitingForReservation");
  EXPECT_NE(WaitOf(r, 3)->message.find("defragmentation: not enough free chips"), std::string::npos)
      << WaitOf(r, 3)->message;
  o.defrag_after_backfill = false;
  r = RunEasyPass(inv, planner, line, running, 7200, 1000, o);
  ASSERT_TRUE(r.defrag);
  EXPECT_EQ(r.starts.size(), 1u);
}

std::vector<std::pair<uint64_t, std::vector<HostId>>> Starts(const EasyPassResult& r) {
  std::vector<std::pair<uint64_t, std::vector<HostId>>> out;
  for (const auto& [w, plan] : r.starts) out.push_back({w.value(), plan.AllHosts()});
  return out;
}

// The simulator's pass (explain = false: only the head's entry, and no planning once no chip
// is free) starts and moves exactly what the head's pass does, on lines with repeated shapes
// (planned once per pass), a reservation, moves, and a line that fills the pod.
TEST(EasyPass, WithoutExplainOnlyTheHeadSaysWhyAndTheSameWorkStarts) {
  const OneJobPerCube t;
  const Inventory& inv = t.inv;
  const SlicePlanner& planner = t.planner;
  const std::vector<EasyRunning>& running = t.running;
  const std::vector<std::vector<EasyWaiting>> lines = {
      // the head reserves; short 2x4x4s backfill, long ones wait behind it, twice each
      {W(3, Req(4, 4, 4), 0), W(4, Req(2, 4, 4), 100), W(5, Req(2, 4, 4), 90000),
       W(6, Req(2, 4, 4), 100), W(7, Req(2, 4, 4), 90000), W(8, Req(2, 2, 1), 0)},
      // moves for the head, then a line of one shape that cannot fit behind it
      {W(3, Req(4, 4, 4), 0), W(4, Req(4, 4, 4), 0), W(5, Req(4, 4, 4), 0)},
      // small work that fills every free chip, then more that finds none
      {W(3, Req(4, 4, 2), 0), W(4, Req(4, 4, 2), 0), W(5, Req(2, 4, 4), 0), W(6, Req(2, 4, 4), 0),
       W(7, Req(2, 2, 4), 0), W(8, Req(2, 2, 2), 0), W(9, Req(2, 2, 1), 0), W(10, Req(2, 2, 1), 0),
       W(11, Req(2, 2, 1), 0), W(12, Req(4, 4, 4), 0)}};
  for (bool after : {true, false}) {
    for (size_t i = 0; i < lines.size(); ++i) {
      SCOPED_TRACE("line " + std::to_string(i) + (after ? ", moves after the line" : ""));
      EasyPassOptions o;
      o.defrag = true;
      o.defrag_after_backfill = after;
      const EasyPassResult told = RunEasyPass(inv, planner, lines[i], running, 7200, 1000, o);
      o.explain = false;
      const EasyPassResult quiet = RunEasyPass(inv, planner, lines[i], running, 7200, 1000, o);
      EXPECT_EQ(Starts(quiet), Starts(told));
      ASSERT_EQ(quiet.defrag.has_value(), told.defrag.has_value());
      if (told.defrag) {
        EXPECT_EQ(quiet.defrag_for, told.defrag_for);
        EXPECT_EQ(quiet.defrag->plan.AllHosts(), told.defrag->plan.AllHosts());
        ASSERT_EQ(quiet.defrag->moves.size(), told.defrag->moves.size());
        for (size_t m = 0; m < told.defrag->moves.size(); ++m)
          EXPECT_EQ(quiet.defrag->moves[m].plan.AllHosts(), told.defrag->moves[m].plan.AllHosts());
      }
      // Every waiting workload says why with explain; without it, at most the head does.
      EXPECT_EQ(told.starts.size() + told.waiting.size() + (told.defrag ? 1 : 0), lines[i].size());
      for (const EasyWait& w : quiet.waiting) EXPECT_EQ(w.reason, "WaitingForReservation");
      EXPECT_LE(quiet.waiting.size(), 1u);
    }
  }
}

// Workloads held under owners of their own (the simulator holds each slice under one): the
// same moves and the same reservation as when they are held under OwnerOf(id).
TEST(EasyPass, WorkloadsHeldUnderTheirOwnOwnersMoveAndReserveTheSame) {
  SlicePlanner planner;
  Inventory by_id = Pod(1, 2), by_slice = Pod(1, 2);
  ASSERT_TRUE(by_id.Reserve(OwnerOf(WorkloadId(1)), CubeHosts(by_id, 0, 5, 6)).ok());
  ASSERT_TRUE(by_id.Reserve(OwnerOf(WorkloadId(2)), CubeHosts(by_id, 1, 9, 10)).ok());
  ASSERT_TRUE(by_slice.Reserve(OwnerId(1 << 16), CubeHosts(by_slice, 0, 5, 6)).ok());
  ASSERT_TRUE(by_slice.Reserve(OwnerId(2 << 16), CubeHosts(by_slice, 1, 9, 10)).ok());
  std::vector<EasyRunning> running = {Running(1, Req(2, 2, 1), 0, 7100),
                                      Running(2, Req(2, 2, 1), 0, 7150)};
  const std::vector<EasyWaiting> line = {W(3, Req(4, 4, 4), 0)};
  EasyPassOptions o;
  o.defrag = true;
  const EasyPassResult want = RunEasyPass(by_id, planner, line, running, 7200, 1000, o);
  running[0].owners = {OwnerId(1 << 16)};
  running[1].owners = {OwnerId(2 << 16)};
  const EasyPassResult got = RunEasyPass(by_slice, planner, line, running, 7200, 1000, o);
  ASSERT_TRUE(want.defrag);
  ASSERT_TRUE(got.defrag);
  ASSERT_EQ(got.defrag->moves.size(), 1u);
  EXPECT_EQ(got.defrag->moves[0].workload, want.defrag->moves[0].workload);
  EXPECT_EQ(got.defrag->moves[0].plan.AllHosts(), want.defrag->moves[0].plan.AllHosts());
  EXPECT_EQ(got.defrag->plan.AllHosts(), want.defrag->plan.AllHosts());
  // Without moves the head reserves the hosts that free soonest, found by their owners.
  o.defrag = false;
  const EasyPassResult reserved = RunEasyPass(by_slice, planner, line, running, 7200, 1000, o);
  ASSERT_EQ(reserved.waiting.size(), 1u);
  EXPECT_EQ(reserved.waiting[0].reason, "WaitingForReservation");
  EXPECT_EQ(reserved.waiting[0].message.find("does not fit"), std::string::npos)
      << reserved.waiting[0].message;
}

// Random pods of two cubes with one-host jobs scattered over them, and lines of small jobs with
// a 4x4x4 head: whatever the pass decides is consistent. Every workload is decided once; starts
// take free hosts, apart from each other and from the room the moves make; moves are of running
// work only. And the pass does place some of its own starts elsewhere (they lose no work).
TEST(EasyPass, MovesMayPlaceThePassesOwnStartsElsewhereAndDecisionsStayConsistent) {
  SlicePlanner planner;
  int starts_placed_elsewhere = 0, moves_of_running_work = 0;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    Inventory inv = Pod(1, 2);
    std::vector<EasyRunning> running;
    const int n_running = 2 + static_cast<int>(rng.Uniform(10));
    for (int i = 0; i < n_running; ++i) {
      std::vector<HostId> free;
      for (const Host& h : inv.hosts())
        if (h.free()) free.push_back(h.id);
      const HostId h = free[rng.Uniform(free.size())];
      const uint64_t id = 1 + static_cast<uint64_t>(i);
      ASSERT_TRUE(inv.Reserve(OwnerOf(WorkloadId(id)), {h}).ok());
      running.push_back(Running(id, Req(2, 2, 1), 0, static_cast<int64_t>(rng.Uniform(7200))));
    }
    std::vector<EasyWaiting> line;
    const int n_line = 1 + static_cast<int>(rng.Uniform(6));
    for (int i = 0; i < n_line; ++i) {
      const SliceRequest small[] = {Req(2, 2, 1), Req(2, 2, 2), Req(2, 2, 4), Req(2, 4, 4)};
      line.push_back(W(100 + static_cast<uint64_t>(i), small[rng.Uniform(4)], 600));
    }
    const size_t head_at = rng.Uniform(line.size() + 1);
    line.insert(line.begin() + static_cast<std::ptrdiff_t>(head_at), W(99, Req(4, 4, 4), 0));
    EasyPassOptions o;
    o.defrag = true;
    o.defrag_after_backfill = rng.Uniform(2) == 0;
    const EasyPassResult r = RunEasyPass(inv, planner, line, running, 7200, 1 << 30, o);

    std::map<uint64_t, int> decided;
    for (const auto& [id, plan] : r.starts) ++decided[id.value()];
    for (const EasyWait& w : r.waiting) ++decided[w.id.value()];
    if (r.defrag) ++decided[r.defrag_for.value()];
    for (const EasyWaiting& w : line) EXPECT_EQ(decided[w.id.value()], 1) << w.id.value();
    std::set<HostId> taken;  // by the starts, the head's room and the moves' placements
    auto take = [&](const PlanResult& plan, bool must_be_free) {
      for (HostId h : plan.AllHosts()) {
        EXPECT_TRUE(taken.insert(h).second) << "host " << h.value() << " given twice";
        if (must_be_free) {
          EXPECT_TRUE(inv.host(h).free()) << "host " << h.value();
        }
      }
    };
    for (const auto& [id, plan] : r.starts) take(plan, true);
    if (r.defrag) {
      ASSERT_FALSE(r.defrag->moves.empty());
      take(r.defrag->plan, false);
      int64_t lost = 0;
      for (const Move& m : r.defrag->moves) {
        take(m.plan, true);  // outside the head's room: on hosts free now
        const auto run = std::find_if(running.begin(), running.end(),
                                      [&](const EasyRunning& e) { return e.id == m.workload; });
        ASSERT_NE(run, running.end())
            << "moved workload " << m.workload.value() << " is not running";
        lost += 4 * (7200 - run->last_checkpoint_s);
        ++moves_of_running_work;
      }
      EXPECT_EQ(r.defrag->lost_work_chip_s, lost);
    }
    // The head starts at once without room of its own only if just the pass's starts moved.
    if (StartOf(r, 99) != nullptr && !planner.Plan(inv, Req(4, 4, 4)).placed()) {
      EXPECT_FALSE(r.defrag);
    }
    // Moves planned after the line: without defragmentation the same starts, where they were.
    if (o.defrag_after_backfill && (r.defrag || StartOf(r, 99) != nullptr)) {
      o.defrag = false;
      const EasyPassResult plain = RunEasyPass(inv, planner, line, running, 7200, 1 << 30, o);
      for (const auto& [id, plan] : plain.starts) {
        const PlanResult* now = StartOf(r, id.value());
        ASSERT_NE(now, nullptr) << id.value();
        if (now->AllHosts() != plan.AllHosts()) ++starts_placed_elsewhere;
      }
    }
  }
  EXPECT_GT(moves_of_running_work, 0);
  EXPECT_GT(starts_placed_elsewhere, 0);
}

// A request that did not fit is not planned again in the pass; the next one of that shape
// waits for the same reason, with the same message.
TEST(EasyPass, ARepeatedRequestWaitsForTheSameReasonAsTheFirst) {
  HalfCubes t;
  const std::vector<EasyWaiting> line = {W(3, Req(4, 4, 4), 3600), W(4, Req(4, 4, 4), 3600),
                                         W(5, Req(4, 4, 4), 3600)};
  EasyPassOptions o;
  o.reserve_min_chips = 1 << 20;  // nobody reserves: each waits as under plain backfill
  const EasyPassResult r = RunEasyPass(t.inv, t.planner, line, t.running, 10, 0, o);
  ASSERT_EQ(r.waiting.size(), 3u);
  EXPECT_FALSE(r.waiting[0].message.empty());
  for (const EasyWait& w : r.waiting) {
    EXPECT_EQ(w.reason, r.waiting[0].reason);
    EXPECT_EQ(w.message, r.waiting[0].message);
  }
}

}  // namespace
}  // namespace tessera
