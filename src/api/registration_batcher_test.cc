// RegistrationBatcher: registrations that arrive while a batch is committed go together in the
// next one, each answered with its own result in order; Stop answers what is queued.
#include "api/registration_batcher.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <string>
#include <vector>

namespace tessera::api {
namespace {

using namespace std::chrono_literals;
using Json = RegistrationBatcher::Json;

protocol::Registration Named(const std::string& name) {
  protocol::Registration r;
  r.name = name;
  return r;
}

// A RegisterAll that blocks its first batch until released, records every batch's names and
// answers each with its name (or an error for names starting with "bad").
struct Recorder {
  std::mutex mu;
  std::condition_variable cv;
  bool first_entered = false, released = false;
  std::vector<std::vector<std::string>> batches;

  std::vector<Result<Json>> operator()(const std::vector<protocol::Registration>& batch) {
    std::unique_lock lock(mu);
    std::vector<std::string> names;
    for (const auto& r : batch) names.push_back(r.name);
    batches.push_back(names);
    if (batches.size() == 1) {
      first_entered = true;
      cv.notify_all();
      cv.wait_for(lock, 30s, [&] { return released; });
    }
    std::vector<Result<Json>> out;
    for (const auto& n : names)
      out.push_back(n.rfind("bad", 0) == 0 ? Result<Json>(InvalidArgument("name: " + n))
                                           : Result<Json>(Json{{"host", n}}));
    return out;
  }
};

TEST(RegistrationBatcher, WhatArrivesDuringACommitGoesTogetherAndEachGetsItsOwnAnswer) {
  Recorder rec;
  int batches_after = 0;
  RegistrationBatcher batcher([&rec](const auto& b) { return rec(b); },
                              [&batches_after] { ++batches_after; });
  batcher.Start();
  std::vector<std::promise<Result<Json>>> answers(4);
  auto submit = [&](int i, const std::string& name) {
    batcher.Submit(Named(name), [&answers, i](Result<Json> r) { answers[i].set_value(r); });
  };
  submit(0, "a");
  {
    std::unique_lock lock(rec.mu);
    ASSERT_TRUE(rec.cv.wait_for(lock, 30s, [&] { return rec.first_entered; }));
  }
  // While "a" is being committed, three more arrive: they make the next batch, in order.
  submit(1, "b");
  submit(2, "bad-c");
  submit(3, "d");
  {
    std::lock_guard lock(rec.mu);
    rec.released = true;
    rec.cv.notify_all();
  }
  std::vector<Result<Json>> got;
  for (auto& p : answers) {
    auto f = p.get_future();
    ASSERT_EQ(f.wait_for(30s), std::future_status::ready);
    got.push_back(f.get());
  }
  batcher.Stop();
  for (int i : {0, 1, 3}) ASSERT_TRUE(got[i].ok()) << i << ": " << got[i].status().ToString();
  EXPECT_EQ((*got[0])["host"], "a");
  EXPECT_EQ((*got[1])["host"], "b");
  EXPECT_EQ(got[2].status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*got[3])["host"], "d");
  ASSERT_EQ(rec.batches.size(), 2u);
  EXPECT_EQ(rec.batches[1], (std::vector<std::string>{"b", "bad-c", "d"}));
  EXPECT_EQ(batches_after, 2);
}

TEST(RegistrationBatcher, AfterStopARegistrationIsAnsweredUnavailableAtOnce) {
  Recorder rec;
  rec.released = true;
  RegistrationBatcher batcher([&rec](const auto& b) { return rec(b); }, nullptr);
  batcher.Start();
  batcher.Stop();
  std::promise<Result<Json>> answer;
  batcher.Submit(Named("late"), [&answer](Result<Json> r) { answer.set_value(r); });
  auto f = answer.get_future();
  ASSERT_EQ(f.wait_for(1s), std::future_status::ready);
  const Result<Json> r = f.get();
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("register again"), std::string::npos);
  EXPECT_TRUE(rec.batches.empty());
}

}  // namespace
}  // namespace tessera::api
