// Strict number parsers of the serving simulator's inputs (the trace's token counts, the
// scaling configurations' counts and seconds). Internal to tessera_serving_sim; pure.
#pragma once

#include <charconv>
#include <cmath>
#include <optional>
#include <string_view>

namespace tessera::sim {

// A whole number of 1 to 9 digits, no sign; nullopt for anything else.
inline std::optional<int> ParseCount(std::string_view s) {
  if (s.empty() || s.size() > 9) return std::nullopt;
  int v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s[0] == '+' || s[0] == '-')
    return std::nullopt;
  return v;
}

// A finite decimal number, the whole of `s`; nullopt for anything else.
inline std::optional<double> ParseNumber(std::string_view s) {
  if (s.empty()) return std::nullopt;
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

}  // namespace tessera::sim
