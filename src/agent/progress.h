// ProgressTailer: reads the JSON lines a worker appends to its TESSERA_PROGRESS_FILE.
//
// The tailer keeps a byte offset into the file: the start of the first line it has not yet
// consumed. Read() parses the complete lines after it, up to a limit, and moves the offset
// past them; a last line without its '\n' (the worker is mid-write) stays in the file for the
// next call. Lines that are not valid progress records are counted and skipped, never fatal.
// The file may not exist yet (the worker has reported nothing).
//
// Line format (python/tessera/worker.py): {"type":"progress","step":N,"rank":R,"attempt":A,
// "time":unix_seconds}, {"type":"checkpoint","step":N,"seconds":S,...} (S: time to save it) or
// {"type":"restore","step":N,"seconds":S,...} (the step the attempt resumed from, S: time to
// load the checkpoint) or {"type":"alive","step":N,...} (a liveness tick from the SDK's
// background thread: the head tells a stopped rank from the ranks waiting for it by these).
//
// Thread-safety: none; one owner calls Read().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "protocol/wire.h"

namespace tessera::agent {

// One parsed line (the wire type heartbeats carry): time_ms is the line's "time" in ms.
using protocol::ProgressRecord;

class ProgressTailer {
 public:
  // Lines longer than this are skipped as malformed.
  static constexpr size_t kMaxLineBytes = 64 * 1024;

  explicit ProgressTailer(std::string path, uint64_t offset = 0)
      : path_(std::move(path)), offset_(offset) {}

  // Appends up to `max_records` records parsed from complete lines after the offset to `out`
  // and returns how many were appended.
  size_t Read(size_t max_records, std::vector<ProgressRecord>& out);

  const std::string& path() const { return path_; }
  uint64_t offset() const { return offset_; }
  // True when the last Read() consumed every complete line the file held (it stopped at the
  // end of the file, not at `max_records`); a missing file counts as read. An exited worker's
  // exit is reported only once a Read() that started after the exit caught up (agent.cc).
  bool caught_up() const { return caught_up_; }
  uint64_t malformed_lines() const { return malformed_; }

 private:
  std::string path_;
  uint64_t offset_;
  uint64_t malformed_ = 0;
  bool caught_up_ = false;
};

// Parses one line; false if it is not a progress record (bad JSON, unknown type, no step).
bool ParseProgressLine(const std::string& line, ProgressRecord& out);

}  // namespace tessera::agent
