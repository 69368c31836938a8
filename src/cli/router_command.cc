// `tessera router`: the serving data path (src/proxy) until SIGTERM or SIGINT. Endpoints come
// from the head's watch API (--head, --token-file) or, without a head, from a static file
// (--static-endpoints); docs/serving-router.md.
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "ha/head_list.h"
#include "proxy/head_link.h"
#include "proxy/serving_router.h"

namespace tessera::cli {
namespace {

struct RouterFlags {
  std::string head;
  std::string token_file;
  std::string ca_file;
  std::string static_endpoints;
  std::string info_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  bool plain_http = false;
  std::string replicas_ca_file;
  bool replicas_plain_http = false;
  int64_t queue_timeout_ms = 60'000;
  int64_t max_queued = 100;
  int64_t max_connections = 10'000;
  int port = 0;
  proxy::RouterOptions options;
};

std::string ReadFile(const std::string& path, const std::string& flag) {
  std::ifstream in(path);
  if (!in) throw CommandError(flag + ": cannot read '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Writes {"pid", "address", "port", "scheme"} atomically (rename), so a reader never sees half
// of it.
void WriteInfo(const std::string& path, const std::string& address, uint16_t port,
               const std::string& scheme) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << nlohmann::json{{"pid", ::getpid()},
                          {"address", address},
                          {"port", port},
                          {"scheme", scheme}}
               .dump()
        << "\n";
    if (!out) throw CommandError("--info-file: cannot write '" + tmp + "'", 1);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw CommandError("--info-file: cannot write '" + path + "': " + ec.message(), 1);
}

void Run(RouterFlags& f) {
  if (f.head.empty() == f.static_endpoints.empty()) {
    throw CommandError(
        "give --head https://ADDRESS:PORT (with --token-file and --ca-file) to learn endpoints "
        "from the head, "
        "or --static-endpoints FILE to route to a fixed list; exactly one of them");
  }
  proxy::HeadLinkOptions link;
  std::vector<proxy::ServiceView> fixed;
  if (!f.head.empty()) {
    // Several heads of an HA control plane, comma-separated: the link follows the leader.
    const std::vector<std::string> heads = ha::SplitHeadList(f.head);
    if (heads.empty()) throw CommandError("--head: no address in '" + f.head + "'");
    for (size_t i = 0; i < heads.size(); ++i) {
      Result<net::ClientOptions> url = net::ClientOptionsForUrl(heads[i], f.ca_file, "--head");
      if (!url.ok()) throw CommandError(url.status().message());
      if (i > 0 && url->tls.has_value() != link.tls.has_value())
        throw CommandError("--head: '" + heads[i] +
                           "' does not speak what the first head does; "
                           "every head of a control plane is https, or every one http");
      if (i == 0) {
        link.host = url->host;
        link.port = url->port;
        link.tls = url->tls;
      } else {
        link.more_heads.emplace_back(url->host, url->port);
      }
    }
    if (f.token_file.empty()) {
      throw CommandError(
          "--token-file: required with --head (the head's admin token, e.g. "
          ".tessera/admin.token)");
    }
    link.token = ReadFile(f.token_file, "--token-file");
    while (!link.token.empty() && std::isspace(static_cast<unsigned char>(link.token.back()))) {
      link.token.pop_back();
    }
    if (link.token.empty()) throw CommandError("--token-file: '" + f.token_file + "' is empty");
  } else {
    if (!f.token_file.empty()) throw CommandError("--token-file: only used with --head");
    if (!f.ca_file.empty())
      throw CommandError(
          "--ca-file: only used with --head (--replicas-ca-file verifies https endpoints)");
    auto services = proxy::ParseStaticEndpoints(ReadFile(f.static_endpoints, "--static-endpoints"));
    if (!services.ok()) {
      throw CommandError("--static-endpoints: " + f.static_endpoints + ": " +
                         services.status().message());
    }
    fixed = std::move(*services);
  }
  // The router's own port: HTTPS with a certificate the cluster CA signed (`tessera up` makes
  // router.crt), or plain HTTP only when asked for by name.
  const bool tls_given = !f.tls_cert_file.empty() || !f.tls_key_file.empty();
  if (f.plain_http && tls_given)
    throw CommandError("--plain-http: conflicts with --tls-cert-file/--tls-key-file; give one");
  if (!f.plain_http) {
    if (f.tls_cert_file.empty() || f.tls_key_file.empty())
      throw CommandError(
          "--tls-cert-file and --tls-key-file: the router serves HTTPS; give its certificate and "
          "key (signed by the cluster CA: `tessera up` writes router.crt and router.key into its "
          "state directory), or --plain-http to serve plain HTTP on a network you trust");
    f.options.tls = proxy::RouterTls{f.tls_cert_file, f.tls_key_file};
  }
  // Replicas that serve HTTPS (their endpoints say so) are verified against the cluster CA:
  // --replicas-ca-file, else the head's --ca-file.
  if (f.replicas_plain_http && !f.replicas_ca_file.empty())
    throw CommandError("--replicas-plain-http: conflicts with --replicas-ca-file; give one");
  f.options.replicas_plain_http = f.replicas_plain_http;
  f.options.replicas_ca_file = !f.replicas_ca_file.empty() ? f.replicas_ca_file : f.ca_file;
  f.options.port = static_cast<uint16_t>(f.port);
  f.options.max_queued = static_cast<size_t>(f.max_queued);
  f.options.max_connections = static_cast<size_t>(f.max_connections);
  f.options.queue_timeout = std::chrono::milliseconds(f.queue_timeout_ms);

  // Block the stop signals before any thread starts, so only sigwait below sees them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  // A client that hangs up mid-write must not kill the router.
  signal(SIGPIPE, SIG_IGN);

  proxy::ServingRouter router(f.options);
  Status started = router.Start();
  if (!started.ok()) {
    throw CommandError(
        (started.code() != StatusCode::kInvalidArgument ? "--bind/--port: "
         : started.message().starts_with("replicas CA") ? "--replicas-ca-file/--ca-file: "
                                                        : "--tls-cert-file/--tls-key-file: ") +
            started.message(),
        1);
  }
  std::unique_ptr<proxy::HeadLink> head_link;
  if (!f.head.empty()) {
    head_link = std::make_unique<proxy::HeadLink>(link, router);
    head_link->Start();
  } else {
    router.ReplaceServices(std::move(fixed));
  }
  const std::string scheme = f.plain_http ? "http" : "https";
  if (!f.info_file.empty()) WriteInfo(f.info_file, f.options.bind_address, router.port(), scheme);
  std::cerr << "tessera router: listening on " << scheme << "://" << f.options.bind_address << ":"
            << router.port()
            << (f.head.empty() ? ", static endpoints from " + f.static_endpoints
                               : ", endpoints from " + f.head)
            << std::endl;
  if (f.plain_http)
    std::cerr << "router: event=router_plain_http PLAIN HTTP on the router's port "
                 "(--plain-http): requests and completions cross the network readable"
              << std::endl;
  // docs/security.md: the hop to the replicas is TLS when they serve it, unless asked not to.
  if (f.options.replicas_plain_http || f.options.replicas_ca_file.empty()) {
    std::cerr << "router: event=replicas_plain_http requests to replicas are plain HTTP (no TLS"
              << (f.options.replicas_plain_http
                      ? ", --replicas-plain-http"
                      : "; no CA to verify replicas with: replicas that serve HTTPS get 502 until "
                        "--replicas-ca-file is given")
              << "): run replicas on a network you trust (docs/security.md)" << std::endl;
  } else {
    std::cerr << "router: event=replicas_tls replicas that serve HTTPS are verified against "
              << f.options.replicas_ca_file << std::endl;
  }
  int sig = 0;
  sigwait(&stop, &sig);
  std::cerr << "tessera router: stopping (signal " << sig << ")" << std::endl;
  if (head_link) head_link->Stop();
  router.Stop();
}

}  // namespace

void AddRouterCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "router", "Run the serving router: routes requests to ready replicas of Services");
  auto f = std::make_shared<RouterFlags>();
  cmd->add_option(
      "--head", f->head,
      "the head to learn endpoints from, https://ADDRESS:PORT (http:// for a head started with "
      "--plain-http); several, comma-separated, for an HA control plane (the router follows "
      "the leader)");
  cmd->add_option("--token-file", f->token_file, "the head's admin token (with --head)");
  cmd->add_option("--ca-file", f->ca_file,
                  "the cluster CA an https:// head's certificate must be signed by (with --head; "
                  "ca.crt in the head's state directory)");
  cmd->add_option("--static-endpoints", f->static_endpoints,
                  "a JSON file of services and endpoints to route to without a head");
  cmd->add_option("--port", f->port, "port to listen on (0: any free port, see --info-file)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--bind", f->options.bind_address, "address to listen on")->capture_default_str();
  cmd->add_option(
      "--default-service", f->options.default_service,
      "the service for paths outside /services/NAME/: NAME, or NS/NAME for a Service of "
      "another namespace (default: the only one)");
  cmd->add_option("--max-queued", f->max_queued,
                  "requests that may wait per service when every replica is full")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1'000'000}));
  cmd->add_option("--queue-timeout-ms", f->queue_timeout_ms,
                  "a waiting request gets 503 after this long (0: no limit)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{3'600'000}));
  cmd->add_option("--max-connections", f->max_connections, "client connections open at once")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1'000'000}));
  cmd->add_option("--info-file", f->info_file,
                  "write {\"pid\", \"address\", \"port\", \"scheme\"} here once listening");
  cmd->add_option("--tls-cert-file", f->tls_cert_file,
                  "the router's HTTPS certificate (PEM; signed by the cluster CA: router.crt in "
                  "the state directory of `tessera up`)");
  cmd->add_option("--tls-key-file", f->tls_key_file, "its key (router.key)");
  cmd->add_flag("--plain-http", f->plain_http,
                "serve plain HTTP instead of HTTPS (a trusted network only; logged)");
  cmd->add_option("--replicas-ca-file", f->replicas_ca_file,
                  "the CA that replicas serving HTTPS (endpoints with scheme https) must present "
                  "a certificate from, naming their address (default: --ca-file)");
  cmd->add_flag("--replicas-plain-http", f->replicas_plain_http,
                "dial every replica in plain HTTP (a head started with --replicas-plain-http "
                "gives them no certificate; a trusted network only; logged)");
  cmd->callback([f] { Run(*f); });
}

}  // namespace tessera::cli
