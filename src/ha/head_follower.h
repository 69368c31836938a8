// HeadFollower: which of several heads a client talks to now, and the move to another one when
// it does not serve (docs/ha.md "Following the leader"). Shared by the agent (register,
// heartbeat, assignment watch) and the serving router's head link (service watch, load
// reports), each of which calls it from more than one thread.
//
// A call that fails on the current head (a transport error, or a standby's 503 whose message
// may name the leader) reports it with Failed(index, answer): the follower moves to the leader
// named, when that is one of its heads, else to the next one round the list (head_list.h). Two
// threads that see the same head fail move on once: the second one's Failed finds the head
// already changed and returns nullopt.
//
// Header-only, like head_list.h, so that its users need not link the etcd code.
// Thread-safety: SetHeads() before any other call; then any method from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ha/head_list.h"

namespace tessera::ha {

class HeadFollower {
 public:
  HeadFollower() = default;
  explicit HeadFollower(std::vector<std::string> heads) : heads_(std::move(heads)) {}
  HeadFollower(const HeadFollower&) = delete;
  HeadFollower& operator=(const HeadFollower&) = delete;

  // "host:port" each; the first is used first.
  void SetHeads(std::vector<std::string> heads) {
    heads_ = std::move(heads);
    current_ = 0;
  }
  const std::vector<std::string>& heads() const { return heads_; }
  size_t current() const { return current_.load(); }

  struct Switch {
    size_t from = 0;
    size_t to = 0;
    std::string leader;  // the leader the answer named; "" when the head was unavailable
    // "from=A to=B reason=leader_named|unavailable", for the caller's log line.
    std::string Describe(const std::vector<std::string>& heads) const {
      return "from=" + heads[from] + " to=" + heads[to] +
             (leader.empty() ? " reason=unavailable" : " reason=leader_named");
    }
  };

  // Head `index` did not serve; `answer` is the transport error or the 503's body. The switch
  // made, or nullopt when there is nowhere else to go or another caller already moved on.
  std::optional<Switch> Failed(size_t index, std::string_view answer) {
    const std::string leader = LeaderNamedIn(answer).value_or("");
    const size_t next = NextHead(heads_, index, leader);
    if (next == index) return std::nullopt;
    size_t expected = index;
    if (!current_.compare_exchange_strong(expected, next)) return std::nullopt;
    return Switch{index, next, leader};
  }

 private:
  std::vector<std::string> heads_;
  std::atomic<size_t> current_{0};
};

}  // namespace tessera::ha
