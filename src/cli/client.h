// How CLI commands reach the head: the server address, admin token and cluster CA, found from
// flags, the environment (TESSERA_SERVER, TESSERA_TOKEN, TESSERA_CA_FILE) or the state directory
// that `tessera up` wrote.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "net/http_client.h"

namespace tessera::cli {

struct ClientFlags {
  std::string server;  // https://HOST:PORT (http:// for a head started with --plain-http)
  std::string state_dir = ".tessera";
  std::string token_file;  // default: <state_dir>/admin.token
  std::string ca_file;     // default: $TESSERA_CA_FILE, then <state_dir>/ca.crt
  void Add(CLI::App* cmd);
};

// Connects per the flags. Throws CommandError (exit 1) with what to do when the head cannot be
// found.
std::unique_ptr<net::HttpClient> Connect(const ClientFlags& flags);

// Sends a request; on a transport error or a 4xx/5xx answer throws CommandError with the
// server's message. Returns the parsed JSON body.
nlohmann::json Call(net::HttpClient& client, net::Method method, const std::string& target,
                    const std::string& body = {});

// Prints the log a logs route (`target`, with its query) serves: all of it, or with `follow`
// each line as it is written (target + "&follow=true") until the stream ends. Throws
// CommandError (exit 1) with the head's message when it cannot be read.
void PrintLog(net::HttpClient& client, const std::string& target, bool follow);

// Reads a file ("-" is standard input); throws CommandError naming the path.
std::string ReadFileOrStdin(const std::string& path);

}  // namespace tessera::cli
