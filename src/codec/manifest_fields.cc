// The field readers of manifest_fields.h, and ValidateName and ParseDurationMs (manifest.h):
// the type, range and text checks every document codec in this library shares.
#include "codec/manifest_fields.h"

#include <algorithm>

#include "codec/manifest.h"
#include "common/json_limits.h"

namespace tessera::codec {
namespace {

// A key as it appears in a field path: as written when plain, quoted and escaped otherwise.
std::string KeyShown(const std::string& key) {
  const bool plain = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return c > 0x20 && c < 0x7f && c != '.' && c != '\'' && c != '\\';
  });
  return plain ? key : ShownText(key, 40);
}

}  // namespace

std::string FieldPath(const std::string& path, const std::string& key) {
  return path.empty() ? KeyShown(key) : path + "." + KeyShown(key);
}

std::string JoinKeys(const std::set<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "" : ", ") + k;
  return out;
}

Status OnlyKnownFields(const Json& obj, const std::string& path,
                       const std::set<std::string>& allowed) {
  for (auto it = obj.begin(); it != obj.end(); ++it)
    if (!allowed.count(it.key()))
      return InvalidArgument(FieldPath(path, it.key()) + ": unknown field; valid fields of " +
                             path + ": " + JoinKeys(allowed));
  return Status::Ok();
}

Status CheckText(const std::string& field, const std::string& text, ControlChars allowed) {
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c != 0x7f) continue;
    if (allowed == ControlChars::kTabAndNewline && (c == '\t' || c == '\n')) continue;
    return InvalidArgument(field + ": " + ShownText(text) + " holds a control character (byte " +
                           std::to_string(i) + ")" + (c == 0 ? ", a NUL," : "") + "; remove it");
  }
  return Status::Ok();
}

Status RequireObject(const Json& v, const std::string& path) {
  if (!v.is_object()) return InvalidArgument(path + ": must be a mapping");
  return Status::Ok();
}

Result<std::string> GetString(const Json& obj, const std::string& key, const std::string& path,
                              bool required) {
  if (!obj.contains(key) || obj[key].is_null()) {
    if (required) return InvalidArgument(path + "." + key + ": required");
    return std::string();
  }
  const Json& v = obj[key];
  const std::string field = path + "." + key;
  if (!v.is_string()) {
    if (v.is_number() || v.is_boolean())
      return InvalidArgument(field + ": must be a string, got " + v.dump() + "; quote it: \"" +
                             v.dump() + "\"");
    return InvalidArgument(field + ": must be a string");
  }
  std::string text = v.get<std::string>();
  TESSERA_RETURN_IF_ERROR(CheckText(field, text, ControlChars::kNone));
  return text;
}

Result<std::string> GetName(const Json& obj, const std::string& key, const std::string& path,
                            bool required) {
  auto name = GetString(obj, key, path, required);
  if (!name.ok()) return name.status();
  if (required || !name->empty()) TESSERA_RETURN_IF_ERROR(ValidateName(path + "." + key, *name));
  return *name;
}

Result<SliceTopology> GetSliceTopology(const Json& obj, const std::string& path) {
  auto accelerator = GetString(obj, "accelerator", path, true);
  if (!accelerator.ok()) return accelerator.status();
  auto topology = GetString(obj, "topology", path, false);
  if (!topology.ok()) return topology.status();
  auto resolved = ResolveAccelerator(*accelerator, *topology);
  if (!resolved.ok()) return InvalidArgument(path + "." + resolved.status().message());
  return *resolved;
}

Result<int64_t> GetInt(const Json& obj, const std::string& key, const std::string& path,
                       int64_t fallback, int64_t lo, int64_t hi) {
  if (!obj.contains(key) || obj[key].is_null()) return fallback;
  const Json& v = obj[key];
  if (!v.is_number_integer())
    return InvalidArgument(path + "." + key + ": must be a whole number between " +
                           std::to_string(lo) + " and " + std::to_string(hi));
  int64_t i = 0;
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi))
      return InvalidArgument(path + "." + key + ": " + std::to_string(u) +
                             " is too large (at most " + std::to_string(hi) + ")");
    i = static_cast<int64_t>(u);
  } else {
    i = v.get<int64_t>();
  }
  if (i < lo || i > hi)
    return InvalidArgument(path + "." + key + ": " + std::to_string(i) + " is out of range; " +
                           "must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  return i;
}

namespace {
constexpr size_t kMaxLabelKeyChars = 253;
constexpr size_t kMaxLabelValueChars = 1024;
}  // namespace

