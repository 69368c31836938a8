// An HA head: `tessera head --store etcd://host:port[,...]`. Several such heads share one
// etcd; one is elected (elector.h) and runs the ordinary Head (api/head.h) on the etcd store
// with its term as the store fence and the controller's term. The others are standbys: they
// serve /healthz and GET /v1/leader (who leads, at which term) and answer every other request
// with 503 naming the leader's address, so a client or agent can go there. A leader that steps
// down (it could not renew in time, or its key is gone) stops its Head and exits with status 3
// for its supervisor to restart it as a standby: it never writes again with what it read as
// leader. docs/ha.md has the whole story and what is not built yet.
//
// Thread-safety: RunHaHead from the main thread, with the stop signals blocked.
#pragma once

#include <signal.h>

#include <chrono>
#include <string>

#include "api/head.h"
#include "common/status.h"
#include "ha/election.h"
#include "store/etcd_client.h"

namespace tessera::ha {

// The head's etcd client certificate and key in its state directory, by default.
inline constexpr char kEtcdClientCertFile[] = "etcd-client.crt";
inline constexpr char kEtcdClientKeyFile[] = "etcd-client.key";

struct HaHeadOptions {
  api::HeadOptions head;  // port must be fixed (not 0): it is this head's address
  std::string store_url;  // etcd://host:port[,host:port...], or etcds:// for TLS
  // With etcds://: the CA that signed the members' certificates and this head's client
  // certificate and key. Empty = ca.crt, etcd-client.crt and etcd-client.key in the head's
  // state directory (where `tessera up --ha` writes them).
  std::string etcd_ca_file;
  std::string etcd_cert_file;
  std::string etcd_key_file;
  std::string prefix = "/tessera/";
  std::string advertise;  // the address standbys show for this head; default bind:port
  ElectionConfig election;
  std::chrono::milliseconds store_timeout{60'000};  // retrying an etcd that is down at start
  // The leader compacts etcd's history every this long (history_compactor.h), keeping one
  // interval of it; 0: never (etcd's own --auto-compaction-retention, or an operator, does).
  std::chrono::milliseconds etcd_compaction_interval{60'000};
};

// The checks of the flag combination, each naming the flag: an etcd URL that does not parse,
// port 0, a bad election config, --etcd-*-file without etcds://, a compaction interval below
// a second.
Status ValidateHaHeadOptions(const HaHeadOptions& options);

// Runs until one of the signals in `stop` arrives (returns 0, having handed leadership over),
// or until this head steps down as leader (returns 3). A start that fails (etcd unreachable
// for store_timeout, a newer schema) is an error.
// The etcd client options of `options`: its endpoints, and for etcds:// the TLS files (the
// defaults filled in from the state directory).
Result<store::EtcdOptions> HaEtcdOptions(const HaHeadOptions& options);

Result<int> RunHaHead(const HaHeadOptions& options, const sigset_t& stop);

}  // namespace tessera::ha
