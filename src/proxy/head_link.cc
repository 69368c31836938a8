#include "proxy/head_link.h"

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/clock.h"
#include "common/object_key.h"
#include "net/http_client.h"

namespace tessera::proxy {
namespace {

using Json = nlohmann::json;

net::ClientOptions ClientFor(const HeadLinkOptions& o,
                             const std::pair<std::string, uint16_t>& head) {
  net::ClientOptions c;
  c.host = head.first;
  c.port = head.second;
  c.bearer_token = o.token;
  c.tls = o.tls;
  c.connect_timeout = std::chrono::milliseconds(2'000);
  c.read_timeout = std::chrono::milliseconds(5'000);
  return c;
}

// Logs `message` under `event` unless it repeats the previous message of that loop.
void LogChange(const char* event, const std::string& message, std::string* last) {
  if (message == *last) return;
  *last = message;
  std::fprintf(stderr, "router: event=%s %s\n", event, message.c_str());
}

}  // namespace

Status ParseHeadUrl(const std::string& url, std::string* host, uint16_t* port) {
  const std::string kScheme = "http://";
  const std::string hint = " (expected http://ADDRESS:PORT, e.g. http://127.0.0.1:7070)";
  if (url.rfind(kScheme, 0) != 0)
    return InvalidArgument("'" + url + "' is not an http:// URL" + hint);
  std::string rest = url.substr(kScheme.size());
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return InvalidArgument("'" + url + "' has no port" + hint);
  }
  const std::string port_text = rest.substr(colon + 1);
  int value = 0;
  for (char c : port_text) {
    if (c < '0' || c > '9' || value > 65535)
      return InvalidArgument("'" + url + "': bad port" + hint);
    value = value * 10 + (c - '0');
  }
  if (port_text.empty() || value < 1 || value > 65535) {
    return InvalidArgument("'" + url + "': bad port" + hint);
  }
  *host = rest.substr(0, colon);
  if (host->size() > 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  *port = static_cast<uint16_t>(value);
  return Status::Ok();
}

std::string LoadReportJson(const ServiceLoad& load, int64_t time_ms) {
  Json per_replica = Json::object();
  for (const auto& [replica, n] : load.load.per_replica) per_replica[std::to_string(replica)] = n;
  Json report = {{"timeMs", time_ms},
                 {"role", load.role},
                 {"ongoingRequests", load.load.in_flight + load.load.queued},
                 {"queued", load.load.queued},
                 {"perReplica", per_replica},
                 {"requests", load.requests},
                 {"latencySecondsSum", load.latency_sum_s},
                 {"refused", load.load.refused}};
  if (!load.latency_bounds.empty())
    report["latencyBuckets"] = {{"upperBounds", load.latency_bounds},
                                {"cumulative", load.latency_cumulative}};
  if (load.ttft_count > 0) {
    report["ttftCount"] = load.ttft_count;
    report["ttftSecondsSum"] = load.ttft_sum_s;
  }
  if (load.output_tokens > 0) report["outputTokens"] = load.output_tokens;
  if (load.tpot_count > 0) {
    report["tpotCount"] = load.tpot_count;
    report["tpotSecondsSum"] = load.tpot_sum_s;
  }
  if (load.queued_prompt_tokens > 0) report["queuedPromptTokens"] = load.queued_prompt_tokens;
  if (load.pairing) {
    const PairingCounts& c = *load.pairing;
    Json d = {{"pairedSameSlice", c.same_slice},  {"pairedOtherSlice", c.other_slice},
              {"noPrefillReplica", c.no_prefill}, {"prefilledRemote", c.remote},
              {"prefilledLocal", c.local},        {"fallbacks", c.fallback}};
    for (const auto& [reason, n] : c.fallback_reasons) d["fallback_" + reason] = n;
    report["disagg"] = std::move(d);
  }
  return report.dump();
}

HeadLink::HeadLink(HeadLinkOptions options, ServingRouter& router)
    : options_(std::move(options)), router_(router) {
  heads_.emplace_back(options_.host, options_.port);
  heads_.insert(heads_.end(), options_.more_heads.begin(), options_.more_heads.end());
  std::vector<std::string> names;
  for (const auto& [host, port] : heads_) names.push_back(host + ":" + std::to_string(port));
  follower_.SetHeads(std::move(names));
}

bool HeadLink::HeadFailed(size_t index, const std::string& answer) {
  const std::optional<ha::HeadFollower::Switch> moved = follower_.Failed(index, answer);
  if (!moved) return false;
  std::fprintf(stderr, "router: event=head_switched %s\n",
               moved->Describe(follower_.heads()).c_str());
  return true;
}

HeadLink::~HeadLink() { Stop(); }

void HeadLink::Start() {
  router_.SetHeadConnected(false);
  watch_thread_ = std::thread([this] { WatchLoop(); });
  report_thread_ = std::thread([this] { ReportLoop(); });
}

void HeadLink::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    if (watch_client_) watch_client_->Cancel();
  }
  cv_.notify_all();
  if (watch_thread_.joinable()) watch_thread_.join();
  if (report_thread_.joinable()) report_thread_.join();
}

bool HeadLink::SleepFor(std::chrono::milliseconds d) {
  std::unique_lock lock(mu_);
  return !cv_.wait_for(lock, d, [this] { return stopping_; });
}

void HeadLink::WatchLoop() {
  std::chrono::milliseconds backoff = options_.initial_backoff;
  std::string last_error;
  while (true) {
    const size_t head = follower_.current();
    auto client = std::make_shared<net::HttpClient>(ClientFor(options_, heads_[head]));
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      watch_client_ = client;
    }
    Status outcome = Status::Ok();
    // Every namespace's Services: the router serves them all (docs/serving-router.md).
    auto list = client->Request(net::Method::kGet, "/api/v1/services?allNamespaces=true");
    if (!list.ok()) {
      outcome = list.status();
    } else if (list->status != 200) {
      outcome = Unavailable("GET /api/v1/services?allNamespaces=true: HTTP " +
                            std::to_string(list->status) + ": " + list->body.substr(0, 200));
    } else if (auto services = ParseServiceList(list->body); !services.ok()) {
      outcome = services.status();
    } else {
      router_.ReplaceServices(std::move(*services));
      router_.SetHeadConnected(true);
      LogChange("head_watch", "connected to " + follower_.heads()[head], &last_error);
      backoff = options_.initial_backoff;
      outcome = client->Stream(net::Method::kGet, "/api/v1/services?watch=true&allNamespaces=true",
                               [&](std::string_view line) {
                                 if (line.empty()) return true;
                                 auto event = ParseServiceEvent(line);
                                 if (!event.ok()) {
                                   std::fprintf(stderr, "router: event=bad_watch_line %s\n",
                                                event.status().message().c_str());
                                   return true;
                                 }
                                 if (event->type == ServiceEvent::Type::kDeleted) {
                                   router_.RemoveService(event->service.name);
                                 } else {
                                   router_.UpsertService(std::move(event->service));
                                 }
                                 return true;
                               });
      if (outcome.ok()) outcome = Unavailable("the head ended the watch stream");
    }
    router_.SetHeadConnected(false);
    {
      std::lock_guard lock(mu_);
      watch_client_.reset();
      if (stopping_) return;
    }
    LogChange("head_watch_down",
              "routing on the last view; retrying with backoff (" +
                  std::to_string(options_.initial_backoff.count()) + " ms doubling to " +
                  std::to_string(options_.max_backoff.count()) + " ms): " + outcome.ToString(),
              &last_error);
    // Another head may lead (or forward to the leader): no reason to wait long for it.
    if (HeadFailed(head, outcome.message())) backoff = options_.initial_backoff;
    if (!SleepFor(backoff)) return;
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
}

void HeadLink::ReportLoop() {
  std::vector<std::unique_ptr<net::HttpClient>> clients;  // one per head
  for (const auto& head : heads_)
    clients.push_back(std::make_unique<net::HttpClient>(ClientFor(options_, head)));
  SystemClock clock;
  std::string last_error;
  while (SleepFor(options_.report_interval)) {
    for (const ServiceLoad& load : router_.Loads()) {
      const size_t head = follower_.current();
      const NamespacedName service = SplitObjectKey(load.service);
      const std::string in_namespace =
          service.namespace_name == kDefaultNamespace ? "" : "?namespace=" + service.namespace_name;
      auto r = clients[head]->Request(net::Method::kPost,
                                      "/api/v1/services/" + service.name + "/load" + in_namespace,
                                      LoadReportJson(load, clock.NowMs()));
      std::string error;
      if (!r.ok()) {
        error = r.status().ToString();
        HeadFailed(head, error);  // the next report goes to the next head
      } else if (r->status / 100 != 2) {
        error = "HTTP " + std::to_string(r->status) + ": " + r->body.substr(0, 200);
        if (r->status == 503) HeadFailed(head, r->body);  // a standby with no leader to forward to
      }
      if (!error.empty()) {
        LogChange("load_report_failed", "(reports are dropped until the head takes one) " + error,
                  &last_error);
      } else if (!last_error.empty()) {
        LogChange("load_report_ok", "", &last_error);
      }
    }
  }
}

}  // namespace tessera::proxy
