// Agent: the host agent (`tessera agent`), one per host.
//
// It registers the host with the head (retrying with backoff until the head accepts it, and
// giving up when the head refuses the token or the registration: fatal_error()), then
// runs two threads: the heartbeat thread reports workers, progress and usage every
// heartbeatIntervalMs (and at once when a worker exits), and the watch thread holds the
// assignment stream open (reconnecting with backoff). Both hand each snapshot of assignments
// to Reconcile, which starts what is newly assigned and stops what no longer is. Workers keep
// running while the head is away; when the same assignments come back they are adopted, not
// restarted. A log server (HttpServer, same join token) serves each worker's log file to the
// head. With a warm pool (AgentOptions::warm), a Python worker is started in a pre-started
// interpreter that already imported its framework (WarmPool), and cold otherwise.
// Protocol: docs/agent-protocol.md.
//
// Ownership: the caller owns the Agent; the Agent owns its workers (destroying it stops them).
// Thread-safety: all public methods may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "agent/devices.h"
#include "agent/discovery.h"
#include "agent/fence.h"
#include "agent/job_warm_pools.h"
#include "agent/launcher.h"
#include "agent/progress.h"
#include "agent/usage.h"
#include "agent/warm_pool.h"
#include "common/status.h"
#include "ha/head_follower.h"
#include "net/duplex_client.h"
#include "net/http.h"
#include "net/http_client.h"
#include "protocol/wire.h"

namespace tessera::net {
class HttpClient;
class HttpServer;
class StreamWriter;
}  // namespace tessera::net

