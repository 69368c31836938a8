// The election rules with an injected clock: no etcd, no threads, no sleeps.
#include "ha/election.h"

#include <gtest/gtest.h>

namespace tessera::ha {
namespace {

using std::chrono::milliseconds;

ElectionConfig Config(int64_t lease, int64_t renew, int64_t retry) {
  return ElectionConfig{milliseconds(lease), milliseconds(renew), milliseconds(retry)};
}

TEST(ElectionConfig, KubernetesDefaultsAreValidAndTheOrderIsEnforced) {
  const ElectionConfig defaults;
  EXPECT_EQ(defaults.lease.count(), 15'000);
  EXPECT_EQ(defaults.renew_deadline.count(), 10'000);
  EXPECT_EQ(defaults.retry.count(), 2'000);
  EXPECT_TRUE(ValidateElectionConfig(defaults).ok());
  EXPECT_TRUE(ValidateElectionConfig(Config(3'000, 2'000, 500)).ok());  // test settings

  struct Bad {
    ElectionConfig config;
    const char* names;
  };
  const Bad bad[] = {
      {Config(10'000, 10'000, 2'000), "--election-renew-deadline-ms"},  // lease == renew
      {Config(10'000, 12'000, 2'000), "--election-lease-ms"},           // lease < renew
      {Config(15'000, 2'400, 2'000), "1.2 x --election-retry-ms"},      // renew == 1.2 retry
      {Config(15'500, 10'000, 2'000), "whole seconds"},
      {Config(1'000, 500, 100), "at least 2000"},
      {Config(15'000, 10'000, 50), "--election-retry-ms"},
  };
  for (const Bad& b : bad) {
    Status s = ValidateElectionConfig(b.config);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << b.names;
    EXPECT_NE(s.message().find(b.names), std::string::npos) << s.message();
  }
}

TEST(ElectionState, ACandidateTriesEveryRetryPeriod) {
  ElectionState e(ElectionConfig{});
  EXPECT_EQ(e.Next(0).action, Action::kAcquire);
  e.OnNotAcquired(0);
  Decision d = e.Next(1'000);
  EXPECT_EQ(d.action, Action::kWait);
  EXPECT_EQ(d.at_ms, 2'000);
  EXPECT_EQ(e.Next(2'000).action, Action::kAcquire);
  EXPECT_EQ(e.role(), Role::kCandidate);
}

TEST(ElectionState, ALeaderRenewsAndStepsDownBeforeItsLeaseCanExpire) {
  const ElectionConfig c;  // 15 s lease, 10 s renew deadline, 2 s retry
  ElectionState e(c);
  e.OnAcquired(/*sent_ms=*/100, /*term=*/42);
  EXPECT_EQ(e.role(), Role::kLeader);
  EXPECT_EQ(e.term(), 42);
  EXPECT_EQ(e.Next(1'000).action, Action::kWait);
  EXPECT_EQ(e.Next(2'100).action, Action::kRenew);
  e.OnRenewed(2'100);
  // From here etcd is unreachable: every renewal fails.
  int64_t now = 4'100;
  int64_t stepped_at = -1;
  for (; now < 30'000; now += 10) {
    const Decision d = e.Next(now);
    if (d.action == Action::kRenew) e.OnRenewFailed(now);
    if (d.action == Action::kStepDown) {
      stepped_at = now;
      e.StepDown();
      break;
    }
  }
  // The last good renewal was SENT at 2100: the deadline is 12100, the lease ends for others
  // no earlier than 17100.
  EXPECT_EQ(stepped_at, 2'100 + c.renew_deadline.count());
  EXPECT_LT(stepped_at, 2'100 + c.lease.count());
  EXPECT_EQ(e.role(), Role::kSteppedDown);
  EXPECT_EQ(e.Next(now + 100'000).action, Action::kNone);  // final
}

TEST(ElectionState, AFailedRenewalIsRetriedSoonNotAfterAWholePeriod) {
  ElectionState e(ElectionConfig{});
  e.OnAcquired(0, 7);
  ASSERT_EQ(e.Next(2'000).action, Action::kRenew);
  e.OnRenewFailed(2'000);
  const Decision d = e.Next(2'001);
  EXPECT_EQ(d.action, Action::kWait);
  EXPECT_EQ(d.at_ms, 2'400);  // a fifth of the retry period
  ASSERT_EQ(e.Next(2'400).action, Action::kRenew);
  e.OnRenewed(2'400);
  EXPECT_EQ(e.lease_end_ms(), 2'400 + 15'000);
  EXPECT_EQ(e.Next(12'399).action, Action::kRenew);  // not stepped down: renewed at 2400
}

TEST(ElectionState, LosingTheKeyStepsDownAtOnceAndLateAnswersChangeNothing) {
  ElectionState e(ElectionConfig{});
  e.OnAcquired(0, 9);
  e.OnLost();
  EXPECT_EQ(e.role(), Role::kSteppedDown);
  e.OnRenewed(1'000);  // a renewal answer that arrives late
  e.OnAcquired(1'000, 10);
  EXPECT_EQ(e.role(), Role::kSteppedDown);
  EXPECT_EQ(e.Next(1'000).action, Action::kNone);
}

}  // namespace
}  // namespace tessera::ha
