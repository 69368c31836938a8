// The names of the wire protocol (wire.h): host names as agents report them, safe names,
// workload kinds, worker keys.
#include "protocol/wire.h"

#include "protocol/wire_json.h"

namespace tessera::protocol {

using wire_json::Quoted;

// ----- names -----

Result<std::string> NormalizeHostName(std::string_view reported) {
  static const std::string kRule =
      "a host name is a DNS-1123 subdomain: labels of a-z, 0-9 and '-' (1..63 characters, "
      "starting and ending with a letter or digit) joined by '.', at most 253 characters; "
      "start the agent with --name NAME to give the host such a name";
  if (reported.empty()) return InvalidArgument("name: required; " + kRule);
  const std::string shown = Quoted(reported);
  if (reported.size() > 253) {
    return InvalidArgument("name: " + shown + " is " + std::to_string(reported.size()) +
                           " characters, more than 253; " + kRule);
  }
  std::string name(reported);
  for (char& c : name) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  size_t start = 0;
  while (true) {
    size_t end = name.find('.', start);
    if (end == std::string::npos) end = name.size();
    const std::string_view label = std::string_view(name).substr(start, end - start);
    if (label.empty()) {
      return InvalidArgument("name: " + shown +
                             " has an empty label (a leading, trailing or doubled '.'); " + kRule);
    }
    if (label.size() > 63) {
      return InvalidArgument("name: " + shown + " has a label of " + std::to_string(label.size()) +
                             " characters, more than 63; " + kRule);
    }
    for (char c : label) {
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) {
        return InvalidArgument("name: " + shown + " contains " + Quoted(std::string_view(&c, 1)) +
                               "; " + kRule);
      }
    }
    if (label.front() == '-' || label.back() == '-') {
      return InvalidArgument("name: " + shown + " has a label that starts or ends with '-'; " +
                             kRule);
    }
    if (end == name.size()) break;
    start = end + 1;
  }
  return name;
}

bool IsSafeName(std::string_view name) {
  if (name.empty() || name.size() > 253 || name == "." || name == "..") return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// ----- assignments -----

const char* WorkloadKindName(WorkloadKind kind) {
  switch (kind) {
    case WorkloadKind::kTrainJob:
      return "TrainJob";
    case WorkloadKind::kService:
      return "Service";
    case WorkloadKind::kUnknown:
      break;
  }
  return "";
}

std::string WorkerKey::ToString() const {
  return job + "/" + std::to_string(attempt) + "/" + std::to_string(rank) + "@" +
         std::to_string(uid);
}

}  // namespace tessera::protocol
