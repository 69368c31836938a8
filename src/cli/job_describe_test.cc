#include "cli/job_describe.h"

#include <gtest/gtest.h>

namespace tessera::cli {
namespace {

using Json = nlohmann::json;

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(Duration, PicksAUnitThatReads) {
  EXPECT_EQ(Duration(-1), "-");
  EXPECT_EQ(Duration(850), "850ms");
  EXPECT_EQ(Duration(31'000), "31.0s");
  EXPECT_EQ(Duration(750'000), "12.5m");
  EXPECT_EQ(Duration(7'560'000), "2.1h");
}

// The demo job of the README: 50 quick steps after 29 s of start-up (Python, torch, the
// rendezvous). Its 3% is start-up, not lost work, and the lines say so.
TEST(GoodputLines, AShortJobSaysItsTimeWentToStartUpNotToFailures) {
  const Json st = Json::parse(R"({
    "phase": "Succeeded", "failures": 0, "completionTimeMs": 131000,
    "attempts": [{"attempt": 0, "placedMs": 100000, "firstStepMs": 129000, "lastStepMs": 130000,
                  "endedMs": 131000}],
    "recovery": {"goodput": 0.03, "stepsLost": 0, "meanTimeToRecoverMs": -1}})");
  const std::string out = GoodputLines(st, 999'999'999);
  EXPECT_EQ(out,
            "Goodput:     3% = 930ms in kept steps / 31.0s since the first placement\n"
            "             start-up (placement to first step, every attempt): 29.0s; no failure, "
            "so nothing was lost to recovery\n");
}

TEST(GoodputLines, AFailedAttemptNamesTheStepsLostAndTheRecovery) {
  const Json st = Json::parse(R"({
    "phase": "Running", "failures": 1,
    "attempts": [{"placedMs": 1000, "firstStepMs": 3000, "endedMs": 61000},
                 {"placedMs": 65000, "firstStepMs": 70000}],
    "recovery": {"goodput": 0.8, "stepsLost": 12, "meanTimeToRecoverMs": 9000}})");
  const std::string out = GoodputLines(st, 101'000);
  EXPECT_TRUE(Has(out, "80% = 80.0s in kept steps / 100.0s since the first placement (running)"))
      << out;
  EXPECT_TRUE(Has(out,
                  "every attempt): 7.0s; 1 failure(s): 12 steps lost, mean time to "
                  "recover 9.0s"))
      << out;
}

TEST(GoodputLines, BeforeTwoStepsThereIsNoFigure) {
  EXPECT_EQ(GoodputLines(Json::parse(R"({"attempts": [{"placedMs": 5}],
                                         "recovery": {"goodput": -1}})"),
                         10),
            "Goodput:     - (known once an attempt has reported two completed steps)\n");
  EXPECT_EQ(GoodputLines(Json::object(), 10),
            "Goodput:     - (known once an attempt has reported two completed steps)\n");
}

}  // namespace
}  // namespace tessera::cli
