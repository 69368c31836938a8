// PrefillPairing: for a disaggregated Service (a prefill and a decode role, docs/serving.md
// "Prefill and decode roles"), which prefill replica a request sent to a decode replica should
// use, and what became of the handoffs.
//
// The router sends every request of such a Service to a decode replica (the Dispatcher's
// choice) and names a prefill replica in the X-Tessera-Prefill header; decode decides whether
// to use it (the prompt's length against the threshold) and says what it did in the
// X-Tessera-Prefilled response header (remote, local, fallback:<reason>).
//
// The pick is topology-aware: a prefill replica on the decode replica's slice (the same cube
// or slice group: the KV moves over the slice's own links, not across the data-centre network)
// is preferred; among the candidates the one with the fewest prompt tokens queued wins (ties:
// the lower replica index, so the choice is deterministic). Prompt tokens are estimated by the
// request body's length (the example model's tokenizer is bytes; the JSON around the prompt
// makes it an over-estimate) and count as queued from the pick until the decode replica's
// first response byte (the prefill is done by then) or the request's end.
//
// Counts (since the router started): pairs on the same slice, on another slice, and requests
// with no prefill replica to name; decode's answers remote / local / fallback (by reason).
//
// Pure: no I/O, no clock. Not thread-safe; the router's io thread owns it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "proxy/service_view.h"

namespace tessera::proxy {

inline constexpr std::string_view kPrefillHeader = "X-Tessera-Prefill";
inline constexpr std::string_view kPrefilledHeader = "X-Tessera-Prefilled";

struct PairingCounts {
  uint64_t same_slice = 0;   // prefill and decode replica on one slice
  uint64_t other_slice = 0;  // none free there: another slice
  uint64_t no_prefill = 0;   // no ready prefill replica: decode prefills locally
  uint64_t remote = 0;       // decode used the prefill replica
  uint64_t local = 0;        // decode prefilled itself (a short prompt)
  uint64_t fallback = 0;     // decode tried the prefill replica and prefilled itself
  std::map<std::string, uint64_t> fallback_reasons;
  uint64_t unreported = 0;  // the answer carried no X-Tessera-Prefilled
};

class PrefillPairing {
 public:
  // The ready prefill replicas (Endpoint::slice is their locality). Picks in flight keep their
  // charge on a replica that left until Done.
  void SetEndpoints(std::vector<Endpoint> prefill);
  const std::vector<Endpoint>& endpoints() const { return endpoints_; }

  struct Pick {
    Endpoint endpoint;
    bool same_slice = false;
    uint64_t ticket = 0;  // pass to Done
  };
  // The prefill replica for a request of about `prompt_tokens` sent to `decode`; nullopt when
  // there is none (counted as no_prefill).
  std::optional<Pick> Choose(const Endpoint& decode, int64_t prompt_tokens);
  // The pick's prefill is over (first byte, failure or end). Idempotent per ticket.
  void Done(uint64_t ticket);
  // Decode's X-Tessera-Prefilled value ("" when absent).
  void Outcome(std::string_view prefilled);

  const PairingCounts& counts() const { return counts_; }
  // Prompt tokens picked and not yet prefilled: in all, and by prefill replica index.
  int64_t QueuedPromptTokens() const;
  std::map<int, int64_t> QueuedByReplica() const;
  // Picks not yet Done: in all, and by prefill replica index.
  int PendingPicks() const { return static_cast<int>(tickets_.size()); }
  std::map<int, int> PendingByReplica() const;

 private:
  struct Charge {
    std::string key;  // Endpoint::Key()
    int replica = 0;
    int64_t tokens = 0;
  };
  std::vector<Endpoint> endpoints_;
  std::map<std::string, int64_t> queued_;  // key -> tokens
  std::map<uint64_t, Charge> tickets_;
  uint64_t next_ticket_ = 0;
  PairingCounts counts_;
};

}  // namespace tessera::proxy
