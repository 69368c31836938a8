#include "proxy/dispatcher.h"

#include <algorithm>
#include <set>

namespace tessera::proxy {

int Dispatcher::InFlight(const std::string& key) const {
  auto it = in_flight_.find(key);
  return it == in_flight_.end() ? 0 : it->second;
}

std::vector<Grant> Dispatcher::SetEndpoints(std::vector<Endpoint> endpoints, int max_ongoing,
                                            Rng& rng) {
  max_ongoing_ = std::max(1, max_ongoing);
  // One replica per key: the same address:port listed twice would count its slots twice.
  std::set<std::string> seen;
  endpoints_.clear();
  keys_.clear();
  for (Endpoint& e : endpoints) {
    std::string key = e.Key();
    if (!seen.insert(key).second) continue;
    endpoints_.push_back(std::move(e));
    keys_.push_back(std::move(key));
  }
  // Keys with nothing in flight and no replica are forgotten.
  std::erase_if(in_flight_,
                [&](const auto& kv) { return kv.second == 0 && !seen.count(kv.first); });
  return DrainQueue(rng);
}

std::optional<size_t> Dispatcher::Choose(Rng& rng, const std::string& avoid_key) const {
  std::vector<size_t>& free = free_;
  free.clear();
  std::optional<size_t> avoided;
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    if (InFlight(keys_[i]) >= max_ongoing_) continue;
    if (!avoid_key.empty() && keys_[i] == avoid_key) {
      avoided = i;
      continue;
    }
    free.push_back(i);
  }
  if (free.empty()) return avoided;
  if (free.size() == 1) return free[0];
  const size_t a = rng.Uniform(free.size());
  size_t b = rng.Uniform(free.size() - 1);
  if (b >= a) ++b;
  // A tie goes to the first drawn, so equal replicas share the traffic.
  const int load_a = InFlight(keys_[free[a]]);
  const int load_b = InFlight(keys_[free[b]]);
  return load_b < load_a ? free[b] : free[a];
}

Dispatcher::Admission Dispatcher::Admit(RequestId request, Rng& rng, const std::string& avoid_key) {
  Admission out;
  // Waiting requests go first: a newcomer never overtakes the queue.
  if (queue_.empty()) {
    if (auto i = Choose(rng, avoid_key)) {
      ++in_flight_[keys_[*i]];
      out.outcome = Outcome::kGranted;
      out.endpoint = endpoints_[*i];
      return out;
    }
  }
  if (queue_.size() >= QueueBound()) {
    ++refused_;
    out.outcome = Outcome::kRejected;
    return out;
  }
  queue_.push_back(request);
  out.outcome = Outcome::kQueued;
  return out;
}

std::vector<Grant> Dispatcher::Release(const std::string& endpoint_key, Rng& rng) {
  auto it = in_flight_.find(endpoint_key);
  if (it != in_flight_.end() && it->second > 0) --it->second;
  if (it != in_flight_.end() && it->second == 0) {
    const bool ready = std::find(keys_.begin(), keys_.end(), endpoint_key) != keys_.end();
    if (!ready) in_flight_.erase(it);
  }
  return DrainQueue(rng);
}

std::vector<Grant> Dispatcher::DrainQueue(Rng& rng) {
  std::vector<Grant> granted;
  while (!queue_.empty()) {
    auto i = Choose(rng, {});
    if (!i) break;
    ++in_flight_[keys_[*i]];
    granted.push_back(Grant{queue_.front(), endpoints_[*i]});
    queue_.pop_front();
  }
  return granted;
}

size_t Dispatcher::QueueBound() const {
  if (starting_ == 0) return max_queued_;
  const size_t ready = endpoints_.size();
  const size_t starting = static_cast<size_t>(starting_);
  if (ready == 0) return max_queued_ * starting;
  return max_queued_ * (ready + starting) / ready;
}

bool Dispatcher::Cancel(RequestId request) {
  auto it = std::find(queue_.begin(), queue_.end(), request);
  if (it == queue_.end()) return false;
  queue_.erase(it);
  ++refused_;
  return true;
}

DispatchLoad Dispatcher::Load() const {
  DispatchLoad load;
  for (const auto& [key, n] : in_flight_) load.in_flight += n;
  load.queued = static_cast<int>(queue_.size());
  load.refused = refused_;
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    load.per_replica[endpoints_[i].replica] += InFlight(keys_[i]);
  }
  return load;
}

}  // namespace tessera::proxy
