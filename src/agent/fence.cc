#include "agent/fence.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

namespace tessera::agent {
namespace {

constexpr size_t kMaxRefusals = 64;
constexpr size_t kMaxUidsTracked = 4096;

}  // namespace

FenceAction FencePolicyFor(protocol::WorkloadKind kind) {
  return kind == protocol::WorkloadKind::kService ? FenceAction::kKeepRunning : FenceAction::kStop;
}

protocol::WorkloadKind KindOf(const protocol::Assignment& a) {
  if (a.kind != protocol::WorkloadKind::kUnknown) return a.kind;
  return a.env.count("TESSERA_SERVICE") ? protocol::WorkloadKind::kService
                                        : protocol::WorkloadKind::kTrainJob;
}

void AgentFence::Contact(int64_t now_ms) {
  last_contact_ms_ = now_ms;
  contacted_ = true;
}

int64_t AgentFence::deadline_ms() const {
  return enabled() && contacted_ ? last_contact_ms_ + fence_ms_ : 0;
}

bool AgentFence::Over(int64_t now_ms) const {
  return enabled() && contacted_ && now_ms >= last_contact_ms_ + fence_ms_;
}

std::string AgentFence::CheckTerm(uint64_t term) {
  if (term < term_) {
    return "stale term: the snapshot is of term " + std::to_string(term) +
           " but this agent has seen term " + std::to_string(term_) +
           (term == 0 ? " (the head sends no term: it is older than fencing)" : "") +
           "; a newer head has taken over, so nothing of it is applied";
  }
  if (term > term_) changed_ = true;
  term_ = term;
  return "";
}

std::string AgentFence::CheckAttempt(const protocol::WorkerKey& key) {
  auto it = newest_attempt_.find(key.uid);
  if (it != newest_attempt_.end() && key.attempt < it->second) {
    return "stale attempt: attempt " + std::to_string(key.attempt) + " of " + key.job +
           " is older than attempt " + std::to_string(it->second) +
           " this agent has already been given; not started";
  }
  if (it == newest_attempt_.end() || key.attempt > it->second) changed_ = true;
  newest_attempt_[key.uid] = key.attempt;
  while (newest_attempt_.size() > kMaxUidsTracked) newest_attempt_.erase(newest_attempt_.begin());
  return "";
}

void AgentFence::Remember(const FenceMemory& memory) {
  term_ = std::max(term_, memory.term);
  for (const auto& [uid, attempt] : memory.newest_attempt) {
    int& newest = newest_attempt_[uid];
    newest = std::max(newest, attempt);
  }
  while (newest_attempt_.size() > kMaxUidsTracked) newest_attempt_.erase(newest_attempt_.begin());
}

void AgentFence::Refuse(protocol::Refusal refusal) {
  if (refusal.reason.size() > 1024) refusal.reason.resize(1024);
  refusals_.push_back(std::move(refusal));
  if (refusals_.size() > kMaxRefusals)
    refusals_.erase(refusals_.begin(), refusals_.begin() + static_cast<std::ptrdiff_t>(
                                                               refusals_.size() - kMaxRefusals));
}

std::vector<protocol::Refusal> AgentFence::TakeRefusals() {
  std::vector<protocol::Refusal> out;
  out.swap(refusals_);
  return out;
}

void AgentFence::Restore(std::vector<protocol::Refusal> refusals) {
  refusals.insert(refusals.end(), refusals_.begin(), refusals_.end());
  refusals_.clear();
  for (protocol::Refusal& r : refusals) Refuse(std::move(r));
}

Status WriteContactFile(const std::string& path, int64_t contact_ms) {
  const std::string temp = path + ".tmp";
  const std::string text = std::to_string(contact_ms) + "\n";
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Unavailable(temp + ": " + std::strerror(errno));
  const ssize_t n = ::write(fd, text.data(), text.size());
  const int write_errno = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size()))
    return Unavailable(temp + ": short write: " + std::strerror(write_errno));
  if (::rename(temp.c_str(), path.c_str()) != 0)
    return Unavailable(path + ": " + std::strerror(errno));
  return Status::Ok();
}

int64_t MonotonicNowMs() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
}

}  // namespace tessera::agent
