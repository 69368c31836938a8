#include "api/namespaces.h"

#include "common/object_key.h"

namespace tessera::api {

std::string TargetKey(const authz::Target& target) {
  if (!authz::IsNamespaced(target.kind)) return target.name;
  return ObjectKey(target.namespace_name, target.name);
}

std::string NamespaceOf(const nlohmann::json& object) {
  std::string out = authz::kDefaultNamespace;
  if (!object.is_object() || !object.contains("metadata")) return out;
  const nlohmann::json& meta = object["metadata"];
  if (meta.is_object() && meta.contains("namespace") && meta["namespace"].is_string())
    out = meta["namespace"].get<std::string>();
  return out;
}

void KeepNamespace(nlohmann::json& list, const std::string& namespace_name) {
  if (namespace_name.empty() || !list.contains("items") || !list["items"].is_array()) return;
  nlohmann::json kept = nlohmann::json::array();
  for (nlohmann::json& item : list["items"])
    if (NamespaceOf(item) == namespace_name) kept.push_back(std::move(item));
  list["items"] = std::move(kept);
}

nlohmann::json ShowKey(nlohmann::json reply) {
  if (!reply.is_object() || !reply.contains("name") || !reply["name"].is_string()) return reply;
  NamespacedName parts = SplitObjectKey(reply["name"].get<std::string>());
  reply["name"] = std::move(parts.name);
  reply["namespace"] = std::move(parts.namespace_name);
  return reply;
}

}  // namespace tessera::api
