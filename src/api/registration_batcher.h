// Registrations committed together. Each registration is a store commit under the
// controller's lock: an fsync with SQLite, a raft round with etcd. When a fleet starts, every
// agent registers at once and each waited for its own commit (10,000 agents: 105 s on SQLite,
// 297 s on etcd). The batcher takes every registration that arrived while the last batch was
// committed and registers them with one commit (Controller::RegisterHosts), so a host costs
// its share of a commit. The HTTP handler answers through Response::Deferred and holds no io
// thread while it waits.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "common/status.h"
#include "protocol/wire.h"

namespace tessera::api {

class RegistrationBatcher {
 public:
  using Json = nlohmann::json;
  using Answer = std::function<void(Result<Json>)>;
  // Registers a batch, one answer per registration in order (Controller::RegisterHosts).
  using RegisterAll =
      std::function<std::vector<Result<Json>>(const std::vector<protocol::Registration>&)>;

  // `after_batch` runs after each batch is answered (the head kicks its loop).
  RegistrationBatcher(RegisterAll register_all, std::function<void()> after_batch,
                      size_t max_batch = 1000);
  ~RegistrationBatcher();  // Stop()
  RegistrationBatcher(const RegistrationBatcher&) = delete;
  RegistrationBatcher& operator=(const RegistrationBatcher&) = delete;

  void Start();
  // Answers what is still queued with kUnavailable ("the head is stopping") and joins.
  void Stop();
  // Queues a registration; `answer` is called once, on the batcher's thread (kUnavailable at
  // once when stopped).
  void Submit(protocol::Registration registration, Answer answer);

 private:
  struct Pending {
    protocol::Registration registration;
    Answer answer;
  };
  void Run();

  RegisterAll register_all_;
  std::function<void()> after_batch_;
  size_t max_batch_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;
  bool started_ = false, stopping_ = false;
  std::thread thread_;
};

}  // namespace tessera::api
