#include "api/head.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "api/audit_log.h"
#include "api/authz.h"
#include "api/head_tls.h"
#include "api/host_certs.h"
#include "api/list_pages.h"
#include "api/log_proxy.h"
#include "api/metrics.h"
#include "api/namespaces.h"
#include "api/registration_batcher.h"
#include "api/replica_certs.h"
#include "api/serial_worker.h"
#include "api/service_prober.h"
#include "api/status_http.h"
#include "api/users.h"
#include "api/watch_hub.h"
#include "api/web_assets.h"
#include "codec/manifest.h"
#include "codec/service_json.h"
#include "controller/head_term.h"
#include "net/http_client.h"
#include "net/http_server.h"
#include "net/port_probe.h"
#include "protocol/credential.h"
#include "store/counting_store.h"
#include "store/sqlite_store.h"

namespace tessera::api {

using codec::kEventKind;
using codec::kHostKind;
using codec::kTrainJobKind;
using codec::ParseDocument;
using Json = nlohmann::json;

namespace {

namespace fs = std::filesystem;
using net::Method;
using net::Request;
using net::Response;

// Every refusal the controller or a codec answers goes out through the one mapping of
// status_http.h: the HTTP status, the message and the field it names.
Response ErrorReply(const Status& status, InputFrom input = InputFrom::kDocument) {
  const HttpError e = ToHttpError(status, input);
  return Response::Error(e.status, e.message, e.field);
}

Response Reply(const Result<Json>& r, int ok_status = 200, InputFrom input = InputFrom::kDocument) {
  if (!r.ok()) return ErrorReply(r.status(), input);
  return Response::Json(ok_status, r->dump());
}

// A delete's answer, its object's key shown as name and namespace (namespaces.h).
Response ReplyDeleted(const Result<Json>& r) {
  if (!r.ok()) return ErrorReply(r.status());
  return Response::Json(200, ShowKey(*r).dump());
}

// Makes `path` readable by its owner only (0600 files, 0700 directories), also when it already
// exists with a wider mode: tokens, specs (env may hold secrets) and logs live there.
Status RestrictToOwner(const std::string& path, mode_t mode) {
  if (::chmod(path.c_str(), mode) == 0) return Status::Ok();
  char octal[8];
  std::snprintf(octal, sizeof octal, "%04o", static_cast<unsigned>(mode));
  return Unavailable(path + ": cannot set mode " + octal + " (" + std::strerror(errno) +
                     "); run the head as the owner of its state directory");
}

Status WriteFileAtomic(const std::string& path, const std::string& text, mode_t mode) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return Unavailable(path + ": " + std::strerror(errno));
  // A leftover temporary file keeps its old mode through O_CREAT.
  const bool ok = ::fchmod(fd, mode) == 0 &&
                  ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                  ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0)
    return Unavailable(path + ": " + std::strerror(errno));
  return Status::Ok();
}

// All of `text` as a decimal number; nullopt for anything else ("1abc", "-1", "", " 1").
std::optional<uint64_t> ParseDecimal(const std::string& text) {
  uint64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

// The token of "Authorization: Bearer <token>", read as net::HasBearerToken reads it (the scheme
// in any case, then one or more spaces); "" when there is none.
std::string BearerTokenOf(const Request& r) {
  const std::string header = r.Header("Authorization");
  constexpr std::string_view kScheme = "bearer ";
  if (header.size() <= kScheme.size()) return "";
  for (size_t i = 0; i < kScheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(header[i])) != kScheme[i]) return "";
  const size_t start = header.find_first_not_of(' ', kScheme.size());
  return start == std::string::npos ? "" : header.substr(start);
}

// The refusal of a users' route to a token that is no user's (the join token).
constexpr char kUsersOnly[] =
    "this endpoint needs the admin token or a user's token; the join token is the agents'";

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// 64 random bits for a head's port seed.
Result<uint64_t> RandomSeed() {
  uint64_t seed = 0;
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::read(fd, &seed, sizeof seed) != static_cast<ssize_t>(sizeof seed)) {
    if (fd >= 0) ::close(fd);
    return Unavailable("/dev/urandom: cannot read random bytes for the head's port seed");
  }
  ::close(fd);
  return seed;
}

// The agent channel's lines (docs/agent-protocol.md "Channel"): the agent sends
// "SEQ HEARTBEAT-JSON", the head answers {"ack": SEQ, "status": S, "body": B}.
std::optional<uint64_t> ChannelSeq(std::string_view line) {
  const size_t space = line.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  uint64_t seq = 0;
  const auto [end, ec] = std::from_chars(line.data(), line.data() + space, seq);
  if (ec != std::errc() || end != line.data() + space) return std::nullopt;
  return seq;
}
std::string AckLine(uint64_t seq, const Response& answer) {
  return "{\"ack\":" + std::to_string(seq) + ",\"status\":" + std::to_string(answer.status) +
         ",\"body\":" + (answer.body.empty() ? std::string("null") : answer.body) + "}\n";
}
std::string ChannelAck(std::string_view line, const Response& answer) {
  return AckLine(ChannelSeq(line).value_or(0), answer);
}
// Channel heartbeats waiting for the channel worker; beyond it a beat is answered 429 at once
// (a second of beats from 100,000 hosts).
constexpr size_t kMaxQueuedChannelBeats = 100'000;

}  // namespace

Result<std::string> LoadOrCreateToken(const std::string& path) {
  std::ifstream in(path);
  if (in) {
    std::string token;
    std::getline(in, token);
    if (token.size() < 16) return InvalidArgument(path + ": token is shorter than 16 characters");
    TESSERA_RETURN_IF_ERROR(RestrictToOwner(path, 0600));
    return token;
  }
  auto token = RandomToken(path);
  if (!token.ok()) return token.status();
  TESSERA_RETURN_IF_ERROR(WriteFileAtomic(path, *token + "\n", 0600));
  return *token;
}

struct Head::Impl {
  SystemClock clock;
  std::unique_ptr<store::CountingStore> store;  // counts writes for /metrics
  std::unique_ptr<controller::Controller> ctl;
  std::unique_ptr<net::HttpServer> server;
  std::unique_ptr<HeadMetrics> metrics;
  std::string web_dir;  // $TESSERA_WEB_DIR: serve the dashboard from disk (development)
  std::string admin_token, join_token;

  std::thread loop;
  std::mutex loop_mu;
  std::condition_variable loop_cv;
  bool stopping = false;
  bool kicked = false;
  // Ticks and registration commits under way, each holding the controller's lock for long
  // (tens of milliseconds at 10,000 hosts; an fsync or a raft round): channel heartbeats that
  // are not quiet (Controller::QuietHeartbeat) then go to channel_beats.
  std::atomic<int> long_holds{0};

  std::unique_ptr<RegistrationBatcher> registrations;  // agents' registrations, batched
  // Answers agents' channel heartbeats that come during a long hold (serial_worker.h).
  std::unique_ptr<SerialWorker> channel_beats;
  std::unique_ptr<WatchHub> hub;  // users' watch streams (created before the controller loads)
  std::unique_ptr<LogProxy> logs;
  std::unique_ptr<ServiceProber> prober;       // Service readiness (service_prober.h)
  std::unique_ptr<UserRegistry> users;         // users and their tokens' hashes (users.h)
  std::unique_ptr<HostCertIssuer> host_certs;  // host certificates; null with --plain-http
  // Replica leaders' certificates; null with --plain-http or --replicas-plain-http.
  std::unique_ptr<ReplicaCertIssuer> replica_certs;
  AuditLog audit;  // every user's write, accepted or refused

