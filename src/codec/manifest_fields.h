// Field readers shared by this library's document codecs (manifest.cc, queue_manifest.cc,
// service_manifest.cc, reservation_manifest.cc; implemented in manifest_fields.cc):
// one set of type, range and text checks, so every kind refuses the same wrong inputs with the
// same messages (a number where a name belongs, a control character in a label, an env key
// with '='). Errors name the field by its path ("spec.roles[0].env.KEY").
//
// Pure; stateless.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>

#include "common/status.h"
#include "topology/topology.h"

namespace tessera::codec {

// The path of `key` inside `path` as errors show it: "spec.env.KEY", the key quoted and
// escaped when it is not plain text (empty, spaces, dots, quotes, control bytes); just the key
// when `path` is "".
std::string FieldPath(const std::string& path, const std::string& key);

// "a, b, c".
std::string JoinKeys(const std::set<std::string>& keys);

// InvalidArgument naming the first key of `obj` not in `allowed` and listing the valid ones.
Status OnlyKnownFields(const nlohmann::json& obj, const std::string& path,
                       const std::set<std::string>& allowed);

// Which control characters a string may hold: none (names, keys, paths), or tab and newline
// (multi-line text: descriptions, environment values).
enum class ControlChars { kNone, kTabAndNewline };
Status CheckText(const std::string& field, const std::string& text, ControlChars allowed);

// Whether `obj` is an object with `key` set to something other than null.
inline bool Has(const nlohmann::json& obj, const std::string& key) {
  return obj.is_object() && obj.contains(key) && !obj[key].is_null();
}

// obj[key], or null when `obj` is not an object or has no `key` (never throws, never inserts).
inline const nlohmann::json& Child(const nlohmann::json& obj, const char* key) {
  static const nlohmann::json kNull;
  if (!obj.is_object()) return kNull;
  auto it = obj.find(key);
  return it == obj.end() ? kNull : *it;
}

// A duration as documents write it: "1500ms".
inline std::string Ms(int64_t ms) { return std::to_string(ms) + "ms"; }

Status RequireObject(const nlohmann::json& v, const std::string& path);

// A string field without control characters; "" when absent and not required.
Result<std::string> GetString(const nlohmann::json& obj, const std::string& key,
                              const std::string& path, bool required);

// A string field that names a resource: ValidateName's rules under the field's path
// ("metadata.queue: ..."); "" when absent (or "") and not required.
Result<std::string> GetName(const nlohmann::json& obj, const std::string& key,
                            const std::string& path, bool required);

// The slice `obj` asks for: its "accelerator" field (required: "v6e", "TPU-V6E", or a pod type
// such as "v6e-16", whose topology may then be left out) and "topology" field, resolved by
// ResolveAccelerator (topology.h). Errors name the field under `path` ("spec.topology: ...").
Result<SliceTopology> GetSliceTopology(const nlohmann::json& obj, const std::string& path);

// A whole number in [lo, hi]; `fallback` when absent.
Result<int64_t> GetInt(const nlohmann::json& obj, const std::string& key, const std::string& path,
                       int64_t fallback, int64_t lo, int64_t hi);

// What a mapping of strings holds: labels (keys and values are strings without control
// characters), or environment variables (values may also be written as numbers or booleans,
// and may hold tabs and newlines; keys are names without '=').
enum class StringMapKind { kLabels, kEnv };
Result<std::map<std::string, std::string>> GetStringMap(const nlohmann::json& obj,
                                                        const std::string& key,
                                                        const std::string& path,
                                                        StringMapKind kind);

// The metadata of a kind that is submitted to a queue (TrainJob, Service): metadata.name
// (required), metadata.queue (the LocalQueue; "" when absent) and metadata.labels, checked in
// that order, so the first wrong one is the one reported. `meta` is the metadata mapping; its
// unknown keys are the caller's to refuse.
struct WorkloadMetadata {
  std::string name;  // the object's key: metadata.name inside metadata.namespace (ObjectKey)
  std::string namespace_name;  // metadata.namespace, "default" when left out
  std::string queue;
  std::map<std::string, std::string> labels;
};
Result<WorkloadMetadata> GetWorkloadMetadata(const nlohmann::json& meta);

// metadata.namespace of a namespaced kind's document (GetName's rules), "default" when left out.
Result<std::string> GetNamespace(const nlohmann::json& meta);

// Writes an object's key (common/object_key.h) into its metadata as name and namespace: the
// form documents show and the store keeps.
void PutObjectKey(nlohmann::json& meta, const std::string& key);

// Copies metadata.namespace, if any, from a stored document's metadata into a manifest's.
void CopyNamespace(const nlohmann::json& from_meta, nlohmann::json& to_meta);

// A duration (ParseDurationMs, manifest.h) that must be above zero. Zero or less is
// InvalidArgument "<field>: must be positive, e.g. <example>; leave it out <leave_out>", where
// `leave_out` says what leaving the field out means ("if unknown").
Result<int64_t> ParsePositiveDurationMs(std::string_view field, const nlohmann::json& v,
                                        std::string_view example, std::string_view leave_out);

}  // namespace tessera::codec
