// ReadLlmTrace (serving_sim.h): the Azure LLM inference trace format, its timestamps and the
// errors that name the line, the column and the fix.
#include <algorithm>
#include <tuple>

#include "common/civil_time.h"
#include "sim/serving_numbers.h"
#include "sim/serving_sim.h"

namespace tessera::sim {
namespace {

constexpr std::string_view kTimestamp = "TIMESTAMP";
constexpr std::string_view kContext = "ContextTokens";
constexpr std::string_view kGenerated = "GeneratedTokens";

std::vector<std::string> SplitCsv(const std::string& line) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t comma = line.find(',', start);
    out.push_back(
        line.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

bool Digits(std::string_view s, size_t at, size_t n, int64_t* out) {
  if (at + n > s.size()) return false;
  int64_t v = 0;
  for (size_t i = at; i < at + n; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + (s[i] - '0');
  }
  *out = v;
  return true;
}

// "YYYY-MM-DD HH:MM:SS[.fraction][Z|+HH:MM|-HH:MM]" -> microseconds since 1970 (fraction
// truncated to us). The 2023 traces carry no zone; the 2024 ones end in "+00:00". A time with
// an offset is taken back to UTC, so a trace that changes offset stays in order.
std::optional<int64_t> ParseTimestamp(std::string_view s) {
  int64_t offset_us = 0;
  if (!s.empty() && s.back() == 'Z') {
    s.remove_suffix(1);
  } else if (s.size() >= 25 && (s[s.size() - 6] == '+' || s[s.size() - 6] == '-') &&
             s[s.size() - 3] == ':') {
    int64_t oh, om;
    if (!Digits(s, s.size() - 5, 2, &oh) || !Digits(s, s.size() - 2, 2, &om) || oh > 23 || om > 59)
      return std::nullopt;
    offset_us = (oh * 60 + om) * 60'000'000 * (s[s.size() - 6] == '-' ? -1 : 1);
    s.remove_suffix(6);
  }
  if (s.size() < 19) return std::nullopt;
  const std::optional<int64_t> seconds = ParseDateTime(s.substr(0, 19), /*max_second=*/60);
  if (!seconds) return std::nullopt;
  int64_t us = 0;
  if (s.size() > 19) {
    if (s[19] != '.' || s.size() == 20) return std::nullopt;
    int64_t scale = 100'000;
    for (size_t i = 20; i < s.size(); ++i) {
      if (s[i] < '0' || s[i] > '9') return std::nullopt;
      us += (s[i] - '0') * scale;
      scale /= 10;
    }
  }
  return *seconds * 1'000'000 + us - offset_us;
}

}  // namespace

Result<LlmTrace> ReadLlmTrace(std::istream& in, std::string_view source) {
  const std::string name(source);
  const std::string expected = "TIMESTAMP,ContextTokens,GeneratedTokens";
  LlmTrace trace;
  trace.source = name;
  std::string line;
  if (!std::getline(in, line))
    return InvalidArgument(name + ":1: the file is empty; expected the header " + expected);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  const std::vector<std::string> header = SplitCsv(line);
  int col_time = -1, col_context = -1, col_generated = -1;
  for (size_t i = 0; i < header.size(); ++i) {
    if (header[i] == kTimestamp) col_time = static_cast<int>(i);
    if (header[i] == kContext) col_context = static_cast<int>(i);
    if (header[i] == kGenerated) col_generated = static_cast<int>(i);
  }
  for (auto [col, column] : {std::pair{col_time, kTimestamp}, std::pair{col_context, kContext},
                             std::pair{col_generated, kGenerated}})
    if (col < 0)
      return InvalidArgument(name + ":1: header: no column " + std::string(column) +
                             " (the header is '" + line + "'); the trace needs the columns " +
                             expected);
  const size_t needed = static_cast<size_t>(std::max({col_time, col_context, col_generated})) + 1;
  int64_t number = 1, first_us = 0, previous_us = 0;
  std::string previous_text;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const std::vector<std::string> fields = SplitCsv(line);
    const std::string at = name + ":" + std::to_string(number) + ": column ";
    if (fields.size() < needed) {
      std::string_view missing;
      int missing_col = 1 << 30;
      for (auto [col, column] : {std::pair{col_time, kTimestamp}, std::pair{col_context, kContext},
                                 std::pair{col_generated, kGenerated}})
        if (static_cast<size_t>(col) >= fields.size() && col < missing_col)
          missing_col = col, missing = column;
      return InvalidArgument(at + std::string(missing) + ": missing (the row has " +
                             std::to_string(fields.size()) + " fields, the header " +
                             std::to_string(header.size()) + ")");
    }
    const std::string& stamp = fields[static_cast<size_t>(col_time)];
    const std::optional<int64_t> t = ParseTimestamp(stamp);
    if (!t)
      return InvalidArgument(at + "TIMESTAMP: '" + stamp +
                             "' is not a timestamp YYYY-MM-DD HH:MM:SS[.fraction][+HH:MM]");
    LlmRequest r;
    r.line = number;
    if (trace.requests.empty()) first_us = *t;
    if (!trace.requests.empty() && *t < previous_us)
      return InvalidArgument(at + "TIMESTAMP: " + stamp + " is earlier than the row before it (" +
                             previous_text + "); the trace must be in arrival order");
    previous_us = *t;
    previous_text = stamp;
    r.arrival_us = *t - first_us;
    for (auto [col, column, minimum, out] :
         {std::tuple{col_context, kContext, 1, &r.context_tokens},
          std::tuple{col_generated, kGenerated, 0, &r.generated_tokens}}) {
      const std::string& text = fields[static_cast<size_t>(col)];
      const std::optional<int> v = ParseCount(text);
      if (!v)
        return InvalidArgument(at + std::string(column) + ": '" + text + "' is not a whole number");
      if (*v < minimum)
        return InvalidArgument(at + std::string(column) + ": must be at least " +
                               std::to_string(minimum) + ", got " + text);
      *out = *v;
    }
    trace.requests.push_back(r);
  }
  if (trace.requests.empty()) return InvalidArgument(name + ": no requests after the header");
  return trace;
}

}  // namespace tessera::sim
