#include "api/audit_log.h"

namespace tessera::api {

nlohmann::json AuditEntryToJson(const AuditEntry& e) {
  nlohmann::json j = {{"timeMs", e.time_ms}, {"user", e.user}, {"verb", e.verb},
                      {"kind", e.kind},      {"name", e.name}, {"code", e.code}};
  if (!e.namespace_name.empty()) j["namespace"] = e.namespace_name;
  if (!e.message.empty()) j["message"] = e.message;
  return j;
}

void AuditLog::Record(AuditEntry entry) {
  std::lock_guard lock(mu_);
  if (entries_.size() == capacity_) entries_.pop_front();
  entries_.push_back(std::move(entry));
  ++recorded_;
}

std::vector<AuditEntry> AuditLog::Latest(size_t limit) const {
  std::lock_guard lock(mu_);
  const size_t n = std::min(limit, entries_.size());
  return {entries_.end() - static_cast<std::ptrdiff_t>(n), entries_.end()};
}

uint64_t AuditLog::recorded() const {
  std::lock_guard lock(mu_);
  return recorded_;
}

}  // namespace tessera::api
