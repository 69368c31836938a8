// Dispatcher: which replica of one Service serves the next request, and who waits.
//
// Each replica (a ready endpoint) takes at most `max_ongoing` requests at once. A request is
// given a replica by power of two choices: two distinct replicas with a free slot are drawn
// from the caller's Rng and the one with fewer requests in flight wins (a tie goes to the
// first drawn, so equal replicas share the traffic; a seed replays the same choices). When no
// replica has a free slot the request waits in a FIFO queue of at most `max_queued` entries;
// beyond that it is rejected (the router answers 503 with Retry-After). A slot freed by
// Release(), or replicas added by SetEndpoints(), go to the queue's head first.
//
// The bound is for the capacity the Service has. While groups are starting (a rolling update's
// surge group, a scale-up, a recreated group: SetStarting), it is for the capacity it will
// have: max_queued * (ready + starting) / ready replicas (max_queued * starting with none
// ready), so a request arriving while capacity is on its way waits, bounded by the router's
// queue timeout, instead of being refused.
//
// Pure: no I/O, no clock, no threads (queue timeouts are the caller's: it calls Cancel()).
// Not thread-safe; the router touches it from its io thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/rng.h"
#include "proxy/service_view.h"

namespace tessera::proxy {

// Identifies one waiting or dispatched request; chosen by the caller, unique per dispatcher.
using RequestId = uint64_t;

struct Grant {
  RequestId request = 0;
  Endpoint endpoint;
};

// The service's load, as the router reports it to the head and on /metrics.
struct DispatchLoad {
  int in_flight = 0;  // summed over replicas, including replicas that left but still finish
  int queued = 0;
  std::map<int, int> per_replica;  // replica -> in flight, ready replicas only
  // Since the dispatcher was made: requests that left unserved, rejected with the queue full or
  // cancelled while queued (queue timeout, client gone). The autoscaler counts them as arrivals.
  uint64_t refused = 0;
};

class Dispatcher {
 public:
  explicit Dispatcher(size_t max_queued) : max_queued_(max_queued) {}

  // Replaces the ready replicas and their per-replica limit (>= 1). Requests in flight on a
  // replica that left keep their slot until released. Returns the queued requests that the
  // new capacity admits, in FIFO order.
  std::vector<Grant> SetEndpoints(std::vector<Endpoint> endpoints, int max_ongoing, Rng& rng);

  enum class Outcome { kGranted, kQueued, kRejected };
  struct Admission {
    Outcome outcome = Outcome::kRejected;
    Endpoint endpoint;  // when kGranted
  };
  // Gives `request` a replica, or queues it, or rejects it (queue full). `avoid_key` (an
  // Endpoint::Key()) is passed over when another replica has a free slot: a retry after that
  // replica failed. A request that is already queued or in flight must not be admitted again.
  Admission Admit(RequestId request, Rng& rng, const std::string& avoid_key = {});

  // Frees the slot `request` held on the replica with key `endpoint_key`. Returns the queued
  // requests now granted (at most one, unless the limit rose). Releasing an unknown key is a
  // no-op (idempotent per slot is the caller's duty: release each grant once).
  std::vector<Grant> Release(const std::string& endpoint_key, Rng& rng);

  // Removes a queued request (its wait timed out or its client left). False if it was not
  // queued (already granted, or never queued).
  bool Cancel(RequestId request);

  // Groups of the Service that are starting and will add replicas (>= 0); see the class
  // comment. Returns nothing: a higher bound admits no queued request, it only queues more.
  void SetStarting(int groups) { starting_ = groups < 0 ? 0 : groups; }
  // The queue bound in force: max_queued, scaled while groups are starting.
  size_t QueueBound() const;

  DispatchLoad Load() const;
  const std::vector<Endpoint>& endpoints() const { return endpoints_; }
  int max_ongoing() const { return max_ongoing_; }
  size_t queued() const { return queue_.size(); }
  size_t max_queued() const { return max_queued_; }

 private:
  // Index into endpoints_ of the replica P2C picks among those with a free slot, skipping
  // `avoid_key` unless it is the only one; nullopt when every replica is full.
  std::optional<size_t> Choose(Rng& rng, const std::string& avoid_key) const;
  std::vector<Grant> DrainQueue(Rng& rng);
  int InFlight(const std::string& key) const;

  const size_t max_queued_;
  int max_ongoing_ = kDefaultMaxOngoingRequests;
  int starting_ = 0;
  std::vector<Endpoint> endpoints_;       // ready replicas, one per key, in endpoint order
  std::vector<std::string> keys_;         // endpoints_[i].Key(), built once per SetEndpoints
  std::map<std::string, int> in_flight_;  // by key; keys of departed replicas stay until 0
  mutable std::vector<size_t> free_;      // Choose()'s scratch list, kept to save allocations
  std::deque<RequestId> queue_;
  uint64_t refused_ = 0;  // DispatchLoad::refused
};

}  // namespace tessera::proxy
