// tessera_loadgen: thousands of emulated tessera agents against one running head, on one
// io thread (Boost.Asio), so the generator is not the bottleneck (bench/README.md, "Control
// plane"). Each emulated agent, as `tessera agent` does (docs/agent-protocol.md):
//   1. with --ca-file (a head serving HTTPS): makes a key and a CSR and gets its host
//      certificate from POST /api/v1/agents/bootstrap, then presents it on every connection;
//   2. registers (POST /api/v1/agents/register) with its own credential (64 random hex digits),
//      a v6e host of a 4x4 slice (4 hosts per slice);
//   3. --connection one (default): holds one connection, the agent channel
//      (GET /api/v1/agents/NAME/channel): heartbeats go up it, acknowledgements and assignment
//      snapshots come down it. --connection two: the protocol before the channel (a heartbeat
//      keep-alive connection and the assignments watch stream), for heads that lack it;
//   4. heartbeats at 1 Hz from a random offset in the first second, with its workers: every
//      assignment it receives is reported Running with one progress record a second, so the
//      mix of idle hosts and hosts running workers is set by the jobs the head places on them.
// Registration runs on --register-threads synchronous clients; the emulated agents afterwards
// on one io thread. Prints one JSON object: registration, heartbeat latency percentiles (from
// the write of a heartbeat to its answer), answered within --deadline-ms, errors, its own CPU;
// also the p99 of the agents running workers alone (hb_busy_p99_ms), and per second of the
// window the beats sent then that were answered after 100 ms (hb_over_100ms_by_second: a tail
// spread evenly, or a few stalls).
//
// --shard I/N emulates agents I, I+N, I+2N, ... of --agents, so several processes share one
// fleet (each process has its own file limit). --wait-go: print "READY" on stdout once set up
// and start the measurement window when a line "GO" arrives on stdin (run.py starts the
// window of every shard at once); otherwise the window starts after --warmup seconds. A line
// "MARK" during the window closes its first part (reported as "before_mark") and starts the
// second: run.py --failover sends it just before it kills the leading head.
//
// --heads H:P,H:P,...: the heads of an HA control plane (docs/ha.md), followed as `tessera
// agent` follows them (src/ha/head_follower.h): each agent uses one head at a time; when its
// channel fails (connection refused or closed) or is refused (a standby's 503 names the
// leader), it moves to the leader named if that is one of its heads, else to the next head round
// the list, and reconnects after 100 ms when it moved, else after its backoff (100 ms doubling to
// 5 s, reset by a snapshot). Registration moves on the same way. Not emulated: the agent's
// heartbeat POST while its channel is down (the emulated agent skips that beat), and its
// re-registration when a head answers 404 (counted in "refusal_statuses").
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ha/head_list.h"
#include "net/http_client.h"
#include "net/response_reader.h"
#include "net/tls_stream.h"
#include "pki/pki.h"
#include "protocol/credential.h"
#include "protocol/wire.h"

