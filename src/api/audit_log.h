// AuditLog: every write a user asked of the head, accepted or refused (docs/security.md
// "Audit log"): who, the verb, the object, when, and the outcome as the HTTP status answered.
// Kept in memory, bounded: a ring of the latest `capacity` entries (default 10,000); the head's
// GET /api/v1/audit serves it to cluster admins. With a file (OpenFile), every entry is also
// appended to it as one JSON line before the answer is sent, the file is rotated as Kubernetes'
// audit log backend rotates (--audit-log-path, --audit-log-maxsize, --audit-log-maxbackup), and
// a head that starts again loads the latest entries back into the ring.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace tessera::api {

struct AuditEntry {
  int64_t time_ms = 0;  // Unix time
  std::string user;     // "admin" for the admin token; "(join token)" for an agent's token
  std::string verb;     // authz::VerbName, or "create-user", "delete-user"
  std::string kind;
  std::string namespace_name;  // empty for cluster-wide kinds
  std::string name;
  int code = 0;         // the HTTP status answered
  std::string message;  // the refusal's or the error's message; empty when accepted
};

nlohmann::json AuditEntryToJson(const AuditEntry& entry);
// nullopt for a line that is not an entry (a torn last line after a crash).
std::optional<AuditEntry> AuditEntryFromJson(const nlohmann::json& j);

struct AuditFileOptions {
  std::string path;                   // audit.log; its backups are path.1 (newest) .. path.N
  uint64_t max_bytes = 100ull << 20;  // a line that takes the file past this rotates it first
  int max_backups = 5;                // rotated files kept; older ones are removed
};

class AuditLog {
 public:
  explicit AuditLog(size_t capacity = 10'000) : capacity_(capacity == 0 ? 1 : capacity) {}
  ~AuditLog();

  // Opens `file.path` for appending (created 0600) and loads the latest entries of it and its
  // backups into the ring, oldest first; lines that are not entries are skipped and counted in
  // skipped_lines(). Errors name the path.
  Status OpenFile(const AuditFileOptions& file);
  // Into the ring, and into the file when one is open. A failed write keeps the entry in the
  // ring, counts in file_errors(), and is said on stderr once per distinct error.
  void Record(AuditEntry entry);
  // The latest `limit` entries, oldest first.
  std::vector<AuditEntry> Latest(size_t limit) const;
  // How many entries Record took since this AuditLog was made (dropped ones included; not
  // those OpenFile loaded).
  uint64_t recorded() const;
  uint64_t file_errors() const;
  uint64_t skipped_lines() const;

 private:
  void PushLocked(AuditEntry entry);
  Status AppendLocked(const std::string& line);
  Status RotateLocked();

  const size_t capacity_;
  mutable std::mutex mu_;
  std::deque<AuditEntry> entries_;
  uint64_t recorded_ = 0;
  AuditFileOptions file_;
  int fd_ = -1;
  uint64_t file_bytes_ = 0;
  uint64_t file_errors_ = 0;
  uint64_t skipped_lines_ = 0;
  std::string last_error_;
};

}  // namespace tessera::api
