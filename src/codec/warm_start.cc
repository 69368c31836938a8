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

Status ParseWarmStart(const nlohmann::json& spec, std::map<std::string, std::string>& env) {
  auto ws = spec.find("warmStart");
  if (ws == spec.end() || ws->is_null()) return Status::Ok();
  if (!ws->is_object())
    return InvalidArgument("spec.warmStart: must be an object such as {preload: [torch]}");
  for (const auto& [key, value] : ws->items())
    if (key != "preload")
      return InvalidArgument("spec.warmStart." + key + ": unknown field (known: preload)");
  auto preload = ws->find("preload");
  if (preload == ws->end() || !preload->is_array() || preload->empty())
    return InvalidArgument(
        "spec.warmStart.preload: required, a non-empty list of Python modules such as [torch]");
  if (preload->size() > kMaxModules)
    return InvalidArgument("spec.warmStart.preload: at most " + std::to_string(kMaxModules) +
                           " modules, got " + std::to_string(preload->size()));
  std::string joined;
  std::set<std::string> seen;
  for (size_t i = 0; i < preload->size(); ++i) {
    const std::string field = "spec.warmStart.preload[" + std::to_string(i) + "]";
    const nlohmann::json& m = (*preload)[i];
    if (!m.is_string()) return InvalidArgument(field + ": must be a module name (a string)");
    const std::string name = m.get<std::string>();
    if (!IsModuleName(name))
      return InvalidArgument(field + ": '" + name +
                             "' is not a Python module name (identifiers joined by dots)");
    if (!seen.insert(name).second) return InvalidArgument(field + ": '" + name + "' repeated");
    joined += (joined.empty() ? "" : ",") + name;
  }
  env[kWarmPreloadEnv] = joined;
  return Status::Ok();
}

}  // namespace tessera::codec