  std::mutex watch_mu;
  std::map<std::string, std::vector<std::shared_ptr<net::StreamWriter>>> agent_streams;
  std::set<std::string> dirty_hosts;
  std::string last_tick_error;  // the loop thread only
  int64_t ticks = 0;            // the loop thread only

  void Kick() {
    std::lock_guard lock(loop_mu);
    kicked = true;
    loop_cv.notify_one();
  }

  // Controller callbacks: called with the controller's lock held, so they only queue.
  void OnChange(const std::string& kind, const std::string& type, const Json& object) {
    hub->Publish(kind, type, object);
  }
  void OnAssignments(const std::set<std::string>& hosts) {
    {
      std::lock_guard lock(watch_mu);
      dirty_hosts.insert(hosts.begin(), hosts.end());
    }
    Kick();
  }
  void FlushAssignments() {
    std::set<std::string> hosts;
    {
      std::lock_guard lock(watch_mu);
      hosts.swap(dirty_hosts);
    }
    for (const auto& h : hosts) {
      auto snap = ctl->Assignments(h);
      if (!snap.ok()) continue;
      const std::string line = snap->dump() + "\n";
      std::lock_guard lock(watch_mu);
      auto& list = agent_streams[h];
      std::erase_if(list, [&](const auto& w) { return !w->Write(line); });
    }
  }
  // The controller's loop: a tick every tick_ms, and at once after a kick (a change that asks
  // for a pass, snapshots to send). A kicked tick waits, after the last one, as long as that
  // one took: under a storm of kicks (thousands of agents registering, each registration and
  // heartbeat asking for a pass over a fleet whose inventory is rebuilt) the loop holds the
  // controller at most half the time, and one tick does what every kick since asked for.
  void Loop(int64_t tick_ms) {
    using Clock = std::chrono::steady_clock;
    Clock::time_point earliest = Clock::now();  // the next kicked tick, not before
    std::unique_lock lock(loop_mu);
    while (!stopping) {
      loop_cv.wait_for(lock, std::chrono::milliseconds(tick_ms),
                       [&] { return stopping || kicked; });
      if (kicked) loop_cv.wait_until(lock, earliest, [&] { return stopping; });
      if (stopping) break;
      kicked = false;
      lock.unlock();
      const Clock::time_point start = Clock::now();
      // A store error in a tick is retried on the next one; say so once per distinct error.
      ++long_holds;
      const Status ticked = ctl->Tick();
      --long_holds;
      // The first tick (a new leader's first pass over every stored job) and any tick that held
      // the controller for over a second, timed: where a takeover's or a stall's time went.
      const int64_t took_ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
      if (ticks++ == 0 || took_ms >= 1000)
        std::fprintf(stderr, "head: event=%s took_ms=%lld unix_ms=%lld\n",
                     ticks == 1 ? "first_tick" : "slow_tick", static_cast<long long>(took_ms),
                     static_cast<long long>(clock.NowMs()));
      if (!ticked.ok() && ticked.message() != last_tick_error)
        std::fprintf(stderr, "head: tick failed (retrying every tick): %s\n",
                     ticked.ToString().c_str());
      last_tick_error = ticked.ok() ? "" : ticked.message();
      FlushAssignments();
      const Clock::time_point end = Clock::now();
      earliest = end + (end - start);
      lock.lock();
    }
  }

  // One heartbeat line of an agent channel, "SEQ HEARTBEAT-JSON", answered with the line
  // {"ack": SEQ, "status": S, "body": B}: S and B what POST .../heartbeat would answer. The
  // host's certificate (`peer_identity`, verified when the channel opened) is checked again,
  // as each POST is: a host revoked since is answered 403 naming the revocation, as a POST
  // is, and `close` is set, so no channel outlives its host's revocation (the agent then
  // waits for an admin to readmit the host, docs/security.md "Host certificates"). Without
  // this the deleted host's beats were answered 404, the agent registered again, and that
  // registration's 403 ended it.
  std::string ChannelBeat(const std::string& host, const std::string& peer_identity,
                          const std::string& credential, std::string_view line, bool& close) {
    const size_t space = line.find(' ');
    const std::optional<uint64_t> seq = ChannelSeq(line);
    Response answer;
    net::Request as_posted;
    as_posted.peer_identity = peer_identity;
    if (!seq) {
      answer = Response::Error(
          400, "channel: a line is \"SEQ HEARTBEAT-JSON\", SEQ an unsigned integer", "channel");
    } else if (auto refused = RefuseHostCall(host_certs.get(), as_posted, host)) {
      answer = *std::move(refused);
      close = true;
    } else if (auto matches = ctl->HostCredentialMatches(host, credential); !matches.ok()) {
      answer = ErrorReply(matches.status());
    } else if (!*matches) {
      answer = Response::Error(
          403, "credential: host '" + host + "' was registered again with another credential",
          "credential");
    } else if (auto beat = protocol::ParseHeartbeat(line.substr(space + 1)); !beat.ok()) {
      answer = ErrorReply(beat.status(), InputFrom::kRequest);
    } else {
      answer = Reply(ctl->Heartbeat(host, *beat));
    }
    return AckLine(seq.value_or(0), answer);
  }

  // ChannelBeat's acknowledgement of a quiet beat (Controller::QuietHeartbeat), taken without
  // the controller's lock; nullopt when the beat needs ChannelBeat.
  std::optional<std::string> QuietChannelBeat(const std::string& host,
                                              const std::string& peer_identity,
                                              const std::string& credential,
                                              std::string_view line) {
    const size_t space = line.find(' ');
    const std::optional<uint64_t> seq = ChannelSeq(line);
    if (!seq || space == std::string_view::npos) return std::nullopt;
    net::Request as_posted;
    as_posted.peer_identity = peer_identity;
    if (RefuseHostCall(host_certs.get(), as_posted, host)) return std::nullopt;
    auto beat = protocol::ParseHeartbeat(line.substr(space + 1));
    if (!beat.ok()) return std::nullopt;
    auto answer = ctl->QuietHeartbeat(host, credential, *beat);
    if (!answer) return std::nullopt;
    return AckLine(*seq, Response::Json(200, *std::move(answer)));
  }

  // The same check the server's auth makes (scheme in any case), so a request it let in as
  // holding a token is seen here as holding that same token.
  bool IsUser(const Request& r) const { return net::HasBearerToken(r, admin_token); }
  bool IsAgent(const Request& r) const { return net::HasBearerToken(r, join_token); }

  // The user a request comes from: the admin token is the cluster-admin "admin", any other
  // token a user's record (revoked ones too: Guard refuses them with a 403 that says so).
  // nullopt for the join token and for tokens nobody holds.
  std::optional<UserRecord> Caller(const Request& r) const {
    if (IsUser(r)) return UserRecord{kAdminUserName, authz::Role::kClusterAdmin, "", "", 0, {}};
    const std::string token = BearerTokenOf(r);
    if (token.empty() || !users) return std::nullopt;
    return users->FindByToken(token);
  }

  // The object a user's route touches: `kind`, the path's {name} if it has one, and for a
  // namespaced kind the namespace the query names (?namespace=NS, default "default"; "" with
  // ?allNamespaces=true). 400 naming the parameter when the namespace is not a valid name.
  Result<authz::Target> TargetOf(const Request& r, const std::string& kind) const {
    authz::Target t{kind, "", r.params.contains("name") ? r.params.at("name") : ""};
    if (!authz::IsNamespaced(kind)) return t;
    // A name is a name, never a key of another namespace (NS.NAME, namespaces.h).
    if (!t.name.empty()) TESSERA_RETURN_IF_ERROR(codec::ValidateName("name", t.name));
    if (r.Query("allNamespaces").value_or("") == "true") return t;
    t.namespace_name = r.Query("namespace").value_or(authz::kDefaultNamespace);
    TESSERA_RETURN_IF_ERROR(codec::ValidateName("namespace", t.namespace_name));
    return t;
  }

