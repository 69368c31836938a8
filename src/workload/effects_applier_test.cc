// The one effects applier: the order it applies effects in, what it records on the object, and
// a failed commit restoring the object (ApplyStep) and applying nothing else.
#include "workload/effects_applier.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tessera {
namespace {

// Writes down every call, in order; its commit fails when told to.
template <typename Object>
class RecordingSink : public EffectsSink<Object> {
 public:
  Result<int64_t> Commit(const Object&, const Effects& e) override {
    calls.push_back("commit " + std::to_string(e.events.size()));
    if (fail) return Unavailable("the store is away");
    return int64_t{42};
  }
  void Release(uint64_t owner) override { calls.push_back("release " + std::to_string(owner)); }
  int64_t BumpAssignments() override {
    calls.push_back("bump");
    return ++revision;
  }
  void NotifyHosts(const std::set<std::string>& hosts) override {
    std::string s = "notify";
    for (const std::string& h : hosts) s += " " + h;
    calls.push_back(s);
  }
  void Announce(Object&, const Effects& e) override {
    calls.push_back(e.remove ? "announce removed" : "announce");
  }
  void Schedule() override { calls.push_back("schedule"); }

  std::vector<std::string> calls;
  bool fail = false;
  int64_t revision = 7;
};

TEST(EffectsApplierTest, AppliesAJobsEffectsInOrderAndRecordsThePersistedState) {
  TrainJob job;
  job.uid = 5;
  job.status.stopping = true;
  job.runtime.progress_dirty = job.runtime.detail_dirty = true;
  Effects e;
  e.persist = e.release_chips = e.assignments_changed = e.schedule = true;
  e.notify_hosts = {"h1", "h0"};
  e.events = {JobEvent{false, "Stopped", "x"}};
  RecordingSink<TrainJob> sink;
  ASSERT_TRUE(ApplyEffects(job, e, sink, 1234).ok());
  EXPECT_EQ(sink.calls, (std::vector<std::string>{"commit 1", "release 5", "bump", "notify h0 h1",
                                                  "announce", "schedule"}));
  EXPECT_EQ(job.runtime.version, 42);
  EXPECT_FALSE(job.runtime.progress_dirty);
  EXPECT_FALSE(job.runtime.detail_dirty);
  EXPECT_EQ(job.runtime.persisted_ms, 1234);
  EXPECT_EQ(job.runtime.stop_revision, 8);  // stopping: hosts confirm after this revision
}

TEST(EffectsApplierTest, NothingToDoCallsNothing) {
  TrainJob job;
  RecordingSink<TrainJob> sink;
  ASSERT_TRUE(ApplyEffects(job, Effects{}, sink, 1).ok());
  Service svc;
  RecordingSink<Service> service_sink;
  ASSERT_TRUE(ApplyEffects(svc, ServiceEffects{}, service_sink).ok());
  EXPECT_TRUE(sink.calls.empty());
  EXPECT_TRUE(service_sink.calls.empty());
}

TEST(EffectsApplierTest, AServiceFreesItsGroupsOneByOne) {
  Service svc;
  ServiceEffects e;
  e.release_owners = {3, 9};
  e.assignments_changed = true;
  RecordingSink<Service> sink;
  ASSERT_TRUE(ApplyEffects(svc, e, sink).ok());
  EXPECT_EQ(sink.calls, (std::vector<std::string>{"commit 0", "release 3", "release 9", "bump",
                                                  "notify", "announce"}));
  EXPECT_EQ(svc.runtime.stop_revision, 8);
  EXPECT_EQ(svc.runtime.version, 0);  // not persisted
}

TEST(EffectsApplierTest, AFailedCommitRestoresTheObjectAndAppliesNothingElse) {
  TrainJob job;
  job.uid = 5;
  job.status.message = "before";
  RecordingSink<TrainJob> sink;
  sink.fail = true;
  Status s = ApplyStep(
      job,
      [](TrainJob& j) {
        j.status.message = "after";
        Effects e;
        e.persist = e.release_chips = e.schedule = true;
        return e;
      },
      sink, 1);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(job.status.message, "before");
  EXPECT_EQ(sink.calls, (std::vector<std::string>{"commit 0"}));
}

}  // namespace
}  // namespace tessera
