#include "api/service_prober.h"

#include <algorithm>

#include "net/http_client.h"

namespace tessera::api {

void ServiceProber::Start() {
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { Run(); });
}

void ServiceProber::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ServiceProber::Run() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    lock.unlock();
    for (const auto& target : controller_.DueProbes()) {
      net::ClientOptions o;
      o.host = target.address;
      o.port = static_cast<uint16_t>(target.port);
      const auto timeout = std::chrono::milliseconds(std::max<int64_t>(1, target.timeout_ms));
      o.connect_timeout = std::min(timeout, std::chrono::milliseconds(5'000));
      o.read_timeout = timeout;
      o.max_response_bytes = 1 << 20;
      if (target.tls) o.tls = net::ClientTlsOptions{ca_file_, "", "", target.address};
      net::HttpClient client(o);
      auto response = client.Request(net::Method::kGet, target.path);
      bool ready = false;
      std::string message;
      if (!response.ok()) {
        message = response.status().message();
      } else if (response->status >= 200 && response->status < 300) {
        ready = true;
      } else {
        message = "GET " + target.path + " answered HTTP " + std::to_string(response->status);
      }
      controller_.ReportReadiness(target, ready, message);
      std::lock_guard stop(mu_);
      if (stopping_) return;
    }
    lock.lock();
    cv_.wait_for(lock, std::chrono::milliseconds(poll_ms_), [this] { return stopping_; });
  }
}

}  // namespace tessera::api
