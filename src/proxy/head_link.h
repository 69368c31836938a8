// HeadLink: the router's two conversations with the head, each on its own thread.
//
//   watch   GET /api/v1/services (the whole view), then GET /api/v1/services?watch=true,
//           applying each ADDED/MODIFIED/DELETED line to the ServingRouter. When the head is
//           unreachable or the stream ends, the router keeps routing on its last view and the
//           link reconnects with exponential backoff (initial_backoff doubling to max_backoff);
//           on reconnect the list replaces the view, so a Service deleted meanwhile leaves.
//   report  every report_interval, POST /api/v1/services/{name}/load per Service:
//           {"timeMs", "role", "ongoingRequests" (in flight + queued), "queued",
//            "perReplica": {"0": 2}, and since the router started "requests",
//            "latencySecondsSum", "latencyBuckets": {"upperBounds", "cumulative"}}.
//           Failures are dropped (logged once until one succeeds).
//   heads   with several (HeadLinkOptions::more_heads), both follow the leader of an HA control
//           plane: after a failure they use the next head (ha/head_follower.h).
//
// Ownership: the caller owns the link and the router; the router must outlive the link.
// Thread-safety: Start() and Stop() from one thread; Stop() is idempotent and joins.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/status.h"
#include "ha/head_follower.h"
#include "net/http_client.h"
#include "proxy/serving_router.h"

namespace tessera::proxy {

struct HeadLinkOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  // Further heads of an HA control plane (docs/ha.md "Following the leader"), after the one
  // above. A standby forwards the router's calls to the leader; when the head in use cannot be
  // reached, ends the watch or answers 503, the link moves to the leader that answer names, or
  // else the next head round the list (ha/head_follower.h, as the agents do).
  std::vector<std::pair<std::string, uint16_t>> more_heads;
  std::string token;  // the admin token
  // TLS to every head (https://), verified against tls->ca_file; nullopt = plain HTTP.
  std::optional<net::ClientTlsOptions> tls;
  std::chrono::milliseconds report_interval{1'000};
  std::chrono::milliseconds initial_backoff{100};
  std::chrono::milliseconds max_backoff{5'000};
};

// "http://HOST:PORT" -> host and port; InvalidArgument naming the fix otherwise.
Status ParseHeadUrl(const std::string& url, std::string* host, uint16_t* port);

// "{...}" the load report body for one Service.
std::string LoadReportJson(const ServiceLoad& load, int64_t time_ms);

class HeadLink {
 public:
  HeadLink(HeadLinkOptions options, ServingRouter& router);
  ~HeadLink();
  HeadLink(const HeadLink&) = delete;
  HeadLink& operator=(const HeadLink&) = delete;

  void Start();
  void Stop();

 private:
  void WatchLoop();
  void ReportLoop();
  // Sleeps up to `d`; false when stopping.
  bool SleepFor(std::chrono::milliseconds d);
  // Head `index` did not serve (`answer`: the error, with a 503's body): moves the follower on
  // and logs the switch. True when it moved.
  bool HeadFailed(size_t index, const std::string& answer);

  const HeadLinkOptions options_;
  ServingRouter& router_;
  std::vector<std::pair<std::string, uint16_t>> heads_;  // options_.host:port, then more_heads
  ha::HeadFollower follower_;                            // which of heads_ is in use
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::shared_ptr<net::HttpClient> watch_client_;  // the one in use, to Cancel() it on Stop
  std::thread watch_thread_, report_thread_;
};

}  // namespace tessera::proxy
