// Bounded JSON parsing: the one way tessera parses JSON that arrives from the network or disk.
//
// nlohmann's parser is iterative, but dumping, copying and walking a document recurse, so a body
// of 100,000 nested arrays parses fine and crashes the process later. ParseJson refuses, while
// parsing, what no tessera document or message needs:
//   - nesting deeper than JsonLimits::max_depth (64) lists and objects,
//   - an object that repeats a key (JSON would keep the last silently; YAML refuses; both refuse),
//   - more than JsonLimits::max_values values, when a limit is set.
// Every refusal is an InvalidArgument whose message starts with `what` (the field the caller
// names, e.g. "body" or "heartbeat"), gives the path inside the document where it happened and
// says what the limit is. Malformed text gives "<what>: malformed JSON: ..." with the position.
//
// Owned by src/common (library tessera_json_limits, which links nlohmann-json, header-only; the
// rest of common links nothing). Thread-safety: stateless functions.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tessera {

// Deep enough for any document tessera reads (a TrainJob is 5 levels deep); shallow enough that
// recursive code over the result (dump, copy, compare) stays far from the stack's end.
inline constexpr int kMaxJsonDepth = 64;

struct JsonLimits {
  // Lists and objects nested inside each other, the outermost counting as 1; deeper is refused.
  int max_depth = kMaxJsonDepth;
  // Values of any kind (each scalar, list and object counts 1); 0 means no limit beyond the
  // size of the text.
  size_t max_values = 0;
};

// Parses `text` as exactly one JSON value (trailing non-space text is an error). See above for
// what is refused; `what` names the input in error messages.
Result<nlohmann::json> ParseJson(std::string_view text, std::string_view what,
                                 const JsonLimits& limits = {});

// `text` as it may appear inside an error message: at most `max_chars` characters, control
// characters, quotes, backslashes and non-ASCII bytes written as \xNN, in single quotes.
std::string ShownText(std::string_view text, size_t max_chars = 64);

// The offset of the first byte of `text` that does not belong to a well-formed UTF-8 sequence
// (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF), or npos when all of it
// is UTF-8. JSON text is checked by ParseJson; YAML scalars are checked with this.
size_t FirstInvalidUtf8(std::string_view text);

}  // namespace tessera
