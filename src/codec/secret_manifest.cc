// ParseSecret, the Secret's stored and served documents, and GetEnv (secret_manifest.h). No
// message here ever quotes a Secret's value: refusals go back to the client and into the audit
// log, which must not hold one either.
#include "codec/secret_manifest.h"

#include <charconv>
#include <set>

#include "codec/manifest.h"
#include "codec/manifest_fields.h"
#include "common/object_key.h"

namespace tessera::codec {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kRedactedPrefix = "<redacted: ";
constexpr std::string_view kRedactedSuffix = " bytes>";

// Whether `value` is what SecretServedJson shows instead of a value: a document copied from
// `tessera get secret -o yaml` and applied again would otherwise store the placeholder.
bool IsRedactedPlaceholder(std::string_view value) {
  if (!value.starts_with(kRedactedPrefix) || !value.ends_with(kRedactedSuffix)) return false;
  const std::string_view digits = value.substr(
      kRedactedPrefix.size(), value.size() - kRedactedPrefix.size() - kRedactedSuffix.size());
  uint64_t n = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  return ec == std::errc() && end == digits.data() + digits.size() && !digits.empty();
}

Status ValidateSecretKey(const std::string& field, const std::string& key) {
  if (key.empty()) return InvalidArgument(field + ": a key is empty; name it");
  if (key.size() > kMaxSecretKeyChars)
    return InvalidArgument(field + ": a key is at most " + std::to_string(kMaxSecretKeyChars) +
                           " characters");
  for (char c : key)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
          c == '.' || c == '_'))
      return InvalidArgument(field +
                             ": a key may contain only letters, digits, '-', '.' and '_' "
                             "(like an environment variable or a file name)");
  if (key == "." || key == "..") return InvalidArgument(field + ": '.' and '..' are not keys");
  return Status::Ok();
}

// One value of data or stringData: text (numbers and booleans as their text), never echoed.
Result<std::string> SecretValue(const std::string& field, const Json& v) {
  std::string value;
  if (v.is_string())
    value = v.get<std::string>();
  else if (v.is_number() || v.is_boolean())
    value = v.dump();
  else
    return InvalidArgument(field + ": must be a string (quote it: \"...\")");
  if (value.find('\0') != std::string::npos)
    return InvalidArgument(field +
                           ": holds a NUL byte, which no environment variable can; "
                           "remove it");
  if (IsRedactedPlaceholder(value))
    return InvalidArgument(field +
                           ": is the placeholder tessera shows instead of a value (from `get "
                           "secret -o yaml`); put the real value there");
  return value;
}

Result<SecretKeyRef> GetSecretRef(const Json& value_from, const std::string& path) {
  TESSERA_RETURN_IF_ERROR(RequireObject(value_from, path));
  TESSERA_RETURN_IF_ERROR(OnlyKnownFields(value_from, path, {"secret", "key", "secretKeyRef"}));
  const bool k8s = Has(value_from, "secretKeyRef");
  if (k8s && (Has(value_from, "secret") || Has(value_from, "key")))
    return InvalidArgument(path +
                           ": give {secret: NAME, key: KEY} or {secretKeyRef: {name: NAME, "
                           "key: KEY}}, not both");
  const Json& ref = k8s ? value_from["secretKeyRef"] : value_from;
  const std::string ref_path = k8s ? path + ".secretKeyRef" : path;
  const std::string name_field = k8s ? "name" : "secret";
  if (k8s) {
    TESSERA_RETURN_IF_ERROR(RequireObject(ref, ref_path));
    TESSERA_RETURN_IF_ERROR(OnlyKnownFields(ref, ref_path, {"name", "key"}));
  }
  if (!Has(ref, name_field))
    return InvalidArgument(ref_path + "." + name_field +
                           ": required, the name of a Secret in the workload's namespace");
  auto secret = GetName(ref, name_field, ref_path, true);
  if (!secret.ok()) return secret.status();
  auto key = GetString(ref, "key", ref_path, true);
  if (!key.ok()) return InvalidArgument(ref_path + ".key: required, a key of the Secret's data");
  TESSERA_RETURN_IF_ERROR(ValidateSecretKey(ref_path + ".key", *key));
  return SecretKeyRef{*secret, *key};
}

Status ValidateEnvName(const std::string& field, const std::string& name) {
  if (name.empty()) return InvalidArgument(field + ": a variable name is empty; name it");
  TESSERA_RETURN_IF_ERROR(CheckText(field, name, ControlChars::kNone));
  if (name.find('=') != std::string::npos)
    return InvalidArgument(field + ": '=' cannot be part of a variable name");
  return Status::Ok();
}

}  // namespace

