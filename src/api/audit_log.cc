#include "api/audit_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

namespace tessera::api {

namespace fs = std::filesystem;

nlohmann::json AuditEntryToJson(const AuditEntry& e) {
  nlohmann::json j = {{"timeMs", e.time_ms}, {"user", e.user}, {"verb", e.verb},
                      {"kind", e.kind},      {"name", e.name}, {"code", e.code}};
  if (!e.namespace_name.empty()) j["namespace"] = e.namespace_name;
  if (!e.message.empty()) j["message"] = e.message;
  return j;
}

std::optional<AuditEntry> AuditEntryFromJson(const nlohmann::json& j) {
  if (!j.is_object()) return std::nullopt;
  const auto text = [&j](const char* key) -> const nlohmann::json* {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? &*it : nullptr;
  };
  const auto time = j.find("timeMs");
  const auto code = j.find("code");
  if (time == j.end() || !time->is_number_integer() || code == j.end() ||
      !code->is_number_integer() || !text("user") || !text("verb") || !text("kind") ||
      !text("name"))
    return std::nullopt;
  AuditEntry e;
  e.time_ms = time->get<int64_t>();
  e.code = code->get<int>();
  e.user = text("user")->get<std::string>();
  e.verb = text("verb")->get<std::string>();
  e.kind = text("kind")->get<std::string>();
  e.name = text("name")->get<std::string>();
  if (text("namespace")) e.namespace_name = text("namespace")->get<std::string>();
  if (text("message")) e.message = text("message")->get<std::string>();
  return e;
}

namespace {
std::string Backup(const std::string& path, int n) { return path + "." + std::to_string(n); }
}  // namespace

AuditLog::~AuditLog() {
  if (fd_ >= 0) ::close(fd_);
}

Status AuditLog::OpenFile(const AuditFileOptions& file) {
  if (file.path.empty()) return InvalidArgument("--audit-log-path: must name a file");
  if (file.max_bytes == 0) return InvalidArgument("--audit-log-maxsize: must be at least 1 (MB)");
  if (file.max_backups < 0)
    return InvalidArgument("--audit-log-maxbackup: must be 0 or more rotated files");
  std::lock_guard lock(mu_);
  // The latest entries first come from the oldest backup that still holds some of them.
  std::deque<AuditEntry> loaded;
  for (int n = file.max_backups; n >= 0; --n) {
    const std::string path = n == 0 ? file.path : Backup(file.path, n);
    std::ifstream in(path);
    if (!in) continue;
    std::string line;
    while (std::getline(in, line)) {
      auto entry = AuditEntryFromJson(nlohmann::json::parse(line, nullptr, false));
      if (!entry) {
        ++skipped_lines_;
        continue;
      }
      loaded.push_back(std::move(*entry));
      if (loaded.size() > capacity_) loaded.pop_front();
    }
  }
  const int fd = ::open(file.path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0)
    return Unavailable("audit log " + file.path + ": " + std::strerror(errno) +
                       " (--audit-log-path names where it is kept)");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    return Unavailable("audit log " + file.path + ": " + why);
  }
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
  file_ = file;
  file_bytes_ = static_cast<uint64_t>(st.st_size);
  for (AuditEntry& e : loaded) PushLocked(std::move(e));
  return Status::Ok();
}

void AuditLog::PushLocked(AuditEntry entry) {
  if (entries_.size() == capacity_) entries_.pop_front();
  entries_.push_back(std::move(entry));
}

Status AuditLog::RotateLocked() {
  // path.N goes, path.(N-1) -> path.N, ..., path -> path.1; then a new empty path.
  std::error_code ec;
  if (file_.max_backups == 0) {
    if (::ftruncate(fd_, 0) != 0)
      return Unavailable("audit log " + file_.path + ": truncate: " + std::strerror(errno));
    file_bytes_ = 0;
    return Status::Ok();
  }
  fs::remove(Backup(file_.path, file_.max_backups), ec);
  for (int n = file_.max_backups - 1; n >= 1; --n) {
    if (!fs::exists(Backup(file_.path, n), ec)) continue;
    fs::rename(Backup(file_.path, n), Backup(file_.path, n + 1), ec);
    if (ec) return Unavailable("audit log " + Backup(file_.path, n) + ": rotate: " + ec.message());
  }
  fs::rename(file_.path, Backup(file_.path, 1), ec);
  if (ec) return Unavailable("audit log " + file_.path + ": rotate: " + ec.message());
  const int fd = ::open(file_.path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return Unavailable("audit log " + file_.path + ": " + std::strerror(errno));
  ::close(fd_);
  fd_ = fd;
  file_bytes_ = 0;
  return Status::Ok();
}

Status AuditLog::AppendLocked(const std::string& line) {
  if (file_bytes_ > 0 && file_bytes_ + line.size() > file_.max_bytes)
    TESSERA_RETURN_IF_ERROR(RotateLocked());
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Unavailable("audit log " + file_.path + ": " + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  file_bytes_ += line.size();
  return Status::Ok();
}

void AuditLog::Record(AuditEntry entry) {
  std::lock_guard lock(mu_);
  if (fd_ >= 0) {
    Status written = AppendLocked(AuditEntryToJson(entry).dump() + "\n");
    if (!written.ok()) {
      ++file_errors_;
      if (written.message() != last_error_)
        std::cerr << "tessera head: " << written.message()
                  << "; entries are kept in memory only until it can be written" << std::endl;
      last_error_ = written.message();
    } else {
      last_error_.clear();
    }
  }
  PushLocked(std::move(entry));
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

uint64_t AuditLog::file_errors() const {
  std::lock_guard lock(mu_);
  return file_errors_;
}

uint64_t AuditLog::skipped_lines() const {
  std::lock_guard lock(mu_);
  return skipped_lines_;
}

}  // namespace tessera::api
