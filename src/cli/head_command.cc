// `tessera head`: run the control-plane server until SIGTERM or SIGINT.
#include <signal.h>

#include <iostream>

#include "api/head.h"
#include "cli/commands.h"

namespace tessera::cli {

void AddHeadCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("head", "Run the tessera head (API server and controller)");
  auto o = std::make_shared<api::HeadOptions>();
  cmd->add_option("--state-dir", o->state_dir, "where the store and tokens live")
      ->capture_default_str();
  cmd->add_option("--bind", o->bind_address, "address to listen on")->capture_default_str();
  cmd->add_option("--port", o->port, "port to listen on (0: any free port, see head.json)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--lease-ms", o->controller.lease_ms, "a host silent for this long is lost")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{200}, int64_t{600'000}));
  cmd->add_option("--heartbeat-ms", o->controller.heartbeat_interval_ms,
                  "how often agents heartbeat")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{50}, int64_t{60'000}));
  cmd->callback([o] {
    if (o->controller.heartbeat_interval_ms * 2 > o->controller.lease_ms)
      throw CommandError("--lease-ms must be at least twice --heartbeat-ms");
    // Block the stop signals before any thread starts, so only sigwait below sees them.
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, nullptr);
    api::Head head(*o);
    Status s = head.Start();
    if (!s.ok()) throw CommandError(s.message(), 1);
    std::cerr << "tessera head: listening on " << o->bind_address << ":" << head.port()
              << ", state in " << o->state_dir << std::endl;
    int sig = 0;
    sigwait(&stop, &sig);
    std::cerr << "tessera head: stopping (signal " << sig << ")" << std::endl;
    head.Stop();
  });
}

}  // namespace tessera::cli
