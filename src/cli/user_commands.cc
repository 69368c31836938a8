// User commands (docs/security.md "Users and roles"): `tessera user create|list|delete` and
// `tessera audit`. Cluster admins run them; the head refuses anyone else with a 403 that says
// so.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "cli/client.h"

namespace tessera::cli {
namespace {

using Json = nlohmann::json;

// "2026-12-04T16:45:03Z" for a Unix time in milliseconds.
std::string UtcTime(int64_t ms) {
  const std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char out[32];
  std::strftime(out, sizeof out, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return out;
}

// The URL a new user's config names: --server, then $TESSERA_SERVER, then the state
// directory's head.json (what Connect reached).
std::string ServerForConfig(const ClientFlags& f) {
  if (!f.server.empty()) return f.server;
  if (const char* env = std::getenv("TESSERA_SERVER")) return env;
  const UserConfig config = ReadUserConfig(f);
  if (!config.path.empty()) return config.server;
  std::ifstream in(f.state_dir + "/head.json");
  const Json head = in ? Json::parse(in, nullptr, false) : Json();
  if (!head.is_object() || !head["port"].is_number_integer())
    throw CommandError(f.state_dir + "/head.json: cannot tell the head's address; pass --server",
                       1);
  std::string address = head.value("address", "127.0.0.1");
  if (address == "0.0.0.0") address = "127.0.0.1";
  return head.value("scheme", "http") + "://" + address + ":" +
         std::to_string(head["port"].get<int>());
}

// Writes `text` to `path` with mode 0600 (it holds a token); refuses to overwrite.
void WritePrivateFile(const std::string& path, const std::string& text, bool overwrite) {
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (overwrite ? O_TRUNC : O_EXCL);
  const int fd = ::open(path.c_str(), flags, 0600);
  if (fd < 0)
    throw CommandError(path + ": cannot write the user's config (" + std::strerror(errno) + ")" +
                           (errno == EEXIST ? "; pass --force to overwrite it" : ""),
                       1);
  const bool ok = ::fchmod(fd, 0600) == 0 &&
                  ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!ok) throw CommandError(path + ": cannot write the user's config", 1);
}

void AddUserCommand(CLI::App& app) {
  auto* user = app.add_subcommand("user", "Create, list and delete (revoke) users");
  user->require_subcommand(1);

  {
    auto* cmd = user->add_subcommand(
        "create", "Create a user with a role and write its config file (server, token)");
    auto flags = std::make_shared<ClientFlags>();
    auto name = std::make_shared<std::string>();
    auto role = std::make_shared<std::string>();
    auto ns = std::make_shared<std::string>();
    auto out = std::make_shared<std::string>();
    auto force = std::make_shared<bool>(false);
    flags->Add(cmd);
    cmd->add_option("name", *name, "the user's name (lower-case letters, digits, '-')")->required();
    cmd->add_option("--role", *role, "view, edit, admin (of a namespace) or cluster-admin")
        ->required();
    cmd->add_option("--namespace", *ns,
                    "the namespace the role holds in (default: default; none for cluster-admin)");
    cmd->add_option("--out", *out, "where to write the config file (default: NAME.tessera.json)");
    cmd->add_flag("--force", *force, "overwrite the config file if it exists");
    cmd->callback([=] {
      if (ns->empty() && *role != "cluster-admin") *ns = "default";
      const std::string path = out->empty() ? *name + ".tessera.json" : *out;
      const std::string server = ServerForConfig(*flags);
      auto client = Connect(*flags);
      const Json body = {{"name", *name}, {"role", *role}, {"namespace", *ns}};
      const Json made = Call(*client, net::Method::kPost, "/api/v1/users", body.dump());
      // The config names the CA this command verified the head with, by its absolute path.
      std::string ca_file;
      if (server.starts_with("https://"))
        ca_file = std::filesystem::absolute(CaFile(*flags, ReadUserConfig(*flags))).string();
      const Json config = {{"server", server},
                           {"caFile", ca_file},
                           {"user", *name},
                           {"token", made.value("token", "")},
                           {"namespace", ns->empty() ? "default" : *ns}};
      WritePrivateFile(path, config.dump(2) + "\n", *force);
      std::cout << "user/" << *name << " created (" << *role
                << (ns->empty() ? "" : " in namespace " + *ns) << "); config written to " << path
                << " (use it with --config " << path << " or TESSERA_CONFIG=" << path << ")\n";
    });
  }
  {
    auto* cmd = user->add_subcommand("list", "List users: name, role, namespace, state");
    auto flags = std::make_shared<ClientFlags>();
    flags->Add(cmd);
    cmd->callback([=] {
      auto client = Connect(*flags);
      const Json list = Call(*client, net::Method::kGet, "/api/v1/users");
      std::printf("%-24s %-14s %-16s %-8s %s\n", "NAME", "ROLE", "NAMESPACE", "STATE", "CREATED");
      for (const Json& u : list.value("items", Json::array())) {
        const std::string ns = u.value("namespace", "");
        std::printf("%-24s %-14s %-16s %-8s %s\n", u.value("name", "").c_str(),
                    u.value("role", "").c_str(), ns.empty() ? "*" : ns.c_str(),
                    u.contains("revokedMs") ? "revoked" : "active",
                    UtcTime(u.value("createdMs", int64_t{0})).c_str());
      }
    });
  }
  {
    auto* cmd = user->add_subcommand("delete", "Delete a user: its token stops working at once");
    auto flags = std::make_shared<ClientFlags>();
    auto name = std::make_shared<std::string>();
    flags->Add(cmd);
    cmd->add_option("name", *name, "the user")->required();
    cmd->callback([=] {
      auto client = Connect(*flags);
      Call(*client, net::Method::kDelete, "/api/v1/users/" + *name);
      std::cout << "user/" << *name << " deleted (its token is revoked)\n";
    });
  }
}

void AddAuditCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "audit", "Show the audit log: every write users asked for, accepted or refused");
  auto flags = std::make_shared<ClientFlags>();
  auto limit = std::make_shared<int>(100);
  auto output = std::make_shared<std::string>();
  flags->Add(cmd);
  cmd->add_option("--limit", *limit, "the latest N entries")->capture_default_str();
  cmd->add_option("-o,--output", *output, "json: the entries as the head returns them")
      ->check(CLI::IsMember({"json"}));
  cmd->callback([=] {
    if (*limit < 0) throw CommandError("--limit: must be >= 0");
    auto client = Connect(*flags);
    const Json log =
        Call(*client, net::Method::kGet, "/api/v1/audit?limit=" + std::to_string(*limit));
    if (*output == "json") {
      std::cout << log.dump(2) << "\n";
      return;
    }
    std::printf("%-20s %-16s %-12s %-40s %s\n", "TIME", "USER", "VERB", "OBJECT", "CODE");
    for (const Json& e : log.value("items", Json::array())) {
      std::string object = e.value("kind", "") + " ";
      if (e.contains("namespace")) object += e.value("namespace", "") + "/";
      object += e.value("name", "");
      std::printf("%-20s %-16s %-12s %-40s %d\n", UtcTime(e.value("timeMs", int64_t{0})).c_str(),
                  e.value("user", "").c_str(), e.value("verb", "").c_str(), object.c_str(),
                  e.value("code", 0));
    }
  });
}

}  // namespace

void AddUserCommands(CLI::App& app) {
  AddUserCommand(app);
  AddAuditCommand(app);
}

}  // namespace tessera::cli
