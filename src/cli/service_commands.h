// The Service parts of the resource commands (docs/serving.md): the table of `tessera get
// services`, `describe service`, `logs service` and `delete service` (called from
// resource_commands.cc, which owns those subcommands), and the `scale` subcommand.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "net/http_client.h"

namespace tessera::cli {

void PrintServices(const nlohmann::json& items, bool wide,
                   bool header = true);  // header: column names
// Status, replicas per role (phase, hosts, slice, readiness, restarts), an autoscaled role's
// settings and the autoscaler's last decision with its reason, endpoints and events.
// `in_namespace`: the query part naming the Service's namespace ("?namespace=NS", or "" for
// default: cli/client.h NamespaceQuery).
void DescribeService(net::HttpClient& client, const std::string& name,
                     const std::string& in_namespace);
// The log of worker `worker` of replica `replica` of `role`; `follow` keeps printing.
// `and_namespace`: "&namespace=NS" or "" (NamespaceQuery with '&').
void ServiceLogs(net::HttpClient& client, const std::string& name, const std::string& role,
                 int replica, int worker, bool follow, const std::string& and_namespace);
// `tessera scale service NAME --role R --replicas N`.
void AddServiceCommands(CLI::App& app);

}  // namespace tessera::cli