  // The key (namespaces.h) of the object a route's path and query name; the query was checked
  // by TargetOf before the route ran.
  std::string Key(const Request& r, const std::string& kind) const {
    auto target = TargetOf(r, kind);
    return target.ok() ? TargetKey(*target) : r.params.at("name");
  }

  // One user's call: who makes it, whether its role allows `verb` on `target` (authz.h), and
  // for every write a line in the audit log with the status answered. A refusal is a 403 that
  // names the user, the verb, the object and the role that would allow it.
  Response Guard(const Request& r, authz::Verb verb, const authz::Target& target,
                 const std::function<Response(const UserRecord&)>& fn) {
    const std::optional<UserRecord> who = Caller(r);
    Response out;
    if (!who) {
      out = Response::Error(403, kUsersOnly);
    } else if (who->revoked_ms) {
      out = Response::Error(403, "user '" + who->name +
                                     "' was revoked (tessera user delete); ask a cluster admin "
                                     "for a new credential (tessera user create)");
    } else if (auto d = authz::Authorize(who->principal(), verb, target); !d.allowed) {
      out = Response::Error(403, d.reason);
    } else {
      out = fn(*who);
    }
    if (authz::IsWrite(verb)) Audit(who ? who->name : "(join token)", verb, target, out);
    return out;
  }

  void Audit(const std::string& user, authz::Verb verb, const authz::Target& target,
             const Response& out) {
    std::string message;
    if (out.status >= 400) {
      const Json body = Json::parse(out.body, nullptr, false);
      message = body.is_object() && body.contains("error") && body["error"].is_string()
                    ? body["error"].get<std::string>()
                    : out.body;
    }
    audit.Record({NowUnixMs(), user, authz::VerbName(verb), target.kind, target.namespace_name,
                  target.name, out.status, std::move(message)});
  }

  // A document's target for create and apply: its kind, metadata.name and metadata.namespace
  // (default "default"; refused for a cluster-wide kind). A namespace "default" is taken out of
  // the document, so the controller's codecs see what they always saw. Anything malformed is
  // left for the codec to refuse, naming the field.
  Result<authz::Target> DocumentTarget(Json& doc, const std::string& kind_of_route) const {
    authz::Target t{kind_of_route, "", ""};
    if (!doc.is_object()) return t;
    // contains() first: operator[] would add the key, and the codec would then see a null.
    if (t.kind.empty() && doc.contains("kind") && doc["kind"].is_string())
      t.kind = doc["kind"].get<std::string>();
    if (!doc.contains("metadata") || !doc["metadata"].is_object()) return t;
    Json& meta = doc["metadata"];
    if (meta.contains("name") && meta["name"].is_string()) t.name = meta["name"].get<std::string>();
    if (!meta.contains("namespace")) {
      if (authz::IsNamespaced(t.kind)) t.namespace_name = authz::kDefaultNamespace;
      return t;
    }
    if (!meta["namespace"].is_string())
      return InvalidArgument("metadata.namespace: must be a namespace's name");
    t.namespace_name = meta["namespace"].get<std::string>();
    TESSERA_RETURN_IF_ERROR(codec::ValidateName("metadata.namespace", t.namespace_name));
    if (!authz::IsNamespaced(t.kind))
      return InvalidArgument("metadata.namespace: " + t.kind +
                             " is cluster-wide; leave metadata.namespace out");
    if (t.namespace_name == authz::kDefaultNamespace) meta.erase("namespace");
    return t;
  }

  // GET on a list route: the list with metadata.resourceVersion; with watch=true its watch
  // stream, from resourceVersion=N (the changes after N) or, without one, the list as ADDED
  // lines and then the changes after it (docs/runtime.md "Watches"). Both hold the objects of
  // the target's namespace only ("" for a cluster-wide kind or ?allNamespaces=true: all).
  Response ListOrWatch(const Request& r, const authz::Target& target) {
    const std::string& kind = target.kind;
    const std::string& in_namespace = target.namespace_name;
    const bool watch = r.Query("watch").value_or("") == "true";
    if (auto from = r.Query("resourceVersion"); from && watch) {
      const std::optional<uint64_t> version = ParseDecimal(*from);
      if (!version)
        return Response::Error(400,
                               "resourceVersion: must be a list's metadata.resourceVersion (a "
                               "decimal number), got '" +
                                   *from + "'",
                               "resourceVersion");
      if (!hub->CanResume(kind, *version))
        return Response::Error(410,
                               "resourceVersion: " + *from + " is too old for a " + kind +
                                   " watch (or not from this run of the head): list again and "
                                   "watch from the list's metadata.resourceVersion",
                               "resourceVersion");
      return Response::Stream(
          [this, kind, in_namespace, v = *version](std::shared_ptr<net::StreamWriter> w) {
            hub->Attach(kind, v, in_namespace, {}, std::move(w));
          });
    }
    if (!watch && (r.Query("limit") || r.Query("continue"))) return ListPage(r, target);
    auto listed = ctl->ListWithVersion(kind);
    if (!listed) return Response::Error(500, "no list of kind " + kind);
    const uint64_t version = hub->VersionAfter(listed->changes);
    Json list = std::move(listed->list);
    KeepNamespace(list, in_namespace);
    list["metadata"] = {{"resourceVersion", std::to_string(version)}};
    if (!watch) return Response::Json(200, list.dump());
    std::vector<std::string> added;
    for (const Json& item : list["items"]) added.push_back(WatchHub::Line("ADDED", item, version));
    return Response::Stream([this, kind, in_namespace, version,
                             added = std::move(added)](std::shared_ptr<net::StreamWriter> w) {
      hub->Attach(kind, version, in_namespace, added, std::move(w));
    });
  }

  // A list in pages (list_pages.h): ?limit=N and ?continue=TOKEN from the previous page's
  // metadata.continue. Every page carries the first page's resourceVersion.
  Response ListPage(const Request& r, const authz::Target& target) {
    const std::string& kind = target.kind;
    auto limit = ParseLimit(r.Query("limit"));
    if (!limit.ok()) return ErrorReply(limit.status(), InputFrom::kRequest);
    controller::Controller::PageRequest request;
    request.limit = *limit;
    request.namespace_name = target.namespace_name;
    std::optional<uint64_t> first_version;
    if (auto text = r.Query("continue"); text && !text->empty()) {
      auto token = DecodeContinue(*text, kind, target.namespace_name);
      if (!token.ok()) return ErrorReply(token.status(), InputFrom::kRequest);
      if (!hub->FromThisRun(token->resource_version))
        return Response::Error(410,
                               "continue: the token is from an earlier run of the head (its list "
                               "was at resourceVersion " +
                                   std::to_string(token->resource_version) +
                                   "); list again without continue",
                               "continue");
      request.after = token->after;
      first_version = token->resource_version;
    }
    auto page = ctl->ListPage(kind, request);
    if (!page.ok()) return ErrorReply(page.status(), InputFrom::kRequest);
    const uint64_t version = first_version.value_or(hub->VersionAfter(page->changes));
    Json list = std::move(page->list);
    list["metadata"] = {{"resourceVersion", std::to_string(version)}};
    if (!page->last.empty()) {
      list["metadata"]["continue"] =
          EncodeContinue({kind, target.namespace_name, version, page->last});
      list["metadata"]["remainingItemCount"] = page->remaining;
    }
    return Response::Json(200, list.dump());
  }

