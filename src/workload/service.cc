#include "workload/service.h"

#include <algorithm>
#include <array>
#include <charconv>

#include "workload/phase_names.h"

namespace tessera {
namespace {

constexpr std::array<const char*, 5> kServicePhaseNames = {"Pending", "Progressing", "Ready",
                                                           "Degraded", "Deleting"};
constexpr std::array<const char*, 6> kReplicaPhaseNames = {"Pending", "Starting",   "Ready",
                                                           "Unready", "Recreating", "Terminating"};
constexpr std::array<const char*, 3> kProcessPhaseNames = {"Pending", "Running", "Exited"};

}  // namespace

const char* ServicePhaseName(ServicePhase p) { return kServicePhaseNames[static_cast<size_t>(p)]; }
Result<ServicePhase> ParseServicePhase(std::string_view name) {
  return ParsePhaseName<ServicePhase>(kServicePhaseNames, name, "status.phase");
}
const char* ReplicaPhaseName(ReplicaPhase p) { return kReplicaPhaseNames[static_cast<size_t>(p)]; }
Result<ReplicaPhase> ParseReplicaPhase(std::string_view name) {
  return ParsePhaseName<ReplicaPhase>(kReplicaPhaseNames, name, "status.roles[].replicas[].phase");
}
const char* ProcessPhaseName(ProcessPhase p) { return kProcessPhaseNames[static_cast<size_t>(p)]; }
Result<ProcessPhase> ParseProcessPhase(std::string_view name) {
  return ParsePhaseName<ProcessPhase>(kProcessPhaseNames, name,
                                      "status.roles[].replicas[].processes[].phase");
}

bool ServiceRoleSpec::SameTemplate(const ServiceRoleSpec& o) const {
  return accelerator == o.accelerator && topology == o.topology && command == o.command &&
         env == o.env && secret_env == o.secret_env && working_dir == o.working_dir &&
         port == o.port && grace_ms == o.grace_ms && kv_role == o.kv_role &&
         (kv_role == KvRole::kNone || kv_transfer == o.kv_transfer);
}

const char* KvRoleName(KvRole role) {
  switch (role) {
    case KvRole::kPrefill:
      return "prefill";
    case KvRole::kDecode:
      return "decode";
    case KvRole::kNone:
      break;
  }
  return "";
}

const ServiceRoleSpec* ServiceSpec::KvRoleOf(KvRole kind) const {
  for (const ServiceRoleSpec& r : roles)
    if (r.kv_role == kind && kind != KvRole::kNone) return &r;
  return nullptr;
}

const ServiceRoleSpec* ServiceSpec::FrontRole() const {
  if (const ServiceRoleSpec* decode = KvRoleOf(KvRole::kDecode)) return decode;
  return roles.empty() ? nullptr : &roles.front();
}

std::map<std::string, std::string> KvRoleEnv(const ServiceRoleSpec& role) {
  if (role.kv_role == KvRole::kNone) return {};
  return {{"TESSERA_KV_ROLE", KvRoleName(role.kv_role)},
          {"TESSERA_KV_THRESHOLD", std::to_string(role.kv_transfer.threshold_tokens)},
          {"TESSERA_KV_TIMEOUT_MS", std::to_string(role.kv_transfer.timeout_ms)},
          {"TESSERA_KV_HOLD_MS", std::to_string(role.kv_transfer.hold_ms)}};
}

std::map<std::string, std::string> WarmStartEnv(const ServiceRoleSpec& role) {
  if (role.warm_preload.empty()) return {};
  std::string joined;
  for (const std::string& m : role.warm_preload) joined += (joined.empty() ? "" : ",") + m;
  return {{"TESSERA_WARM_PRELOAD", joined}};
}

const ServiceRoleSpec* ServiceSpec::Role(std::string_view role) const {
  for (const ServiceRoleSpec& r : roles)
    if (r.name == role) return &r;
  return nullptr;
}

bool ReplicaStatus::OnHost(const std::string& host) const {
  return std::any_of(processes.begin(), processes.end(),
                     [&](const ServiceProcess& p) { return p.host == host; });
}

int RoleStatus::ReadyReplicas() const {
  return static_cast<int>(std::count_if(replicas.begin(), replicas.end(), [](const auto& r) {
    return r.phase == ReplicaPhase::kReady;
  }));
}

RoleStatus* ServiceStatus::Role(std::string_view name) {
  for (RoleStatus& r : roles)
    if (r.name == name) return &r;
  return nullptr;
}
const RoleStatus* ServiceStatus::Role(std::string_view name) const {
  for (const RoleStatus& r : roles)
    if (r.name == name) return &r;
  return nullptr;
}

std::vector<Endpoint> Service::Endpoints() const {
  std::vector<Endpoint> out;
  for (const RoleStatus& role : status.roles)
    for (const ReplicaStatus& r : role.replicas) {
      const ServiceProcess* leader = r.leader();
      if (!r.Assigned() || leader == nullptr) continue;
      out.push_back({role.name, r.replica, r.generation, leader->address, leader->port,
                     r.phase == ReplicaPhase::kReady});
    }
  return out;
}

bool Service::OnHost(const std::string& host) const {
  for (const RoleStatus& role : status.roles)
    for (const ReplicaStatus& r : role.replicas)
      if (r.OnHost(host)) return true;
  return false;
}

int Service::PlacedReplicas() const {
  int n = 0;
  for (const RoleStatus& role : status.roles)
    for (const ReplicaStatus& r : role.replicas) n += r.placed() ? 1 : 0;
  return n;
}

std::string ReplicaWorkloadName(const std::string& service, const std::string& role, int replica) {
  return service + "." + role + "." + std::to_string(replica);
}

std::optional<ReplicaRef> ParseReplicaWorkloadName(std::string_view name) {
  // From the right: the service part is a key (common/object_key.h), "NAME" or "NS.NAME".
  const size_t b = name.rfind('.');
  if (b == std::string_view::npos || b == 0) return std::nullopt;
  const size_t a = name.rfind('.', b - 1);
  if (a == std::string_view::npos) return std::nullopt;
  const size_t dot = name.find('.');
  if (dot != a && name.find('.', dot + 1) != a) return std::nullopt;  // more than one in the key
  ReplicaRef ref;
  ref.service = std::string(name.substr(0, a));
  ref.role = std::string(name.substr(a + 1, b - a - 1));
  const std::string_view idx = name.substr(b + 1);
  auto [p, ec] = std::from_chars(idx.data(), idx.data() + idx.size(), ref.replica);
  if (ref.service.empty() || ref.role.empty() || idx.empty() || ec != std::errc() ||
      p != idx.data() + idx.size() || ref.replica < 0)
    return std::nullopt;
  return ref;
}

}  // namespace tessera
