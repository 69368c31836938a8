#include "ha/history_compactor.h"

#include <utility>

namespace tessera::ha {

HistoryCompactor::HistoryCompactor(store::EtcdStore& store, std::chrono::milliseconds interval,
                                   std::function<void(const std::string&)> log)
    : store_(store), interval_(interval), log_(std::move(log)) {}

HistoryCompactor::~HistoryCompactor() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void HistoryCompactor::Start() {
  thread_ = std::thread([this] { Run(); });
}

int64_t HistoryCompactor::compacted() const {
  std::lock_guard lock(mu_);
  return compacted_;
}

void HistoryCompactor::Run() {
  std::string failing;  // the last failure logged; empty while calls succeed
  while (true) {
    auto compacted = store_.CompactHistory();
    if (compacted.ok()) {
      if (*compacted > 0) {
        std::lock_guard lock(mu_);
        compacted_ = *compacted;
      }
      if (!failing.empty())
        log_("etcd's history is compacted again (up to revision " + std::to_string(*compacted) +
             ")");
      failing.clear();
    } else if (compacted.status().message() != failing) {
      failing = compacted.status().message();
      log_(failing + "; retrying every " + std::to_string(interval_.count()) + " ms");
    }
    std::unique_lock lock(mu_);
    if (wake_.wait_for(lock, interval_, [this] { return stopping_; })) return;
  }
}

}  // namespace tessera::ha