  // The dashboard's files: embedded at build time, or read from web_dir when it is set.
  Response Static(const std::string& path) const {
    Response out;
    out.headers["Cache-Control"] = "no-cache";
    out.headers["X-Content-Type-Options"] = "nosniff";
    // Scripts only from the head itself; inline style attributes (job colour swatches) allowed.
    out.headers["Content-Security-Policy"] =
        "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
        "frame-ancestors 'none'";
    const bool safe = !path.empty() && path.find("..") == std::string::npos && path[0] != '/';
    if (safe && !web_dir.empty()) {
      std::ifstream in(web_dir + "/" + path, std::ios::binary);
      if (in) {
        std::ostringstream text;
        text << in.rdbuf();
        const WebAsset* known = FindWebAsset(path);
        out.content_type = known                    ? std::string(known->content_type)
                           : path.ends_with(".js")  ? "text/javascript; charset=utf-8"
                           : path.ends_with(".css") ? "text/css; charset=utf-8"
                                                    : "text/html; charset=utf-8";
        out.body = text.str();
        return out;
      }
    }
    const WebAsset* asset = safe ? FindWebAsset(path) : nullptr;
    if (!asset) return Response::Error(404, "path: no dashboard file '" + path + "'", "path");
    out.content_type = std::string(asset->content_type);
    out.body = std::string(asset->body);
    return out;
  }

  Response Metrics() const {
    HeadMetrics::Inputs in;
    in.jobs = ctl->ListJobs();
    in.hosts = ctl->ListHosts();
    in.cluster_queues = ctl->ListClusterQueues();
    in.open_connections = static_cast<double>(server->connection_count());
    const store::CountingStore::Counts writes = store->counts();
    in.store_writes_by_kind = writes.writes_by_kind;
    in.store_commits = writes.commits;
    auto text = metrics->Render(in);
    if (!text.ok()) return Response::Error(500, text.status().message());
    Response out = Response::Text(200, std::move(text).value());
    out.content_type = "text/plain; version=0.0.4; charset=utf-8";
    return out;
  }

  // A worker's log, read (or followed) from its agent by the LogProxy: the I/O thread only
  // locates it and hands it over.
  Response Logs(const Request& req) {
    const std::string job = Key(req, kTrainJobKind);
    int rank = 0;
    if (auto w = req.Query("worker")) {
      const std::optional<uint64_t> parsed = ParseDecimal(*w);
      if (!parsed || *parsed > 1'000'000)
        return Response::Error(
            400,
            "worker: must be a worker rank, a whole number >= 0 (e.g. worker=0), got '" + *w + "'",
            "worker");
      rank = static_cast<int>(*parsed);
    }
    // A rank the job does not have is a 400 (the query's "worker"), as for a malformed one.
    auto loc = ctl->LocateLog(job, rank);
    if (!loc.ok()) return ErrorReply(loc.status(), InputFrom::kRequest);
    const controller::Controller::LogLocation& l = *loc;
    LogProxy::Source source{l.address, static_cast<uint16_t>(l.port),
                            l.path,    "worker " + std::to_string(rank) + " of trainjob " + job,
                            l.token,   HostDnsName(l.host)};
    const bool follow = req.Query("follow").value_or("false") == "true";
    return logs->Serve(source, follow ? LogProxy::Mode::kFollow : LogProxy::Mode::kRead);
  }
};

Head::Head(HeadOptions options) : impl_(std::make_unique<Impl>()), options_(std::move(options)) {}

Head::~Head() { Stop(); }

int Head::port() const { return impl_->server ? impl_->server->port() : 0; }

