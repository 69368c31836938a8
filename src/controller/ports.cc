// Controller: the ports it hands out to workers (a TrainJob's or a Service group's MASTER_PORT
// and the JAX port above it; each Service process's PORT where hosts share an address). They
// are drawn from options_.port_range_* with the Rng the head seeded (a seed of its own per start,
// so two heads on one machine draw different sequences), never one a workload of this head
// holds now, and never one options_.port_taken says is taken on the address the worker listens
// on: on a local emulated cluster that is another cluster's worker on the same machine.
#include "controller/controller.h"

namespace tessera::controller {
namespace {

// Random draws before the linear scan (a nearly full range, or a probe that says everything is
// taken): the scan finds a free port in one pass, or says there is none.
constexpr int kRandomDraws = 64;

}  // namespace

std::set<int> Controller::PortsHeldLocked() const {
  std::set<int> held;
  for (const auto& kind : kinds_) kind->AddHeldPorts(held);
  return held;
}

void Controller::AddJobPorts(std::set<int>& held) const {
  for (const auto& [name, job] : jobs_) {
    if (!job.HoldsChips() || job.status.master_port <= 0) continue;
    held.insert(job.status.master_port);
    held.insert(job.status.jax_port > 0 ? job.status.jax_port : job.status.master_port + 1);
  }
}

void Controller::AddServicePorts(std::set<int>& held) const {
  for (const auto& [name, svc] : services_)
    for (const RoleStatus& role : svc.status.roles)
      for (const ReplicaStatus& r : role.replicas) {
        if (r.processes.empty()) continue;
        if (r.master_port > 0) held.insert({r.master_port, r.master_port + 1});
        for (const ServiceProcess& p : r.processes)
          if (p.port > 0) held.insert(p.port);
      }
}

int Controller::DrawPorts(const std::string& address, int count, std::set<int>& held) {
  const int span = options_.port_range_size - (count - 1);
  auto free = [&](int first, bool probe) {
    for (int p = first; p < first + count; ++p) {
      if (held.count(p)) return false;
      if (probe && options_.port_taken && options_.port_taken(address, p)) return false;
    }
    return true;
  };
  int port = 0;
  bool found = false;
  for (int draw = 0; draw < kRandomDraws && !found; ++draw) {
    port = options_.port_range_start + static_cast<int>(rng_.Uniform(span));
    found = free(port, true);
  }
  // A crowded range: the first free ports after the last draw, probed, then unprobed (the probe
  // may answer "taken" for ports that a worker of a finished job still lingers on).
  for (int pass = 0; pass < 2 && !found; ++pass)
    for (int i = 0; i < span && !found; ++i) {
      const int candidate =
          options_.port_range_start + (port - options_.port_range_start + i) % span;
      if (free(candidate, pass == 0)) {
        port = candidate;
        found = true;
      }
    }
  for (int p = port; p < port + count; ++p) held.insert(p);
  return port;
}

int Controller::TrainJobMasterPort(const TrainJob& job, const std::string& address) {
  std::set<int> held = PortsHeldLocked();
  // Fresh ports every attempt: a stale rendezvous port is a known cause of hangs after restarts.
  if (job.status.master_port > 0) held.insert({job.status.master_port, job.status.master_port + 1});
  return DrawPorts(address, 2, held);
}

GroupPorts Controller::ServiceGroupPorts(const std::vector<WorkerHost>& hosts, int role_port) {
  std::set<int> held = PortsHeldLocked();
  GroupPorts out;
  out.master_port = DrawPorts(hosts.empty() ? std::string() : hosts[0].address, 2, held);
  // On a real cluster every process listens on the role's port; where hosts share an address
  // (a local emulated cluster), each process gets its own port from the port range.
  std::set<std::string> addresses;
  bool shared = false;
  for (const auto& [name, h] : hosts_) shared = shared || !addresses.insert(h.spec.address).second;
  for (const WorkerHost& h : hosts)
    out.ports.push_back(shared ? DrawPorts(h.address, 1, held) : role_port);
  return out;
}

}  // namespace tessera::controller
