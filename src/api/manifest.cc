#include "api/manifest.h"

#include <yaml-cpp/anchor.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>
#include <set>
#include <sstream>

#include "api/in_memory_checkpoint.h"
#include "api/manifest_fields.h"
#include "api/warm_start.h"
#include "common/json_limits.h"

namespace tessera::api {
namespace {

constexpr int kMaxSlices = 4096;

// A key as it appears in a field path: as written when plain, quoted and escaped otherwise.
std::string KeyShown(const std::string& key) {
  const bool plain = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return c > 0x20 && c < 0x7f && c != '.' && c != '\'' && c != '\\';
  });
  return plain ? key : ShownText(key, 40);
}

std::string FieldPath(const std::string& path, const std::string& key) {
  return path.empty() ? KeyShown(key) : path + "." + KeyShown(key);
}

// The scalar a plain (unquoted) YAML value stands for: a boolean, null, a whole number, a
// number, or nullopt for a string.
std::optional<Json> PlainScalar(const std::string& s) {
  if (s == "true" || s == "True") return Json(true);
  if (s == "false" || s == "False") return Json(false);
  if (s == "null" || s == "~") return Json(nullptr);
  if (s.empty()) return std::nullopt;
  int64_t i = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), i);
  if (ec == std::errc() && p == s.data() + s.size()) return Json(i);
  double d = 0;
  auto [p2, ec2] = std::from_chars(s.data(), s.data() + s.size(), d);
  if (ec2 == std::errc() && p2 == s.data() + s.size() && std::isfinite(d) &&
      s.find_first_of("0123456789") != std::string::npos)
    return Json(d);
  return std::nullopt;
}

// YAML text is UTF-8 (YAML 1.2, section 5.2), and so is everything tessera stores and serves as
// JSON. JSON text is checked by its parser; a YAML scalar is checked here.
// `what` is "" for a value, "the key " for a mapping key.
Status CheckUtf8(const std::string& field, const std::string& what, const std::string& text) {
  const size_t bad = FirstInvalidUtf8(text);
  if (bad == std::string::npos) return Status::Ok();
  return InvalidArgument(field + ": " + what + ShownText(text) + " is not valid UTF-8 (byte " +
                         std::to_string(bad) + "); save the document as UTF-8");
}

// Converts a YAML node to JSON. Scalars become numbers or booleans when they are plainly
// written as such (unquoted), and strings otherwise. Mapping keys must be strings: a plain key
// that reads as a number, boolean or null is refused (quote it). `depth` counts the lists and
// mappings around `node`; ParseDocument has already refused deeper documents, this keeps the
// recursion bounded on its own.
Result<Json> YamlToJson(const YAML::Node& node, const std::string& path, int depth) {
  const bool container =
      node.Type() == YAML::NodeType::Sequence || node.Type() == YAML::NodeType::Map;
  if (container && depth >= kMaxJsonDepth) {
    return InvalidArgument("body: " + path + ": nested deeper than " +
                           std::to_string(kMaxJsonDepth) +
                           " levels of lists and mappings; flatten the document");
  }
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return Json(nullptr);
    case YAML::NodeType::Scalar: {
      const std::string& s = node.Scalar();
      TESSERA_RETURN_IF_ERROR(CheckUtf8(path.empty() ? "body" : "body: " + path, "", s));
      if (node.Tag() == "!") return Json(s);  // quoted
      std::optional<Json> plain = PlainScalar(s);
      return plain ? *plain : Json(s);
    }
    case YAML::NodeType::Sequence: {
      Json arr = Json::array();
      for (size_t i = 0; i < node.size(); ++i) {
        auto v = YamlToJson(node[i], path + "[" + std::to_string(i) + "]", depth + 1);
        if (!v.ok()) return v;
        arr.push_back(std::move(*v));
      }
      return arr;
    }
    case YAML::NodeType::Map: {
      Json obj = Json::object();
      for (const auto& kv : node) {
        const std::string where = path.empty() ? "body" : path;
        if (!kv.first.IsScalar())
          return InvalidArgument(where + ": mapping keys must be plain strings");
        const std::string key = kv.first.Scalar();
        TESSERA_RETURN_IF_ERROR(
            CheckUtf8(path.empty() ? "body" : "body: " + path, "the key ", key));
        if (kv.first.Tag() != "!" && PlainScalar(key)) {
          return InvalidArgument(FieldPath(path, key) +
                                 ": mapping keys must be strings; quote it: \"" + key + "\"");
        }
        if (obj.contains(key))
          return InvalidArgument(FieldPath(path, key) + ": key appears twice; keep one");
        auto v = YamlToJson(kv.second, FieldPath(path, key), depth + 1);
        if (!v.ok()) return v;
        obj[key] = std::move(*v);
      }
      return obj;
    }
  }
  return Json(nullptr);
}

