#include "ha/elector.h"

#include <algorithm>
#include <chrono>
#include <utility>

namespace tessera::ha {

using nlohmann::json;
namespace etcd = store::etcd;

namespace {
int64_t SteadyNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The elector's calls end within the renew deadline: a renewal still waiting after it cannot
// keep the lease, and a leader cut off from etcd must find out in time to step down. A call
// tries each endpoint in turn, so each connect (and TLS handshake) gets an equal share of the
// deadline with one share left over.
store::EtcdOptions BoundedByRenewDeadline(store::EtcdOptions etcd, const ElectionConfig& config) {
  const auto n = static_cast<int64_t>(std::max<size_t>(1, etcd.endpoints.size()));
  const std::chrono::milliseconds connect_share{config.renew_deadline.count() / (n + 1)};
  etcd.connect_timeout =
      std::max(std::chrono::milliseconds{50}, std::min(etcd.connect_timeout, connect_share));
  etcd.request_timeout = std::min(etcd.request_timeout, config.renew_deadline);
  return etcd;
}
}  // namespace

Elector::Elector(ElectorOptions options)
    : options_(std::move(options)),
      client_(BoundedByRenewDeadline(options_.etcd, options_.config)),
      state_(options_.config) {
  if (!options_.now_ms) options_.now_ms = SteadyNowMs;
}

Elector::~Elector() { Stop(); }

Status Elector::Start() {
  TESSERA_RETURN_IF_ERROR(ValidateElectionConfig(options_.config));
  if (options_.identity.empty()) return InvalidArgument("elector: identity must not be empty");
  thread_ = std::thread([this] { Run(); });
  return Status::Ok();
}

void Elector::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

LeaderInfo Elector::Snapshot() const {
  std::lock_guard lock(mu_);
  return info_;
}

void Elector::Run() {
  while (true) {
    const int64_t now = options_.now_ms();
    const Decision d = state_.Next(now);
    switch (d.action) {
      case Action::kAcquire:
        Acquire(now);
        break;
      case Action::kRenew:
        Renew(now);
        break;
      case Action::kStepDown:
        StepDown("could not renew the leader lease for " +
                 std::to_string(options_.config.renew_deadline.count()) +
                 " ms (renew deadline); stepping down before the lease can expire for others");
        break;
      case Action::kNone:
      case Action::kWait:
        break;
    }
    std::unique_lock lock(mu_);
    if (stopping_) break;
    if (d.action == Action::kWait || d.action == Action::kNone) {
      const int64_t wait = d.action == Action::kNone ? 1'000 : std::max<int64_t>(d.at_ms - now, 1);
      cv_.wait_for(lock, std::chrono::milliseconds(wait), [&] { return stopping_; });
      if (stopping_) break;
    }
  }
  // Leaving while leading: hand over now rather than after the lease.
  if (state_.role() == Role::kLeader && lease_id_ != 0) {
    Status revoked = client_.LeaseRevoke(lease_id_);
    state_.StepDown();
    std::lock_guard lock(mu_);
    info_.role = Role::kSteppedDown;
    if (!revoked.ok()) info_.last_error = revoked.message();
  }
}

void Elector::Acquire(int64_t now) {
  const std::string key = this->key();
  auto fail = [&](const std::string& error) {
    state_.OnNotAcquired(options_.now_ms());
    std::lock_guard lock(mu_);
    info_.last_error = error;
  };
  // A candidate's lease is kept for its next attempt (and expires by itself if the head dies);
  // one that ran out in the meantime is replaced.
  if (lease_id_ != 0 && !client_.LeaseKeepAlive(lease_id_).ok()) lease_id_ = 0;
  if (lease_id_ == 0) {
    auto lease = client_.LeaseGrant(options_.config.lease.count() / 1000);
    if (!lease.ok()) return fail(lease.status().message());
    lease_id_ = *lease;
  }
  json txn = {{"compare", json::array({etcd::CompareCreateRevision(key, 0)})},
              {"success", json::array({etcd::Put(key, options_.identity, lease_id_)})},
              {"failure", json::array({etcd::GetRange(key)})}};
  auto answer = client_.Call("/v3/kv/txn", txn);
  if (!answer.ok()) return fail(answer.status().message());
  if (answer->value("succeeded", false)) {
    // The key was created by this txn, so its create_revision is the txn's revision.
    const int64_t term = etcd::Int((*answer)["header"], "revision");
    state_.OnAcquired(now, term);
    {
      std::lock_guard lock(mu_);
      info_ = LeaderInfo{Role::kLeader, term, options_.identity, ""};
    }
    if (options_.on_elected) options_.on_elected(term);
    return;
  }
  const json& responses = (*answer)["responses"];
  auto holder = responses.is_array() && !responses.empty()
                    ? etcd::DecodeRange(responses[0].value("response_range", json::object()))
                    : Result<store::EtcdRange>(Unavailable("etcd txn: no range in the answer"));
  if (holder.ok() && !holder->kvs.empty() && holder->kvs[0].lease == lease_id_) {
    // Our own earlier attempt created the key, but its answer was lost (a timeout).
    const int64_t term = holder->kvs[0].create_revision;
    state_.OnAcquired(now, term);
    {
      std::lock_guard lock(mu_);
      info_ = LeaderInfo{Role::kLeader, term, options_.identity, ""};
    }
    if (options_.on_elected) options_.on_elected(term);
    return;
  }
  state_.OnNotAcquired(options_.now_ms());
  std::lock_guard lock(mu_);
  info_.role = Role::kCandidate;
  if (holder.ok() && !holder->kvs.empty()) {
    info_.leader = holder->kvs[0].value;
    info_.term = holder->kvs[0].create_revision;
    info_.last_error.clear();
  } else {
    info_.leader.clear();
  }
}

void Elector::Renew(int64_t now) {
  auto ttl = client_.LeaseKeepAlive(lease_id_);
  if (!ttl.ok()) {
    if (ttl.status().code() == StatusCode::kNotFound) {
      return StepDown("the leader lease expired in etcd (" + ttl.status().message() + ")");
    }
    state_.OnRenewFailed(options_.now_ms());
    std::lock_guard lock(mu_);
    info_.last_error = ttl.status().message();
    return;
  }
  // The key must still be ours: same term.
  auto range = client_.Range(key());
  if (!range.ok()) {
    state_.OnRenewFailed(options_.now_ms());
    std::lock_guard lock(mu_);
    info_.last_error = range.status().message();
    return;
  }
  if (range->kvs.empty() || range->kvs[0].create_revision != state_.term()) {
    return StepDown("the leader key is no longer this head's (term " +
                    std::to_string(state_.term()) + ")");
  }
  state_.OnRenewed(now);
  std::lock_guard lock(mu_);
  info_.last_error.clear();
}

void Elector::StepDown(const std::string& reason) {
  state_.StepDown();
  {
    std::lock_guard lock(mu_);
    info_.role = Role::kSteppedDown;
    info_.leader.clear();
    info_.last_error = reason;
  }
  if (options_.on_stepped_down) options_.on_stepped_down(reason);
}

}  // namespace tessera::ha
