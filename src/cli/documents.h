// The documents of `tessera apply -f`: one file's text split into the manifests it holds, in
// order. Pure (no I/O): the command reads files, directories and standard input.
//
// A file may hold one document, several YAML documents separated by "---" lines (as kubectl
// takes them), a JSON list of documents, or a JSON object {"kind": "List", "items": [...]}.
// Documents that are empty or only comments are skipped. Each document is sent to the head
// as its own text, so the head's YAML checks (anchors, duplicate keys, size) apply to each.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tessera::cli {

struct ManifestDocument {
  std::string source;  // "jobs.yaml", "jobs.yaml (document 2)", "list.json (item 3)"
  std::string text;
};

// Splits `text`, read from `source` (a path, or "-" for standard input). InvalidArgument naming
// the source for a JSON list that is malformed or holds something other than objects.
Result<std::vector<ManifestDocument>> SplitManifests(std::string_view text,
                                                     const std::string& source);

// Whether a directory entry is a manifest `apply -f DIR` takes: *.yaml, *.yml, *.json.
bool IsManifestFileName(std::string_view name);

// "5m", "30s", "1h", "1500ms" or a bare number of seconds, as milliseconds; InvalidArgument
// naming `flag` otherwise.
Result<int64_t> ParseFlagDuration(std::string_view flag, std::string_view text);

}  // namespace tessera::cli