// Thrown by YamlGuard to stop yaml-cpp's parser; caught in ParseDocument.
struct YamlRefused {
  std::string message;
};

// Walks a YAML text's events before any node is built, so that nothing is expanded or
// allocated for a document that will be refused: anchors and aliases (a few hundred bytes of
// nested aliases expand to gigabytes: "billion laughs"), nesting deeper than kMaxJsonDepth,
// and more than kMaxDocumentValues values. Events arrive before yaml-cpp recurses into a
// collection, so a deep document is refused at depth 65, not at yaml-cpp's own limit.
class YamlGuard : public YAML::EventHandler {
 public:
  int documents() const { return documents_; }

  void OnDocumentStart(const YAML::Mark&) override { ++documents_; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override { Node(mark, anchor); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override {
    Refuse(mark, "YAML aliases (*name) are not supported; write the value out in full");
  }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                const std::string&) override {
    Node(mark, anchor);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    Open(mark, anchor);
  }
  void OnSequenceEnd() override { --depth_; }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    Open(mark, anchor);
  }
  void OnMapEnd() override { --depth_; }

 private:
  void Node(const YAML::Mark& mark, YAML::anchor_t anchor) {
    if (anchor != YAML::NullAnchor) {
      Refuse(mark,
             "YAML anchors (&name) and aliases (*name) are not supported; write the "
             "value out in full");
    }
    if (++values_ > kMaxDocumentValues) {
      Refuse(mark, "more than " + std::to_string(kMaxDocumentValues) +
                       " values; send a smaller document");
    }
  }
  void Open(const YAML::Mark& mark, YAML::anchor_t anchor) {
    Node(mark, anchor);
    if (++depth_ > kMaxJsonDepth) {
      Refuse(mark, "nested deeper than " + std::to_string(kMaxJsonDepth) +
                       " levels of lists and mappings; flatten the document");
    }
  }
  [[noreturn]] static void Refuse(const YAML::Mark& mark, const std::string& what) {
    throw YamlRefused{"body: line " + std::to_string(mark.line + 1) + ", column " +
                      std::to_string(mark.column + 1) + ": " + what};
  }

  int documents_ = 0;
  int depth_ = 0;
  size_t values_ = 0;
};

}  // namespace

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

