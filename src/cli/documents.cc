#include "cli/documents.h"

#include <charconv>
#include <nlohmann/json.hpp>

namespace tessera::cli {
namespace {

bool OnlyCommentsOrBlank(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    const size_t first = line.find_first_not_of(" \t\r");
    if (first != std::string_view::npos && line[first] != '#') return false;
    pos = end + 1;
  }
  return true;
}

// A YAML document marker: "---" or "..." at the start of a line, alone or followed by a space
// (at column 0 these can only be markers, never part of a scalar).
bool IsMarkerLine(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.size() < 3) return false;
  const std::string_view head = line.substr(0, 3);
  if (head != "---" && head != "...") return false;
  return line.size() == 3 || line[3] == ' ' || line[3] == '\t';
}

}  // namespace

Result<std::vector<ManifestDocument>> SplitManifests(std::string_view text,
                                                     const std::string& source) {
  std::vector<ManifestDocument> out;
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return out;
  const bool json_list = text[first] == '[';
  if (json_list || text[first] == '{') {
    nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    const bool k8s_list = !json_list && j.is_object() && j.value("kind", "") == "List" &&
                          j.contains("items") && j["items"].is_array();
    if (json_list && j.is_discarded())
      return InvalidArgument(source + ": malformed JSON list; send a list of documents [{...}]");
    if (json_list || k8s_list) {
      const nlohmann::json& items = json_list ? j : j["items"];
      for (size_t i = 0; i < items.size(); ++i) {
        if (!items[i].is_object())
          return InvalidArgument(source + ": item " + std::to_string(i + 1) +
                                 " is not a document (an object with apiVersion and kind)");
        out.push_back({source + " (item " + std::to_string(i + 1) + ")", items[i].dump()});
      }
      return out;
    }
    // A single JSON document (or text the head will refuse with its own message).
    out.push_back({source, std::string(text)});
    return out;
  }
  std::vector<std::string> docs(1);
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    if (IsMarkerLine(line)) {
      docs.emplace_back();
      // "--- {a: 1}": content after the marker belongs to the new document.
      if (line.substr(0, 3) == "---" && line.size() > 4) docs.back() += std::string(line.substr(4));
    } else {
      docs.back() += std::string(line);
    }
    docs.back() += "\n";
    pos = end + 1;
  }
  int kept = 0;
  for (const std::string& d : docs)
    if (!OnlyCommentsOrBlank(d)) ++kept;
  int index = 0;
  for (std::string& d : docs) {
    if (OnlyCommentsOrBlank(d)) continue;
    ++index;
    out.push_back(
        {kept > 1 ? source + " (document " + std::to_string(index) + ")" : source, std::move(d)});
  }
  return out;
}

bool IsManifestFileName(std::string_view name) {
  return name.ends_with(".yaml") || name.ends_with(".yml") || name.ends_with(".json");
}

Result<int64_t> ParseFlagDuration(std::string_view flag, std::string_view text) {
  const std::string how = std::string(flag) + ": '" + std::string(text) +
                          "' is not a duration; write e.g. 30s, 5m, 1h or 1500ms";
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0 || digits > 12) return InvalidArgument(how);
  int64_t n = 0;
  std::from_chars(text.data(), text.data() + digits, n);
  const std::string_view unit = text.substr(digits);
  if (unit == "ms") return n;
  if (unit == "s" || unit.empty()) return n * 1000;
  if (unit == "m") return n * 60'000;
  if (unit == "h") return n * 3'600'000;
  return InvalidArgument(how);
}

}  // namespace tessera::cli
