// Elector: runs ElectionState (election.h) against etcd on its own thread. It campaigns for
// `<prefix>leader` with a lease, renews it while leading, and reports who leads.
//
// The leader key holds this head's identity (its API address, what standbys show as the
// leader). Its create_revision is the term. Callbacks run on the elector's thread:
//   on_elected(term)          this head now leads; set the store fence before writing
//   on_stepped_down(reason)   this head no longer leads (final); stop writing and exit
// Stop() revokes the lease when leading, so a standby takes over at its next retry instead of
// after the lease.
//
// Thread-safety: Start/Stop from one thread; Snapshot() from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "ha/election.h"
#include "store/etcd_client.h"

namespace tessera::ha {

struct ElectorOptions {
  store::EtcdOptions etcd;
  std::string prefix = "/tessera/";  // the key is prefix + "leader"
  std::string identity;              // e.g. "127.0.0.1:8080"; must not be empty
  ElectionConfig config;
  // Milliseconds of a monotonic clock; steady_clock unless a test injects another.
  std::function<int64_t()> now_ms;
  std::function<void(int64_t term)> on_elected;
  std::function<void(const std::string& reason)> on_stepped_down;
};

struct LeaderInfo {
  Role role = Role::kCandidate;
  int64_t term = 0;        // this head's term when leading; the leader's term otherwise
  std::string leader;      // the leader's identity; empty when nobody leads (or unknown)
  std::string last_error;  // the last etcd error, for /healthz
};

class Elector {
 public:
  explicit Elector(ElectorOptions options);
  ~Elector();
  Elector(const Elector&) = delete;
  Elector& operator=(const Elector&) = delete;

  // kInvalidArgument for a bad config or an empty identity.
  Status Start();
  void Stop();

  LeaderInfo Snapshot() const;
  std::string key() const { return options_.prefix + "leader"; }

 private:
  void Run();
  void Acquire(int64_t now);
  void Renew(int64_t now);
  void StepDown(const std::string& reason);

  ElectorOptions options_;
  store::EtcdClient client_;
  ElectionState state_;
  int64_t lease_id_ = 0;  // the elector thread only

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;  // guarded by mu_
  LeaderInfo info_;        // guarded by mu_
  std::thread thread_;
};

}  // namespace tessera::ha
