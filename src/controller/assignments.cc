// Controller: assignments, what each host must run now. A host's snapshot lists what every
// registered kind appends for it (WorkloadKind::AppendAssignments: one entry per worker it
// places there, and "stop" entries for withdrawn workers that must die faster or slower than
// their own grace), under a revision that grows with every change. docs/agent-protocol.md.
#include <algorithm>

#include "controller/controller.h"

namespace tessera::controller {

void Controller::NotifyHosts(const std::set<std::string>& hosts) {
  for (const std::string& host : hosts) ForgetQuietLocked(host);  // their answer moved
  // Every host whose assignments changed up to this revision is forgotten: the others are
  // still idle at it (quiet_beats.cc).
  notified_revision_.store(assignment_revision_.load());
  if (on_assignments_ && !hosts.empty()) on_assignments_(hosts);
}

Result<Json> Controller::Assignments(const std::string& host) const {
  auto lock = Hold();
  if (!hosts_.count(host)) return NotFound("host '" + host + "' is not registered; register first");
  return AssignmentsLocked(host);
}

Json Controller::AssignmentsLocked(const std::string& host) const {
  std::vector<protocol::Assignment> out;
  std::vector<protocol::StopRequest> stop;
  for (const auto& kind : kinds_) kind->AppendAssignments(host, out, stop);
  return Json::parse(protocol::AssignmentSnapshotJson(assignment_revision_, out, stop, term_));
}

}  // namespace tessera::controller
