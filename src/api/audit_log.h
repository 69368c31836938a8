// AuditLog: every write a user asked of the head, accepted or refused (docs/security.md
// "Audit log"): who, the verb, the object, when, and the outcome as the HTTP status answered.
// Kept in memory, bounded: a ring of the latest `capacity` entries (default 10,000); the head's
// GET /api/v1/audit serves it to cluster admins. It does not survive a restart of the head.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

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

class AuditLog {
 public:
  explicit AuditLog(size_t capacity = 10'000) : capacity_(capacity == 0 ? 1 : capacity) {}

  void Record(AuditEntry entry);
  // The latest `limit` entries, oldest first.
  std::vector<AuditEntry> Latest(size_t limit) const;
  // How many entries were ever recorded (dropped ones included).
  uint64_t recorded() const;

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::deque<AuditEntry> entries_;
  uint64_t recorded_ = 0;
};

}  // namespace tessera::api
