// Clock: how time reaches code that must not read the wall clock itself. The pure core takes
// times as values; the controller takes a Clock& so tests can drive it with a FakeClock.
//
// Thread-safety: SystemClock is safe from any thread; FakeClock is safe from any thread too
// (an atomic), which lets a test advance time while a server thread reads it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace tessera {

class Clock {
 public:
  virtual ~Clock() = default;
  // Milliseconds since the Unix epoch.
  virtual int64_t NowMs() const = 0;
};

class SystemClock final : public Clock {
 public:
  int64_t NowMs() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
};

class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t start_ms = 1'000'000) : now_ms_(start_ms) {}
  int64_t NowMs() const override { return now_ms_.load(); }
  void AdvanceMs(int64_t ms) { now_ms_ += ms; }

 private:
  std::atomic<int64_t> now_ms_;
};

}  // namespace tessera
