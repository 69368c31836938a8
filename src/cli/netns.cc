#include "cli/netns.h"

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include "cli/commands.h"

namespace tessera::cli {
namespace {

namespace fs = std::filesystem;

// `ip netns exec NAME` shows the files of /etc/netns/NAME/ in place of /etc's.
const fs::path kNetnsEtc = "/etc/netns";

std::string IpBinary() {
  std::vector<std::string> dirs;
  if (const char* path = std::getenv("PATH")) {
    std::stringstream in(path);
    for (std::string d; std::getline(in, d, ':');)
      if (!d.empty()) dirs.push_back(d);
  }
  dirs.insert(dirs.end(), {"/usr/sbin", "/sbin", "/usr/bin", "/bin"});
  for (const std::string& d : dirs)
    if (::access((d + "/ip").c_str(), X_OK) == 0) return d + "/ip";
  return "";
}

struct IpRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

IpRun RunIpArgs(const std::vector<std::string>& args) {
  IpRun run;
  const std::string ip = IpBinary();
  if (ip.empty()) {
    run.output = "no `ip` (iproute2) found";
    return run;
  }
  int fds[2];
  if (::pipe(fds) != 0) {
    run.output = "pipe failed";
    return run;
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    run.output = "fork failed";
    return run;
  }
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    ::close(fds[1]);
    std::vector<char*> argv = {const_cast<char*>(ip.c_str())};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(ip.c_str(), argv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) run.output.append(buf, n);
  ::close(fds[0]);
  int status = 0;
  if (::waitpid(pid, &status, 0) == pid && WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
  return run;
}

std::string Quoted(const std::vector<std::string>& args) {
  std::string out = "ip";
  for (const std::string& a : args) out += " " + a;
  return out;
}

std::set<std::string> LinkNames() {
  std::set<std::string> names;
  std::stringstream in(RunIpArgs({"-o", "link", "show"}).output);
  for (std::string line; std::getline(in, line);) {
    // "15: tsbr5: <BROADCAST,...", or "16: tsv5-1@if2: ..." for a veth
    const size_t a = line.find(": ");
    const size_t b = a == std::string::npos ? a : line.find(':', a + 2);
    if (b == std::string::npos) continue;
    std::string name = line.substr(a + 2, b - a - 2);
    if (const size_t at = name.find('@'); at != std::string::npos) name.resize(at);
    names.insert(name);
  }
  return names;
}

std::vector<std::string> Ipv4Addresses() {
  std::vector<std::string> out;
  std::stringstream in(RunIpArgs({"-o", "-4", "addr", "show"}).output);
  for (std::string line; std::getline(in, line);) {
    const size_t inet = line.find(" inet ");
    if (inet == std::string::npos) continue;
    const size_t start = inet + 6;
    out.push_back(line.substr(start, line.find('/', start) - start));
  }
  return out;
}

std::set<std::string> NamespaceNames() {
  std::set<std::string> names;
  std::stringstream in(RunIpArgs({"netns", "list"}).output);
  for (std::string line; std::getline(in, line);) {
    const size_t end = line.find(' ');
    if (!line.empty()) names.insert(line.substr(0, end));
  }
  return names;
}

// The bridge's alias, "" when it has none, nullopt-like "\n" when it does not exist.
std::string BridgeAlias(const std::string& bridge) {
  const IpRun run = RunIpArgs({"-o", "link", "show", "dev", bridge});
  if (run.exit_code != 0) return "\n";
  const size_t at = run.output.find("alias ");
  if (at == std::string::npos) return "";
  std::string alias = run.output.substr(at + 6);
  while (!alias.empty() && (alias.back() == '\n' || alias.back() == ' ')) alias.pop_back();
  return alias;
}

std::string RecordPath(const std::string& dir) { return dir + "/netns.json"; }

}  // namespace

std::string NetnsUnsupportedReason() {
  if (::geteuid() != 0)
    return "--netns: needs root (it makes network namespaces, veths and a bridge); run `sudo "
           "tessera up --netns ...`, or leave --netns out";
  if (IpBinary().empty())
    return "--netns: needs iproute2's `ip` on PATH or in /usr/sbin; install it (apt-get install "
           "iproute2, scripts/setup.sh does)";
  return "";
}

std::vector<std::string> InNetns(const std::string& ns, const std::vector<std::string>& args) {
  std::vector<std::string> out = {IpBinary(), "netns", "exec", ns};
  out.insert(out.end(), args.begin(), args.end());
  return out;
}

NetnsPlan MakeNetns(const std::string& dir, const std::vector<std::string>& agents) {
  if (const std::string why = NetnsUnsupportedReason(); !why.empty()) throw CommandError(why);
  RemoveNetns(dir, true);
  if (fs::exists(RecordPath(dir)))
    throw CommandError("--netns: the namespaces of an earlier cluster from " + dir +
                           " could not all be removed (see above); remove them with `tessera "
                           "down --state-dir " +
                           dir + "` or by hand (docs/netns.md)",
                       1);
  // Claim an id: creating the bridge fails when a concurrent `up` made it first.
  int id = -1;
  const std::set<std::string> links = LinkNames();
  const std::vector<std::string> addresses = Ipv4Addresses();
  for (int candidate : NetnsIdOrder(dir)) {
    if (!NetnsIdLooksFree(candidate, links, addresses)) continue;
    if (RunIpArgs({"link", "add", "name", "tsbr" + std::to_string(candidate), "type", "bridge"})
            .exit_code == 0) {
      id = candidate;
      break;
    }
  }
  if (id < 0)
    throw CommandError(
        "--netns: no free /24 left in 198.18.0.0/15 (512 clusters' bridges or "
        "addresses exist); `tessera down` some",
        1);
  auto plan = PlanNetns(id, dir, agents);
  if (!plan.ok()) {
    RunIpArgs({"link", "del", "tsbr" + std::to_string(id)});
    throw CommandError(plan.status().message());
  }
  {
    std::ofstream out(RecordPath(dir), std::ios::trunc);
    out << NetnsRecord(*plan).dump(2) << "\n";
    if (!out) {
      RunIpArgs({"link", "del", plan->bridge});
      throw CommandError("--netns: cannot write " + RecordPath(dir), 1);
    }
  }
  char hostname[256] = {};
  ::gethostname(hostname, sizeof hostname - 1);
  auto run = [&](const std::vector<std::string>& args) {
    const IpRun r = RunIpArgs(args);
    if (r.exit_code == 0) return;
    RemoveNetns(dir, true);
    throw CommandError("--netns: `" + Quoted(args) + "` failed: " + r.output, 1);
  };
  for (const auto& args : NetnsBridgeCommands(*plan)) run(args);
  for (const NetnsMember& m : plan->members) {
    std::error_code ec;
    fs::create_directories(kNetnsEtc / m.ns, ec);
    std::ofstream hosts(kNetnsEtc / m.ns / "hosts", std::ios::trunc);
    hosts << NetnsHostsFile(*plan, m, hostname);
    if (!hosts) {
      RemoveNetns(dir, true);
      throw CommandError("--netns: cannot write " + (kNetnsEtc / m.ns / "hosts").string(), 1);
    }
    for (const auto& args : NetnsMemberCommands(*plan, m)) run(args);
  }
  return *plan;
}

int RemoveNetns(const std::string& dir, bool quiet) {
  std::ifstream in(RecordPath(dir));
  if (!in) return 0;
  const nlohmann::json record = nlohmann::json::parse(in, nullptr, false);
  auto plan = ParseNetnsRecord(record);
  std::error_code ec;
  if (!plan.ok()) {
    std::cerr << "warning: " << RecordPath(dir) << ": " << plan.status().message() << "\n";
    return 0;
  }
  const std::string alias = BridgeAlias(plan->bridge);
  if (alias != "" && alias != "\n" && alias != NetnsBridgeAlias(dir)) {
    // The bridge is someone else's now; nothing in the record can be proven ours.
    if (!quiet)
      std::cerr << "warning: " << plan->bridge << " now belongs to '" << alias
                << "'; leaving it and its namespaces alone\n";
    fs::remove(RecordPath(dir), ec);
    return 0;
  }
  int removed = 0;
  bool left = false;
  const std::set<std::string> namespaces = NamespaceNames();
  const std::set<std::string> links = LinkNames();
  // A bridge that no longer exists takes its id's claim with it: namespaces of that id are then
  // another cluster's (it made its bridge first), so only the hosts files are ours to remove.
  const bool ours = alias != "\n";
  for (const NetnsMember& m : plan->members) {
    if (ours && namespaces.count(m.ns)) {
      const IpRun r = RunIpArgs({"netns", "del", m.ns});
      if (r.exit_code == 0) {
        ++removed;
      } else {
        left = true;
        std::cerr << "warning: `ip netns del " << m.ns << "`: " << r.output;
      }
    }
    if (ours && links.count(m.veth)) RunIpArgs({"link", "del", m.veth});  // gone with its peer
    fs::remove_all(kNetnsEtc / m.ns, ec);
  }
  if (ours && !left) {
    const IpRun r = RunIpArgs({"link", "del", plan->bridge});
    if (r.exit_code != 0) {
      left = true;
      std::cerr << "warning: `ip link del " << plan->bridge << "`: " << r.output;
    }
  }
  if (!left) fs::remove(RecordPath(dir), ec);
  return removed;
}

}  // namespace tessera::cli