namespace tessera::loadgen {
namespace {

using Json = nlohmann::json;
using SteadyClock = std::chrono::steady_clock;
namespace asio = boost::asio;
using asio::ip::tcp;

struct HeadAddress {
  std::string host;
  uint16_t port = 0;
  std::string Name() const { return host + ":" + std::to_string(port); }
};

struct Options {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  std::vector<HeadAddress> heads;  // --heads, else {--host:--port}
  std::vector<std::string> head_names;
  std::string ca_file;  // "" = plain HTTP
  std::string join_token;
  int agents = 100;
  int shard = 0, shards = 1;
  bool one_connection = true;
  int register_threads = 8;
  double warmup_s = 3, window_s = 20, setup_timeout_s = 300;
  int64_t deadline_ms = 1000;
  int64_t interval_ms = 1000;
  bool wait_go = false;
  uint64_t seed = 1;
  std::string name_prefix = "cp-";
};

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string RandomHex(std::mt19937_64& rng, int bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < bytes; ++i) {
    const auto b = static_cast<unsigned>(rng() & 0xff);
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

// One TCP (or TLS) connection on the io thread: connect, handshake, queued writes, reads fed
// to a ResponseReader. `on_closed` runs once when it fails or the server closes it.
class Link : public std::enable_shared_from_this<Link> {
 public:
  Link(asio::io_context& io, asio::ssl::context* tls) : stream_(MakeStream(io, tls)) {}
  net::ResponseReader reader;
  std::function<void()> on_open;
  std::function<void(const std::string&)> on_closed;

  void Open(const tcp::endpoint& endpoint, const std::string& server_name) {
    auto self = shared_from_this();
    stream_->tcp_layer().async_connect(endpoint, [self, server_name](boost::system::error_code ec) {
      if (ec) return self->Fail("connect: " + ec.message());
      if (!self->stream_->has_tls()) return self->Opened();
      if (Status s = net::ExpectServerName(self->stream_->tls(), server_name); !s.ok())
        return self->Fail(s.message());
      self->stream_->tls().async_handshake(asio::ssl::stream_base::client,
                                           [self](boost::system::error_code ec2) {
                                             if (ec2) return self->Fail("tls: " + ec2.message());
                                             self->stream_->Activate();
                                             self->Opened();
                                           });
    });
  }
  void Send(std::string bytes) {
    if (closed_) return;
    out_.push_back(std::move(bytes));
    if (opened_ && !writing_) Pump();  // else Opened() starts the writes
  }
  void Close() {
    if (closed_) return;
    closed_ = true;
    boost::system::error_code ignored;
    stream_->socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_->close();
  }
  bool closed() const { return closed_; }

 private:
  static std::unique_ptr<net::TlsStream> MakeStream(asio::io_context& io, asio::ssl::context* tls) {
    if (tls) return std::make_unique<net::TlsStream>(io.get_executor(), *tls);
    return std::make_unique<net::TlsStream>(io.get_executor());
  }
  void Opened() {
    opened_ = true;
    if (on_open) on_open();
    if (!writing_) Pump();
    Read();
  }
  void Read() {
    auto self = shared_from_this();
    stream_->async_read_some(asio::buffer(in_), [self](boost::system::error_code ec, size_t n) {
      if (ec) return self->Fail(ec == asio::error::eof ? "closed by the head" : ec.message());
      if (!self->reader.Feed(std::string_view(self->in_.data(), n))) return self->Fail("not HTTP");
      if (!self->closed_) self->Read();
    });
  }
  void Pump() {
    if (out_.empty() || closed_) return;
    writing_ = true;
    current_ = std::move(out_.front());
    out_.pop_front();
    auto self = shared_from_this();
    asio::async_write(*stream_, asio::buffer(current_),
                      [self](boost::system::error_code ec, size_t) {
                        self->writing_ = false;
                        if (ec) return self->Fail("write: " + ec.message());
                        self->Pump();
                      });
  }
  void Fail(const std::string& why) {
    if (closed_) return;
    Close();
    if (on_closed) on_closed(why);
  }

  std::unique_ptr<net::TlsStream> stream_;
  std::array<char, 16384> in_{};
  std::deque<std::string> out_;
  std::string current_;
  bool writing_ = false;
  bool opened_ = false;
  bool closed_ = false;
};

// Counts heartbeats sent in [since, until) and their fates, so a window's figures are of its
// own heartbeats only (not answers to ones sent before it, nor ones sent after its end).
struct Stats {
  SteadyClock::time_point since = SteadyClock::time_point::max();
  SteadyClock::time_point until = SteadyClock::time_point::max();
  bool Counts(SteadyClock::time_point at) const { return at >= since && at < until; }
  uint64_t sent = 0, ok = 0, in_time = 0, late = 0, errors = 0, send_lag = 0;
  std::map<std::string, uint64_t> error_kinds;
  std::vector<uint32_t> latency_us;
  // Of the beats counted: those of agents with workers assigned, and how many beats sent in
  // each second of the window were answered after 100 ms (where the tail is: spread, or in a
  // few stalls).
  std::vector<uint32_t> busy_latency_us;
  std::map<int64_t, uint32_t> slow_by_second;
  void Error(const std::string& kind) {
    ++errors;
    ++error_kinds[kind];
  }
};

struct Counters {
  uint64_t snapshots = 0, reconnects = 0, connected = 0, first_snapshot = 0;
  uint64_t stream_refusals = 0;   // a channel or watch answered with another status than 200
  uint64_t assigned_workers = 0;  // now, over all agents
  uint64_t head_switches = 0;     // moves to another head (--heads)
  std::map<std::string, uint64_t> refusal_statuses;  // status -> channels/watches so answered
};

// One emulated agent after registration: its connection(s), its heartbeat timer, its workers.
struct EmulatedAgent {
  int index = 0;
  std::string name, credential;
  std::shared_ptr<asio::ssl::context> tls;  // its host certificate; null for plain HTTP
  int64_t revision = -1;
  bool seen_snapshot = false;
  std::map<protocol::WorkerKey, int64_t> workers;  // assigned worker -> its step
  int64_t started_at_ms = 0;
  size_t head = 0;             // the head in use (Options::heads)
  int64_t backoff_ms = 100;    // before the next reconnect to the same head
  bool channel_ready = false;  // this connection has delivered its first snapshot
  bool channel_live = false;   // this connection was accepted (200)
  // Failover figures, from the window's start on: the first time the agent's connection went
  // down, and its first heartbeat answered 200 after that (unix ms; 0 = none).
  int64_t first_down_ms = 0, rejoined_ms = 0;
  uint64_t downs = 0;
  std::shared_ptr<Link> channel;                // --connection one
  std::shared_ptr<Link> beat_link, watch_link;  // --connection two
  std::unique_ptr<asio::steady_timer> timer;
  SteadyClock::time_point t0;
  double offset_s = 0;
  int64_t k = 0;  // the next beat's period
  uint64_t seq = 0;
  std::map<uint64_t, SteadyClock::time_point> in_flight;  // seq -> sent (channel)
  SteadyClock::time_point beat_sent;                      // the beat in flight (two)
  bool beat_busy = false;
  std::string line_buf;
};

class Fleet {
 public:
  Fleet(const Options& o, asio::io_context& io) : o_(o), io_(io) {
    for (const HeadAddress& h : o_.heads)
      endpoints_.emplace_back(asio::ip::make_address(h.host), h.port);
  }
  std::vector<std::unique_ptr<EmulatedAgent>> agents;
  Stats stats;
  Counters counters;
  bool stopping = false;

  void Start(EmulatedAgent& a) {
    a.t0 = SteadyClock::now();
    a.timer = std::make_unique<asio::steady_timer>(io_);
    a.started_at_ms = UnixMs();
    Connect(a);
    Schedule(a);
  }

 private:
  std::string Head(const char* method, const std::string& target, const EmulatedAgent& a,
                   size_t body_len, bool has_body) const {
    std::string h = std::string(method) + " " + target +
                    " HTTP/1.1\r\nHost: " + o_.head_names[a.head] + "\r\nAuthorization: Bearer " +
                    o_.join_token + "\r\n" + protocol::kHostCredentialHeader + ": " + a.credential +
                    "\r\n";
    if (has_body)
      h += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body_len) + "\r\n";
    return h + "\r\n";
  }

  void Connect(EmulatedAgent& a) {
    if (stopping) return;
    if (o_.one_connection) {
      a.channel = OpenStream(a, "/api/v1/agents/" + a.name + "/channel");
    } else {
      a.watch_link = OpenStream(a, "/api/v1/agents/" + a.name + "/assignments?watch=true");
      ConnectBeat(a);
    }
  }

  // --connection two: the keep-alive connection of the heartbeat POSTs.
  void ConnectBeat(EmulatedAgent& a) {
    {
      auto beat = std::make_shared<Link>(io_, a.tls.get());
      beat->reader.on_header = [this, &a](int status) {
        if (!a.beat_busy) return;
        a.beat_busy = false;
        Answered(a.beat_sent, status, !a.workers.empty());
      };
      beat->on_closed = [this, &a](const std::string& why) {
        if (a.beat_busy) {
          a.beat_busy = false;
          if (stats.Counts(a.beat_sent)) stats.Error(why);
        }
      };
      a.beat_link = beat;
      beat->Open(endpoints_[a.head], o_.heads[a.head].host);
    }
  }

  std::shared_ptr<Link> OpenStream(EmulatedAgent& a, const std::string& target) {
    auto link = std::make_shared<Link>(io_, a.tls.get());
    a.channel_ready = false;
    a.channel_live = false;
    // A refused stream's status and body (a standby's 503 names the leader).
    auto refused = std::make_shared<std::pair<int, std::string>>(0, "");
    link->on_open = [this, &a, target, raw = link.get()] {
      raw->Send(Head("GET", target, a, 0, false));
    };
    link->reader.on_header = [this, &a, refused](int status) {
      if (status != 200) {
        ++counters.stream_refusals;
        ++counters.refusal_statuses[std::to_string(status)];
        refused->first = status;
        return;
      }
      a.channel_live = true;
      ++counters.connected;
    };
    link->reader.on_data = [this, &a, refused](std::string_view data) {
      if (refused->first != 0) {
        if (refused->second.size() < 4096) refused->second.append(data);
        return;
      }
      a.line_buf.append(data);
      size_t start = 0;
      for (size_t nl; (nl = a.line_buf.find('\n', start)) != std::string::npos; start = nl + 1)
        OnLine(a, std::string_view(a.line_buf.data() + start, nl - start));
      a.line_buf.erase(0, start);
    };
    link->reader.on_end = [this, &a, target, refused, raw = link.get()] {
      if (refused->first == 0) return;
      raw->Close();  // no on_closed after Close: the refusal is handled here
      Down(a, target, "http " + std::to_string(refused->first), refused->second);
    };
    link->on_closed = [this, &a, target](const std::string& why) { Down(a, target, why, why); };
    link->Open(endpoints_[a.head], o_.heads[a.head].host);
    return link;
  }

  // The agent's stream ended (`why`; `answer`: the refusal's body or the transport error): move
  // to another head as `tessera agent` does (HeadFollower::Failed), then reconnect.
  void Down(EmulatedAgent& a, const std::string& target, const std::string& why,
            const std::string& answer) {
    if (stopping) return;
    ++counters.reconnects;
    for (const auto& beat : a.in_flight)
      if (stats.Counts(beat.second)) stats.Error(why);
    a.in_flight.clear();
    a.line_buf.clear();
    if (a.channel_live && counters.connected > 0) --counters.connected;
    a.channel_live = false;
    a.channel_ready = false;
    if (stats.Counts(SteadyClock::now()) || marked) {
      ++a.downs;
      if (a.first_down_ms == 0) a.first_down_ms = UnixMs();
    }
    const size_t next = ha::NextHead(o_.head_names, a.head, ha::LeaderNamedIn(answer).value_or(""));
    if (next != a.head) {
      a.head = next;
      a.backoff_ms = 100;
      ++counters.head_switches;
    }
    const int64_t delay = a.backoff_ms;
    a.backoff_ms = std::min<int64_t>(a.backoff_ms * 2, 5000);
    auto t = std::make_shared<asio::steady_timer>(io_, std::chrono::milliseconds(delay));
    t->async_wait([this, &a, t, target](boost::system::error_code) {
      if (stopping) return;
      if (o_.one_connection) {
        a.channel = OpenStream(a, target);
      } else {
        a.watch_link = OpenStream(a, target);
      }
    });
  }

  void OnLine(EmulatedAgent& a, std::string_view line) {
    if (line.empty()) return;
    if (line.starts_with("{\"ack\"")) {
      const Json ack = Json::parse(line, nullptr, false);
      if (!ack.is_object()) return stats.Error("bad ack");
      auto it = a.in_flight.find(ack.value("ack", uint64_t{0}));
      if (it == a.in_flight.end()) return;
      const auto sent = it->second;
      a.in_flight.erase(it);
      const int status = ack.value("status", 0);
      if (status == 200 && a.first_down_ms != 0 && a.rejoined_ms == 0) a.rejoined_ms = UnixMs();
      Answered(sent, status, !a.workers.empty());
      return;
    }
    auto snap = protocol::ParseAssignmentSnapshot(line);
    if (!snap.ok()) return stats.Error("bad snapshot");
    ++counters.snapshots;
    if (!a.seen_snapshot) ++counters.first_snapshot;
    a.seen_snapshot = true;
    a.channel_ready = true;
    a.backoff_ms = 100;
    a.revision = snap->revision;
    std::map<protocol::WorkerKey, int64_t> next;
    for (const auto& p : snap->assignments) {
      auto it = a.workers.find(p.assignment.key);
      next[p.assignment.key] = it == a.workers.end() ? 0 : it->second;
    }
    counters.assigned_workers += next.size();
    counters.assigned_workers -= a.workers.size();
    a.workers.swap(next);
  }

  void Answered(SteadyClock::time_point sent, int status, bool busy) {
    if (!stats.Counts(sent)) return;
    const auto us =
        std::chrono::duration_cast<std::chrono::microseconds>(SteadyClock::now() - sent).count();
    if (status != 200) return stats.Error("http " + std::to_string(status));
    ++stats.ok;
    const auto latency = static_cast<uint32_t>(std::min<int64_t>(us, UINT32_MAX));
    stats.latency_us.push_back(latency);
    if (busy) stats.busy_latency_us.push_back(latency);
    if (us > 100'000)
      ++stats.slow_by_second[std::chrono::duration_cast<std::chrono::seconds>(sent - stats.since)
                                 .count()];
    if (us <= o_.deadline_ms * 1000) {
      ++stats.in_time;
    } else {
      ++stats.late;
    }
  }

  void Schedule(EmulatedAgent& a) {
    if (stopping) return;
    const auto due =
        a.t0 + std::chrono::microseconds(static_cast<int64_t>(
                   (a.offset_s + static_cast<double>(a.k) * o_.interval_ms / 1000.0) * 1e6));
    a.timer->expires_at(due);
    a.timer->async_wait([this, &a, due](boost::system::error_code ec) {
      if (ec || stopping) return;
      const auto now = SteadyClock::now();
      if (now - due > std::chrono::milliseconds(100) && stats.Counts(now)) ++stats.send_lag;
      // A beat more than one period behind skips the missed periods (as loadgen.py).
      const int64_t behind =
          std::chrono::duration_cast<std::chrono::milliseconds>(now - a.t0).count() -
          static_cast<int64_t>(a.offset_s * 1000);
      a.k = std::max(a.k + 1, behind / o_.interval_ms + 1);
      Beat(a);
      Schedule(a);
    });
  }

  std::string Body(EmulatedAgent& a) {
    protocol::Heartbeat hb;
    hb.revision = a.revision;
    const int64_t now = UnixMs();
    for (auto& [key, step] : a.workers) {
      protocol::WorkerReport w;
      w.key = key;
      w.pid = 100000 + a.index;
      w.started_at_ms = a.started_at_ms;
      hb.workers.push_back(w);
      ++step;
      hb.progress.push_back({key, protocol::ProgressRecord{"progress", step, 0, now}});
    }
    if (!a.workers.empty()) hb.usage = protocol::Usage{95.0, int64_t{1} << 30};
    return protocol::HeartbeatJson(hb);
  }

  void Beat(EmulatedAgent& a) {
    if (o_.one_connection) {
      if (!a.channel || a.channel->closed() || !a.channel_ready) return;
      const uint64_t seq = ++a.seq;
      const auto now = SteadyClock::now();
      if (stats.Counts(now)) ++stats.sent;
      a.in_flight[seq] = now;
      a.channel->Send(std::to_string(seq) + " " + Body(a) + "\n");
      return;
    }
    if (a.beat_busy) {
      if (stats.Counts(SteadyClock::now())) stats.Error("previous heartbeat unanswered");
      return;
    }
    if (!a.beat_link || a.beat_link->closed()) {
      ConnectBeat(a);  // the watch reconnects by itself
      return;
    }
    const std::string body = Body(a);
    a.beat_busy = true;
    a.beat_sent = SteadyClock::now();
    if (stats.Counts(a.beat_sent)) ++stats.sent;
    a.beat_link->Send(
        Head("POST", "/api/v1/agents/" + a.name + "/heartbeat", a, body.size(), true) + body);
  }

  const Options& o_;
  asio::io_context& io_;
  std::vector<tcp::endpoint> endpoints_;

 public:
  bool marked = false;  // a MARK arrived: downs count from then on even after the window
};

struct Registered {
  std::string credential;
  std::shared_ptr<asio::ssl::context> tls;
  double latency_s = 0;
  std::string error;
  size_t head = 0;  // the head that registered it
};

// Bootstrap (with TLS) and registration of agent `index`, on the calling thread.
Registered RegisterOne(const Options& o, const std::string& dir, int index, std::mt19937_64& rng,
                       SteadyClock::time_point deadline) {
  Registered out;
  char name[32];
  std::snprintf(name, sizeof name, "%s%05d", o.name_prefix.c_str(), index);
  out.credential = RandomHex(rng, 32);
  net::ClientOptions base;
  base.host = o.heads[0].host;
  base.port = o.heads[0].port;
  base.bearer_token = o.join_token;
  base.read_timeout = std::chrono::milliseconds(30'000);
  const auto t = SteadyClock::now();
  std::string cert_file, key_file;
  if (!o.ca_file.empty()) {
    base.tls = net::ClientTlsOptions{o.ca_file, "", "", ""};
    auto csr = pki::MakeCsr(std::string("host:") + name);
    if (!csr.ok()) return out.error = csr.status().message(), out;
    net::HttpClient client(base);
    const std::string body = Json{{"name", name}, {"csr", csr->csr_pem}}.dump();
    auto r = client.Request(net::Method::kPost, "/api/v1/agents/bootstrap", body);
    if (!r.ok() || r->status != 200)
      return out.error = "bootstrap: " + (r.ok() ? r->body.substr(0, 200) : r.status().message()),
             out;
    const Json reply = Json::parse(r->body, nullptr, false);
    cert_file = dir + "/" + name + ".crt";
    key_file = dir + "/" + name + ".key";
    std::ofstream(cert_file) << reply.value("certificate", "");
    std::ofstream(key_file) << csr->key_pem;
    base.tls = net::ClientTlsOptions{o.ca_file, cert_file, key_file, ""};
    auto ctx = net::MakeClientTlsContext(*base.tls);
    if (!ctx.ok()) return out.error = ctx.status().message(), out;
    out.tls = *ctx;
  }
  protocol::Registration reg;
  reg.name = name;
  reg.generation = Generation::kV6e;
  reg.chips = 4;
  reg.agent_port = 1;
  reg.slice = protocol::SliceMembership{"slice-" + std::to_string(index / 4), "4x4", index % 4};
  reg.credential = out.credential;
  auto client = std::make_unique<net::HttpClient>(base);
  const std::string body = protocol::RegistrationJson(reg);
  while (true) {
    auto r = client->Request(net::Method::kPost, "/api/v1/agents/register", body);
    if (r.ok() && r->status == 200) break;
    const std::string why =
        r.ok() ? std::to_string(r->status) + " " + r->body.substr(0, 200) : r.status().message();
    if ((r.ok() && r->status >= 400 && r->status < 500) || SteadyClock::now() > deadline)
      return out.error = "register " + std::string(name) + ": " + why, out;
    if (!r.ok() || r->status == 503) {  // another head may lead: the one named, else the next
      const size_t next = ha::NextHead(o.head_names, out.head,
                                       ha::LeaderNamedIn(r.ok() ? r->body : why).value_or(""));
      if (next != out.head) {
        out.head = next;
        base.host = o.heads[next].host;
        base.port = o.heads[next].port;
        client = std::make_unique<net::HttpClient>(base);
        continue;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  out.latency_s = std::chrono::duration<double>(SteadyClock::now() - t).count();
  return out;
}

double Pct(std::vector<uint32_t>& v, double p) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * (v.size() - 1) + 0.5));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k] / 1000.0;
}

// The heartbeat figures of one part of the window (`window_s` long).
Json StatsJson(Stats& s, double window_s) {
  Json out;
  out["window_s"] = window_s;
  out["hb_sent"] = s.sent;
  out["hb_ok"] = s.ok;
  out["hb_in_time"] = s.in_time;
  out["hb_late"] = s.late;
  out["hb_errors"] = s.errors;
  out["hb_error_kinds"] = s.error_kinds;
  out["hb_send_lag"] = s.send_lag;
  out["hb_per_s"] = window_s > 0 ? static_cast<double>(s.ok) / window_s : 0.0;
  out["hb_in_time_pct"] =
      100.0 * static_cast<double>(s.in_time) / static_cast<double>(std::max<uint64_t>(s.sent, 1));
  out["hb_p50_ms"] = Pct(s.latency_us, 50);
  out["hb_p99_ms"] = Pct(s.latency_us, 99);
  out["hb_busy_p99_ms"] = Pct(s.busy_latency_us, 99);
  out["hb_busy_count"] = s.busy_latency_us.size();
  Json slow = Json::array();
  for (const auto& [second, count] : s.slow_by_second) slow.push_back({second, count});
  out["hb_over_100ms_by_second"] = std::move(slow);
  out["hb_max_ms"] = s.latency_us.empty()
                         ? 0.0
                         : *std::max_element(s.latency_us.begin(), s.latency_us.end()) / 1000.0;
  return out;
}

// Set (steady clock, ns) when a line "MARK" arrives on stdin; 0 before.
std::atomic<int64_t> g_mark_ns{0};

int Run(const Options& o) {
  rlimit fds{};
  getrlimit(RLIMIT_NOFILE, &fds);
  fds.rlim_cur = fds.rlim_max;
  setrlimit(RLIMIT_NOFILE, &fds);
  std::vector<int> mine;
  for (int i = o.shard; i < o.agents; i += o.shards) mine.push_back(i);
  const size_t per_agent = o.one_connection ? 1 : 2;
  if (mine.size() * per_agent + 64 > fds.rlim_cur) {
    std::fprintf(stderr,
                 "loadgen: %zu agents need %zu file descriptors, the limit is %llu; spread them "
                 "over more processes with --shard I/N\n",
                 mine.size(), mine.size() * per_agent + 64,
                 static_cast<unsigned long long>(fds.rlim_cur));
    return 2;
  }
  char dir_template[] = "/tmp/tessera-loadgen-XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (dir == nullptr) return std::perror("mkdtemp"), 2;

  // ---- the emulated agents' io thread, started first: an agent heartbeats as soon as it is
  // registered, as `tessera agent` does (a fleet that registers for longer than the lease
  // would otherwise lose its first hosts) ----
  asio::io_context io;
  auto guard = asio::make_work_guard(io);
  Fleet fleet(o, io);
  std::mt19937_64 offsets(o.seed);
  std::uniform_real_distribution<double> offset(0, 1);
  for (int index : mine) {
    auto a = std::make_unique<EmulatedAgent>();
    a->index = index;
    char name[32];
    std::snprintf(name, sizeof name, "%s%05d", o.name_prefix.c_str(), index);
    a->name = name;
    a->offset_s = offset(offsets);
    fleet.agents.push_back(std::move(a));
  }
  const double cpu_start = CpuSeconds();
  std::thread io_thread([&] { io.run(); });

  // ---- registration: --register-threads synchronous clients ----
  const auto t0 = SteadyClock::now();
  const auto deadline =
      t0 + std::chrono::milliseconds(static_cast<int64_t>(o.setup_timeout_s * 1e3));
  std::vector<Registered> regs(mine.size());
  std::atomic<size_t> next{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < o.register_threads; ++t)
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(o.seed * 1000003 + static_cast<uint64_t>(o.shard) * 7919 + t);
      for (size_t i; (i = next.fetch_add(1)) < mine.size();) {
        regs[i] = RegisterOne(o, dir, mine[i], rng, deadline);
        if (!regs[i].error.empty()) continue;
        EmulatedAgent* agent = fleet.agents[i].get();
        agent->credential = regs[i].credential;
        agent->tls = regs[i].tls;
        agent->head = regs[i].head;
        asio::post(io, [&fleet, agent] { fleet.Start(*agent); });
      }
    });
  for (auto& t : threads) t.join();
  const double register_s = std::chrono::duration<double>(SteadyClock::now() - t0).count();
  std::vector<uint32_t> reg_lat;
  int reg_errors = 0;
  size_t registered = 0;
  for (const auto& r : regs) {
    if (!r.error.empty()) {
      if (reg_errors++ < 5) std::fprintf(stderr, "loadgen: %s\n", r.error.c_str());
      continue;
    }
    ++registered;
    reg_lat.push_back(static_cast<uint32_t>(r.latency_s * 1e6));
  }
  std::fprintf(stderr, "[loadgen %d/%d] %zu of %zu registered in %.2f s\n", o.shard, o.shards,
               reg_lat.size(), mine.size(), register_s);
  // Every agent's first snapshot (bounded by the setup deadline).
  auto on_io = [&](auto fn) {
    std::promise<decltype(fn())> p;
    asio::post(io, [&] { p.set_value(fn()); });
    return p.get_future().get();
  };
  while (SteadyClock::now() < deadline &&
         on_io([&] { return fleet.counters.first_snapshot; }) < registered)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const double setup_s = std::chrono::duration<double>(SteadyClock::now() - t0).count();
  if (o.wait_go) {
    std::printf("READY\n");
    std::fflush(stdout);
    std::string line;
    while (std::getline(std::cin, line) && line != "GO") {
    }
    // The rest of stdin: "MARK" (run.py --failover). Detached: it may block in the read until
    // the process exits, and touches only the atomic.
    std::thread([] {
      std::string command;
      while (std::getline(std::cin, command))
        if (command == "MARK" && g_mark_ns.load() == 0)
          g_mark_ns = SteadyClock::now().time_since_epoch().count();
    }).detach();
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(o.warmup_s * 1e3)));
  }
  // ---- the window ----
  const auto w0 = SteadyClock::now();
  const auto w1 = w0 + std::chrono::milliseconds(static_cast<int64_t>(o.window_s * 1e3));
  on_io([&] {
    fleet.stats = Stats{};
    fleet.stats.since = w0;
    fleet.stats.until = w1;
    return 0;
  });
  const double cpu0 = CpuSeconds();
  Stats before;
  double before_s = 0;
  bool marked = false;
  while (SteadyClock::now() < w1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (marked || g_mark_ns.load() == 0) continue;
    marked = true;
    const auto at = SteadyClock::time_point(SteadyClock::duration(g_mark_ns.load()));
    before_s = std::chrono::duration<double>(at - w0).count();
    before = on_io([&] {
      Stats first = fleet.stats;
      first.until = at;
      fleet.stats = Stats{};
      fleet.stats.since = at;
      fleet.stats.until = w1;
      fleet.marked = true;
      return first;
    });
  }
  const double cpu1 = CpuSeconds();
  const double window = std::chrono::duration<double>(w1 - w0).count() - before_s;
  const Counters c = on_io([&] { return fleet.counters; });
  // The window's last heartbeats get the deadline to be answered, then everything is counted.
  std::this_thread::sleep_for(std::chrono::milliseconds(o.deadline_ms));
  Stats s = on_io([&] { return fleet.stats; });
  const uint64_t unanswered = s.sent - std::min(s.sent, s.ok + s.errors);
  on_io([&] {
    fleet.stopping = true;
    for (auto& a : fleet.agents) {
      if (a->timer) a->timer->cancel();
      for (auto* l : {a->channel.get(), a->beat_link.get(), a->watch_link.get()})
        if (l) l->Close();
    }
    return 0;
  });
  guard.reset();
  io.stop();
  io_thread.join();
  std::filesystem::remove_all(dir);

  Json out;
  out["agents"] = mine.size();
  out["shard"] = std::to_string(o.shard) + "/" + std::to_string(o.shards);
  out["connection"] = o.one_connection ? "one" : "two";
  out["tls"] = !o.ca_file.empty();
  out["register_s"] = register_s;
  out["register_errors"] = reg_errors;
  out["register_p50_ms"] = Pct(reg_lat, 50);
  out["register_p99_ms"] = Pct(reg_lat, 99);
  out["setup_s"] = setup_s;
  out.update(StatsJson(s, window));
  out["hb_unanswered_at_end"] = unanswered;
  if (marked) {
    // The window's part before the MARK; the fields above are of the part after it.
    out["before_mark"] = StatsJson(before, before_s);
    Json rejoined = Json::array();
    uint64_t down = 0, not_rejoined = 0;
    int64_t first_down = 0;
    for (const auto& a : fleet.agents) {
      if (a->first_down_ms == 0) continue;
      ++down;
      if (first_down == 0 || a->first_down_ms < first_down) first_down = a->first_down_ms;
      if (a->rejoined_ms != 0) {
        rejoined.push_back(a->rejoined_ms);
      } else {
        ++not_rejoined;
      }
    }
    out["failover"] = {{"agents_down", down},
                       {"agents_rejoined", rejoined.size()},
                       {"agents_not_rejoined", not_rejoined},
                       {"first_down_unix_ms", first_down},
                       {"rejoined_unix_ms", rejoined},
                       {"head_switches", c.head_switches},
                       {"refusal_statuses", c.refusal_statuses},
                       {"connected_at_end", c.connected}};
  }
  out["snapshots"] = c.snapshots;
  out["reconnects"] = c.reconnects;
  out["stream_refusals"] = c.stream_refusals;
  out["assigned_workers"] = c.assigned_workers;
  out["loadgen_cpu_pct"] = 100.0 * (cpu1 - cpu0) / window;
  out["loadgen_setup_cpu_s"] = cpu0 - cpu_start;
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

