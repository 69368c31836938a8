#include "agent/fence_memory.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace tessera::agent {
namespace {

constexpr char kHeader[] = "tessera-agent-fence 1";

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

Status Errno(const std::string& what) { return Unavailable(what + ": " + std::strerror(errno)); }

}  // namespace

Status SaveFenceMemory(const std::string& path, const FenceMemory& memory) {
  std::string text = std::string(kHeader) + "\nterm " + std::to_string(memory.term) + "\n";
  for (const auto& [uid, attempt] : memory.newest_attempt)
    text += "attempt " + std::to_string(uid) + " " + std::to_string(attempt) + "\n";
  const std::string temp = path + ".tmp";
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Errno(temp);
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Status error = Errno(temp + ": write");
      ::close(fd);
      return error;
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    Status error = Errno(temp + ": fsync");
    ::close(fd);
    return error;
  }
  if (::close(fd) != 0) return Errno(temp + ": close");
  if (::rename(temp.c_str(), path.c_str()) != 0) return Errno(path + ": rename");
  // The rename itself survives a crash only once the directory is synced.
  const int dir = ::open(DirOf(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return Errno(DirOf(path));
  const int synced = ::fsync(dir);
  const int sync_errno = errno;
  ::close(dir);
  if (synced != 0) {
    errno = sync_errno;
    return Errno(DirOf(path) + ": fsync");
  }
  return Status::Ok();
}

Result<FenceMemory> LoadFenceMemory(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec) && !ec) return FenceMemory{};  // a new agent
  std::ifstream in(path);
  if (!in) return Errno(path);
  const std::string fix =
      "; it is written by the agent only: restore it, or delete it to forget the terms and "
      "attempts seen (then a deposed head is accepted until the agent hears the leader)";
  FenceMemory memory;
  std::string line;
  int number = 0;
  bool header = false, term = false;
  while (std::getline(in, line)) {
    ++number;
    auto bad = [&](const std::string& why) {
      return InvalidArgument(path + ":" + std::to_string(number) + ": " + why + fix);
    };
    if (number == 1) {
      if (line != kHeader)
        return bad("expected '" + std::string(kHeader) + "' (a newer agent's file, or not one)");
      header = true;
      continue;
    }
    if (line.empty()) continue;
    std::istringstream fields(line);
    std::string word;
    fields >> word;
    if (word == "term") {
      if (!(fields >> memory.term)) return bad("expected 'term N'");
      term = true;
    } else if (word == "attempt") {
      uint64_t uid = 0;
      int attempt = 0;
      if (!(fields >> uid >> attempt) || attempt < 0) return bad("expected 'attempt UID N'");
      memory.newest_attempt[uid] = attempt;
    } else {
      return bad("unknown line '" + line.substr(0, 80) + "'");
    }
    std::string extra;
    if (fields >> extra) return bad("unexpected '" + extra + "' at the end of the line");
  }
  if (in.bad()) return Errno(path);
  if (!header || !term) {
    return InvalidArgument(path + ": incomplete (no " + (header ? "term line" : "header") + ")" +
                           fix);
  }
  return memory;
}

}  // namespace tessera::agent