Result<Secret> ParseSecret(const Json& doc) {
  TESSERA_RETURN_IF_ERROR(RequireObject(doc, "body"));
  auto kind = DocumentKindName(doc);
  if (!kind.ok()) return kind.status();
  if (*kind != kSecretKind) return InvalidArgument("kind: expected Secret, got " + *kind);
  TESSERA_RETURN_IF_ERROR(
      OnlyKnownFields(doc, "document", {"apiVersion", "kind", "metadata", "data", "stringData"}));
  if (!doc.contains("metadata")) return InvalidArgument("metadata: required (metadata.name)");
  const Json& meta = doc["metadata"];
  TESSERA_RETURN_IF_ERROR(RequireObject(meta, "metadata"));
  TESSERA_RETURN_IF_ERROR(OnlyKnownFields(meta, "metadata", {"name", "namespace", "labels"}));
  auto name = GetName(meta, "name", "metadata", true);
  if (!name.ok()) return name.status();
  auto namespace_name = GetNamespace(meta);
  if (!namespace_name.ok()) return namespace_name.status();
  Secret out;
  out.key = ObjectKey(*namespace_name, *name);
  auto labels = GetStringMap(meta, "labels", "metadata", StringMapKind::kLabels);
  if (!labels.ok()) return labels.status();
  out.labels = std::move(*labels);

  size_t bytes = 0;
  for (const char* field : {"data", "stringData"}) {
    if (!Has(doc, field)) continue;
    const Json& data = doc[field];
    TESSERA_RETURN_IF_ERROR(RequireObject(data, field));
    for (auto it = data.begin(); it != data.end(); ++it) {
      const std::string path = FieldPath(field, it.key());
      TESSERA_RETURN_IF_ERROR(ValidateSecretKey(path, it.key()));
      if (out.data.count(it.key()))
        return InvalidArgument(path + ": given in both data and stringData; keep one");
      auto value = SecretValue(path, *it);
      if (!value.ok()) return value.status();
      bytes += it.key().size() + value->size();
      out.data[it.key()] = std::move(*value);
    }
  }
  if (bytes > kMaxSecretBytes)
    return InvalidArgument("data: " + std::to_string(bytes) +
                           " bytes of keys and values; at most " + std::to_string(kMaxSecretBytes) +
                           " (1 MiB): split it into Secrets");
  return out;
}

std::string RedactedValue(const std::string& value) {
  return std::string(kRedactedPrefix) + std::to_string(value.size()) + std::string(kRedactedSuffix);
}

Json SecretStoredJson(const Secret& secret) {
  Json meta = Json::object();
  PutObjectKey(meta, secret.key);
  if (!secret.labels.empty()) meta["labels"] = secret.labels;
  return {{"apiVersion", kApiVersion},
          {"kind", kSecretKind},
          {"metadata", meta},
          {"data", secret.data}};
}

Json SecretServedJson(const Secret& secret, int64_t resource_version) {
  Json meta = Json::object();
  PutObjectKey(meta, secret.key);
  if (!secret.labels.empty()) meta["labels"] = secret.labels;
  meta["resourceVersion"] = resource_version;
  Json data = Json::object();
  for (const auto& [key, value] : secret.data) data[key] = RedactedValue(value);
  return {{"apiVersion", kApiVersion},
          {"kind", kSecretKind},
          {"metadata", meta},
          {"type", "Opaque"},
          {"data", data}};
}

std::vector<std::string> EnvSpec::Names() const {
  std::vector<std::string> out;
  for (const auto& [name, value] : plain) out.push_back(name);
  for (const auto& [name, ref] : secrets) out.push_back(name);
  return out;
}

Result<EnvSpec> GetEnv(const Json& obj, const std::string& key, const std::string& path) {
  EnvSpec out;
  if (!Has(obj, key)) return out;
  const Json& env = obj[key];
  const std::string env_path = path + "." + key;
  // The plain entries go through GetStringMap, so they are checked as they always were.
  Json plain = Json::object();
  auto add_ref = [&](const std::string& name, const Json& value_from,
                     const std::string& field) -> Status {
    auto ref = GetSecretRef(value_from, field);
    if (!ref.ok()) return ref.status();
    out.secrets[name] = std::move(*ref);
    return Status::Ok();
  };
  if (env.is_array()) {
    for (size_t i = 0; i < env.size(); ++i) {
      const std::string item = env_path + "[" + std::to_string(i) + "]";
      const Json& e = env[i];
      TESSERA_RETURN_IF_ERROR(RequireObject(e, item));
      TESSERA_RETURN_IF_ERROR(OnlyKnownFields(e, item, {"name", "value", "valueFrom"}));
      auto name = GetString(e, "name", item, true);
      if (!name.ok()) return name.status();
      TESSERA_RETURN_IF_ERROR(ValidateEnvName(item + ".name", *name));
      if (plain.contains(*name) || out.secrets.count(*name))
        return InvalidArgument(item + ".name: " + *name + " is set twice; keep one");
      if (Has(e, "value") == Has(e, "valueFrom"))
        return InvalidArgument(item + ": give value or valueFrom (one of them)");
      if (Has(e, "valueFrom")) {
        TESSERA_RETURN_IF_ERROR(add_ref(*name, e["valueFrom"], item + ".valueFrom"));
      } else {
        plain[*name] = e["value"];
      }
    }
  } else if (env.is_object()) {
    for (auto it = env.begin(); it != env.end(); ++it) {
      const std::string field = FieldPath(env_path, it.key());
      if (!it->is_object()) {
        plain[it.key()] = *it;
        continue;
      }
      TESSERA_RETURN_IF_ERROR(ValidateEnvName(field, it.key()));
      TESSERA_RETURN_IF_ERROR(OnlyKnownFields(*it, field, {"valueFrom"}));
      if (!Has(*it, "valueFrom"))
        return InvalidArgument(field +
                               ": a value is a string, or {valueFrom: {secret: NAME, "
                               "key: KEY}}");
      TESSERA_RETURN_IF_ERROR(add_ref(it.key(), (*it)["valueFrom"], field + ".valueFrom"));
    }
  } else {
    return InvalidArgument(env_path +
                           ": must be a mapping of strings (or a list of {name, value} and "
                           "{name, valueFrom: {secret, key}})");
  }
  auto values = GetStringMap(Json{{key, plain}}, key, path, StringMapKind::kEnv);
  if (!values.ok()) return values.status();
  out.plain = std::move(*values);
  return out;
}

Json EnvJson(const std::map<std::string, std::string>& plain, const SecretEnv& secrets) {
  Json out = Json::object();
  for (const auto& [name, value] : plain) out[name] = value;
  for (const auto& [name, ref] : secrets)
    out[name] = {{"valueFrom", {{"secret", ref.secret}, {"key", ref.key}}}};
  return out;
}

}  // namespace tessera::codec
