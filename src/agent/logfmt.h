// Values in the agent's log lines, which are logfmt (`event key=value ...`, src/agent/README.md).
//
// Thread-safety: stateless functions.
#pragma once

#include <string>
#include <string_view>

namespace tessera::agent {

// `s` in double quotes, with '"' and '\' escaped: always safe as a value.
inline std::string LogfmtQuoted(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// `s` as it is when it needs no quotes (not empty; no space, '"' or '='), else LogfmtQuoted.
inline std::string LogfmtValue(std::string_view s) {
  if (!s.empty() && s.find_first_of(" \"=") == std::string_view::npos) return std::string(s);
  return LogfmtQuoted(s);
}

}  // namespace tessera::agent
