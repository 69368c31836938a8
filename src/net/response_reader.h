// ResponseReader: an incremental reader of HTTP/1.1 responses on a byte stream, for clients
// that drive their own sockets (DuplexClient, the control-plane load generator): a status line
// and header, then a Content-Length or chunked body, message after message (keep-alive).
//
// Pure (no I/O): bytes go in through Feed, events come out through the callbacks, in order.
// Not thread-safe: one owner.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace tessera::net {

class ResponseReader {
 public:
  // The status line and header of a response were read: its status code.
  std::function<void(int status)> on_header;
  // Body bytes, in order (a chunked body without its framing).
  std::function<void(std::string_view data)> on_data;
  // The response's body is complete (the next bytes start another response).
  std::function<void()> on_end;

  // Reads `bytes`, calling the callbacks for what they complete. False when they are not an
  // HTTP/1.1 response (the caller should drop the connection); the reader is then spent.
  bool Feed(std::string_view bytes);

 private:
  enum class State { kHeader, kBody, kChunkSize, kChunkData, kChunkEnd, kTrailer, kBroken };
  State state_ = State::kHeader;
  uint64_t remaining_ = 0;
  std::string buffer_;
};

}  // namespace tessera::net
