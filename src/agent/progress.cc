#include "agent/progress.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/json_limits.h"

namespace tessera::agent {

bool ParseProgressLine(const std::string& line, ProgressRecord& out) {
  auto parsed = ParseJson(line, "progress line");  // bounded: nesting, repeated keys
  if (!parsed.ok()) return false;
  const nlohmann::json& j = *parsed;
  if (!j.is_object()) return false;
  auto type = j.find("type");
  auto step = j.find("step");
  if (type == j.end() || !type->is_string() || step == j.end() || !step->is_number_integer()) {
    return false;
  }
  ProgressRecord r;
  r.type = type->get<std::string>();
  if (r.type != "progress" && r.type != "checkpoint" && r.type != "restore" && r.type != "alive")
    return false;
  r.step = step->get<int64_t>();
  if (r.step < 0) return false;
  if (auto s = j.find("seconds"); s != j.end() && s->is_number()) {
    r.seconds = s->get<double>();
    if (!std::isfinite(r.seconds) || r.seconds < 0) return false;
  }
  if (auto t = j.find("time"); t != j.end() && t->is_number()) {
    double time_s = t->get<double>();
    if (std::isfinite(time_s) && time_s >= 0 && time_s < 1e11) {
      r.time_ms = static_cast<int64_t>(std::llround(time_s * 1000.0));
    }
  }
  out = std::move(r);
  return true;
}

size_t ProgressTailer::Read(size_t max_records, std::vector<ProgressRecord>& out) {
  caught_up_ = false;
  if (max_records == 0) return 0;
  int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    caught_up_ = errno == ENOENT;  // nothing written yet; another error: try again later
    return 0;
  }
  size_t added = 0;
  std::string buffer;
  uint64_t buffer_offset = offset_;  // file offset of buffer[0]
  constexpr size_t kChunk = 256 * 1024;
  std::string chunk(kChunk, '\0');
  bool eof = false;
  while (added < max_records) {
    if (!eof) {
      ssize_t n =
          ::pread(fd, chunk.data(), kChunk, static_cast<off_t>(buffer_offset + buffer.size()));
      if (n <= 0) {
        eof = true;
      } else {
        buffer.append(chunk.data(), static_cast<size_t>(n));
      }
    }
    // Consume complete lines from the buffer.
    size_t pos = 0;
    while (added < max_records) {
      size_t nl = buffer.find('\n', pos);
      if (nl == std::string::npos) break;
      std::string line = buffer.substr(pos, nl - pos);
      pos = nl + 1;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) continue;
      ProgressRecord record;
      if (line.size() <= kMaxLineBytes && ParseProgressLine(line, record)) {
        out.push_back(std::move(record));
        ++added;
      } else {
        ++malformed_;
      }
    }
    buffer.erase(0, pos);
    buffer_offset += pos;
    offset_ = buffer_offset;
    if (added >= max_records) break;
    // Every complete line is consumed: what is left is the start of one line.
    if (buffer.size() > kMaxLineBytes) {
      // A line with no end in sight: skip what we have of it; the rest is skipped up to its
      // newline as the start of a malformed line.
      ++malformed_;
      buffer_offset += buffer.size();
      buffer.clear();
      offset_ = buffer_offset;
      size_t skipped = 0;
      while (true) {
        ssize_t n = ::pread(fd, chunk.data(), kChunk, static_cast<off_t>(offset_ + skipped));
        if (n <= 0) break;
        const char* nl = static_cast<const char*>(std::memchr(chunk.data(), '\n', size_t(n)));
        if (nl != nullptr) {
          skipped += static_cast<size_t>(nl - chunk.data()) + 1;
          break;
        }
        skipped += static_cast<size_t>(n);
      }
      offset_ += skipped;
      buffer_offset = offset_;
      continue;
    }
    if (eof) {
      caught_up_ = true;
      break;
    }
  }
  ::close(fd);
  return added;
}

}  // namespace tessera::agent
