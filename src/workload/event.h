// Event: a record for people of something that happened to an object ("trainjob/x",
// "host/y", "clusterqueue/z"): `tessera get events`, the dashboard, /metrics counters. Events
// are best kept but never decide anything.
//
// Thread-safety: values.
#pragma once

#include <cstdint>
#include <string>

namespace tessera {

struct Event {
  std::string name;  // "evt-0000000042": ordered by creation
  bool warning = false;
  std::string reason;  // CamelCase: Placed, HostLost, Preempted, ...
  std::string object;  // kind/name, the kind lower case
  std::string message;
  int64_t time_ms = 0;
};

}  // namespace tessera
