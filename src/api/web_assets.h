// The dashboard's static files (web/ in the source tree), embedded into the binary at build
// time by embed_web.cmake, so `tessera head` serves them from wherever it is installed and
// needs no network. Paths are relative to web/: "index.html", "app.js".
//
// Thread-safety: immutable data; safe from any thread.
#pragma once

#include <cstddef>
#include <string_view>

namespace tessera::api {

struct WebAsset {
  std::string_view path;
  std::string_view content_type;
  std::string_view body;
};

// The file at `path`, or nullptr.
const WebAsset* FindWebAsset(std::string_view path);
size_t WebAssetCount();

}  // namespace tessera::api
