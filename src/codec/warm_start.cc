#include "codec/warm_start.h"

#include <cctype>
#include <set>

namespace tessera::codec {
namespace {

constexpr size_t kMaxModules = 16;
constexpr size_t kMaxModuleName = 200;

// A dotted Python module name: identifiers ([A-Za-z_][A-Za-z0-9_]*) joined by dots.
bool IsModuleName(const std::string& name) {
  if (name.empty() || name.size() > kMaxModuleName) return false;
  bool start = true;
  for (char c : name) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '.') {
      if (start) return false;
      start = true;
    } else if (std::isalpha(u) || c == '_' || (!start && std::isdigit(u))) {
      start = false;
    } else {
      return false;
    }
  }
  return !start;
}

}  // namespace

Result<std::vector<std::string>> ParseWarmPreload(const nlohmann::json& obj,
                                                  const std::string& path) {
  const std::string at = path + ".warmStart";
  std::vector<std::string> modules;
  auto ws = obj.find("warmStart");
  if (ws == obj.end() || ws->is_null()) return modules;
  if (!ws->is_object())
    return InvalidArgument(at + ": must be an object such as {preload: [torch]}");
  for (const auto& [key, value] : ws->items())
    if (key != "preload")
      return InvalidArgument(at + "." + key + ": unknown field (known: preload)");
  auto preload = ws->find("preload");
  if (preload == ws->end() || !preload->is_array() || preload->empty())
    return InvalidArgument(
        at + ".preload: required, a non-empty list of Python modules such as [torch]");
  if (preload->size() > kMaxModules)
    return InvalidArgument(at + ".preload: at most " + std::to_string(kMaxModules) +
                           " modules, got " + std::to_string(preload->size()));
  std::set<std::string> seen;
  for (size_t i = 0; i < preload->size(); ++i) {
    const std::string field = at + ".preload[" + std::to_string(i) + "]";
    const nlohmann::json& m = (*preload)[i];
    if (!m.is_string()) return InvalidArgument(field + ": must be a module name (a string)");
    const std::string name = m.get<std::string>();
    if (!IsModuleName(name))
      return InvalidArgument(field + ": '" + name +
                             "' is not a Python module name (identifiers joined by dots)");
    if (!seen.insert(name).second) return InvalidArgument(field + ": '" + name + "' repeated");
    modules.push_back(name);
  }
  return modules;
}

Status ParseWarmStart(const nlohmann::json& spec, std::map<std::string, std::string>& env) {
  auto modules = ParseWarmPreload(spec, "spec");
  if (!modules.ok()) return modules.status();
  if (modules->empty()) return Status::Ok();
  std::string joined;
  for (const std::string& m : *modules) joined += (joined.empty() ? "" : ",") + m;
  env[kWarmPreloadEnv] = joined;
  return Status::Ok();
}

}  // namespace tessera::codec
