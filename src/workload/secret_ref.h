// SecretKeyRef: an environment variable of a workload's workers whose value is one key of a
// Secret in the workload's own namespace (`valueFrom: {secret: NAME, key: KEY}` in
// `template.env`). Specs keep only the reference; the head resolves it when it builds the
// assignments of the hosts that run the workload's workers (docs/security.md "Secrets"), so the
// value is never part of a spec, a stored workload or anything served about it.
//
// Thread-safety: values.
#pragma once

#include <map>
#include <string>

namespace tessera {

struct SecretKeyRef {
  std::string secret;  // metadata.name of a Secret in the workload's namespace
  std::string key;     // a key of its data
  friend bool operator==(const SecretKeyRef&, const SecretKeyRef&) = default;
};

// Variable name -> the Secret key that holds its value.
using SecretEnv = std::map<std::string, SecretKeyRef>;

}  // namespace tessera
