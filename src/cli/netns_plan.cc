#include "cli/netns_plan.h"

#include <cstdint>

namespace tessera::cli {
namespace {

std::string SubnetPrefix(int id) {
  return "198." + std::to_string(18 + id / 256) + "." + std::to_string(id % 256) + ".";
}

}  // namespace

const NetnsMember* NetnsPlan::Find(const std::string& name) const {
  for (const NetnsMember& m : members)
    if (m.name == name) return &m;
  return nullptr;
}

Result<NetnsPlan> PlanNetns(int id, const std::string& owner,
                            const std::vector<std::string>& agents) {
  if (id < 0 || id >= kNetnsIds) {
    return InvalidArgument("netns id " + std::to_string(id) + ": must be 0.." +
                           std::to_string(kNetnsIds - 1) + " (one /24 of 198.18.0.0/15 each)");
  }
  if (agents.size() > static_cast<size_t>(kNetnsMaxAgents)) {
    return InvalidArgument("--netns: " + std::to_string(agents.size()) +
                           " hosts do not fit one /24 (at most " + std::to_string(kNetnsMaxAgents) +
                           "); start fewer slices or cubes");
  }
  NetnsPlan plan;
  plan.id = id;
  plan.owner = owner;
  plan.bridge = "tsbr" + std::to_string(id);
  const std::string prefix = SubnetPrefix(id);
  plan.bridge_address = prefix + "1";
  std::vector<std::string> names = {"head"};
  names.insert(names.end(), agents.begin(), agents.end());
  for (size_t n = 0; n < names.size(); ++n) {
    const std::string suffix = std::to_string(id) + "-" + std::to_string(n);
    plan.members.push_back(
        {names[n], "tessera-" + suffix, "tsv" + suffix, prefix + std::to_string(n + 2)});
  }
  return plan;
}

std::string NetnsBridgeAlias(const std::string& owner) { return "tessera " + owner; }

bool NetnsIdLooksFree(int id, const std::set<std::string>& links,
                      const std::vector<std::string>& ipv4_addresses) {
  if (links.count("tsbr" + std::to_string(id))) return false;
  const std::string prefix = SubnetPrefix(id);
  for (const std::string& a : ipv4_addresses)
    if (a.rfind(prefix, 0) == 0) return false;
  return true;
}

std::vector<int> NetnsIdOrder(const std::string& owner) {
  uint32_t hash = 2166136261u;  // FNV-1a: the same order from every build
  for (unsigned char ch : owner) hash = (hash ^ ch) * 16777619u;
  const int first = static_cast<int>(hash % kNetnsIds);
  std::vector<int> order;
  for (int i = 0; i < kNetnsIds; ++i) order.push_back((first + i) % kNetnsIds);
  return order;
}

std::vector<std::vector<std::string>> NetnsBridgeCommands(const NetnsPlan& plan) {
  return {
      {"link", "set", "dev", plan.bridge, "alias", NetnsBridgeAlias(plan.owner)},
      {"addr", "add", plan.bridge_address + "/24", "dev", plan.bridge},
      {"link", "set", "dev", plan.bridge, "up"},
  };
}

std::vector<std::vector<std::string>> NetnsMemberCommands(const NetnsPlan& plan,
                                                          const NetnsMember& m) {
  const std::vector<std::string> in_ns = {"netns", "exec", m.ns, "ip"};
  auto inside = [&](std::vector<std::string> args) {
    args.insert(args.begin(), in_ns.begin(), in_ns.end());
    return args;
  };
  return {
      {"netns", "add", m.ns},
      {"link", "add", m.veth, "type", "veth", "peer", "name", "eth0", "netns", m.ns},
      {"link", "set", "dev", m.veth, "master", plan.bridge},
      {"link", "set", "dev", m.veth, "up"},
      inside({"addr", "add", m.address + "/24", "dev", "eth0"}),
      inside({"link", "set", "dev", "lo", "up"}),
      inside({"link", "set", "dev", "eth0", "up"}),
  };
}

std::string NetnsHostsFile(const NetnsPlan& plan, const NetnsMember& m,
                           const std::string& hostname) {
  std::string out = "# tessera up --netns: " + m.ns + " (cluster " + std::to_string(plan.id) +
                    ", " + plan.owner + ")\n127.0.0.1 localhost\n" + m.address + " " + hostname +
                    "\n";
  for (const NetnsMember& other : plan.members) {
    if (other.name == hostname) continue;  // a host named like this machine: the line above
    out += other.address + " " + other.name + "\n";
  }
  return out;
}

nlohmann::json NetnsRecord(const NetnsPlan& plan) {
  nlohmann::json members = nlohmann::json::array();
  for (const NetnsMember& m : plan.members)
    members.push_back({{"name", m.name}, {"ns", m.ns}, {"veth", m.veth}, {"address", m.address}});
  return {{"id", plan.id},
          {"owner", plan.owner},
          {"bridge", plan.bridge},
          {"bridgeAddress", plan.bridge_address},
          {"members", members}};
}

Result<NetnsPlan> ParseNetnsRecord(const nlohmann::json& record) {
  const auto bad = [](const std::string& why) {
    return InvalidArgument("netns.json: " + why + "; remove what it names by hand (docs/netns.md)");
  };
  if (!record.is_object() || !record.contains("id") || !record["id"].is_number_integer() ||
      !record.contains("owner") || !record["owner"].is_string() || !record.contains("members") ||
      !record["members"].is_array() || record["members"].empty()) {
    return bad("not a record of `tessera up --netns` (id, owner, members)");
  }
  std::vector<std::string> agents;
  for (const auto& m : record["members"]) {
    if (!m.is_object() || !m.contains("name") || !m["name"].is_string())
      return bad("a member without a name");
    agents.push_back(m["name"].get<std::string>());
  }
  if (agents.front() != "head") return bad("the first member is not the head");
  agents.erase(agents.begin());
  auto plan = PlanNetns(record["id"].get<int>(), record["owner"].get<std::string>(), agents);
  if (!plan.ok()) return bad(plan.status().message());
  if (NetnsRecord(*plan) != record) return bad("its names or addresses are not its id's");
  return plan;
}

}  // namespace tessera::cli