namespace tessera::agent {

// The wire types (protocol/wire.h) the agent works with, by their short names.
using protocol::Assignment;
using protocol::AssignmentSnapshot;
using protocol::CubeMembership;
using protocol::Heartbeat;
using protocol::IsSafeName;
using protocol::ParsedAssignment;
using protocol::ProgressReport;
using protocol::SliceMembership;
using protocol::StopRequest;
using protocol::WorkerKey;
using protocol::WorkerReport;
using protocol::WorkerState;

struct AgentOptions {
  std::string head_host = "127.0.0.1";
  uint16_t head_port = 0;
  // Further heads of an HA control plane (docs/ha.md "Following the leader"), after the one
  // above: on a transport failure or a standby's 503 the agent goes to the leader that answer
  // names, or else the next head round the list.
  std::vector<std::pair<std::string, uint16_t>> more_heads;
  // TLS to every head (https://): the heads' certificates verified against head_tls.ca_file.
  // nullopt = plain HTTP (a head started with --plain-http).
  std::optional<net::ClientTlsOptions> head_tls;
  std::string join_token;  // sent to the head on every call
  // The host credential (protocol/credential.h, docs/agent-protocol.md "Host identity"): ""
  // = read <state_dir>/credential, or create it (256 random bits, mode 0600) on the first
  // start, so a restarted agent keeps speaking for its host.
  std::string credential;
  // Host name. Registered as protocol::NormalizeHostName(name) (lower-cased), which is also
  // the name in the agent's URLs; Start() fails with the rule's error if it refuses it.
  std::string name;
  std::string state_dir;                     // logs/ and progress/ live here; created if missing
  std::string listen_address = "127.0.0.1";  // the log server binds here
  uint16_t port = 0;                         // log server port; 0 = ephemeral
  std::string address = "127.0.0.1";         // advertised to the head
  std::string generation;                    // "v6e", "7x", ...: ParseGeneration
  std::optional<SliceMembership> slice;      // 2D generations
  std::optional<CubeMembership> cube;        // 3D generations
  std::map<std::string, std::string> labels;
  // Registration and watch reconnects: first wait, doubled up to the max.
  std::chrono::milliseconds backoff_initial{100};
  std::chrono::milliseconds backoff_max{5'000};
  // Deadline of each register/heartbeat request.
  std::chrono::milliseconds request_timeout{10'000};
  // Progress records per heartbeat at most; the rest waits for the next one.
  size_t max_progress_batch = 1000;
  // How often a followed log is checked for new bytes.
  std::chrono::milliseconds log_poll_interval{100};
  // Exited, unassigned workers remembered so they are never started again.
  size_t max_remembered_exits = 4096;
  LauncherOptions launcher;
  // Warm workers: off while warm.python is empty. warm.log_path "" = <state_dir>/warm/warm.log.
  WarmPoolOptions warm;
  // Fencing (agent/fence.h, docs/agent-protocol.md "Fencing"): once no head has answered a
  // heartbeat for this long, training workers are stopped (SIGKILL) and none is started until
  // one answers; serving replicas keep running. Told to the head at registration, which waits
  // for it before replacing the workers of a lost host. 0 (the default here; `tessera agent`
  // defaults to 15 s): never fenced.
  int64_t fence_ms = 0;
  // What host discovery found (agent/discovery.h, docs/discovery.md), sent with the
  // registration as "discovered"; absent for an emulated host.
  std::optional<protocol::Discovered> discovered;
  // Logged by Start() as agent.discovery events: each source that did not answer and why,
  // then the one that did ("emulated" when the layout flags gave the host).
  std::vector<SourceNote> discovery_log;
};

class Agent {
 public:
  Agent(AgentOptions options, std::unique_ptr<DeviceDiscovery> devices);
  // Shutdown().
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Discovers the devices, starts the log server and the threads; registration proceeds in
  // the background. InvalidArgument for bad options (a name NormalizeHostName refuses, an
  // unknown generation, ...); Unavailable if discovery fails or the log server cannot bind.
  // Call once.
  Status Start();

  // Stops the threads, stops every worker (SIGTERM, SIGKILL after its graceMs) and waits for
  // them, then stops the log server. Idempotent.
  void Shutdown();

  // Not OK once the agent has given up registering, which no retry would fix: the head
  // refused the join token (401/403: FailedPrecondition), or refused the registration itself
  // (400/409/422: InvalidArgument carrying the head's error message, e.g. a slice worker
  // another host already is). The agent then does nothing more; call Shutdown(). Transport
  // errors and other answers (5xx, 404, 429, ...) are retried with backoff instead.
  Status fatal_error() const;
  // True once a registration has been accepted.
  bool registered() const;
  // The log server's port (after Start()).
  uint16_t port() const;
  // The host credential in use (after Start()). For tests.
  const std::string& credential() const { return credential_; }
  // The workers the agent would report now, by key.
  std::vector<WorkerReport> Workers() const;
  // The newest assignment revision applied; -1 before the first.
  int64_t revision() const;
  // The warm pool; null when there is none. For tests and measurements.
  const WarmPool* warm_pool() const { return warm_pool_.get(); }
  // Paths of a worker's files.
  std::string LogPath(const WorkerKey& key) const;
  std::string ProgressPath(const WorkerKey& key) const;
  // A replica leader's TLS files (Assignment::tls; docs/serving.md "TLS to replicas"), all
  // 0600 under <state_dir>/tls/JOB/UID/ATTEMPT/: worker-RANK.crt, .key and ca.crt. The worker
  // finds them in TESSERA_TLS_CERT, TESSERA_TLS_KEY and TESSERA_CA_FILE.
  struct TlsPaths {
    std::string cert, key, ca;
  };
  TlsPaths WorkerTlsPaths(const WorkerKey& key) const;

 private:
  struct WorkerRecord {
    Assignment assignment;
    std::shared_ptr<WorkerProcess> process;  // null if it never started
    std::optional<ExitInfo> exit;            // set when it never started
    std::string error;
    bool assigned = true;
    int64_t stop_grace_ms = 0;  // the grace its stop was started with
    int nice = 0;               // the niceness its process group has now (ApplyNice)
    std::unique_ptr<ProgressTailer> tailer;
    // Every line the worker wrote before it exited has been read: a Read() that started after
    // the exit was seen caught up. Its exit is reported, and the record forgotten, only then.
    bool progress_drained = false;
  };
  struct LogFollower {
    std::shared_ptr<net::StreamWriter> writer;
    std::string path;
    uint64_t offset = 0;
    WorkerKey key;
  };

  // options_.credential, or the one in <state_dir>/credential (created when missing).
  Result<std::string> LoadOrCreateCredential() const;
  void MainLoop();
  // The assignments thread: holds the channel (docs/agent-protocol.md "Channel": snapshots and
  // heartbeat acknowledgements down, heartbeats up, one connection), or against a head without
  // it the watch stream beside the heartbeat POSTs.
  void WatchLoop();
  // One channel connection to head `head`, until it ends; what ended it.
  Status RunChannel(size_t head, std::chrono::milliseconds& backoff);
  // One line of the channel: an acknowledgement for the heartbeat waiting on it, or a snapshot.
  void OnChannelLine(std::string_view line, bool& first, std::chrono::milliseconds& backoff);
  // Sends a heartbeat: up the channel when one is open (and waits for its acknowledgement),
  // else as POST .../heartbeat. The answer as the POST's would be.
  Result<net::Response> DeliverHeartbeat(const std::string& json);
  // Fencing: fences when no head has answered for the fence time (FenceLoop polls it; the
  // heartbeat and Reconcile check it first, so an agent resumed from a freeze fences before it
  // acts on anything). FenceLocked stops the training workers.
  void FenceLoop();
  void CheckFenceLocked();
  void FenceLocked(const std::string& why);
  // A head answered a heartbeat (or registration) sent at `sent_ms` (MonotonicNowMs).
  void ContactLocked(int64_t sent_ms);
  // Saves what the fence has seen (fence_memory.h) when it grew: before a snapshot that raised
  // the term or an attempt is acted on. A failed save is logged; the agent goes on.
  void SaveFenceMemoryLocked();
  // Records a refusal for the head and logs it once per distinct reason.
  void RefuseLocked(protocol::Refusal refusal);
  void LogLoop();
  // Creates server_ with the GET /logs/{job}/{uid}/{attempt}/{rank} route and starts it
  // (log_server.cc, with LogLoop); with TLS, ServeLogs starts it once the host certificate is
  // there.
  Status StartLogServer();
  Status ServeLogs();
  // The host certificate (host_credential.h), main thread. EnsureHostCert loads it or
  // bootstraps one (retrying until the head answers; false when stopping or refused: fatal_
  // says why). RenewHostCertIfDue renews at 3/4 of its life, for new connections only:
  // clients_ are made again and the log server reloads; workers and open streams go on.
  bool EnsureHostCert();
  void RenewHostCertIfDue();
  // The head's TLS options, with the host certificate when `with_cert` and there is one.
  std::optional<net::ClientTlsOptions> HeadTls(bool with_cert) const;
  // A client of the head in use with the join token and no certificate: the bootstrap's, and a
  // renewal's once the certificate has expired.
  net::ClientOptions JoinTokenClientOptions() const;
  // (Re)makes clients_ (one per head); under clients_mu_.
  void MakeHeadClients();
  // Registers until accepted, stopped or refused (fatal_ says why); true when accepted.
  bool RegisterWithRetry();
  void SendHeartbeat();
  // Applies a snapshot; `from_new_stream` accepts a revision lower than the last one (the
  // head restarted with a different history).
  // Workers are launched outside mu_ (a fork, or a warm process's hand-off, can take seconds on
  // a busy machine, and the heartbeat must not wait for it), one Reconcile at a time
  // (reconcile_mu_). The heartbeat's reply is applied only when no Reconcile is under way
  // (`wait` false): the watch applies that revision, or the next reply carries it again.
  void Reconcile(const AssignmentSnapshot& snapshot, bool from_new_stream, bool wait = true);
  // A worker to start, prepared under mu_ and launched after it is released.
  struct PendingStart {
    Assignment assignment;
    LaunchSpec spec;
  };
  // Under mu_: a start refused at once (its assignment could not be read) is recorded as
  // exited; otherwise the launch is prepared.
  std::optional<PendingStart> PrepareStartLocked(const ParsedAssignment& parsed);
  // Writes `a.tls` to WorkerTlsPaths(a.key) (each file replaced atomically, 0600).
  Status WriteWorkerTls(const Assignment& a) const;
  // Under mu_: a running worker whose assignment now carries another certificate gets its
  // files rewritten.
  void RenewWorkerTlsLocked(WorkerRecord& record, const ParsedAssignment& parsed);
  // Gives the worker's process group the niceness its assignment asks for (a Service group's
  // start-up priority, then 0 once Ready); a failure is logged. Called with mu_ held, or on a
  // record not yet in workers_.
  void ApplyNice(WorkerRecord& record, int nice);
  WorkerRecord Launch(PendingStart start);  // without mu_; the record to add under it
  WorkerReport ReportLocked(const WorkerKey& key, const WorkerRecord& record) const;
  void RememberExitLocked(const WorkerReport& report);
  bool WorkerDoneLocked(const WorkerKey& key) const;
  void Log(const std::string& event, const std::string& fields) const;
  // Waits until `deadline`, a wake-up or Shutdown; false when stopping.
  bool SleepUntil(std::chrono::steady_clock::time_point deadline, bool wake_on_exit);

  const AgentOptions options_;
  // options_.name after protocol::NormalizeHostName: the name the head registers, used in the
  // agent's URLs and logs.
  const std::string name_;
  const std::unique_ptr<DeviceDiscovery> devices_;
  ProcessLauncher launcher_;
  std::unique_ptr<WarmPool> warm_pool_;
  std::unique_ptr<JobWarmPools> job_pools_;  // guarded by pools_mu_
  std::mutex pools_mu_;      // taken after mu_ when both are held; the heartbeat only tries it
  std::mutex reconcile_mu_;  // one Reconcile at a time: held across its launches, not mu_
  Generation generation_ = Generation::kV6e;  // options_.generation, parsed by Start()
  std::vector<Device> discovered_;
  std::string credential_;  // set by Start(), then read-only
  net::Headers credential_header_;
  std::unique_ptr<net::HttpServer> server_;
  // <state_dir>/host.pem with an https:// head, else "" (set by Start(), then read-only).
  std::string host_cert_file_;
  int64_t host_cert_renew_at_unix_ = 0;   // main thread
  int64_t host_cert_not_after_unix_ = 0;  // main thread
  // Deadline of each request to a head (set by Start()).
  std::chrono::milliseconds request_timeout_{10'000};
  // Register + heartbeat (main thread): one client per head, follower_ says which is in use.
  // Replaced by the main thread when the host certificate is renewed, under clients_mu_
  // (Shutdown cancels them under it).
  std::vector<std::unique_ptr<net::HttpClient>> clients_;
  std::mutex clients_mu_;
  std::vector<std::string> heads_;  // "host:port": options_.head_host:head_port, more_heads
  ha::HeadFollower follower_;       // which of heads_ is in use (ha/head_follower.h)
  net::HttpClient& HeadClient() { return *clients_[follower_.current()]; }
  // `index` did not serve (`answer`: a transport error or a standby's 503 body, which may
  // name the leader): moves follower_ on, unless another thread already did.
  // True when it moved.
  bool HeadFailed(size_t index, std::string_view answer);
  UsageSampler usage_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool started_ = false;
  bool wake_ = false;  // a worker exited: heartbeat now
  bool registered_ = false;
  bool reregister_ = false;
  Status fatal_;
  int64_t heartbeat_interval_ms_ = 1000;
  int64_t revision_ = -1;
  std::map<WorkerKey, WorkerRecord> workers_;
  std::map<WorkerKey, WorkerReport> remembered_;
  std::vector<WorkerKey> remembered_order_;
  std::vector<ProgressReport> pending_progress_;  // read but not yet acknowledged by the head
  net::HttpClient* watch_client_ = nullptr;       // the stream in progress, for Cancel()
  // The channel (under mu_): the open one (for Send and Cancel), nullptr while none is; whether
  // the head lacks it (a head older than the channel: the watch and POSTs are used instead);
  // the acknowledgements waited for, by sequence number (nullopt until answered); channel_run_
  // counts channel connections, so a waiter sees its channel end.
  net::DuplexClient* channel_ = nullptr;
  bool channel_unsupported_ = false;
  uint64_t channel_seq_ = 0;
  uint64_t channel_run_ = 0;
  std::map<uint64_t, std::optional<net::Response>> channel_acks_;
  std::condition_variable ack_cv_;
  // The watch has applied a snapshot of its stream and the stream is still open: every revision
  // comes that way, and a heartbeat's reply (which carries the snapshot too) is applied only
  // when its revision was already in the previous reply (the watch had a beat to apply it).
  bool watch_live_ = false;
  int64_t reply_revision_ = -1;  // the revision in the last heartbeat reply
  std::vector<LogFollower> followers_;
  AgentFence fence_;
  bool fenced_ = false;       // the fence is over and no head has answered since
  std::string contact_file_;  // <state_dir>/fence/contact: the last contact, for the SDK
  std::string memory_file_;   // <state_dir>/fence/seen: the term and attempts seen (FenceMemory)
  std::set<std::string> refusals_logged_;  // reasons already logged (and reported)

  std::thread main_thread_;
  std::thread watch_thread_;
  std::thread log_thread_;
  std::thread fence_thread_;
};

// What `tessera agent` was given, as typed (parsed by MakeAgent so every error names a flag).
struct AgentFlags {
  std::string head;     // https://HOST:PORT (http:// for a head started with --plain-http)
  std::string ca_file;  // the cluster CA, for an https:// head
  std::string join_token_file;
  std::string name;
  std::string state_dir;
  std::string port = "0";
  std::string generation;
  std::string chips;  // "" = what the generation and topology give a host
  std::string slice, topology, worker;
  std::string cube, block, coord;
  std::vector<std::string> labels;  // k=v
  std::string address = "127.0.0.1";
  std::string bind = "127.0.0.1";  // where the log server listens (`up --netns`: the host's own)
  // Warm pool (docs/agent-protocol.md, "Warm workers"); off while warm_python is "".
  std::string warm_python;
  std::string warm_preload;  // comma list of modules
  std::string warm_pool = "1";
  std::string warm_refill_delay_ms = "0";
  std::string warm_sdk_dir;        // "" = the python/ directory of the checkout holding this binary
  std::string fence_ms = "15000";  // AgentOptions::fence_ms; 0 turns fencing off
  // Host discovery (agent/discovery.h, docs/discovery.md): auto, emulated, tpu or nvidia.
  std::string devices = "auto";
  std::string metadata_url = kDefaultMetadataUrl;
  std::string dev_root = "/";
  std::string nvidia_smi = "nvidia-smi";
  // The environment the GKE source reads; nullopt = this process's (tests pass their own).
  std::optional<std::map<std::string, std::string>> environment;
};

struct AgentSetup {
  AgentOptions options;
  std::unique_ptr<DeviceDiscovery> devices;
};

// Validates the flags, reads the join token file and, unless --devices is emulated, discovers
// the host (DiscoverHost: environment, metadata server, /dev, nvidia-smi). The host's layout
// comes from what a TPU source (gke, metadata) found, and any layout flag given must agree
// with it; from the layout flags otherwise (devices and nvidia-smi give a chip count and GPUs,
// not a slice), and with --devices auto also when no source answered. InvalidArgument whose
// message starts with the flag at fault ("--topology: ...", "--devices: tpu: metadata:
// tpu-env TOPOLOGY: ...").
Result<AgentSetup> MakeAgentSetup(const AgentFlags& flags);

// Runs an agent until SIGTERM or SIGINT (then stops its workers and returns OK), or until it
// gives up (returns Agent::fatal_error()) or cannot start (returns Start()'s error).
// Blocks SIGTERM and SIGINT in the calling thread (and so in the agent's threads).
Status RunAgent(AgentSetup setup);

}  // namespace tessera::agent