Result<Json> ParseDocument(std::string_view text) {
  if (text.size() > kMaxDocumentBytes) {
    return InvalidArgument("body: " + std::to_string(text.size()) +
                           " bytes; documents are at most " + std::to_string(kMaxDocumentBytes) +
                           " bytes");
  }
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return InvalidArgument("body: empty document");
  if (text[first] == '{' || text[first] == '[') {
    JsonLimits limits;
    limits.max_depth = kMaxJsonDepth;
    limits.max_values = kMaxDocumentValues;
    return ParseJson(text, "body", limits);
  }
  try {
    // First the events alone: aliases, depth and size are refused before a node exists.
    std::istringstream in{std::string(text)};
    YAML::Parser parser(in);
    YamlGuard guard;
    while (parser.HandleNextDocument(guard)) {
    }
    if (guard.documents() == 0) return InvalidArgument("body: empty document");
    if (guard.documents() > 1)
      return InvalidArgument("body: " + std::to_string(guard.documents()) +
                             " YAML documents; send one document per request");
    YAML::Node doc = YAML::Load(std::string(text));
    return YamlToJson(doc, "", 0);
  } catch (const YamlRefused& e) {
    return InvalidArgument(e.message);
  } catch (const YAML::Exception& e) {
    return InvalidArgument("body: malformed YAML at line " + std::to_string(e.mark.line + 1) +
                           ", column " + std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
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

Result<TrainJobSpec> ParseTrainJob(const Json& doc) {
  TESSERA_RETURN_IF_ERROR(RequireObject(doc, "body"));
  TESSERA_RETURN_IF_ERROR(
      OnlyKnownFields(doc, "document", {"apiVersion", "kind", "metadata", "spec", "status"}));
  auto api_version = GetString(doc, "apiVersion", "document", true);
  if (!api_version.ok()) return InvalidArgument("apiVersion: required; use tessera/v1");
  if (*api_version != kApiVersion)
    return InvalidArgument("apiVersion: '" + *api_version + "' is not served; use tessera/v1");
  auto kind = GetString(doc, "kind", "document", true);
  if (!kind.ok()) return InvalidArgument("kind: required; valid: TrainJob");
  if (*kind != "TrainJob")
    return InvalidArgument("kind: '" + *kind + "' is unknown here; valid: TrainJob");

  TrainJobSpec spec;
  if (!doc.contains("metadata")) return InvalidArgument("metadata: required (metadata.name)");
  const Json& meta = doc["metadata"];
  TESSERA_RETURN_IF_ERROR(RequireObject(meta, "metadata"));
  TESSERA_RETURN_IF_ERROR(OnlyKnownFields(meta, "metadata", {"name", "queue", "labels"}));
  auto name = GetString(meta, "name", "metadata", true);
  if (!name.ok()) return name.status();
  TESSERA_RETURN_IF_ERROR(ValidateName("metadata.name", *name));
  spec.name = *name;
  auto queue = GetString(meta, "queue", "metadata", false);
  if (!queue.ok()) return queue.status();
  if (!queue->empty()) TESSERA_RETURN_IF_ERROR(ValidateName("metadata.queue", *queue));
  spec.queue = *queue;
  auto labels = GetStringMap(meta, "labels", "metadata", StringMapKind::kLabels);
  if (!labels.ok()) return labels.status();
  spec.labels = *labels;

  if (!doc.contains("spec")) return InvalidArgument("spec: required");
  const Json& s = doc["spec"];
  TESSERA_RETURN_IF_ERROR(RequireObject(s, "spec"));
  TESSERA_RETURN_IF_ERROR(
      OnlyKnownFields(s, "spec",
                      {"accelerator", "topology", "slices", "priority", "failurePolicy", "progress",
                       "checkpoint", "template", "warmStart", "expectedDuration", "reservation"}));
  auto accel = GetString(s, "accelerator", "spec", true);
  if (!accel.ok()) return accel.status();
  // "v6e", "TPU-V6E" or a pod type ("v6e-16", whose topology may then be left out).
  auto topo_text = GetString(s, "topology", "spec", false);
  if (!topo_text.ok()) return topo_text.status();
  auto topo = ResolveAccelerator(*accel, *topo_text);
  if (!topo.ok()) return InvalidArgument("spec." + topo.status().message());
  spec.accelerator = topo->generation();
  spec.topology = topo->shape();

  if (s.contains("slices")) {
    const Json& sl = s["slices"];
    if (sl.is_object()) {
      TESSERA_RETURN_IF_ERROR(OnlyKnownFields(sl, "spec.slices", {"min", "max"}));
      auto mn = GetInt(sl, "min", "spec.slices", 1, 1, kMaxSlices);
      if (!mn.ok()) return mn.status();
      auto mx = GetInt(sl, "max", "spec.slices", *mn, 1, kMaxSlices);
      if (!mx.ok()) return mx.status();
      if (*mx < *mn)
        return InvalidArgument("spec.slices.max: " + std::to_string(*mx) +
                               " is below spec.slices.min " + std::to_string(*mn));
      spec.min_slices = static_cast<int>(*mn);
      spec.max_slices = static_cast<int>(*mx);
    } else {
      auto n = GetInt(s, "slices", "spec", 1, 1, kMaxSlices);
      if (!n.ok()) return n.status();
      spec.min_slices = spec.max_slices = static_cast<int>(*n);
    }
  }
  auto prio = GetString(s, "priority", "spec", false);
  if (!prio.ok()) return prio.status();
  spec.priority = *prio;
  auto reservation = GetString(s, "reservation", "spec", false);
  if (!reservation.ok()) return reservation.status();
  if (!reservation->empty())
    TESSERA_RETURN_IF_ERROR(ValidateName("spec.reservation", *reservation));
  spec.reservation = *reservation;

  if (s.contains("failurePolicy")) {
    const Json& fp = s["failurePolicy"];
    TESSERA_RETURN_IF_ERROR(RequireObject(fp, "spec.failurePolicy"));
    TESSERA_RETURN_IF_ERROR(OnlyKnownFields(
        fp, "spec.failurePolicy", {"maxFailures", "onHostLoss", "growBackInterval", "mtbf"}));
    auto mf = GetInt(fp, "maxFailures", "spec.failurePolicy", 0, -1, 1'000'000);
    if (!mf.ok()) return mf.status();
    spec.max_failures = static_cast<int>(*mf);
    auto hl = GetString(fp, "onHostLoss", "spec.failurePolicy", false);
    if (!hl.ok()) return hl.status();
    if (*hl == "" || *hl == "fail")
      spec.on_host_loss = HostLossPolicy::kFail;
    else if (*hl == "pause")
      spec.on_host_loss = HostLossPolicy::kPause;
    else if (*hl == "resize")
      spec.on_host_loss = HostLossPolicy::kResize;
    else
      return InvalidArgument("spec.failurePolicy.onHostLoss: '" + *hl +
                             "' is unknown; valid: fail, pause, resize");
    if (fp.contains("growBackInterval")) {
      auto ms = ParseDurationMs("spec.failurePolicy.growBackInterval", fp["growBackInterval"]);
      if (!ms.ok()) return ms.status();
      if (*ms < 100)
        return InvalidArgument("spec.failurePolicy.growBackInterval: must be at least 100ms");
      spec.grow_back_interval_ms = *ms;
    }
    if (fp.contains("mtbf")) {
      auto ms = ParseDurationMs("spec.failurePolicy.mtbf", fp["mtbf"]);
      if (!ms.ok()) return ms.status();
      if (*ms <= 0) return InvalidArgument("spec.failurePolicy.mtbf: must be positive, e.g. 24h");
      spec.mtbf_ms = *ms;
    }
  }
  if (s.contains("progress")) {
    const Json& pr = s["progress"];
    TESSERA_RETURN_IF_ERROR(RequireObject(pr, "spec.progress"));
    TESSERA_RETURN_IF_ERROR(OnlyKnownFields(pr, "spec.progress", {"hangTimeout"}));
    if (pr.contains("hangTimeout")) {
      auto ms = ParseDurationMs("spec.progress.hangTimeout", pr["hangTimeout"]);
      if (!ms.ok()) return ms.status();
      spec.hang_timeout_ms = *ms;
    }
  }
  if (s.contains("expectedDuration")) {
    auto ms = ParseDurationMs("spec.expectedDuration", s["expectedDuration"]);
    if (!ms.ok()) return ms.status();
    if (*ms <= 0)
      return InvalidArgument(
          "spec.expectedDuration: must be positive, e.g. 6h; leave it out if "
          "unknown");
    spec.expected_duration_ms = *ms;
  }
  if (s.contains("checkpoint")) {
    const Json& ck = s["checkpoint"];
    TESSERA_RETURN_IF_ERROR(RequireObject(ck, "spec.checkpoint"));
    TESSERA_RETURN_IF_ERROR(OnlyKnownFields(ck, "spec.checkpoint", {"dir", "inMemory"}));
    auto dir = GetString(ck, "dir", "spec.checkpoint", false);
    if (!dir.ok()) return dir.status();
    spec.checkpoint_dir = *dir;
  }
  if (!s.contains("template")) return InvalidArgument("spec.template: required (a command)");
  const Json& t = s["template"];
  TESSERA_RETURN_IF_ERROR(RequireObject(t, "spec.template"));
  TESSERA_RETURN_IF_ERROR(OnlyKnownFields(
      t, "spec.template", {"command", "env", "workingDir", "terminationGracePeriod"}));
  if (!t.contains("command") || !t["command"].is_array() || t["command"].empty())
    return InvalidArgument(
        "spec.template.command: required, a non-empty list such as [python3, train.py]");
  for (size_t i = 0; i < t["command"].size(); ++i) {
    const Json& c = t["command"][i];
    const std::string field = "spec.template.command[" + std::to_string(i) + "]";
    if (!c.is_string() && !c.is_number()) return InvalidArgument(field + ": must be a string");
    std::string arg = c.is_string() ? c.get<std::string>() : c.dump();
    // A NUL would end the argument early at exec; newlines and tabs are ordinary arguments.
    TESSERA_RETURN_IF_ERROR(CheckText(field, arg, ControlChars::kTabAndNewline));
    spec.command.push_back(std::move(arg));
  }
  auto env = GetStringMap(t, "env", "spec.template", StringMapKind::kEnv);
  if (!env.ok()) return env.status();
  for (const auto& [k, v] : *env) {
    if (k.rfind("TPU_", 0) == 0 || k.rfind("MEGASCALE_", 0) == 0 || k == "RANK" ||
        k == "WORLD_SIZE" || k == "MASTER_ADDR" || k == "MASTER_PORT" ||
        k.rfind("TESSERA_", 0) == 0)
      return InvalidArgument("spec.template.env." + k +
                             ": set by tessera for every attempt; remove it from the spec");
  }
  spec.env = *env;
  TESSERA_RETURN_IF_ERROR(ParseWarmStart(s, spec.env));  // warm_start.h
  if (s.contains("checkpoint"))  // in_memory_checkpoint.h: TESSERA_PEER_CKPT_*
    TESSERA_RETURN_IF_ERROR(
        ParseInMemoryCheckpoint(s["checkpoint"], spec.checkpoint_dir, spec.env));
  auto wd = GetString(t, "workingDir", "spec.template", false);
  if (!wd.ok()) return wd.status();
  spec.working_dir = *wd;
  if (t.contains("terminationGracePeriod")) {
    auto ms = ParseDurationMs("spec.template.terminationGracePeriod", t["terminationGracePeriod"]);
    if (!ms.ok()) return ms.status();
    spec.grace_ms = *ms;
  }
  return spec;
}

namespace {

// The admission model's Validate names fields relative to the resource ("name", "quotas[0]...");
// documents put the name under metadata and the rest under spec.
Status InDocument(const Status& s, const std::string& spec_path) {
  if (s.ok()) return s;
  const std::string& m = s.message();
  if (spec_path.empty()) return s;
  if (m.rfind("name:", 0) == 0) return InvalidArgument("metadata." + m);
  return InvalidArgument(spec_path + "." + m);
}

// Checks apiVersion, kind and metadata (name only) and returns metadata.name.
Result<std::string> CheckHeader(const Json& doc, const std::string& kind,
                                const std::set<std::string>& top_level) {
  TESSERA_RETURN_IF_ERROR(RequireObject(doc, "body"));
  auto k = DocumentKind(doc);
  if (!k.ok()) return k.status();
  if (*k != kind) return InvalidArgument("kind: expected " + kind + ", got " + *k);
  TESSERA_RETURN_IF_ERROR(OnlyKnownFields(doc, "document", top_level));
  if (!doc.contains("metadata")) return InvalidArgument("metadata: required (metadata.name)");
  const Json& meta = doc["metadata"];
  TESSERA_RETURN_IF_ERROR(RequireObject(meta, "metadata"));
  TESSERA_RETURN_IF_ERROR(OnlyKnownFields(meta, "metadata", {"name", "labels"}));
  auto name = GetString(meta, "name", "metadata", true);
  if (!name.ok()) return name.status();
  TESSERA_RETURN_IF_ERROR(ValidateName("metadata.name", *name));
  // Labels are kept with the document (and served back): the same rules as a TrainJob's.
  auto labels = GetStringMap(meta, "labels", "metadata", StringMapKind::kLabels);
  if (!labels.ok()) return labels.status();
  return *name;
}

template <typename E>
Result<E> GetEnum(const Json& obj, const std::string& key, const std::string& path, E fallback,
                  const std::vector<std::pair<std::string, E>>& values) {
  auto s = GetString(obj, key, path, false);
  if (!s.ok()) return s.status();
  if (s->empty()) return fallback;
  std::string valid;
  for (const auto& [name, v] : values) {
    if (name == *s) return v;
    valid += (valid.empty() ? "" : ", ") + name;
  }
  return InvalidArgument(path + "." + key + ": '" + *s + "' is unknown; valid: " + valid);
}

Result<std::optional<int64_t>> GetOptionalInt(const Json& obj, const std::string& key,
                                              const std::string& path, int64_t lo, int64_t hi) {
  if (!obj.contains(key) || obj[key].is_null()) return std::optional<int64_t>();
  auto v = GetInt(obj, key, path, 0, lo, hi);
  if (!v.ok()) return v.status();
  return std::optional<int64_t>(*v);
}

constexpr int64_t kMaxChips = int64_t{1} << 40;
constexpr double kMinWeight = 0.001;
constexpr double kMaxWeight = 1'000'000;

}  // namespace

Result<std::string> DocumentKind(const Json& doc) {
  TESSERA_RETURN_IF_ERROR(RequireObject(doc, "body"));
  auto api_version = GetString(doc, "apiVersion", "document", true);
  if (!api_version.ok()) return InvalidArgument("apiVersion: required; use tessera/v1");
  if (*api_version != kApiVersion)
    return InvalidArgument("apiVersion: '" + *api_version + "' is not served; use tessera/v1");
  auto kind = GetString(doc, "kind", "document", true);
  if (!kind.ok()) return InvalidArgument(std::string("kind: required; valid: ") + kKinds);
  for (const char* k :
       {"TrainJob", "Service", "ClusterQueue", "LocalQueue", "PriorityClass", "SliceReservation"})
    if (*kind == k) return *kind;
  return InvalidArgument("kind: '" + *kind + "' is unknown here; valid: " + kKinds);
}

Result<ClusterQueueSpec> ParseClusterQueue(const Json& doc) {
  auto name =
      CheckHeader(doc, "ClusterQueue", {"apiVersion", "kind", "metadata", "spec", "status"});
  if (!name.ok()) return name.status();
  ClusterQueueSpec cq;
  cq.name = *name;
  if (!doc.contains("spec")) return InvalidArgument("spec: required (spec.quotas)");
  const Json& s = doc["spec"];
  TESSERA_RETURN_IF_ERROR(RequireObject(s, "spec"));
  TESSERA_RETURN_IF_ERROR(OnlyKnownFields(
      s, "spec", {"cohort", "quotas", "queueingStrategy", "preemption", "fairSharing"}));
  auto cohort = GetString(s, "cohort", "spec", false);
  if (!cohort.ok()) return cohort.status();
  cq.cohort = *cohort;
  if (s.contains("quotas")) {
    const Json& qs = s["quotas"];
    if (!qs.is_array())
      return InvalidArgument(
          "spec.quotas: must be a list such as [{generation: v6e, nominalQuota: 32}]");
    for (size_t i = 0; i < qs.size(); ++i) {
      const std::string path = "spec.quotas[" + std::to_string(i) + "]";
      const Json& q = qs[i];
      TESSERA_RETURN_IF_ERROR(RequireObject(q, path));
      TESSERA_RETURN_IF_ERROR(OnlyKnownFields(
          q, path, {"generation", "nominalQuota", "borrowingLimit", "lendingLimit"}));
      ResourceQuota rq;
      auto gen_name = GetString(q, "generation", path, true);
      if (!gen_name.ok()) return gen_name.status();
      auto gen = ParseGeneration(*gen_name);
      if (!gen.ok()) return InvalidArgument(path + ".generation: " + gen.status().message());
      rq.generation = *gen;
      if (!q.contains("nominalQuota"))
        return InvalidArgument(path + ".nominalQuota: required (chips)");
      auto nominal = GetInt(q, "nominalQuota", path, 0, 0, kMaxChips);
      if (!nominal.ok()) return nominal.status();
      rq.nominal_chips = *nominal;
      auto borrow = GetOptionalInt(q, "borrowingLimit", path, 0, kMaxChips);
      if (!borrow.ok()) return borrow.status();
      rq.borrowing_limit_chips = *borrow;
      auto lend = GetOptionalInt(q, "lendingLimit", path, 0, kMaxChips);
      if (!lend.ok()) return lend.status();
      rq.lending_limit_chips = *lend;
      cq.quotas.push_back(rq);
    }
  }
  auto strategy =
      GetEnum<QueueingStrategy>(s, "queueingStrategy", "spec", QueueingStrategy::kBestEffortFIFO,
                                {{"StrictFIFO", QueueingStrategy::kStrictFIFO},
                                 {"BestEffortFIFO", QueueingStrategy::kBestEffortFIFO}});
  if (!strategy.ok()) return strategy.status();
  cq.queueing_strategy = *strategy;
  if (s.contains("preemption")) {
    const Json& p = s["preemption"];
    TESSERA_RETURN_IF_ERROR(RequireObject(p, "spec.preemption"));
    TESSERA_RETURN_IF_ERROR(OnlyKnownFields(
        p, "spec.preemption", {"withinClusterQueue", "reclaimWithinCohort", "borrowWithinCohort"}));
    auto within = GetEnum<WithinClusterQueue>(
        p, "withinClusterQueue", "spec.preemption", WithinClusterQueue::kNever,
        {{"Never", WithinClusterQueue::kNever},
         {"LowerPriority", WithinClusterQueue::kLowerPriority},
         {"LowerOrNewerEqualPriority", WithinClusterQueue::kLowerOrNewerEqualPriority}});
    if (!within.ok()) return within.status();
    cq.preemption.within_cluster_queue = *within;
    auto reclaim = GetEnum<ReclaimWithinCohort>(
        p, "reclaimWithinCohort", "spec.preemption", ReclaimWithinCohort::kNever,
        {{"Never", ReclaimWithinCohort::kNever},
         {"LowerPriority", ReclaimWithinCohort::kLowerPriority},
         {"Any", ReclaimWithinCohort::kAny}});
    if (!reclaim.ok()) return reclaim.status();
    cq.preemption.reclaim_within_cohort = *reclaim;
    if (p.contains("borrowWithinCohort")) {
      const std::string path = "spec.preemption.borrowWithinCohort";
      const Json& b = p["borrowWithinCohort"];
      TESSERA_RETURN_IF_ERROR(RequireObject(b, path));
      TESSERA_RETURN_IF_ERROR(OnlyKnownFields(b, path, {"policy", "maxPriorityThreshold"}));
      auto policy = GetEnum<BorrowWithinCohortPolicy>(
          b, "policy", path, BorrowWithinCohortPolicy::kNever,
          {{"Never", BorrowWithinCohortPolicy::kNever},
           {"LowerPriority", BorrowWithinCohortPolicy::kLowerPriority}});
      if (!policy.ok()) return policy.status();
      cq.preemption.borrow_within_cohort.policy = *policy;
      auto threshold =
          GetOptionalInt(b, "maxPriorityThreshold", path, -1'000'000'000, 1'000'000'000);
      if (!threshold.ok()) return threshold.status();
      if (*threshold)
        cq.preemption.borrow_within_cohort.max_priority_threshold =
            static_cast<int32_t>(**threshold);
    }
  }
  if (s.contains("fairSharing")) {
    const Json& f = s["fairSharing"];
    TESSERA_RETURN_IF_ERROR(RequireObject(f, "spec.fairSharing"));
    TESSERA_RETURN_IF_ERROR(OnlyKnownFields(f, "spec.fairSharing", {"weight"}));
    if (f.contains("weight")) {
      const Json& w = f["weight"];
      const std::string range = "must be a number from 0.001 to 1000000 (1 is the default)";
      if (!w.is_number()) return InvalidArgument("spec.fairSharing.weight: " + range);
      const double weight = w.get<double>();
      if (!std::isfinite(weight) || weight < kMinWeight || weight > kMaxWeight)
        return InvalidArgument("spec.fairSharing.weight: " + w.dump() + " is out of range; " +
                               range);
      cq.fair_sharing_weight = weight;
    }
  }
  TESSERA_RETURN_IF_ERROR(InDocument(Validate(cq), "spec"));
  return cq;
}

Result<LocalQueueSpec> ParseLocalQueue(const Json& doc) {
  auto name = CheckHeader(doc, "LocalQueue", {"apiVersion", "kind", "metadata", "spec", "status"});
  if (!name.ok()) return name.status();
  LocalQueueSpec lq;
  lq.name = *name;
  if (!doc.contains("spec")) return InvalidArgument("spec: required (spec.clusterQueue)");
  const Json& s = doc["spec"];
  TESSERA_RETURN_IF_ERROR(RequireObject(s, "spec"));
  TESSERA_RETURN_IF_ERROR(OnlyKnownFields(s, "spec", {"clusterQueue"}));
  auto cq = GetString(s, "clusterQueue", "spec", true);
  if (!cq.ok()) return cq.status();
  lq.cluster_queue = *cq;
  TESSERA_RETURN_IF_ERROR(InDocument(Validate(lq), "spec"));
  return lq;
}

Result<PriorityClass> ParsePriorityClass(const Json& doc) {
  auto name =
      CheckHeader(doc, "PriorityClass", {"apiVersion", "kind", "metadata", "value", "description"});
  if (!name.ok()) return name.status();
  PriorityClass pc;
  pc.name = *name;
  if (!doc.contains("value")) return InvalidArgument("value: required (higher runs first)");
  if (!doc["value"].is_number_integer())
    return InvalidArgument("value: must be a whole number in [-1000000000, 1000000000]");
  const int64_t v = doc["value"].is_number_unsigned()
                        ? static_cast<int64_t>(
                              std::min<uint64_t>(doc["value"].get<uint64_t>(), uint64_t{1} << 40))
                        : doc["value"].get<int64_t>();
  if (v < -1'000'000'000 || v > 1'000'000'000)
    return InvalidArgument("value: must be in [-1000000000, 1000000000], got " + std::to_string(v));
  pc.value = static_cast<int32_t>(v);
  if (doc.contains("description")) {
    const Json& d = doc["description"];
    if (!d.is_string()) return InvalidArgument("description: must be a string");
    TESSERA_RETURN_IF_ERROR(
        CheckText("description", d.get<std::string>(), ControlChars::kTabAndNewline));
  }
  TESSERA_RETURN_IF_ERROR(InDocument(Validate(pc), ""));
  return pc;
}

}  // namespace tessera::api
