// HistoryCompactor: the leader's compaction of etcd's history. etcd keeps every version of
// every key until its history is compacted (EtcdStore::CompactHistory says why that fills
// etcd), so the elected head compacts it every interval, as kube-apiserver does
// (--etcd-compaction-interval): each call compacts up to the revision the call before noted,
// so one interval of history always stays.
//
// On its own thread: a call waits for etcd (up to its request timeout per endpoint when etcd
// is cut off), and the head's loop must never wait with it: it steps down at once when the
// lease is lost. A failure is logged once (and again only when its message changes); the
// next success says so. The first call is made at Start, the next ones every interval.
//
// Owner: the HA head, while it leads; the store must outlive it. Thread-safety: construct,
// Start and destroy from one thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "store/etcd_store.h"

namespace tessera::ha {

class HistoryCompactor {
 public:
  // `log` gets one line per failure and per recovery (no newline).
  HistoryCompactor(store::EtcdStore& store, std::chrono::milliseconds interval,
                   std::function<void(const std::string&)> log);
  ~HistoryCompactor();  // stops the thread without waiting out the interval
  HistoryCompactor(const HistoryCompactor&) = delete;
  HistoryCompactor& operator=(const HistoryCompactor&) = delete;

  void Start();
  // The revision etcd was last compacted up to by this compactor; 0 before the first.
  int64_t compacted() const;

 private:
  void Run();

  store::EtcdStore& store_;
  const std::chrono::milliseconds interval_;
  const std::function<void(const std::string&)> log_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;  // guarded by mu_
  int64_t compacted_ = 0;  // guarded by mu_
  std::thread thread_;
};

}  // namespace tessera::ha
