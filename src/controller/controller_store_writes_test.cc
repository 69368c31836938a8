// What heartbeats cost the store (issue 35): a heartbeat that changes nothing writes nothing; a
// running job's progress is written by the tick's flush at most once a second per job, never by
// the heartbeat itself. The store is a store::CountingStore over a MemoryStore.
#include <gtest/gtest.h>

#include <set>

#include "controller/controller_test_util.h"
#include "store/counting_store.h"

namespace tessera::controller {
namespace {

class StoreWritesTest : public CountingStoreTest {
 protected:
  uint64_t Writes() const { return counting_->counts().writes(); }
  uint64_t WritesOf(const std::string& kind) const {
    const auto counts = counting_->counts();
    auto it = counts.writes_by_kind.find(kind);
    return it == counts.writes_by_kind.end() ? 0 : it->second;
  }
  // One heartbeat from every host: its workers all Running, and a progress line at `step` for
  // each of them when step >= 0.
  void BeatAll(int64_t step) {
    for (int s = 0; s < 2; ++s)
      for (int w = 0; w < 4; ++w) {
        const std::string h = HostName(s, w);
        const Json a = Ok(c_->Assignments(h));
        const Json progress = step >= 0 ? ProgressReports(a, step, clock_.NowMs()) : Json::array();
        Ok(Beat(*c_, h,
                {{"workers", WorkerReports(a, "Running")},
                 {"progress", progress},
                 {"revision", a["revision"]}}));
      }
  }
};

TEST_F(StoreWritesTest, IdleHostsHeartbeatWithoutWriting) {
  RegisterTwoSlices();
  BeatAll(-1);
  ASSERT_TRUE(c_->Tick().ok());
  const uint64_t before = Writes();
  ASSERT_GT(before, 0u) << "registration writes the hosts: the counter must count";
  for (int second = 0; second < 30; ++second) {
    clock_.AdvanceMs(1000);
    BeatAll(-1);
    ASSERT_TRUE(c_->Tick().ok());
  }
  EXPECT_EQ(Writes(), before) << "30 s of heartbeats from 8 idle hosts wrote to the store";
}

TEST_F(StoreWritesTest, ProgressIsWrittenByTheFlushAtMostOnceASecondPerJob) {
  RegisterTwoSlices();
  Ok(c_->CreateJob(JobDoc("a", 1)));
  Ok(c_->CreateJob(JobDoc("b", 1)));
  ASSERT_TRUE(c_->RunPass().ok());
  BeatAll(-1);  // the workers start: a write each (Running)
  ASSERT_EQ(Phase("a"), "Running");
  ASSERT_EQ(Phase("b"), "Running");
  ASSERT_TRUE(c_->Tick().ok());
  clock_.AdvanceMs(1000);
  ASSERT_TRUE(c_->Tick().ok());

  // Running workers that report nothing new: nothing to write.
  uint64_t before = Writes();
  for (int second = 0; second < 10; ++second) {
    clock_.AdvanceMs(1000);
    BeatAll(-1);
    ASSERT_TRUE(c_->Tick().ok());
  }
  EXPECT_EQ(Writes(), before) << "running workers with no new progress wrote to the store";

  // Progress every second: the heartbeats write nothing; the tick's flush writes each job at
  // most once a second, and does write it (the figures survive a restart of the head).
  uint64_t by_beats = 0, by_ticks = 0;
  const int kSeconds = 20;
  for (int second = 0; second < kSeconds; ++second) {
    clock_.AdvanceMs(1000);
    before = Writes();
    BeatAll(10 * (second + 1));
    by_beats += Writes() - before;
    before = Writes();
    ASSERT_TRUE(c_->Tick().ok());
    by_ticks += Writes() - before;
  }
  EXPECT_EQ(by_beats, 0u) << "a progress-only heartbeat wrote to the store";
  EXPECT_LE(by_ticks, 2u * kSeconds) << "more than one write per job and second";
  EXPECT_GE(by_ticks, 2u) << "progress was never persisted";
  EXPECT_EQ(WritesOf("Host"), 8u) << "only the registrations wrote hosts";
  EXPECT_EQ(Ok(c_->GetJob("a"))["status"]["lastStep"], 10 * kSeconds);
}

// More running jobs step every second than a flush writes (200 a tick): each flush starts
// after the job it wrote last, so every job's progress reaches the store, not only the first
// 200 in name order again and again (issue 35: 1,000 running jobs at 10,000 hosts).
TEST_F(StoreWritesTest, EveryJobsProgressIsWrittenWhenMoreStepEachSecondThanAFlushWrites) {
  constexpr int kJobs = 250;  // one v6e 2x2 slice (one host) each
  auto host = [](int i) { return "h" + std::to_string(i); };
  for (int i = 0; i < kJobs; ++i)
    Ok(Register(
        *c_,
        {{"name", host(i)},
         {"generation", "v6e"},
         {"chips", 4},
         {"address", "127.0.0.1"},
         {"agentPort", 9000 + i},
         {"slice", {{"name", "slice-" + std::to_string(i)}, {"topology", "2x2"}, {"worker", 0}}}}));
  auto name = [](int i) { return "run-" + std::to_string(1000 + i); };
  for (int i = 0; i < kJobs; ++i) Ok(c_->CreateJob(JobDoc(name(i), 1, "2x2")));
  ASSERT_TRUE(c_->RunPass().ok());
  auto beat_all = [&](int64_t step) {
    for (int i = 0; i < kJobs; ++i) {
      const Json a = Ok(c_->Assignments(host(i)));
      const Json progress = step >= 0 ? ProgressReports(a, step, clock_.NowMs()) : Json::array();
      Ok(Beat(*c_, host(i),
              {{"workers", WorkerReports(a, "Running")},
               {"progress", progress},
               {"revision", a["revision"]}}));
    }
  };
  beat_all(-1);
  for (int i = 0; i < kJobs; ++i) ASSERT_EQ(Phase(name(i)), "Running") << name(i);
  constexpr int kSeconds = 3;
  for (int second = 1; second <= kSeconds; ++second) {
    clock_.AdvanceMs(1000);
    beat_all(10 * second);
    ASSERT_TRUE(c_->Tick().ok());
  }
  // Written at least every other tick: the stored step is at most two seconds behind.
  for (int i = 0; i < kJobs; ++i) {
    auto obj = store_->Get("TrainJob", name(i));
    ASSERT_TRUE(obj.ok()) << obj.status().ToString();
    EXPECT_GE(Json::parse(obj->body)["status"].value("lastStep", int64_t{-1}), 10 * (kSeconds - 1))
        << name(i) << "'s progress was not written in the last two ticks";
  }
}

// A pass that changes the reason of many waiting jobs (issue 35: a new leader whose first pass
// changed 10,000 seeded reasons committed each on its own, 10,000 raft rounds on etcd while it
// held the controller): the statuses reach the store, many jobs to a commit, by the tick's flush.
TEST_F(StoreWritesTest, APassWritesChangedReasonsManyJobsToACommit) {
  constexpr int kJobs = 250;  // kStatusWritesPerCommit is 100: three commits, two ticks
  auto name = [](int i) { return "wait-" + std::to_string(1000 + i); };
  // Three slices each: never placed on two. Created before any host, so no pass has given them
  // a reason yet (as documents a head on another fleet wrote).
  for (int i = 0; i < kJobs; ++i) Ok(c_->CreateJob(JobDoc(name(i), 3)));
  RegisterTwoSlices();  // the passes of the registrations give every job its reason
  auto stored = [&](int i) {
    auto obj = store_->Get("TrainJob", name(i));
    EXPECT_TRUE(obj.ok()) << obj.status().ToString();
    return obj.ok() ? std::make_pair(Json::parse(obj->body), obj->resource_version)
                    : std::make_pair(Json(), int64_t{0});
  };
  auto status_of = [](const Json& doc) {
    const Json& st = doc["status"];
    return st.value("reason", "") + " | " + st.value("message", "") + " | " +
           std::to_string(st.value("queuePosition", 0));
  };
  auto all_stored = [&] {
    for (int i = 0; i < kJobs; ++i)
      if (status_of(stored(i).first) != status_of(Ok(c_->GetJob(name(i))))) return false;
    return true;
  };
  const std::string created = status_of(stored(0).first);
  const uint64_t commits_before = counting_->counts().commits;
  int ticks = 0;
  do {
    ASSERT_TRUE(c_->Tick().ok());
    ++ticks;
  } while (ticks < 10 && !all_stored());
  ASSERT_TRUE(all_stored()) << "the statuses did not reach the store in 10 ticks";
  ASSERT_NE(status_of(stored(0).first), created) << "the passes changed no job's status";
  EXPECT_LE(ticks, 2) << "200 statuses a tick";

  std::set<int64_t> revisions;
  for (int i = 0; i < kJobs; ++i) {
    const auto [doc, version] = stored(i);
    EXPECT_EQ(status_of(doc), status_of(Ok(c_->GetJob(name(i))))) << name(i);
    EXPECT_EQ(Ok(c_->GetJob(name(i)))["metadata"]["resourceVersion"], version) << name(i);
    revisions.insert(version);
  }
  EXPECT_LE(revisions.size(), 3u) << "the statuses of " << kJobs << " jobs took "
                                  << revisions.size() << " commits (one each before issue 35)";
  EXPECT_LE(counting_->counts().commits - commits_before, 3u);

  // Settled: a pass that changes nothing writes nothing.
  const uint64_t settled = Writes();
  ASSERT_TRUE(c_->Tick().ok());
  EXPECT_EQ(Writes(), settled);

  // A restarted head reads the reasons the flush wrote.
  c_.reset();
  Start();
  for (int i = 0; i < kJobs; i += 50)
    EXPECT_EQ(status_of(Ok(c_->GetJob(name(i)))), status_of(stored(i).first)) << name(i);
}

// A request's own pass (here the job's creation, whose pass gives it its reason) writes the
// statuses it changed before the request returns, and watchers hear of them with it, as when each
// status had a commit of its own: no tick is needed (docs/scale.md "Status writes").
TEST_F(StoreWritesTest, ARequestsPassStoresAndAnnouncesTheStatusesItChangedBeforeItReturns) {
  RegisterTwoSlices();
  Ok(c_->CreateJob(JobDoc("a", 2)));  // both slices
  ASSERT_TRUE(c_->Tick().ok());
  std::vector<std::pair<std::string, std::string>> heard;  // (type, reason) of TrainJob "big"
  c_->SetChangeListener([&](const std::string& kind, const std::string& type, const Json& obj) {
    if (kind == "TrainJob" && obj["metadata"]["name"] == "big")
      heard.emplace_back(type, obj["status"].value("reason", ""));
  });
  Ok(c_->CreateJob(JobDoc("big", 1)));  // waits for a slice a holds
  const Json job = Ok(c_->GetJob("big"));
  const std::string reason = job["status"].value("reason", "");
  ASSERT_FALSE(reason.empty()) << job.dump();
  auto stored = store_->Get("TrainJob", "big");
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_EQ(Json::parse(stored->body)["status"].value("reason", ""), reason)
      << "the request returned before its pass's status was stored";
  EXPECT_EQ(job["metadata"]["resourceVersion"], stored->resource_version);
  ASSERT_FALSE(heard.empty());
  EXPECT_EQ(heard.back(), std::make_pair(std::string("MODIFIED"), reason))
      << "watchers did not hear of the status with the request";
}

}  // namespace
}  // namespace tessera::controller
