#include "proxy/disagg_pairing.h"

#include <algorithm>
#include <tuple>

namespace tessera::proxy {

void PrefillPairing::SetEndpoints(std::vector<Endpoint> prefill) {
  endpoints_ = std::move(prefill);
}

std::optional<PrefillPairing::Pick> PrefillPairing::Choose(const Endpoint& decode,
                                                           int64_t prompt_tokens) {
  const Endpoint* best = nullptr;
  auto rank = [&](const Endpoint& e) {
    const bool near = !decode.slice.empty() && e.slice == decode.slice;
    auto q = queued_.find(e.Key());
    return std::make_tuple(near ? 0 : 1, q == queued_.end() ? 0 : q->second, e.replica);
  };
  for (const Endpoint& e : endpoints_)
    if (best == nullptr || rank(e) < rank(*best)) best = &e;
  if (best == nullptr) {
    ++counts_.no_prefill;
    return std::nullopt;
  }
  Pick pick;
  pick.endpoint = *best;
  pick.same_slice = !decode.slice.empty() && best->slice == decode.slice;
  ++(pick.same_slice ? counts_.same_slice : counts_.other_slice);
  pick.ticket = ++next_ticket_;
  const int64_t tokens = std::max<int64_t>(prompt_tokens, 0);
  queued_[best->Key()] += tokens;
  tickets_[pick.ticket] = {best->Key(), best->replica, tokens};
  return pick;
}

void PrefillPairing::Done(uint64_t ticket) {
  auto it = tickets_.find(ticket);
  if (it == tickets_.end()) return;
  auto q = queued_.find(it->second.key);
  if (q != queued_.end()) {
    q->second -= it->second.tokens;
    if (q->second <= 0) queued_.erase(q);
  }
  tickets_.erase(it);
}

void PrefillPairing::Outcome(std::string_view prefilled) {
  if (prefilled == "remote") {
    ++counts_.remote;
  } else if (prefilled == "local") {
    ++counts_.local;
  } else if (prefilled.substr(0, 9) == "fallback:") {
    ++counts_.fallback;
    // A metric label: kept short and to [a-z_] whatever a replica sends.
    std::string reason;
    for (char c : prefilled.substr(9, 32))
      if ((c >= 'a' && c <= 'z') || c == '_') reason += c;
    if (reason.empty()) reason = "unknown";
    ++counts_.fallback_reasons[reason];
  } else {
    ++counts_.unreported;
  }
}

int64_t PrefillPairing::QueuedPromptTokens() const {
  int64_t sum = 0;
  for (const auto& [key, tokens] : queued_) sum += tokens;
  return sum;
}

std::map<int, int64_t> PrefillPairing::QueuedByReplica() const {
  std::map<int, int64_t> out;
  for (const Endpoint& e : endpoints_) out[e.replica] = 0;
  for (const auto& [ticket, charge] : tickets_) out[charge.replica] += charge.tokens;
  return out;
}

std::map<int, int> PrefillPairing::PendingByReplica() const {
  std::map<int, int> out;
  for (const Endpoint& e : endpoints_) out[e.replica] = 0;
  for (const auto& [ticket, charge] : tickets_) ++out[charge.replica];
  return out;
}

}  // namespace tessera::proxy
