#include "cli/client.h"

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

namespace tessera::cli {

void ClientFlags::Add(CLI::App* cmd) {
  cmd->add_option("--server", server, "the head, http://HOST:PORT (default: from --state-dir)");
  cmd->add_option("--state-dir", state_dir, "where `tessera up` keeps the cluster's state")
      ->capture_default_str();
  cmd->add_option("--token-file", token_file, "admin token (default: <state-dir>/admin.token)");
}

std::string ReadFileOrStdin(const std::string& path) {
  std::stringstream ss;
  if (path == "-") {
    ss << std::cin.rdbuf();
    return ss.str();
  }
  std::ifstream in(path);
  if (!in) throw CommandError(path + ": cannot read this file", 1);
  ss << in.rdbuf();
  return ss.str();
}

std::unique_ptr<net::HttpClient> Connect(const ClientFlags& f) {
  std::string server = f.server;
  if (server.empty())
    if (const char* env = std::getenv("TESSERA_SERVER")) server = env;
  net::ClientOptions o;
  if (server.empty()) {
    std::ifstream in(f.state_dir + "/head.json");
    if (!in)
      throw CommandError("no head found: " + f.state_dir +
                             "/head.json is missing; start a cluster with `tessera up`, or pass "
                             "--server http://HOST:PORT",
                         1);
    nlohmann::json head = nlohmann::json::parse(in, nullptr, false);
    if (head.is_discarded() || !head.contains("port"))
      throw CommandError(f.state_dir + "/head.json is not valid; restart the head", 1);
    o.host = head.value("address", "127.0.0.1");
    if (o.host == "0.0.0.0") o.host = "127.0.0.1";
    o.port = head["port"].get<uint16_t>();
  } else {
    std::string rest = server;
    if (rest.rfind("http://", 0) == 0) rest = rest.substr(7);
    const size_t colon = rest.rfind(':');
    if (colon == std::string::npos)
      throw CommandError("--server: '" + server + "' has no port; write http://HOST:PORT");
    o.host = rest.substr(0, colon);
    try {
      o.port = static_cast<uint16_t>(std::stoi(rest.substr(colon + 1)));
    } catch (...) {
      throw CommandError("--server: '" + server + "' has no valid port; write http://HOST:PORT");
    }
  }
  std::string token;
  if (const char* env = std::getenv("TESSERA_TOKEN"); env && f.token_file.empty()) token = env;
  if (token.empty()) {
    const std::string path = f.token_file.empty() ? f.state_dir + "/admin.token" : f.token_file;
    std::ifstream in(path);
    if (!in) throw CommandError(path + ": cannot read the admin token; pass --token-file", 1);
    std::getline(in, token);
  }
  o.bearer_token = token;
  return std::make_unique<net::HttpClient>(o);
}

nlohmann::json Call(net::HttpClient& client, net::Method method, const std::string& target,
                    const std::string& body) {
  auto r = client.Request(method, target, body);
  if (!r.ok()) throw CommandError("cannot reach the head: " + r.status().message(), 1);
  nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
  if (r->status >= 400) {
    std::string msg =
        j.is_object() && j.contains("error") ? j["error"].get<std::string>() : r->body;
    throw CommandError(msg, r->status == 404 ? 1 : r->status >= 500 ? 1 : 2);
  }
  return j;
}

}  // namespace tessera::cli
