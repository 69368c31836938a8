// SerialWorker: one thread that runs the tasks handed to it, in the order they came.
//
// The head answers on one the agents' channel heartbeats that arrive while a tick runs
// (head.cc): a heartbeat needs the controller's lock, which a tick holds for tens of
// milliseconds at 10,000 hosts. Answered on the io loops, every loop waited on that lock during
// each tick and the whole server stopped reading, accepting and answering, registrations
// included (bench/README.md "One event loop a thread"). Handed to the worker, the loops go on;
// one thread keeps each channel's acknowledgements in the order its beats came.
//
// Thread-safety: Submit may be called from any thread; Start and Stop from one.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace tessera::api {

class SerialWorker {
 public:
  // At most `max_queued` tasks wait; Submit refuses more.
  explicit SerialWorker(size_t max_queued);
  ~SerialWorker();  // Stop()
  SerialWorker(const SerialWorker&) = delete;
  SerialWorker& operator=(const SerialWorker&) = delete;

  void Start();
  // Waits for the tasks the thread has taken (it takes all that wait at once) and joins; the
  // tasks still queued are destroyed unrun.
  void Stop();
  // Queues `task`; false (and `task` not kept) when `max_queued` tasks wait or the worker is
  // stopped: the caller answers "busy" itself.
  bool Submit(std::function<void()> task);

 private:
  void Run();

  const size_t max_queued_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool started_ = false, stopping_ = false;
  std::thread thread_;
};

}  // namespace tessera::api
