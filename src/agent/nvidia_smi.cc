#include "agent/nvidia_smi.h"

#include <expat.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>

#include "agent/launcher.h"
#include "common/text.h"

extern char** environ;

namespace tessera::agent {
namespace {

// One <gpu> as read, before it is checked.
struct RawGpu {
  std::string uuid;
  std::optional<std::string> memory_total;
  std::string fabric_state, fabric_status, clique_id, cluster_uuid;
};

struct ParseState {
  std::vector<std::string> path;  // open elements, the root first
  std::string text;               // character data of the innermost open element
  std::string root;
  std::optional<std::string> attached_gpus;
  std::vector<RawGpu> gpus;
};

void OnStart(void* data, const XML_Char* name, const XML_Char** /*attributes*/) {
  auto* s = static_cast<ParseState*>(data);
  if (s->path.empty()) s->root = name;
  s->path.emplace_back(name);
  s->text.clear();
  if (s->path.size() == 2 && s->path[1] == "gpu") s->gpus.emplace_back();
}

void OnEnd(void* data, const XML_Char* /*name*/) {
  auto* s = static_cast<ParseState*>(data);
  const std::vector<std::string>& p = s->path;
  const std::string value = Trim(s->text);
  if (p.size() == 2 && p[1] == "attached_gpus") s->attached_gpus = value;
  if (p.size() >= 3 && p[1] == "gpu" && !s->gpus.empty()) {
    RawGpu& g = s->gpus.back();
    if (p.size() == 3 && p[2] == "uuid") g.uuid = value;
    if (p.size() == 4 && p[2] == "fb_memory_usage" && p[3] == "total") g.memory_total = value;
    if (p.size() == 4 && p[2] == "fabric") {
      if (p[3] == "state") g.fabric_state = value;
      if (p[3] == "status") g.fabric_status = value;
      if (p[3] == "cliqueId") g.clique_id = value;
      if (p[3] == "clusterUuid") g.cluster_uuid = value;
    }
  }
  s->path.pop_back();
  s->text.clear();
}

void OnText(void* data, const XML_Char* text, int len) {
  static_cast<ParseState*>(data)->text.append(text, static_cast<size_t>(len));
}

// "81559 MiB" -> 81559.
std::optional<int64_t> ParseMiB(std::string_view text) {
  const size_t space = text.find(' ');
  if (space == std::string_view::npos || text.substr(space + 1) != "MiB") return std::nullopt;
  int64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + space, value);
  if (space == 0 || ec != std::errc() || ptr != text.data() + space || value < 0) {
    return std::nullopt;
  }
  return value;
}

}  // namespace

Result<std::vector<protocol::DiscoveredGpu>> ParseNvidiaSmiXml(std::string_view xml) {
  ParseState state;
  XML_Parser parser = XML_ParserCreate("UTF-8");
  if (parser == nullptr) return Internal("nvidia-smi -q -x: cannot create an XML parser");
  XML_SetUserData(parser, &state);
  XML_SetElementHandler(parser, OnStart, OnEnd);
  XML_SetCharacterDataHandler(parser, OnText);
  const bool parsed = XML_Parse(parser, xml.data(), static_cast<int>(xml.size()),
                                /*isFinal=*/1) == XML_STATUS_OK;
  std::string error;
  if (!parsed) {
    error = "nvidia-smi -q -x: line " + std::to_string(XML_GetCurrentLineNumber(parser)) + ": " +
            XML_ErrorString(XML_GetErrorCode(parser)) + "; the output is not the XML report";
  }
  XML_ParserFree(parser);
  if (!parsed) return InvalidArgument(error);
  if (state.root != "nvidia_smi_log") {
    return InvalidArgument("nvidia-smi -q -x: the root element is <" + state.root +
                           ">, not <nvidia_smi_log>");
  }
  std::vector<protocol::DiscoveredGpu> gpus;
  for (size_t i = 0; i < state.gpus.size(); ++i) {
    const RawGpu& raw = state.gpus[i];
    const std::string path = "gpus[" + std::to_string(i) + "]";
    protocol::DiscoveredGpu gpu;
    if (raw.uuid.empty()) return InvalidArgument(path + ".uuid: missing; each <gpu> has a <uuid>");
    gpu.uuid = raw.uuid;
    if (!raw.memory_total) {
      return InvalidArgument(path + ".fb_memory_usage.total: missing (GPU " + raw.uuid + ")");
    }
    auto mib = ParseMiB(*raw.memory_total);
    if (!mib) {
      return InvalidArgument(path + ".fb_memory_usage.total: " + Quote(*raw.memory_total) +
                             " is not '<N> MiB' (GPU " + raw.uuid + ")");
    }
    gpu.memory_mib = *mib;
    if (!raw.fabric_state.empty() && raw.fabric_state != "N/A") {
      gpu.fabric =
          protocol::GpuFabric{raw.cluster_uuid, raw.clique_id, raw.fabric_state, raw.fabric_status};
    }
    gpus.push_back(std::move(gpu));
  }
  if (state.attached_gpus && *state.attached_gpus != std::to_string(gpus.size())) {
    return InvalidArgument("attached_gpus: " + Quote(*state.attached_gpus) +
                           " but the report has " + std::to_string(gpus.size()) +
                           " <gpu> elements");
  }
  return gpus;
}

Result<std::string> RunNvidiaSmi(const std::string& program, const std::string& path_var,
                                 std::chrono::milliseconds timeout) {
  const std::string exe = FindExecutable(program, path_var);
  if (exe.empty()) {
    return NotFound("--nvidia-smi: " + Quote(program) +
                    " is not an executable file (no NVIDIA driver tools on this host)");
  }
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return Unavailable("nvidia-smi: pipe failed");
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    return Unavailable("nvidia-smi: pipe failed");
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  std::string arg_q = "-q", arg_x = "-x";
  std::vector<char*> argv = {const_cast<char*>(exe.c_str()), arg_q.data(), arg_x.data(), nullptr};
  pid_t pid = 0;
  const int spawned = ::posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (spawned != 0) {
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    return Unavailable("nvidia-smi: cannot start " + exe + ": " + std::strerror(spawned));
  }
  std::string out, err;
  constexpr size_t kMaxOutput = 64 << 20;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool timed_out = false;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  while (open_fds > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    const int ready = ::poll(fds, 2, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[65536];
      const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        std::string& sink = i == 0 ? out : err;
        if (sink.size() < kMaxOutput) sink.append(buf, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (pollfd& fd : fds) {
    if (fd.fd >= 0) ::close(fd.fd);
  }
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return Unavailable("nvidia-smi: " + exe + " -q -x ran longer than " +
                       std::to_string(timeout.count()) + " ms and was killed");
  }
  if (WIFSIGNALED(status)) {
    return Unavailable("nvidia-smi: " + exe + " -q -x was killed by signal " +
                       std::to_string(WTERMSIG(status)));
  }
  if (WEXITSTATUS(status) != 0) {
    std::string why = Trim(err.empty() ? out : err);
    if (const size_t nl = why.find('\n'); nl != std::string::npos) why.resize(nl);
    return Unavailable("nvidia-smi: " + exe + " -q -x exited with status " +
                       std::to_string(WEXITSTATUS(status)) + (why.empty() ? "" : ": " + why));
  }
  return out;
}

}  // namespace tessera::agent