Status Head::Start() {
  std::error_code ec;
  fs::create_directories(options_.state_dir, ec);
  if (ec) return Unavailable("state directory " + options_.state_dir + ": " + ec.message());
  TESSERA_RETURN_IF_ERROR(RestrictToOwner(options_.state_dir, 0700));
  auto admin = LoadOrCreateToken(options_.state_dir + "/admin.token");
  if (!admin.ok()) return admin.status();
  auto join = LoadOrCreateToken(options_.state_dir + "/join.token");
  if (!join.ok()) return join.status();
  admin_token_ = *admin;
  join_token_ = *join;
  Impl& m = *impl_;
  m.admin_token = admin_token_;
  m.join_token = join_token_;

  auto store = options_.open_store ? options_.open_store()
                                   : store::SqliteStore::Open(options_.state_dir + "/tessera.db");
  if (!store.ok()) return store.status();
  m.store = std::make_unique<store::CountingStore>(std::move(store).value());
  controller::ControllerOptions controller_options = options_.controller;
  if (controller_options.term == 0) {  // no election fed one: this start takes the next term
    auto term = controller::TakeNextHeadTerm(*m.store);
    if (!term.ok()) return term.status();
    controller_options.term = *term;
  }
  // Ports: a seed of this start's own, and a probe of this machine, so that clusters whose hosts
  // share it never hand their workers the same port (controller/ports.cc).
  if (options_.port_seed) {
    port_seed_ = *options_.port_seed;
  } else {
    auto seed = RandomSeed();
    if (!seed.ok()) return seed.status();
    port_seed_ = *seed;
  }
  controller_options.seed = port_seed_;
  if (!controller_options.port_taken) controller_options.port_taken = net::PortTakenHere;
  // Replica leaders' certificates (replica_certs.h): the issuer is made with the CA below,
  // before the server starts and so before any assignment is built.
  const bool replica_tls = !options_.plain_http && !options_.replicas_plain_http;
  if (replica_tls) {
    controller_options.replica_tls = [&m](const controller::ReplicaCertRequest& request) {
      return m.replica_certs ? m.replica_certs->For(request) : std::nullopt;
    };
  }
  // The loop checks leases every tick; a gap well beyond that is the head's own stall.
  if (controller_options.lease_stall_ms == 0)
    controller_options.lease_stall_ms =
        std::max(controller_options.lease_ms / 4, 4 * options_.tick_ms);
  m.ctl = std::make_unique<controller::Controller>(*m.store, m.clock, controller_options);
  m.registrations = std::make_unique<RegistrationBatcher>(
      [&m](const std::vector<protocol::Registration>& batch) {
        ++m.long_holds;
        auto answers = m.ctl->RegisterHosts(batch);
        --m.long_holds;
        return answers;
      },
      [&m] { m.Kick(); });
  m.channel_beats = std::make_unique<SerialWorker>(kMaxQueuedChannelBeats);
  m.channel_beats->Start();
  m.metrics = std::make_unique<HeadMetrics>(m.clock);
  // Resource versions start at this run's start time in microseconds: above any an earlier
  // run handed out (one per change), so a client's stale version gets 410, not wrong data.
  m.hub = std::make_unique<WatchHub>(
      WatchHubOptions{options_.watch_history, static_cast<uint64_t>(m.clock.NowMs()) * 1000});
  const std::string ca_file = options_.state_dir + "/" + kCaCertFile;
  LogProxyOptions log_options = options_.logs;
  log_options.bearer_token = join_token_;
  if (!options_.plain_http) log_options.tls = net::ClientTlsOptions{ca_file, "", "", ""};
  m.logs = std::make_unique<LogProxy>(log_options);
  if (const char* dir = std::getenv("TESSERA_WEB_DIR")) m.web_dir = dir;
  // Every change goes to the metrics (histograms, event counts) and to the watch streams.
  m.ctl->SetChangeListener(
      [&m](const std::string& kind, const std::string& type, const Json& object) {
        m.metrics->OnChange(kind, type, object);
        m.OnChange(kind, type, object);
      });
  m.ctl->SetAssignmentListener(
      [&m](const std::set<std::string>& hosts) { m.OnAssignments(hosts); });
  // A heartbeat that freed chips asks for a pass instead of running one (Controller::Heartbeat).
  m.ctl->SetPassListener([&m] { m.Kick(); });
  // Each step of the load timed (a new leader over 100,000 stored jobs: docs/ha.md).
  using StartClock = std::chrono::steady_clock;
  auto since_ms = [](StartClock::time_point t) {
    return static_cast<long long>(
        std::chrono::duration_cast<std::chrono::milliseconds>(StartClock::now() - t).count());
  };
  const StartClock::time_point load_start = StartClock::now();
  TESSERA_RETURN_IF_ERROR(m.ctl->Load());
  const long long controller_ms = since_ms(load_start);
  m.users = std::make_unique<UserRegistry>(*m.store);
  TESSERA_RETURN_IF_ERROR(m.users->Load());
  AuditFileOptions audit_file = options_.audit_file;
  if (audit_file.path.empty()) audit_file.path = options_.state_dir + "/audit.log";
  TESSERA_RETURN_IF_ERROR(m.audit.OpenFile(audit_file));
  const StartClock::time_point seed_start = StartClock::now();
  // What a restarted head finds was counted before: a walk, no copy of every job.
  m.ctl->VisitJobs([&m](const TrainJob& job) { m.metrics->SeedJob(job); });
  std::fprintf(stderr, "head: event=loaded controller_ms=%lld metrics_seed_ms=%lld total_ms=%lld\n",
               controller_ms, since_ms(seed_start), since_ms(load_start));

  net::ServerOptions so;
  so.bind_address = options_.bind_address;
  so.port = static_cast<uint16_t>(options_.port);
  so.io_threads = options_.io_threads;
  so.auth.tokens = {admin_token_, join_token_};
  if (!options_.plain_http) {
    auto tls = PrepareHeadTls(options_.state_dir, {options_.bind_address, options_.tls_sans});
    if (!tls.ok()) return tls.status();
    so.tls = *tls;
    // Asked, not required: users and the CLI call without one (docs/security.md).
    so.tls->client_ca_file = ca_file;
    so.tls->client_certs = net::ClientCertMode::kRequest;
    m.host_certs = std::make_unique<HostCertIssuer>(
        *m.store,
        HostCertOptions{ca_file, options_.state_dir + "/" + kCaKeyFile, options_.host_cert_ttl});
    TESSERA_RETURN_IF_ERROR(m.host_certs->Load());
    if (replica_tls) {
      m.replica_certs = std::make_unique<ReplicaCertIssuer>(ReplicaCertOptions{
          ca_file, options_.state_dir + "/" + kCaKeyFile, options_.host_cert_ttl});
      TESSERA_RETURN_IF_ERROR(m.replica_certs->Load());
    }
  }
  if (!replica_tls)
    std::fprintf(stderr,
                 "head: event=replicas_plain_http Service replicas get no certificate: they "
                 "serve, and are probed, in plain HTTP (%s); run them on a network you trust "
                 "(docs/security.md)\n",
                 options_.plain_http ? "--plain-http" : "--replicas-plain-http");
  // Users' tokens (users.h): any token a user record holds, revoked ones included, so that a
  // revoked user hears why (403) rather than 401.
  so.auth.check = [&m](const Request& r) { return m.Caller(r).has_value(); };
  // The dashboard's files hold no data (the page asks for the token), so they need no token.
  so.auth.exempt_paths = {"/healthz", "/v1/leader", "/", "/web/*"};
  m.server = std::make_unique<net::HttpServer>(so);
  auto& s = *m.server;
  // A users' route: `verb` on `kind` (the object Impl::TargetOf reads from the path and the
  // query), answered by fn when the caller's role allows it (Impl::Guard).
  auto allow = [&m](authz::Verb verb, const std::string& kind, auto fn) {
    return [&m, verb, kind, fn](const Request& r) -> Response {
      auto target = m.TargetOf(r, kind);
      if (!target.ok()) return ErrorReply(target.status(), InputFrom::kRequest);
      return m.Guard(r, verb, *target, [&](const UserRecord&) { return fn(r); });
    };
  };
  // A list (or watch: the verb is watch then) of `kind`, in the namespace the query names.
  auto list = [&m](const std::string& kind) {
    return [&m, kind](const Request& r) -> Response {
      auto target = m.TargetOf(r, kind);
      if (!target.ok()) return ErrorReply(target.status(), InputFrom::kRequest);
      const bool watch = r.Query("watch").value_or("") == "true";
      return m.Guard(r, watch ? authz::Verb::kWatch : authz::Verb::kList, *target,
                     [&](const UserRecord&) { return m.ListOrWatch(r, *target); });
    };
  };
  using authz::Verb;
  auto agent = [&m](auto fn) {
    return [&m, fn](const Request& r) -> Response {
      if (!m.IsAgent(r)) return Response::Error(403, "this endpoint needs the join token");
      return fn(r);
    };
  };
  // The calls of one registered host (/api/v1/agents/{name}/...): the join token, and that
  // host's own credential in the X-Tessera-Host-Credential header (docs/agent-protocol.md,
  // "Host identity"), so an agent speaks only for its own host.
  auto own_host = [&m](auto fn) {
    return [&m, fn](const Request& r) -> Response {
      if (!m.IsAgent(r)) return Response::Error(403, "this endpoint needs the join token");
      const std::string host = r.params.at("name");
      if (auto refused = RefuseHostCall(m.host_certs.get(), r, host)) return *refused;
      auto matches = m.ctl->HostCredentialMatches(host, r.Header(protocol::kHostCredentialHeader));
      if (!matches.ok()) return ErrorReply(matches.status());
      if (!*matches)
        return Response::Error(
            403,
            "credential: the " + std::string(protocol::kHostCredentialHeader) +
                " header does not hold host '" + host +
                "''s credential; an agent may speak only for the host it registered",
            "credential");
      return fn(r);
    };
  };
  // An agent's message the wire decoder refuses: 400 naming the field; nothing is applied.
  auto bad_message = [](const Status& status) { return ErrorReply(status, InputFrom::kRequest); };
  auto parse_body = [](const Request& r) -> Result<Json> { return ParseDocument(r.body); };

  TESSERA_RETURN_IF_ERROR(s.Handle(Method::kGet, "/healthz", [this](const Request&) {
    if (!options_.leader_info) return Response::Json(200, R"({"status":"ok"})");
    return Response::Json(200, R"({"status":"ok","ha":)" + options_.leader_info() + "}");
  }));
  if (options_.leader_info) {
    TESSERA_RETURN_IF_ERROR(s.Handle(Method::kGet, "/v1/leader", [this](const Request&) {
      return Response::Json(200, options_.leader_info());
    }));
  }
  TESSERA_RETURN_IF_ERROR(
      s.Handle(Method::kGet, "/", [&m](const Request&) { return m.Static("index.html"); }));
  TESSERA_RETURN_IF_ERROR(s.Handle(Method::kGet, "/web/{path...}", [&m](const Request& r) {
    return m.Static(r.params.at("path"));
  }));
  TESSERA_RETURN_IF_ERROR(
      s.Handle(Method::kGet, "/metrics",
               allow(Verb::kGet, "Metrics", [&m](const Request&) { return m.Metrics(); })));
  auto create = [&m, parse_body](const Request& r) {
    auto doc = parse_body(r);
    if (!doc.ok()) return Response::Error(400, doc.status().message(), "body");
    auto target = m.DocumentTarget(*doc, kTrainJobKind);
    if (!target.ok()) return ErrorReply(target.status());
    return m.Guard(r, Verb::kCreate, *target, [&](const UserRecord&) {
      Response out = Reply(m.ctl->CreateJob(*doc), 201);
      m.Kick();
      return out;
    });
  };
  TESSERA_RETURN_IF_ERROR(
      s.Handle(Method::kPost, "/api/v1/apply", [&m, parse_body](const Request& r) {
        auto doc = parse_body(r);
        if (!doc.ok()) return Response::Error(400, doc.status().message(), "body");
        auto target = m.DocumentTarget(*doc, "");
        if (!target.ok()) return ErrorReply(target.status());
        return m.Guard(r, Verb::kApply, *target, [&](const UserRecord&) {
          // ?dryRun=true: every check, nothing stored (tessera apply --dry-run).
          if (r.Query("dryRun").value_or("") == "true") return Reply(m.ctl->DryRunApply(*doc));
          auto applied = m.ctl->Apply(*doc);
          int status = 201;
          if (applied.ok() && !applied->value("created", true)) status = 200;
          Response out = Reply(applied, status);
          m.Kick();
          return out;
        });
      }));
  // Admission resources: lists (and watches) with status.
  const std::pair<const char*, const char*> queue_lists[] = {
      {"/api/v1/clusterqueues", "ClusterQueue"},
      {"/api/v1/localqueues", "LocalQueue"},
      {"/api/v1/priorityclasses", "PriorityClass"}};
  for (const auto& [path, kind_name] : queue_lists) {
    const std::string kind = kind_name;
    TESSERA_RETURN_IF_ERROR(s.Handle(Method::kGet, path, list(kind)));
    // 409 naming what still uses it (docs/admission.md "Deleting").
    TESSERA_RETURN_IF_ERROR(s.Handle(Method::kDelete, std::string(path) + "/{name}",
                                     allow(Verb::kDelete, kind, [&m, kind](const Request& r) {
                                       auto deleted =
                                           m.ctl->DeleteQueueObject(kind, m.Key(r, kind));
                                       if (deleted.ok()) *deleted = ShowKey(std::move(*deleted));
                                       Response out = Reply(deleted, 200, InputFrom::kRequest);
                                       m.Kick();
                                       return out;
                                     })));
  }
  TESSERA_RETURN_IF_ERROR(s.Handle(Method::kPost, "/api/v1/jobs", create));
  TESSERA_RETURN_IF_ERROR(s.Handle(Method::kGet, "/api/v1/jobs", list(kTrainJobKind)));
  TESSERA_RETURN_IF_ERROR(s.Handle(Method::kGet, "/api/v1/jobs/{name}",
                                   allow(Verb::kGet, kTrainJobKind, [&m](const Request& r) {
                                     return Reply(m.ctl->GetJob(m.Key(r, kTrainJobKind)));
                                   })));
  TESSERA_RETURN_IF_ERROR(s.Handle(Method::kDelete, "/api/v1/jobs/{name}",
                                   allow(Verb::kDelete, kTrainJobKind, [&m](const Request& r) {
                                     Response out =
                                         ReplyDeleted(m.ctl->DeleteJob(m.Key(r, kTrainJobKind)));
                                     m.Kick();
                                     return out;
                                   })));
  TESSERA_RETURN_IF_ERROR(
      s.Handle(Method::kGet, "/api/v1/jobs/{name}/logs",
               allow(Verb::kLogs, kTrainJobKind, [&m](const Request& r) { return m.Logs(r); })));
  TESSERA_RETURN_IF_ERROR(s.Handle(Method::kGet, "/api/v1/hosts", list(kHostKind)));
  // An admin forgets a host, so its name may be registered by a new agent (a replaced machine):
  // 409 while it runs workers of a job that holds chips or of a Service group, unless it is Lost.
  TESSERA_RETURN_IF_ERROR(s.Handle(Method::kDelete, "/api/v1/hosts/{name}",
                                   allow(Verb::kDelete, kHostKind, [&m](const Request& r) {
                                     const std::string host = r.params.at("name");
                                     Response out = Reply(m.ctl->DeleteHost(host));
                                     // Its certificate goes on the deny-list (host_certs.h).
                                     if (out.status == 200 && m.host_certs) {
                                       Status revoked = m.host_certs->Revoke(host, NowUnixMs());
                                       if (!revoked.ok()) out = ErrorReply(revoked);
                                     }
                                     m.Kick();
                                     return out;
                                   })));
  // Lifting a revocation lets the host bootstrap again (docs/security.md "Host certificates").
  TESSERA_RETURN_IF_ERROR(s.Handle(
      Method::kDelete, "/api/v1/hostrevocations/{name}",
      allow(Verb::kDelete, kHostRevocationKind, [&m](const Request& r) {
        if (!m.host_certs) return Response::Error(404, "this head issues no host certificates");
        const Status lifted = m.host_certs->Readmit(r.params.at("name"));
        return lifted.ok() ? Response::Json(200, R"({"status":"Deleted"})") : ErrorReply(lifted);
      })));
  TESSERA_RETURN_IF_ERROR(
      s.Handle(Method::kPost, "/api/v1/agents/bootstrap", agent([&m](const Request& r) {
                 return BootstrapHost(m.host_certs.get(), r,
                                      [&m](const std::string& host, std::string_view credential) {
                                        return m.ctl->HostCredentialMatches(host, credential);
                                      });
               })));
  TESSERA_RETURN_IF_ERROR(s.Handle(Method::kGet, "/api/v1/events", list(kEventKind)));
  TESSERA_RETURN_IF_ERROR(s.Handle(
      Method::kPost, "/api/v1/agents/register", agent([&m, bad_message](const Request& r) {
        // One decoder for the agent's messages, the one the agent's encoder is
        // tested against (protocol/wire.h).
        auto registration = protocol::ParseRegistration(r.body);
        if (!registration.ok()) return bad_message(registration.status());
        if (auto refused = RefuseHostCall(m.host_certs.get(), r, registration->name))
          return *refused;
        // Committed with the registrations that arrive meanwhile (registration_batcher.h).
        return Response::Deferred([&m, reg = *std::move(registration)](auto answer) mutable {
          m.registrations->Submit(std::move(reg),
                                  [answer](Result<Json> reply) { answer(Reply(reply)); });
        });
      })));
  TESSERA_RETURN_IF_ERROR(s.Handle(Method::kPost, "/api/v1/agents/{name}/heartbeat",
                                   own_host([&m, bad_message](const Request& r) {
                                     auto beat = protocol::ParseHeartbeat(r.body);
                                     if (!beat.ok()) return bad_message(beat.status());
                                     // No kick: a heartbeat that changes assignments or frees
                                     // chips kicks through the controller's listeners, and lease
                                     // expiry needs only the periodic tick. Kicking on every
                                     // heartbeat made the loop walk every host 1,000 times a
                                     // second at 1,000 agents.
                                     return Reply(m.ctl->Heartbeat(r.params.at("name"), *beat));
                                   })));
  // The agent channel (docs/agent-protocol.md "Channel"): one connection per agent carrying
  // both directions. Down: assignment snapshots, as the watch stream sends them, and one
  // acknowledgement per heartbeat; up: "SEQ HEARTBEAT-JSON" lines, each handled as a heartbeat
  // POST would be (the credential checked again, so a channel outlives no host deletion).
  TESSERA_RETURN_IF_ERROR(s.Handle(
      Method::kGet, "/api/v1/agents/{name}/channel", own_host([&m](const Request& r) {
        const std::string host = r.params.at("name");
        const std::string credential = r.Header(protocol::kHostCredentialHeader);
        // Set by on_stream, which the server runs before it passes any client line.
        auto writer = std::make_shared<std::shared_ptr<net::StreamWriter>>();
        Response out = Response::Stream([&m, host, writer](std::shared_ptr<net::StreamWriter> w) {
          *writer = w;
          {
            std::lock_guard lock(m.watch_mu);
            m.agent_streams[host].push_back(w);
            m.dirty_hosts.insert(host);  // the loop sends the current snapshot
          }
          m.Kick();
        });
        // Beats handed to the channel worker and not yet answered: while there are any, the
        // next beat goes there too, so acknowledgements keep their order.
        auto queued = std::make_shared<std::atomic<int>>(0);
        out.on_client_line = [&m, host, peer = r.peer_identity, credential, writer,
                              queued](std::string_view line) {
          if (line.empty() || !*writer) return;
          auto answer = [&m, host, peer, credential, writer](std::string_view beat) {
            bool close = false;
            (*writer)->Write(m.ChannelBeat(host, peer, credential, beat, close));
            if (close) (*writer)->Close();  // after the acknowledgement that says why
          };
          // A tick holds the controller's lock for tens of milliseconds at 10,000 hosts: a
          // beat answered here would stop this io loop that long, and with every loop stopped
          // the head read nothing, registrations included. The worker answers it instead.
          if (queued->load() == 0) {
            // An idle host's beat needs none of the controller's lock (quiet_beats.cc): it is
            // answered here whatever holds the lock.
            if (auto quiet = m.QuietChannelBeat(host, peer, credential, line)) {
              (*writer)->Write(*quiet);
              return;
            }
            if (m.long_holds.load() == 0) return answer(line);
          }
          // Heard now: a lease check while the beat waits counts it (Controller::
          // HeartbeatArrived), so a tick that holds the lock for seconds loses no host.
          m.ctl->HeartbeatArrived(host);
          queued->fetch_add(1);
          const bool taken = m.channel_beats->Submit([answer, queued, beat = std::string(line)] {
            answer(beat);
            queued->fetch_sub(1);
          });
          if (taken) return;
          queued->fetch_sub(1);
          (*writer)->Write(ChannelAck(
              line,
              Response::Error(429,
                              "channel: the head has " + std::to_string(kMaxQueuedChannelBeats) +
                                  " heartbeats waiting; beat again at the next interval",
                              "channel")));
        };
        return out;
      })));
  TESSERA_RETURN_IF_ERROR(
      s.Handle(Method::kGet, "/api/v1/agents/{name}/assignments", own_host([&m](const Request& r) {
                 const std::string host = r.params.at("name");
                 auto snap = m.ctl->Assignments(host);
                 if (!snap.ok() || r.Query("watch").value_or("") != "true") return Reply(snap);
                 return Response::Stream([&m, host](std::shared_ptr<net::StreamWriter> w) {
                   {
                     std::lock_guard lock(m.watch_mu);
                     m.agent_streams[host].push_back(w);
                     m.dirty_hosts.insert(host);  // the loop sends the current snapshot
                   }
                   m.Kick();
                 });
               })));

  // SliceReservations (docs/reservations.md): list and watch, get, delete (?force=true stops the
  // workloads inside it; without it a reservation in use is a 409 naming them).
  TESSERA_RETURN_IF_ERROR(
      s.Handle(Method::kGet, "/api/v1/slicereservations", list("SliceReservation")));
  TESSERA_RETURN_IF_ERROR(s.Handle(Method::kGet, "/api/v1/slicereservations/{name}",
                                   allow(Verb::kGet, "SliceReservation", [&m](const Request& r) {
                                     return Reply(
                                         m.ctl->GetReservation(m.Key(r, "SliceReservation")));
                                   })));
  TESSERA_RETURN_IF_ERROR(s.Handle(
      Method::kDelete, "/api/v1/slicereservations/{name}",
      allow(Verb::kDelete, "SliceReservation", [&m](const Request& r) {
        const std::string force = r.Query("force").value_or("false");
        if (force != "true" && force != "false")
          return Response::Error(400, "force: must be true or false, got '" + force + "'", "force");
        Response out =
            ReplyDeleted(m.ctl->DeleteReservation(m.Key(r, "SliceReservation"), force == "true"));
        m.Kick();
        return out;
      })));

  // Secrets (docs/security.md "Secrets"): list and watch, get, delete; created and replaced by
  // POST /api/v1/apply. Every answer shows keys and value lengths, never a value.
  TESSERA_RETURN_IF_ERROR(s.Handle(Method::kGet, "/api/v1/secrets", list(codec::kSecretKind)));
  TESSERA_RETURN_IF_ERROR(s.Handle(Method::kGet, "/api/v1/secrets/{name}",
                                   allow(Verb::kGet, codec::kSecretKind, [&m](const Request& r) {
                                     return Reply(m.ctl->GetSecret(m.Key(r, codec::kSecretKind)));
                                   })));
  TESSERA_RETURN_IF_ERROR(s.Handle(Method::kDelete, "/api/v1/secrets/{name}",
                                   allow(Verb::kDelete, codec::kSecretKind, [&m](const Request& r) {
                                     auto deleted =
                                         m.ctl->DeleteSecret(m.Key(r, codec::kSecretKind));
                                     if (deleted.ok()) *deleted = ShowKey(std::move(*deleted));
                                     return Reply(deleted, 200, InputFrom::kRequest);
                                   })));

  // Services (docs/serving.md): list and watch, get, delete, scale, the router's load reports
  // and the logs of one process of a replica group.
  TESSERA_RETURN_IF_ERROR(s.Handle(Method::kGet, "/api/v1/services", list("Service")));
  TESSERA_RETURN_IF_ERROR(s.Handle(Method::kGet, "/api/v1/services/{name}",
                                   allow(Verb::kGet, "Service", [&m](const Request& r) {
                                     return Reply(m.ctl->GetService(m.Key(r, "Service")));
                                   })));
  TESSERA_RETURN_IF_ERROR(s.Handle(Method::kDelete, "/api/v1/services/{name}",
                                   allow(Verb::kDelete, "Service", [&m](const Request& r) {
                                     Response out =
                                         ReplyDeleted(m.ctl->DeleteService(m.Key(r, "Service")));
                                     m.Kick();
                                     return out;
                                   })));
  TESSERA_RETURN_IF_ERROR(s.Handle(
      Method::kPost, "/api/v1/services/{name}/scale",
      allow(Verb::kScale, "Service", [&m, parse_body](const Request& r) {
        auto doc = parse_body(r);
        if (!doc.ok()) return Response::Error(400, doc.status().message(), "body");
        if (!doc->is_object() || !(*doc)["replicas"].is_number_integer() ||
            (*doc)["replicas"].get<int64_t>() < 0 || (*doc)["replicas"].get<int64_t>() > 4096)
          return Response::Error(422, "replicas: required, a whole number from 0 to 4096",
                                 "replicas");
        std::string role = "server";
        if (doc->contains("role")) {
          if (!(*doc)["role"].is_string())
            return Response::Error(422, "role: must be a role name", "role");
          role = (*doc)["role"].get<std::string>();
        }
        Response out = Reply(m.ctl->ScaleService(
            m.Key(r, "Service"), role, static_cast<int>((*doc)["replicas"].get<int64_t>())));
        m.Kick();
        return out;
      })));
  TESSERA_RETURN_IF_ERROR(
      s.Handle(Method::kPost, "/api/v1/services/{name}/load",
               allow(Verb::kReportLoad, "Service", [&m, parse_body](const Request& r) {
                 auto doc = parse_body(r);
                 if (!doc.ok()) return Response::Error(400, doc.status().message(), "body");
                 // The whole report is kept (status.roles[].traffic) for the dashboard's charts.
                 auto traffic = codec::RouterTrafficFromJson(*doc);
                 if (!traffic.ok()) return ErrorReply(traffic.status());
                 const std::string role = doc->contains("role") && (*doc)["role"].is_string()
                                              ? (*doc)["role"].get<std::string>()
                                              : "server";
                 const double ongoing = traffic->ongoing_requests;
                 return Reply(m.ctl->ReportServiceLoad(m.Key(r, "Service"), role, ongoing,
                                                       std::move(*traffic)));
               })));
  TESSERA_RETURN_IF_ERROR(s.Handle(
      Method::kGet, "/api/v1/services/{name}/logs",
      allow(Verb::kLogs, "Service", [&m](const Request& r) {
        const std::string name = m.Key(r, "Service");
        int numbers[2] = {0, 0};  // replica, worker
        const char* keys[2] = {"replica", "worker"};
        for (int i = 0; i < 2; ++i)
          if (auto v = r.Query(keys[i])) {
            const std::optional<uint64_t> parsed = ParseDecimal(*v);
            if (!parsed || *parsed > 1'000'000)
              return Response::Error(
                  400, std::string(keys[i]) + ": must be a whole number >= 0, got '" + *v + "'",
                  keys[i]);
            numbers[i] = static_cast<int>(*parsed);
          }
        const std::string role = r.Query("role").value_or("server");
        auto loc = m.ctl->LocateServiceLog(name, role, numbers[0], numbers[1]);
        if (!loc.ok()) return ErrorReply(loc.status(), InputFrom::kRequest);
        const controller::Controller::LogLocation& l = *loc;
        LogProxy::Source source{l.address,
                                static_cast<uint16_t>(l.port),
                                l.path,
                                "worker " + std::to_string(numbers[1]) + " of replica " + role +
                                    "/" + std::to_string(numbers[0]) + " of service " + name,
                                l.token,
                                HostDnsName(l.host)};
        const bool follow = r.Query("follow").value_or("false") == "true";
        return m.logs->Serve(source, follow ? LogProxy::Mode::kFollow : LogProxy::Mode::kRead);
      })));

  // Who the caller is (any user, revoked ones refused): the dashboard shows it.
  TESSERA_RETURN_IF_ERROR(s.Handle(Method::kGet, "/api/v1/whoami", [&m](const Request& r) {
    const std::optional<UserRecord> who = m.Caller(r);
    if (!who) return Response::Error(403, kUsersOnly);
    if (who->revoked_ms) return Response::Error(403, "user '" + who->name + "' was revoked");
    return Response::Json(200, UserToJson(*who, false).dump());
  }));
  // Users (docs/security.md "Users and roles"): cluster admins create, list and revoke them.
  // The token is in the create's answer only; the head keeps its hash.
  TESSERA_RETURN_IF_ERROR(
      s.Handle(Method::kGet, "/api/v1/users", allow(Verb::kList, kUserKind, [&m](const Request&) {
                 Json items = Json::array();
                 for (const UserRecord& u : m.users->List()) items.push_back(UserToJson(u, false));
                 return Response::Json(200, Json{{"items", items}}.dump());
               })));
  TESSERA_RETURN_IF_ERROR(
      s.Handle(Method::kPost, "/api/v1/users", [&m, parse_body](const Request& r) {
        auto doc = parse_body(r);
        if (!doc.ok()) return Response::Error(400, doc.status().message(), "body");
        if (!doc->is_object()) return Response::Error(400, "body: must be a JSON object", "body");
        const Json& d = *doc;
        for (const char* key : {"name", "role", "namespace"})
          if (d.contains(key) && !d[key].is_string())
            return Response::Error(400, std::string(key) + ": must be a string", key);
        const authz::Target target{kUserKind, "", d.value("name", "")};
        return m.Guard(r, Verb::kCreate, target, [&](const UserRecord&) {
          auto issued = m.users->Create(target.name, d.value("role", ""), d.value("namespace", ""),
                                        NowUnixMs());
          if (!issued.ok()) return ErrorReply(issued.status(), InputFrom::kRequest);
          Json out = UserToJson(issued->user, false);
          out["token"] = issued->token;
          return Response::Json(201, out.dump());
        });
      }));
  TESSERA_RETURN_IF_ERROR(s.Handle(Method::kDelete, "/api/v1/users/{name}",
                                   allow(Verb::kDelete, kUserKind, [&m](const Request& r) {
                                     auto revoked =
                                         m.users->Revoke(r.params.at("name"), NowUnixMs());
                                     if (!revoked.ok())
                                       return ErrorReply(revoked.status(), InputFrom::kRequest);
                                     return Response::Json(200, UserToJson(*revoked, false).dump());
                                   })));
  // The audit log (audit_log.h): cluster admins only; ?limit=N (default 1000) latest entries.
  TESSERA_RETURN_IF_ERROR(s.Handle(
      Method::kGet, "/api/v1/audit", allow(Verb::kList, "AuditLog", [&m](const Request& r) {
        size_t limit = 1000;
        if (auto v = r.Query("limit")) {
          const std::optional<uint64_t> parsed = ParseDecimal(*v);
          if (!parsed)
            return Response::Error(400, "limit: must be a whole number, got '" + *v + "'", "limit");
          limit = static_cast<size_t>(*parsed);
        }
        Json items = Json::array();
        for (const AuditEntry& e : m.audit.Latest(limit)) items.push_back(AuditEntryToJson(e));
        return Response::Json(200, Json{{"items", items}, {"recorded", m.audit.recorded()}}.dump());
      })));

  TESSERA_RETURN_IF_ERROR(s.Start());
  const Json head = {{"address", options_.bind_address},
                     {"port", s.port()},
                     {"scheme", options_.plain_http ? "http" : "https"},
                     {"pid", ::getpid()},
                     {"portSeed", port_seed_}};
  TESSERA_RETURN_IF_ERROR(
      WriteFileAtomic(options_.state_dir + "/head.json", head.dump() + "\n", 0600));
  m.loop = std::thread([&m, tick = options_.tick_ms] { m.Loop(tick); });
  m.registrations->Start();
  m.prober = std::make_unique<ServiceProber>(*m.ctl, replica_tls ? ca_file : "");
  m.prober->Start();
  return Status::Ok();
}

void Head::Stop() {
  Impl& m = *impl_;
  {
    std::lock_guard lock(m.loop_mu);
    if (m.stopping) return;
    m.stopping = true;
    m.loop_cv.notify_one();
  }
  if (m.prober) m.prober->Stop();
  if (m.registrations) m.registrations->Stop();  // answers what is queued: 503
  if (m.loop.joinable()) m.loop.join();
  if (m.logs) m.logs->Stop();  // log streams end with an error line, then the server stops
  if (m.server) m.server->Stop();
  if (m.channel_beats) m.channel_beats->Stop();  // after the server: no line comes in later
  if (m.store)
    if (Status closed = m.store->Close(); !closed.ok())
      std::fprintf(stderr, "head: closing the store failed: %s\n", closed.ToString().c_str());
}

}  // namespace tessera::api
