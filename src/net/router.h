// Route table and URL helpers for HttpServer (internal to src/net, no Boost).
//
// A pattern is a path whose segments are literals, `{name}` (one segment, bound to params) or,
// as the last segment only, `{name...}` (the rest of the path, possibly empty, slashes kept).
// When several patterns match a path, the most specific wins: segment by segment, a literal
// beats `{name}`, which beats `{name...}`. Equal patterns for one method are rejected by Add.
// A trailing slash is ignored ("/a/b/" matches "/a/b").
//
// Thread-safety: Add is not thread-safe; Find is const and safe to call concurrently once no
// more routes are being added.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "net/http.h"

namespace tessera::net {

// Decodes %XX escapes (and '+' as a space when `plus_is_space`). InvalidArgument on a bad
// escape.
Result<std::string> PercentDecode(std::string_view text, bool plus_is_space);

// Splits "a=1&b=x%20y&flag" into {"a":"1","b":"x y","flag":""}. InvalidArgument on a bad
// escape.
Result<std::map<std::string, std::string>> ParseQuery(std::string_view query);

class Router {
 public:
  enum class Outcome { kFound, kNoRoute, kWrongMethod };

  struct Match {
    Outcome outcome = Outcome::kNoRoute;
    const Handler* handler = nullptr;           // set when kFound
    std::map<std::string, std::string> params;  // set when kFound
    std::string allow;                          // set when kWrongMethod: "GET, POST"
  };

  // Adds a route. InvalidArgument if the pattern is malformed or already taken for `method`.
  Status Add(Method method, std::string_view pattern, Handler handler);

  // Looks up `raw_path` (still percent-encoded, without the query). Segments are decoded after
  // splitting, so "%2F" inside a segment does not split it. A bad escape yields kNoRoute.
  Match Find(Method method, std::string_view raw_path) const;

 private:
  enum class SegmentKind { kLiteral = 0, kParam = 1, kRest = 2 };
  struct Segment {
    SegmentKind kind;
    std::string text;  // the literal, or the parameter name
  };
  struct Route {
    Method method;
    std::string pattern;
    std::vector<Segment> segments;
    Handler handler;
  };

  // True if `route` matches the decoded `segments`; fills `params`.
  static bool Matches(const Route& route, const std::vector<std::string>& segments,
                      std::map<std::string, std::string>& params);
  // True if `a` is more specific than `b`.
  static bool MoreSpecific(const Route& a, const Route& b);

  std::vector<Route> routes_;
};

}  // namespace tessera::net
