// SerialWorker (serial_worker.h): a queue and the one thread that empties it.
#include "api/serial_worker.h"

#include <utility>

namespace tessera::api {

SerialWorker::SerialWorker(size_t max_queued) : max_queued_(max_queued < 1 ? 1 : max_queued) {}

SerialWorker::~SerialWorker() { Stop(); }

void SerialWorker::Start() {
  std::lock_guard lock(mu_);
  if (started_ || stopping_) return;
  started_ = true;
  thread_ = std::thread([this] { Run(); });
}

void SerialWorker::Stop() {
  std::deque<std::function<void()>> left;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  std::lock_guard lock(mu_);
  left.swap(queue_);  // destroyed unrun
}

bool SerialWorker::Submit(std::function<void()> task) {
  std::lock_guard lock(mu_);
  if (stopping_ || queue_.size() >= max_queued_) return false;
  queue_.push_back(std::move(task));
  if (queue_.size() == 1) cv_.notify_one();
  return true;
}

void SerialWorker::Run() {
  std::deque<std::function<void()>> batch;
  while (true) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      batch.swap(queue_);  // everything that waits, taken under one lock
    }
    for (auto& task : batch) task();
    batch.clear();
  }
}

}  // namespace tessera::api
