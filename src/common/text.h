// Small text helpers for the formats tessera reads (flags, HTTP, etcd keys, traces, device
// reports) and the errors it writes about them.
// Pure; stateless.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tessera {

// The decimal integer `text` is, or nullopt when it is empty, out of range or holds anything
// else (a sign other than a leading '-', spaces, a fraction).
inline std::optional<int64_t> ParseInt(std::string_view text) {
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// `text` without the spaces, tabs and line ends around it.
inline std::string Trim(std::string_view text) {
  const char* space = " \t\r\n";
  const size_t first = text.find_first_not_of(space);
  if (first == std::string_view::npos) return "";
  const size_t last = text.find_last_not_of(space);
  return std::string(text.substr(first, last - first + 1));
}

// `text` in single quotes for an error message: its first 200 bytes, control bytes shown as '?',
// "..." when cut.
inline std::string Quote(std::string_view text) {
  std::string out = "'";
  for (char c : text.substr(0, 200)) {
    out += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? '?' : c;
  }
  if (text.size() > 200) out += "...";
  return out + "'";
}

}  // namespace tessera
