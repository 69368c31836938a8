// `tessera head`: run the control-plane server until SIGTERM or SIGINT.
#include <signal.h>

#include <iostream>

#include "admission/help_threshold.h"
#include "api/head.h"
#include "cli/commands.h"
#include "ha/ha_head.h"

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
  cmd->add_flag("--plain-http", o->plain_http,
                "INSECURE, for debugging only: serve plain HTTP instead of HTTPS, so every token "
                "crosses the network readable (docs/security.md)");
  cmd->add_flag("--replicas-plain-http", o->replicas_plain_http,
                "give Service replicas no certificate: they serve, and the head probes them, in "
                "plain HTTP (a trusted network only; logged as event=replicas_plain_http). "
                "Default: each replica leader gets one from the cluster CA and serves HTTPS "
                "(docs/serving.md \"TLS to replicas\")");
  cmd->add_option("--tls-san", o->tls_sans,
                  "another DNS name or IP address for the head's server certificate (repeatable; "
                  "it always names the bind address, 127.0.0.1, ::1, localhost and the host name)");
  cmd->add_option("--audit-log-path", o->audit_file.path,
                  "the audit log's file: one JSON line per write asked of the head, accepted or "
                  "refused (default: audit.log in --state-dir)");
  cmd->add_option_function<uint64_t>(
         "--audit-log-maxsize", [o](const uint64_t& mb) { o->audit_file.max_bytes = mb << 20; },
         "megabytes of the audit log before it is rotated (default 100)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20));
  cmd->add_option("--audit-log-maxbackup", o->audit_file.max_backups,
                  "rotated audit log files kept (audit.log.1 newest)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  cmd->add_option_function<int64_t>(
         "--host-cert-ttl-s",
         [o](const int64_t& seconds) { o->host_cert_ttl = std::chrono::seconds(seconds); },
         "the lifetime in seconds of the host certificates agents get at bootstrap (default "
         "86400, 24 h); agents renew at 3/4 of it. Short values are for tests (docs/security.md)")
      ->check(CLI::Range(int64_t{10}, int64_t{366 * 24 * 3600}));
  cmd->add_option("--lease-ms", o->controller.lease_ms, "a host silent for this long is lost")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{200}, int64_t{600'000}));
  cmd->add_option("--heartbeat-ms", o->controller.heartbeat_interval_ms,
                  "how often agents heartbeat")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{50}, int64_t{60'000}));
  auto* progress_write =
      cmd->add_option("--progress-write-interval-ms", o->controller.progress_write_interval_ms,
                      "a running job's progress is written to the store at most this often "
                      "(default 1000 with SQLite, 10000 with etcd, where every write is a raft "
                      "round and stays in etcd's history until compacted); reads show it live")
          ->check(CLI::Range(int64_t{100}, int64_t{3'600'000}));
  cmd->add_option("--io-threads", o->io_threads,
                  "threads serving HTTP; a request waiting for the controller's lock holds one, "
                  "so a few more than cores keep /healthz and streams answered during a long "
                  "pass")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option_function<uint64_t>(
      "--port-seed", [o](const uint64_t& seed) { o->port_seed = seed; },
      "the seed of the ports handed to workers (MASTER_PORT, ...); default: a random one per "
      "start, printed and in head.json, so clusters on one machine never share a port");
  cmd->add_flag(
      "--fair-sharing",
      [o](int64_t n) {
        o->controller.fair_sharing = n > 0 ? FairSharing::kEnabled : FairSharing::kDisabled;
      },
      "admission: fair sharing across the ClusterQueues of a cohort (off by default, as in "
      "Kueue; docs/admission.md)");
  auto* backfill = cmd->add_option_function<std::string>(
      "--backfill", [o](const std::string& v) { o->controller.backfill_easy = v == "easy"; },
      "while no ClusterQueue exists: none (first come, first served; the default) or easy (EASY "
      "backfill: the head of the line reserves the chips that free soonest, from "
      "spec.expectedDuration, default 24h; docs/admission.md)");
  backfill->check(CLI::IsMember({"none", "easy"}));
  cmd->add_flag(
      "--defrag",
      [o](int64_t n) {
        if (n > 0 && !o->controller.backfill_easy)
          throw CLI::ValidationError("--defrag", "needs --backfill easy");
        o->controller.defrag = n > 0;
      },
      "with --backfill easy: move sub-cube jobs (checkpoint and restart) to free whole cubes for "
      "a waiting 4x4x4 or super-slice; moved work under 1% of capacity");
  // The help threshold, named and checked as `tessera sim --admission easy` (help_threshold.h).
  HelpThresholdOptions& help = o->controller.help_threshold;
  auto* help_factor =
      cmd->add_option("--help-factor", help.factor,
                      "with --backfill easy: a large job (64 chips or more) gets a reservation, "
                      "and moves, only once it has waited this many times the recent small "
                      "jobs' wait quantile (0: off, helped at once; to 1000; as tessera sim)")
          ->capture_default_str();
  auto* help_quantile = cmd->add_option("--help-quantile", help.quantile,
                                        "with --help-factor: the quantile of the recent small "
                                        "jobs' waits (0 to 1)")
                            ->capture_default_str();
  auto* help_window = cmd->add_option("--help-window", help.window,
                                      "with --help-factor: how many of the last small starts it "
                                      "looks at (1 to 1048576)")
                          ->capture_default_str();
  // HA (docs/ha.md): an etcd store, leader election among heads.
  auto ha = std::make_shared<ha::HaHeadOptions>();
  auto store_url = std::make_shared<std::string>("sqlite");
  struct HaMs {
    int64_t lease = 15'000, renew = 10'000, retry = 2'000, store_timeout = 60'000,
            compaction = 60'000;
  };
  auto ms = std::make_shared<HaMs>();
  cmd->add_option("--store", *store_url,
                  "sqlite (tessera.db in --state-dir, one head) or etcd://host:port[,host:port...] "
                  "(several heads, one elected leader); etcds://... for etcd over TLS with a "
                  "client certificate (--etcd-*-file)")
      ->capture_default_str();
  auto* lease = cmd->add_option("--election-lease-ms", ms->lease,
                                "HA: the leader lease (whole seconds; default 15000)");
  auto* renew = cmd->add_option("--election-renew-deadline-ms", ms->renew,
                                "HA: a leader that cannot renew for this long steps down "
                                "(default 10000; must be < the lease)");
  auto* retry = cmd->add_option("--election-retry-ms", ms->retry,
                                "HA: how often standbys try and the leader renews (default 2000; "
                                "the renew deadline must exceed 1.2 x this)");
  auto* advertise = cmd->add_option("--advertise", ha->advertise,
                                    "HA: this head's address as standbys report it (default "
                                    "bind:port)");
  auto* store_timeout = cmd->add_option("--store-timeout-ms", ms->store_timeout,
                                        "HA: how long to retry an etcd that is down at start "
                                        "(default 60000)");
  auto* compaction =
      cmd->add_option("--etcd-compaction-interval-ms", ms->compaction,
                      "HA: the leader compacts etcd's history every this long, keeping one "
                      "interval of it (default 60000; 0: never, when etcd's "
                      "--auto-compaction-retention or an operator does)");
  auto* prefix = cmd->add_option("--store-prefix", ha->prefix,
                                 "HA: the etcd key prefix of this cluster (default /tessera/)");
  auto* etcd_ca = cmd->add_option("--etcd-ca-file", ha->etcd_ca_file,
                                  "HA, etcds://: the CA of etcd's certificates (default "
                                  "ca.crt in --state-dir)");
  auto* etcd_cert = cmd->add_option("--etcd-cert-file", ha->etcd_cert_file,
                                    "HA, etcds://: this head's client certificate for etcd "
                                    "(default etcd-client.crt in --state-dir)");
  auto* etcd_key = cmd->add_option("--etcd-key-file", ha->etcd_key_file,
                                   "HA, etcds://: its key (default etcd-client.key in "
                                   "--state-dir)");
  cmd->callback([o, ha, ms, store_url, lease, renew, retry, advertise, store_timeout, compaction,
                 prefix, etcd_ca, etcd_cert, etcd_key, help_factor, help_quantile, help_window,
                 progress_write] {
    if (o->controller.heartbeat_interval_ms * 2 > o->controller.lease_ms)
      throw CommandError("--lease-ms must be at least twice --heartbeat-ms");
    for (auto* flag : {help_factor, help_quantile, help_window})
      if (flag->count() > 0 && !o->controller.backfill_easy)
        throw CommandError(flag->get_name() + " needs --backfill easy");
    if (Status valid = ValidateHelpThreshold(o->controller.help_threshold); !valid.ok())
      throw CommandError(valid.message());
    const bool etcd = store_url->starts_with("etcd://") || store_url->starts_with("etcds://");
    if (!etcd && *store_url != "sqlite")
      throw CommandError("--store: '" + *store_url +
                         "' is neither sqlite nor etcd://host:port[,host:port...] (etcds:// "
                         "for TLS)");
    for (auto* flag : {lease, renew, retry, advertise, store_timeout, compaction, prefix, etcd_ca,
                       etcd_cert, etcd_key}) {
      if (!etcd && flag->count() > 0)
        throw CommandError(flag->get_name() +
                           " only applies to an HA head: give --store etcd://host:port too");
    }
    // Block the stop signals before any thread starts, so only sigwait below sees them.
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, nullptr);
    if (etcd) {
      if (progress_write->count() == 0) o->controller.progress_write_interval_ms = 10'000;
      ha->head = *o;
      ha->store_url = *store_url;
      ha->election = ha::ElectionConfig{std::chrono::milliseconds(ms->lease),
                                        std::chrono::milliseconds(ms->renew),
                                        std::chrono::milliseconds(ms->retry)};
      ha->store_timeout = std::chrono::milliseconds(ms->store_timeout);
      ha->etcd_compaction_interval = std::chrono::milliseconds(ms->compaction);
      if (Status valid = ha::ValidateHaHeadOptions(*ha); !valid.ok())
        throw CommandError(valid.message());
      auto code = ha::RunHaHead(*ha, stop);
      if (!code.ok()) throw CommandError(code.status().message(), 1);
      if (*code == 3) throw CommandError("stepped down as leader; restart to stand by", 3);
      if (*code != 0) throw CommandError("the elected head failed to start", *code);
      return;
    }
    api::Head head(*o);
    Status s = head.Start();
    if (!s.ok()) throw CommandError(s.message(), 1);
    std::cerr << "tessera head: listening on " << (o->plain_http ? "http://" : "https://")
              << o->bind_address << ":" << head.port() << ", state in " << o->state_dir
              << ", port seed " << head.port_seed()
              << (o->plain_http ? "; PLAIN HTTP (--plain-http): tokens cross the network readable"
                                : "; clients verify it with " + o->state_dir + "/ca.crt")
              << std::endl;
    int sig = 0;
    sigwait(&stop, &sig);
    std::cerr << "tessera head: stopping (signal " << sig << ")" << std::endl;
    head.Stop();
  });
}

}  // namespace tessera::cli
