// The Secret kind's codec, and the `template.env` reader that lets a workload's environment
// name a Secret's key (docs/security.md "Secrets").
//
// A Secret is a namespaced document:
//   apiVersion: tessera/v1
//   kind: Secret
//   metadata: {name: db, namespace: team-a}
//   data: {password: "..."}          # plain strings (stringData is accepted as a synonym)
// Keys are 1-253 characters of [-._a-zA-Z0-9] (Kubernetes' rule); values are text without NUL;
// the keys and values together at most kMaxSecretBytes.
//
// What the head serves of a Secret is SecretServedJson: the keys and each value's length,
// never a value (`data: {password: "<redacted: 12 bytes>"}`). Only the store keeps the values
// (SecretStoredJson), and only the controller's assignment builder reads them.
//
// Pure; stateless.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "workload/secret_ref.h"

namespace tessera::codec {

inline constexpr const char* kSecretKind = "Secret";
inline constexpr size_t kMaxSecretBytes = size_t{1} << 20;  // keys and values, as Kubernetes
inline constexpr size_t kMaxSecretKeyChars = 253;

struct Secret {
  std::string key;  // common/object_key.h: metadata.name inside metadata.namespace
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> data;
};

// Validates a Secret document (what users apply, and what the store keeps). Errors name the
// field: "data.pass word: ...", "metadata.name: ...", "data: 1048600 bytes; at most ...".
Result<Secret> ParseSecret(const nlohmann::json& doc);

// "<redacted: 12 bytes>": what every served document shows in place of a value.
std::string RedactedValue(const std::string& value);

// The document the store keeps: with the values.
nlohmann::json SecretStoredJson(const Secret& secret);
// The document the API, watches, the CLI and the dashboard get: keys and lengths, no values.
nlohmann::json SecretServedJson(const Secret& secret, int64_t resource_version);

// A workload's environment (`env` in `obj`, under `path`), in either form:
//   a mapping   env: {STEPS: "10", DB_PASSWORD: {valueFrom: {secret: db, key: password}}}
//   a list      env: [{name: STEPS, value: "10"},
//                     {name: DB_PASSWORD, valueFrom: {secret: db, key: password}}]
// valueFrom also takes Kubernetes' spelling, {secretKeyRef: {name: db, key: password}}.
// Plain values follow GetStringMap's kEnv rules (numbers and booleans are taken as text).
struct EnvSpec {
  std::map<std::string, std::string> plain;
  SecretEnv secrets;
  std::vector<std::string> Names() const;
};
Result<EnvSpec> GetEnv(const nlohmann::json& obj, const std::string& key, const std::string& path);

// The mapping form of an environment, as stored and served: secret entries as
// {valueFrom: {secret, key}}; GetEnv reads it back.
nlohmann::json EnvJson(const std::map<std::string, std::string>& plain, const SecretEnv& secrets);

}  // namespace tessera::codec
