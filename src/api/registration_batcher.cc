#include "api/registration_batcher.h"

#include <utility>

namespace tessera::api {

RegistrationBatcher::RegistrationBatcher(RegisterAll register_all,
                                         std::function<void()> after_batch, size_t max_batch)
    : register_all_(std::move(register_all)),
      after_batch_(std::move(after_batch)),
      max_batch_(max_batch < 1 ? 1 : max_batch) {}

RegistrationBatcher::~RegistrationBatcher() { Stop(); }

void RegistrationBatcher::Start() {
  std::lock_guard lock(mu_);
  if (started_ || stopping_) return;
  started_ = true;
  thread_ = std::thread([this] { Run(); });
}

void RegistrationBatcher::Stop() {
  std::deque<Pending> left;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  {
    std::lock_guard lock(mu_);
    left.swap(queue_);
  }
  for (Pending& p : left) p.answer(Unavailable("the head is stopping; register again"));
}

void RegistrationBatcher::Submit(protocol::Registration registration, Answer answer) {
  {
    std::lock_guard lock(mu_);
    if (!stopping_) {
      queue_.push_back({std::move(registration), std::move(answer)});
      cv_.notify_one();
      return;
    }
  }
  answer(Unavailable("the head is stopping; register again"));
}

void RegistrationBatcher::Run() {
  while (true) {
    std::vector<Pending> batch;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      while (!queue_.empty() && batch.size() < max_batch_) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    std::vector<protocol::Registration> registrations;
    registrations.reserve(batch.size());
    for (const Pending& p : batch) registrations.push_back(p.registration);
    std::vector<Result<Json>> answers = register_all_(registrations);
    for (size_t i = 0; i < batch.size(); ++i)
      batch[i].answer(i < answers.size() ? std::move(answers[i])
                                         : Result<Json>(Internal("no answer for a registration")));
    if (after_batch_) after_batch_();
  }
}

}  // namespace tessera::api
