// SseTokenCounter: the output tokens of a streamed completion, counted from the bytes the router
// relays (text/event-stream, OpenAI's streaming format), so that the router can report the time
// per output token (TPOT) of each role without parsing or buffering the response.
//
// A token is one `data:` event that carries a choice: `data: [DONE]` and the usage chunk of
// `stream_options.include_usage` (its `"choices": []`) are not tokens. The example model server
// (examples/serve) sends one event per token; an OpenAI-compatible server that puts several
// tokens in one event is undercounted by that factor (vLLM and TGI send one per token too).
// Events may be split anywhere across Feed calls; a line is looked at up to kMaxLine bytes (a
// longer event still counts, by its first kMaxLine bytes).
//
// Pure: no I/O, no clock. Not thread-safe (one per request, on the router's io thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tessera::proxy {

class SseTokenCounter {
 public:
  static constexpr size_t kMaxLine = 512;

  // The next bytes of the response body (after any chunked framing is removed).
  void Feed(std::string_view bytes);
  // Token events whose line has ended so far.
  uint64_t tokens() const { return tokens_; }
  void Reset() { *this = SseTokenCounter(); }

 private:
  void EndLine();
  std::string line_;  // the current line, up to kMaxLine bytes
  uint64_t tokens_ = 0;
};

// Time per output token of one stream: from its first body byte (the first token) to its last,
// over the tokens after the first (as vLLM's benchmarks define it); -1 when the stream had
// fewer than two tokens (no time between tokens to measure).
double TimePerOutputToken(double first_byte_s, double end_s, uint64_t tokens);

}  // namespace tessera::proxy
