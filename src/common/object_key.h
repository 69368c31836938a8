// ObjectKey: the one identity of a namespaced object (a TrainJob, Service, SliceReservation or
// LocalQueue) inside the head: its key in the controller's maps, the store and the admission
// model's LocalQueue names.
//
// An object of the namespace "default" is keyed by its bare name, so every object stored before
// namespaces existed is found where it always was; an object of any other namespace is keyed
// "NAMESPACE.NAME". A name or namespace never holds '.' (DNS-1123 labels: [a-z0-9-]), so the key
// splits back without ambiguity, and it is safe wherever a name already went: URL path segments
// (an agent's log route), file names (an agent's log directory) and environment values.
// Documents never show a key: metadata.name and metadata.namespace carry the two parts
// (docs/security.md "Namespaces").
//
// Thread-safety: stateless functions.
#pragma once

#include <string>
#include <string_view>

namespace tessera {

inline constexpr std::string_view kDefaultNamespace = "default";
inline constexpr char kObjectKeySeparator = '.';

struct NamespacedName {
  std::string namespace_name;  // "default" for a bare key
  std::string name;
};

// The key of `name` in `namespace_name` ("" is the namespace "default").
inline std::string ObjectKey(std::string_view namespace_name, std::string_view name) {
  if (namespace_name.empty() || namespace_name == kDefaultNamespace) return std::string(name);
  std::string key(namespace_name);
  key += kObjectKeySeparator;
  key += name;
  return key;
}

// The two parts of a key ObjectKey made.
inline NamespacedName SplitObjectKey(std::string_view key) {
  const size_t dot = key.find(kObjectKeySeparator);
  if (dot == std::string_view::npos) return {std::string(kDefaultNamespace), std::string(key)};
  return {std::string(key.substr(0, dot)), std::string(key.substr(dot + 1))};
}

// The namespace of a key.
inline std::string NamespaceOfKey(std::string_view key) {
  return SplitObjectKey(key).namespace_name;
}

}  // namespace tessera