Result<std::map<std::string, std::string>> GetStringMap(const Json& obj, const std::string& key,
                                                        const std::string& path,
                                                        StringMapKind kind) {
  std::map<std::string, std::string> out;
  if (!obj.contains(key) || obj[key].is_null()) return out;
  const Json& v = obj[key];
  const std::string map_path = path + "." + key;
  if (!v.is_object()) return InvalidArgument(map_path + ": must be a mapping of strings");
  for (auto it = v.begin(); it != v.end(); ++it) {
    const std::string field = FieldPath(map_path, it.key());
    if (it.key().empty()) return InvalidArgument(map_path + ": a key is empty; name it");
    TESSERA_RETURN_IF_ERROR(CheckText(field, it.key(), ControlChars::kNone));
    if (kind == StringMapKind::kEnv && it.key().find('=') != std::string::npos)
      return InvalidArgument(field + ": '=' cannot be part of a variable name");
    if (kind == StringMapKind::kLabels && it.key().size() > kMaxLabelKeyChars)
      return InvalidArgument(field + ": label keys are at most " +
                             std::to_string(kMaxLabelKeyChars) + " characters");
    std::string value;
    if (it->is_string()) {
      value = it->get<std::string>();
    } else if (kind == StringMapKind::kEnv && (it->is_number() || it->is_boolean())) {
      value = it->dump();
    } else if (it->is_number() || it->is_boolean()) {
      return InvalidArgument(field + ": must be a string, got " + it->dump() + "; quote it: \"" +
                             it->dump() + "\"");
    } else {
      return InvalidArgument(field + ": must be a string (quote it: \"...\")");
    }
    if (kind == StringMapKind::kLabels) {
      TESSERA_RETURN_IF_ERROR(CheckText(field, value, ControlChars::kNone));
      if (value.size() > kMaxLabelValueChars)
        return InvalidArgument(field + ": label values are at most " +
                               std::to_string(kMaxLabelValueChars) + " characters");
    } else {
      TESSERA_RETURN_IF_ERROR(CheckText(field, value, ControlChars::kTabAndNewline));
    }
    out[it.key()] = std::move(value);
  }
  return out;
}

Status ValidateName(std::string_view field, std::string_view name) {
  const std::string f(field);
  if (name.empty()) return InvalidArgument(f + ": required");
  if (name.size() > 63)
    return InvalidArgument(f + ": " + ShownText(name, 20) + " is " + std::to_string(name.size()) +
                           " characters; at most 63");
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
      return InvalidArgument(f + ": " + ShownText(name) +
                             " may contain only lowercase letters, digits and '-'");
  if (name.front() == '-' || name.back() == '-')
    return InvalidArgument(f + ": " + ShownText(name) +
                           " must start and end with a letter or digit");
  return Status::Ok();
}

Result<int64_t> ParseDurationMs(std::string_view field, const Json& v) {
  const std::string f(field);
  const std::string how = f + ": write a duration like 30s, 1500ms, 2m or 1h";
  if (v.is_number_integer()) {
    const int64_t s = v.get<int64_t>();
    if (s < 0 || s > 30 * 86400) return InvalidArgument(how + " (0 to 30 days)");
    return s * 1000;
  }
  if (!v.is_string()) return InvalidArgument(how);
  const std::string s = v.get<std::string>();
  size_t i = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  if (i == 0 || i > 9) return InvalidArgument(how + "; got '" + s + "'");
  const int64_t n = std::stoll(s.substr(0, i));
  const std::string unit = s.substr(i);
  int64_t ms = 0;
  if (unit == "ms")
    ms = n;
  else if (unit == "s" || unit.empty())
    ms = n * 1000;
  else if (unit == "m")
    ms = n * 60'000;
  else if (unit == "h")
    ms = n * 3'600'000;
  else
    return InvalidArgument(how + "; got '" + s + "'");
  if (ms > int64_t{30} * 86'400'000) return InvalidArgument(how + " (at most 30 days)");
  return ms;
}

Result<std::string> GetNamespace(const Json& meta) {
  auto namespace_name = GetName(meta, "namespace", "metadata", false);
  if (!namespace_name.ok()) return namespace_name.status();
  return namespace_name->empty() ? std::string(kDefaultNamespace) : *namespace_name;
}

void PutObjectKey(Json& meta, const std::string& key) {
  NamespacedName parts = SplitObjectKey(key);
  meta["name"] = std::move(parts.name);
  meta["namespace"] = std::move(parts.namespace_name);
}

void CopyNamespace(const Json& from_meta, Json& to_meta) {
  if (from_meta.is_object() && from_meta.contains("namespace"))
    to_meta["namespace"] = from_meta["namespace"];
}

Result<WorkloadMetadata> GetWorkloadMetadata(const Json& meta) {
  WorkloadMetadata out;
  auto name = GetName(meta, "name", "metadata", true);
  if (!name.ok()) return name.status();
  auto namespace_name = GetNamespace(meta);
  if (!namespace_name.ok()) return namespace_name.status();
  out.namespace_name = std::move(*namespace_name);
  out.name = ObjectKey(out.namespace_name, *name);
  auto queue = GetName(meta, "queue", "metadata", false);
  if (!queue.ok()) return queue.status();
  out.queue = std::move(*queue);
  auto labels = GetStringMap(meta, "labels", "metadata", StringMapKind::kLabels);
  if (!labels.ok()) return labels.status();
  out.labels = std::move(*labels);
  return out;
}

Result<int64_t> ParsePositiveDurationMs(std::string_view field, const Json& v,
                                        std::string_view example, std::string_view leave_out) {
  auto ms = ParseDurationMs(field, v);
  if (!ms.ok()) return ms.status();
  if (*ms <= 0)
    return InvalidArgument(std::string(field) + ": must be positive, e.g. " + std::string(example) +
                           "; leave it out " + std::string(leave_out));
  return *ms;
}

}  // namespace tessera::codec
