// ServiceProber: the head's readiness prober for Service replica groups. One thread asks the
// controller which leaders are due a probe (Controller::DueProbes: never probed, or a
// readiness period since the last result), sends each an HTTP GET of its readiness path with
// the probe's timeout, and reports the result (Controller::ReportReadiness: 2xx is ready;
// another status, a refused connection or a timeout is not, with that as the message).
//
// Probing from the head is the simple first step: it costs one request per replica per period
// from one thread, and a probe that hangs delays the others by up to its timeout. The scalable
// design is for the agent that runs a leader to probe it locally and report in its heartbeat
// (docs/serving.md "Not yet").
//
// A leader with a certificate from the head (ProbeTarget::tls) is probed over HTTPS, its
// certificate verified against the cluster CA (`ca_file`) and its endpoint's address.
//
// Ownership: the head owns it; the controller must outlive it. Thread-safety: Start and Stop
// from one thread.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "controller/controller.h"

namespace tessera::api {

class ServiceProber {
 public:
  // `ca_file`: the cluster CA, for the leaders that serve HTTPS ("" when none does).
  explicit ServiceProber(controller::Controller& controller, std::string ca_file = "",
                         int64_t poll_ms = 200)
      : controller_(controller), ca_file_(std::move(ca_file)), poll_ms_(poll_ms) {}
  ~ServiceProber() { Stop(); }
  ServiceProber(const ServiceProber&) = delete;
  ServiceProber& operator=(const ServiceProber&) = delete;

  void Start();
  // Returns after the probe in flight, if any (at most its timeout).
  void Stop();

 private:
  void Run();

  controller::Controller& controller_;
  const std::string ca_file_;
  int64_t poll_ms_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
};

}  // namespace tessera::api