int Usage(const char* why) {
  std::fprintf(stderr,
               "tessera_loadgen: %s\nusage: tessera_loadgen --port P | --heads H:P,H:P... "
               "--join-token-file F [--host H] [--ca-file CA] [--agents N] [--shard I/N] "
               "[--connection one|two] "
               "[--window S] [--warmup S] [--deadline-ms MS] [--register-threads N] "
               "[--setup-timeout S] [--wait-go] [--seed N] [--name-prefix P]\n",
               why);
  return 2;
}

}  // namespace
}  // namespace tessera::loadgen

int main(int argc, char** argv) {
  using namespace tessera::loadgen;
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::exit(Usage((arg + ": needs a value").c_str()));
      }
      return argv[++i];
    };
    if (arg == "--host") {
      o.host = value();
    } else if (arg == "--port") {
      o.port = static_cast<uint16_t>(std::atoi(value().c_str()));
    } else if (arg == "--heads") {
      for (const std::string& item : tessera::ha::SplitHeadList(value())) {
        const size_t colon = item.rfind(':');
        const int port = colon == std::string::npos ? 0 : std::atoi(item.c_str() + colon + 1);
        if (colon == 0 || colon == std::string::npos || port < 1 || port > 65535)
          return Usage(("--heads: HOST:PORT[,HOST:PORT...], not '" + item + "'").c_str());
        o.heads.push_back({item.substr(0, colon), static_cast<uint16_t>(port)});
      }
    } else if (arg == "--ca-file") {
      o.ca_file = value();
    } else if (arg == "--join-token-file") {
      std::ifstream f(value());
      std::getline(f, o.join_token);
    } else if (arg == "--agents") {
      o.agents = std::atoi(value().c_str());
    } else if (arg == "--shard") {
      const std::string v = value();
      if (std::sscanf(v.c_str(), "%d/%d", &o.shard, &o.shards) != 2 || o.shards < 1 ||
          o.shard < 0 || o.shard >= o.shards)
        return Usage("--shard: I/N with 0 <= I < N, e.g. 0/2");
    } else if (arg == "--connection") {
      const std::string v = value();
      if (v != "one" && v != "two") return Usage("--connection: one or two");
      o.one_connection = v == "one";
    } else if (arg == "--window") {
      o.window_s = std::atof(value().c_str());
    } else if (arg == "--warmup") {
      o.warmup_s = std::atof(value().c_str());
    } else if (arg == "--deadline-ms") {
      o.deadline_ms = std::atoll(value().c_str());
    } else if (arg == "--register-threads") {
      o.register_threads = std::max(1, std::atoi(value().c_str()));
    } else if (arg == "--setup-timeout") {
      o.setup_timeout_s = std::atof(value().c_str());
    } else if (arg == "--wait-go") {
      o.wait_go = true;
    } else if (arg == "--seed") {
      o.seed = std::strtoull(value().c_str(), nullptr, 10);
    } else if (arg == "--name-prefix") {
      o.name_prefix = value();
    } else {
      return Usage(("unknown argument " + arg).c_str());
    }
  }
  if (o.heads.empty()) {
    if (o.port == 0) return Usage("--port (one head) or --heads (several): required");
    o.heads.push_back({o.host, o.port});
  }
  for (const HeadAddress& h : o.heads) o.head_names.push_back(h.Name());
  if (o.join_token.empty()) return Usage("--join-token-file: required (the head's join.token)");
  if (o.agents < 1) return Usage("--agents: at least 1");
  return Run(o);
}
