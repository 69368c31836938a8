// Several head addresses, and who leads among them: the small pure rules the agents and the CLI
// share to follow the leader of an HA control plane (docs/ha.md "Following the leader").
//
// A standby answers what it does not serve with 503 and a message naming the leader
// ("... the leader is at 127.0.0.1:8081 (term 7)"), and the same address in the JSON field
// "leader" and the header X-Tessera-Leader. LeaderNamedIn finds it in a message or body, so a
// client can go there; NextHead says which address to try after a failure.
//
// Header-only so that the agent and the CLI use it without linking the etcd code.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::ha {

// The phrase a standby's 503 uses before the leader's address.
inline constexpr std::string_view kLeaderIsAt = "the leader is at ";
// The header a standby's 503 carries with the leader's address.
inline constexpr std::string_view kLeaderHeader = "X-Tessera-Leader";

// "a,b,,c " -> {"a","b","c"}: the comma-separated items, trimmed, empty ones dropped.
inline std::vector<std::string> SplitHeadList(std::string_view text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view item = text.substr(start, end - start);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (!item.empty()) out.emplace_back(item);
    start = end + 1;
  }
  return out;
}

// The leader's "host:port" named in a standby's error message or body, or nullopt.
inline std::optional<std::string> LeaderNamedIn(std::string_view text) {
  const size_t at = text.find(kLeaderIsAt);
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = text.substr(at + kLeaderIsAt.size());
  size_t end = 0;
  while (end < rest.size() && rest[end] != ' ' && rest[end] != '"' && rest[end] != ',' &&
         rest[end] != ';' && rest[end] != ')')
    ++end;
  if (end == 0 || rest.substr(0, end).find(':') == std::string_view::npos) return std::nullopt;
  return std::string(rest.substr(0, end));
}

// Which of `heads` ("host:port" each) to try after `failed` did not serve: the leader it named
// (`leader`, "" for none) when that is one of them, else the next one round the list.
inline size_t NextHead(const std::vector<std::string>& heads, size_t failed,
                       std::string_view leader) {
  if (heads.empty()) return 0;
  if (!leader.empty()) {
    for (size_t i = 0; i < heads.size(); ++i)
      if (heads[i] == leader) return i;
  }
  return (failed + 1) % heads.size();
}

}  // namespace tessera::ha
