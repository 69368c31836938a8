#include "net/response_reader.h"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace tessera::net {
namespace {

// The value of header `name` (lower case) in `head`, or "" when absent.
std::string_view ResponseHeaderValue(std::string_view head, std::string_view name) {
  size_t pos = head.find("\r\n");
  while (pos != std::string_view::npos && pos + 2 < head.size()) {
    const size_t start = pos + 2;
    const size_t end = std::min(head.find("\r\n", start), head.size());
    const std::string_view line = head.substr(start, end - start);
    const size_t colon = line.find(':');
    if (colon == name.size() &&
        std::equal(name.begin(), name.end(), line.begin(), [](char a, char b) {
          return a == std::tolower(static_cast<unsigned char>(b));
        })) {
      std::string_view value = line.substr(colon + 1);
      while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
        value.remove_prefix(1);
      return value;
    }
    pos = end == head.size() ? std::string_view::npos : end;
  }
  return {};
}

}  // namespace

bool ResponseReader::Feed(std::string_view bytes) {
  if (state_ == State::kBroken) return false;
  buffer_.append(bytes);
  size_t pos = 0;
  bool ok = true;
  while (ok) {
    if (state_ == State::kHeader) {
      const size_t end = buffer_.find("\r\n\r\n", pos);
      if (end == std::string::npos) break;
      const std::string_view head(buffer_.data() + pos, end - pos);
      int status = 0;
      if (head.size() < 12 || !head.starts_with("HTTP/1.") ||
          std::from_chars(head.data() + 9, head.data() + 12, status).ec != std::errc()) {
        ok = false;
        break;
      }
      std::string encoding(ResponseHeaderValue(head, "transfer-encoding"));
      std::transform(encoding.begin(), encoding.end(), encoding.begin(), ::tolower);
      const bool chunked = encoding.find("chunked") != std::string::npos;
      const std::string_view length = ResponseHeaderValue(head, "content-length");
      remaining_ = 0;
      if (!chunked && !length.empty() &&
          std::from_chars(length.data(), length.data() + length.size(), remaining_).ec !=
              std::errc()) {
        ok = false;
        break;
      }
      pos = end + 4;
      if (on_header) on_header(status);
      if (chunked) {
        state_ = State::kChunkSize;
      } else if (remaining_ > 0) {
        state_ = State::kBody;
      } else if (on_end) {
        on_end();
      }
    } else if (state_ == State::kBody || state_ == State::kChunkData) {
      const size_t n = std::min<uint64_t>(remaining_, buffer_.size() - pos);
      if (n == 0) break;
      if (on_data) on_data(std::string_view(buffer_.data() + pos, n));
      pos += n;
      remaining_ -= n;
      if (remaining_ > 0) continue;
      if (state_ == State::kChunkData) {
        state_ = State::kChunkEnd;
      } else {
        state_ = State::kHeader;
        if (on_end) on_end();
      }
    } else if (state_ == State::kChunkSize) {
      const size_t eol = buffer_.find("\r\n", pos);
      if (eol == std::string::npos) break;
      // The size in hex, then optional ";extensions".
      if (std::from_chars(buffer_.data() + pos, buffer_.data() + eol, remaining_, 16).ec !=
          std::errc()) {
        ok = false;
        break;
      }
      pos = eol + 2;
      state_ = remaining_ == 0 ? State::kTrailer : State::kChunkData;
    } else if (state_ == State::kChunkEnd) {
      if (buffer_.size() - pos < 2) break;
      if (buffer_.compare(pos, 2, "\r\n") != 0) {
        ok = false;
        break;
      }
      pos += 2;
      state_ = State::kChunkSize;
    } else {  // kTrailer: trailer lines up to an empty one
      const size_t eol = buffer_.find("\r\n", pos);
      if (eol == std::string::npos) break;
      const bool last = eol == pos;
      pos = eol + 2;
      if (last) {
        state_ = State::kHeader;
        if (on_end) on_end();
      }
    }
  }
  buffer_.erase(0, pos);
  if (!ok) state_ = State::kBroken;
  return ok;
}

}  // namespace tessera::net
