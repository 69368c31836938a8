// How CLI commands reach the head: the server address, a token and the cluster CA, found from
// flags, a user's config file (--config, TESSERA_CONFIG), the environment (TESSERA_SERVER,
// TESSERA_TOKEN, TESSERA_CA_FILE) or the state directory that `tessera up` wrote.
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
  std::string token_file;       // default: <state_dir>/admin.token
  std::string ca_file;          // default: the config file's, $TESSERA_CA_FILE, <state_dir>/ca.crt
  std::string config;           // a user's config file (default: $TESSERA_CONFIG)
  std::string namespace_name;   // -n: default the config file's namespace, else "default"
  bool all_namespaces = false;  // -A: lists only
  void Add(CLI::App* cmd);
  // Adds -n/--namespace, and for lists (`lists`) -A/--all-namespaces.
  void AddNamespace(CLI::App* cmd, bool lists);
};

// A user's config file (like a kubeconfig; `tessera user create` writes it, 0600): JSON with
// "server", "token", "namespace" (default "default"), "caFile" (the cluster CA; empty for a head
// started with --plain-http) and "user".
struct UserConfig {
  std::string path;  // empty: no config file was named
  std::string server, token, namespace_name, ca_file;
};

// The config file --config or $TESSERA_CONFIG names (an empty UserConfig when neither does).
// Throws CommandError naming the path when it cannot be read or is not a config file.
UserConfig ReadUserConfig(const ClientFlags& flags);

// The cluster CA a client of these flags verifies the head with: --ca-file, else the config
// file's (when it names the server), $TESSERA_CA_FILE, then <state-dir>/ca.crt.
std::string CaFile(const ClientFlags& flags, const UserConfig& config);

// The query that puts a request on the route of `kind_path` ("jobs", "localqueues", ...) in the
// namespace the flags name, begun with `sep` ('?' or '&'): "" for the namespace "default" and
// for cluster-wide kinds, so those requests are what they always were.
std::string NamespaceQuery(const ClientFlags& flags, const std::string& kind_path, char sep = '?');

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
