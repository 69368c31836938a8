// SerialWorker: tasks run one at a time in the order they came; a full queue and a stopped
// worker refuse; Stop leaves the queued tasks unrun.
#include "api/serial_worker.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera::api {
namespace {

using namespace std::chrono_literals;

// A gate the first task waits at, so the test controls what is queued behind it.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false, open = false;
  void Enter() {
    std::unique_lock lock(mu);
    entered = true;
    cv.notify_all();
    cv.wait_for(lock, 30s, [&] { return open; });
  }
  bool WaitEntered() {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, 30s, [&] { return entered; });
  }
  void Open() {
    std::lock_guard lock(mu);
    open = true;
    cv.notify_all();
  }
};

TEST(SerialWorker, RunsTasksInTheOrderTheyCame) {
  SerialWorker worker(100);
  worker.Start();
  Gate gate;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> ran;
  ASSERT_TRUE(worker.Submit([&] { gate.Enter(); }));
  ASSERT_TRUE(gate.WaitEntered());
  for (int i = 0; i < 50; ++i)
    ASSERT_TRUE(worker.Submit([&, i] {
      std::lock_guard lock(mu);
      ran.push_back(i);
      cv.notify_all();
    }));
  gate.Open();
  std::unique_lock lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, 30s, [&] { return ran.size() == 50; }));
  for (int i = 0; i < 50; ++i) EXPECT_EQ(ran[i], i);
}

TEST(SerialWorker, AFullQueueRefusesAndTakesTasksAgainOnceItDrains) {
  SerialWorker worker(2);
  worker.Start();
  Gate gate;
  ASSERT_TRUE(worker.Submit([&] { gate.Enter(); }));
  ASSERT_TRUE(gate.WaitEntered());  // taken: the queue is empty again
  std::mutex mu;
  std::condition_variable cv;
  int ran = 0;
  auto count = [&] {
    std::lock_guard lock(mu);
    ++ran;
    cv.notify_all();
  };
  EXPECT_TRUE(worker.Submit(count));
  EXPECT_TRUE(worker.Submit(count));
  EXPECT_FALSE(worker.Submit(count));  // two wait: the third is refused
  gate.Open();
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 30s, [&] { return ran == 2; }));
  }
  EXPECT_TRUE(worker.Submit(count));
  std::unique_lock lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, 30s, [&] { return ran == 3; }));
}

TEST(SerialWorker, StopLeavesQueuedTasksUnrunAndRefusesNewOnes) {
  SerialWorker worker(1 << 20);  // far more than the polling below queues before Stop marks
  worker.Start();
  Gate gate;
  bool queued_ran = false;
  ASSERT_TRUE(worker.Submit([&] { gate.Enter(); }));
  ASSERT_TRUE(gate.WaitEntered());
  ASSERT_TRUE(worker.Submit([&] { queued_ran = true; }));
  std::thread stopper([&] { worker.Stop(); });
  // Stop waits for the running task; open it once Stop has marked the worker stopping (the
  // refusal below is that mark).
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (worker.Submit([] {}) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  EXPECT_FALSE(worker.Submit([] {}));
  gate.Open();
  stopper.join();
  EXPECT_FALSE(queued_ran);
}

}  // namespace
}  // namespace tessera::api
