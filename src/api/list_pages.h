// Paginated lists (Kubernetes' `limit` and `continue`; docs/runtime.md "Lists in pages"): the
// query's limit and the opaque continue token. Pages are cut by controller::Controller::ListPage.
//
// A page holds at most `limit` items in the kind's list order (controller::ListPosition: a
// TrainJob's uid, an event's name, every other object's key), each after the position of the
// previous page's last item. An object present through the whole listing comes exactly once;
// one added or removed between pages comes at most once. Every page answers the first page's
// metadata.resourceVersion, so a watch from it (`?watch=true&resourceVersion=`) misses nothing
// that changed while the pages were read.
//
// The token is base64url of a small JSON document: opaque to clients, checked here for its
// kind and namespace, and refused (410) by the head once it is not from this run.
//
// Thread-safety: stateless functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/status.h"

namespace tessera::api {

struct ContinueToken {
  std::string kind;
  std::string namespace_name;     // "" for every namespace
  uint64_t resource_version = 0;  // the first page's
  std::string after;              // the list position of the last item handed out
};

std::string EncodeContinue(const ContinueToken& token);

// kInvalidArgument (field "continue") for text that is not a token, or one of another kind or
// namespace than the request's.
Result<ContinueToken> DecodeContinue(const std::string& text, const std::string& kind,
                                     const std::string& namespace_name);

// `?limit=`: a decimal number; 0 or no limit is the whole list. kInvalidArgument (field
// "limit") otherwise.
Result<size_t> ParseLimit(const std::optional<std::string>& text);

}  // namespace tessera::api
