// The serving router's metrics: the Prometheus text of /metrics (RouterImpl::MetricsText) and
// the per-Service loads the head link reports (ServingRouter::Loads). Both read the io thread's
// state, on the io thread.
#include <boost/asio/post.hpp>
#include <future>

#include "proxy/router_internal.h"

namespace tessera::proxy {

void RouterImpl::DisaggMetrics(metrics::ExpositionWriter& w) const {
  w.Family("tessera_router_prefill_pairings_total",
           "Requests of disaggregated Services by where their prefill replica was: same_slice "
           "as the decode replica, other_slice, or none (no ready prefill replica)",
           metrics::MetricType::kCounter);
  for (const auto& [name, state] : services_) {
    if (state->view.prefill_role.empty()) continue;
    const PairingCounts& c = state->pairing.counts();
    w.Sample("tessera_router_prefill_pairings_total",
             {{"service", name}, {"placement", "same_slice"}}, static_cast<double>(c.same_slice));
    w.Sample("tessera_router_prefill_pairings_total",
             {{"service", name}, {"placement", "other_slice"}}, static_cast<double>(c.other_slice));
    w.Sample("tessera_router_prefill_pairings_total", {{"service", name}, {"placement", "none"}},
             static_cast<double>(c.no_prefill));
  }
  w.Family("tessera_router_prefills_total",
           "Where decode replicas prefilled (their X-Tessera-Prefilled answer): remote (the "
           "paired prefill replica, KV handed off), local (a short prompt), fallback (the "
           "handoff failed; by reason)",
           metrics::MetricType::kCounter);
  for (const auto& [name, state] : services_) {
    if (state->view.prefill_role.empty()) continue;
    const PairingCounts& c = state->pairing.counts();
    w.Sample("tessera_router_prefills_total",
             {{"service", name}, {"where", "remote"}, {"reason", ""}},
             static_cast<double>(c.remote));
    w.Sample("tessera_router_prefills_total",
             {{"service", name}, {"where", "local"}, {"reason", ""}}, static_cast<double>(c.local));
    for (const auto& [reason, n] : c.fallback_reasons)
      w.Sample("tessera_router_prefills_total",
               {{"service", name}, {"where", "fallback"}, {"reason", reason}},
               static_cast<double>(n));
  }
  w.Family("tessera_router_prefill_queued_prompt_tokens",
           "Prompt tokens (request body bytes) sent to prefill replicas and not yet prefilled",
           metrics::MetricType::kGauge);
  for (const auto& [name, state] : services_) {
    if (state->view.prefill_role.empty()) continue;
    w.Sample("tessera_router_prefill_queued_prompt_tokens", {{"service", name}},
             static_cast<double>(state->pairing.QueuedPromptTokens()));
  }
}

std::string RouterImpl::MetricsText() {
  metrics::ExpositionWriter w;
  requests_.Write(w);
  errors_.Write(w);
  retries_.Write(w);
  latency_.Write(w);
  first_byte_.Write(w);
  queue_wait_.Write(w);
  output_tokens_.Write(w);
  role_ttft_.Write(w);
  role_tpot_.Write(w);
  w.Family("tessera_router_in_flight", "Requests in flight per replica",
           metrics::MetricType::kGauge);
  for (const auto& [name, state] : services_) {
    for (const auto& [replica, n] : state->dispatcher.Load().per_replica) {
      w.Sample("tessera_router_in_flight",
               {{"service", name}, {"replica", std::to_string(replica)}}, n);
    }
  }
  w.Family("tessera_router_queued",
           "Requests waiting for a free replica (one FIFO queue per service, shared by its "
           "replicas)",
           metrics::MetricType::kGauge);
  for (const auto& [name, state] : services_) {
    w.Sample("tessera_router_queued", {{"service", name}}, state->dispatcher.Load().queued);
  }
  w.Family("tessera_router_queue_bound",
           "Requests that may wait per service before 503 queue_full: --max-queued, scaled "
           "by the groups starting (dispatcher.h)",
           metrics::MetricType::kGauge);
  for (const auto& [name, state] : services_) {
    w.Sample("tessera_router_queue_bound", {{"service", name}},
             static_cast<double>(state->dispatcher.QueueBound()));
  }
  w.Family("tessera_router_ready_replicas", "Ready replicas the router routes to",
           metrics::MetricType::kGauge);
  for (const auto& [name, state] : services_) {
    w.Sample("tessera_router_ready_replicas", {{"service", name}},
             static_cast<double>(state->dispatcher.endpoints().size()));
  }
  w.Family("tessera_router_max_ongoing_requests", "Per-replica limit (maxOngoingRequests)",
           metrics::MetricType::kGauge);
  for (const auto& [name, state] : services_) {
    w.Sample("tessera_router_max_ongoing_requests", {{"service", name}},
             state->dispatcher.max_ongoing());
  }
  DisaggMetrics(w);
  w.Family("tessera_router_client_connections", "Client connections open",
           metrics::MetricType::kGauge);
  w.Sample("tessera_router_client_connections", {}, static_cast<double>(sessions_));
  size_t idle = 0;
  for (const auto& [key, conns] : pool_) idle += conns.size();
  w.Family("tessera_router_idle_upstream_connections",
           "Kept-alive connections to replicas waiting in the pool", metrics::MetricType::kGauge);
  w.Sample("tessera_router_idle_upstream_connections", {}, static_cast<double>(idle));
  if (head_connected_ >= 0) {
    w.Family("tessera_router_head_connected",
             "1 while the watch on the head is connected; 0 while routing on the last view",
             metrics::MetricType::kGauge);
    w.Sample("tessera_router_head_connected", {}, head_connected_.load());
  }
  auto text = w.Finish();
  return text.ok() ? *text : "# metrics error: " + text.status().message() + "\n";
}

namespace {

// A role's streams since the router started: TTFT of those it prefilled, output tokens and
// TPOT of those it decoded.
void ReadStreams(const RouterImpl& impl, const std::string& service, ServiceLoad& load) {
  const metrics::HistogramFamily::Snapshot ttft = impl.role_ttft_.Read({service, load.role});
  load.ttft_count = ttft.count;
  load.ttft_sum_s = ttft.sum;
  load.output_tokens = static_cast<uint64_t>(impl.output_tokens_.Value({service, load.role}));
  const metrics::HistogramFamily::Snapshot tpot = impl.role_tpot_.Read({service, load.role});
  load.tpot_count = tpot.count;
  load.tpot_sum_s = tpot.sum;
}

}  // namespace

std::vector<ServiceLoad> ServingRouter::Loads() {
  if (!impl_->started_ || impl_->stopped_) return {};
  auto promise = std::make_shared<std::promise<std::vector<ServiceLoad>>>();
  std::future<std::vector<ServiceLoad>> future = promise->get_future();
  asio::post(impl_->ioc_, [impl = impl_.get(), promise] {
    std::vector<ServiceLoad> out;
    for (const auto& [name, state] : impl->services_) {
      ServiceLoad load;
      load.service = name;
      load.role = state->view.role;
      load.load = state->dispatcher.Load();
      const metrics::HistogramFamily::Snapshot latency = impl->latency_.Read({name});
      load.requests = latency.count;
      load.latency_sum_s = latency.sum;
      load.latency_bounds = impl->latency_.upper_bounds();
      load.latency_cumulative = latency.cumulative;
      ReadStreams(*impl, name, load);
      if (!state->view.prefill_role.empty()) {
        load.pairing = state->pairing.counts();
        // The prefill role's own report: the picks waiting for their prefill and their tokens
        // (the prefill role's autoscaling signal).
        ServiceLoad prefill;
        prefill.service = name;
        prefill.role = state->view.prefill_role;
        prefill.load.per_replica = state->pairing.PendingByReplica();
        prefill.load.in_flight = state->pairing.PendingPicks();
        prefill.queued_prompt_tokens = static_cast<double>(state->pairing.QueuedPromptTokens());
        ReadStreams(*impl, name, prefill);
        out.push_back(std::move(load));
        out.push_back(std::move(prefill));
        continue;
      }
      out.push_back(std::move(load));
    }
    promise->set_value(std::move(out));
  });
  if (future.wait_for(std::chrono::seconds(1)) != std::future_status::ready) return {};
  return future.get();
}

}  // namespace tessera::proxy
