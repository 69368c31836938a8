// ParseDocument and DocumentKind (manifest.h): a request body, YAML or JSON, read into one
// JSON value within the limits of docs/security.md (size, depth, values, no YAML aliases), and
// the kind that value declares.
#include <yaml-cpp/anchor.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>
#include <sstream>

#include "codec/manifest.h"
#include "codec/manifest_fields.h"
#include "common/json_limits.h"

namespace tessera::codec {
namespace {

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

// yaml-cpp 0.7 allocates about 200 MB (under a second, or over 5 s on a loaded machine in the
// fuzz stage) before it refuses a document whose first token is ',', a flow entry outside any
// [ ] or { } (found by manifest_fuzz). Refused here first: the line of each document's start
// (after comments, directives and a "---" or "..." marker, which YAML reads only at column 0:
// an indented one is text of a block scalar) that begins with ','.
Status RefuseLeadingFlowEntry(std::string_view text) {
  auto skip_blanks = [](std::string_view s) {
    const size_t first = s.find_first_not_of(" \t\r");
    return first == std::string_view::npos ? std::string_view() : s.substr(first);
  };
  bool document_start = true;
  int line = 0;
  for (size_t at = 0; at <= text.size();) {
    const size_t end = std::min(text.find('\n', at), text.size());
    std::string_view rest = text.substr(at, end - at);
    at = end + 1;
    ++line;
    const bool marker = (rest.starts_with("---") || rest.starts_with("...")) &&
                        (rest.size() == 3 || rest[3] == ' ' || rest[3] == '\t' || rest[3] == '\r');
    if (marker) {
      document_start = true;
      rest = rest.substr(3);
    }
    rest = skip_blanks(rest);
    if (!document_start || rest.empty() || rest[0] == '#' || rest[0] == '%') continue;
    if (rest[0] == ',')
      return InvalidArgument("body: line " + std::to_string(line) +
                             ": a YAML document cannot begin with ',' (a flow entry outside [ ] "
                             "or { }); remove it");
    document_start = false;
  }
  return Status::Ok();
}

}  // namespace

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
  TESSERA_RETURN_IF_ERROR(RefuseLeadingFlowEntry(text));
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

Result<std::string> DocumentKind(const Json& doc) {
  auto kind = DocumentKindName(doc);
  if (!kind.ok()) return kind.status();
  for (const char* k :
       {"TrainJob", "Service", "ClusterQueue", "LocalQueue", "PriorityClass", "SliceReservation"})
    if (*kind == k) return *kind;
  return InvalidArgument("kind: '" + *kind + "' is unknown here; valid: " + kKinds);
}

Result<std::string> DocumentKindName(const Json& doc) {
  TESSERA_RETURN_IF_ERROR(RequireObject(doc, "body"));
  auto api_version = GetString(doc, "apiVersion", "document", true);
  if (!api_version.ok()) return InvalidArgument("apiVersion: required; use tessera/v1");
  if (*api_version != kApiVersion)
    return InvalidArgument("apiVersion: '" + *api_version + "' is not served; use tessera/v1");
  auto kind = GetString(doc, "kind", "document", true);
  if (!kind.ok()) return InvalidArgument(std::string("kind: required; valid: ") + kKinds);
  return *kind;
}

}  // namespace tessera::codec
