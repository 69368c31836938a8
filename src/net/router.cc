#include "net/router.h"

#include <algorithm>
#include <utility>

namespace tessera::net {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Splits "/a/b/" into {"a", "b"}; "/" into {}. Empty segments in the middle are kept.
std::vector<std::string_view> SplitPath(std::string_view path) {
  std::vector<std::string_view> out;
  if (!path.empty() && path.front() == '/') path.remove_prefix(1);
  if (!path.empty() && path.back() == '/') path.remove_suffix(1);
  if (path.empty()) return out;
  size_t start = 0;
  while (true) {
    size_t slash = path.find('/', start);
    if (slash == std::string_view::npos) {
      out.push_back(path.substr(start));
      break;
    }
    out.push_back(path.substr(start, slash - start));
    start = slash + 1;
  }
  return out;
}

}  // namespace

Result<std::string> PercentDecode(std::string_view text, bool plus_is_space) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '%') {
      if (i + 2 >= text.size()) {
        return InvalidArgument("bad percent escape in '" + std::string(text) + "'");
      }
      int hi = HexValue(text[i + 1]);
      int lo = HexValue(text[i + 2]);
      if (hi < 0 || lo < 0) {
        return InvalidArgument("bad percent escape in '" + std::string(text) + "'");
      }
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

Result<std::map<std::string, std::string>> ParseQuery(std::string_view query) {
  std::map<std::string, std::string> out;
  size_t start = 0;
  while (start <= query.size()) {
    size_t amp = query.find('&', start);
    if (amp == std::string_view::npos) amp = query.size();
    std::string_view pair = query.substr(start, amp - start);
    if (!pair.empty()) {
      size_t eq = pair.find('=');
      std::string_view key = pair.substr(0, eq);
      std::string_view value =
          eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
      Result<std::string> k = PercentDecode(key, true);
      if (!k.ok()) return k.status();
      Result<std::string> v = PercentDecode(value, true);
      if (!v.ok()) return v.status();
      out[std::move(*k)] = std::move(*v);
    }
    start = amp + 1;
  }
  return out;
}

Status Router::Add(Method method, std::string_view pattern, Handler handler) {
  if (pattern.empty() || pattern.front() != '/') {
    return InvalidArgument("route pattern '" + std::string(pattern) + "' must start with '/'");
  }
  if (!handler) return InvalidArgument("route " + std::string(pattern) + ": handler is empty");
  Route route{method, std::string(pattern), {}, std::move(handler)};
  std::vector<std::string_view> parts = SplitPath(pattern);
  for (size_t i = 0; i < parts.size(); ++i) {
    std::string_view part = parts[i];
    if (part.size() >= 2 && part.front() == '{' && part.back() == '}') {
      std::string_view name = part.substr(1, part.size() - 2);
      SegmentKind kind = SegmentKind::kParam;
      if (name.size() > 3 && name.substr(name.size() - 3) == "...") {
        name.remove_suffix(3);
        kind = SegmentKind::kRest;
        if (i + 1 != parts.size()) {
          return InvalidArgument("route pattern '" + std::string(pattern) + "': {" +
                                 std::string(name) + "...} must be the last segment");
        }
      }
      if (name.empty() || name.find_first_of("{}/") != std::string_view::npos) {
        return InvalidArgument("route pattern '" + std::string(pattern) +
                               "': bad parameter name in '" + std::string(part) + "'");
      }
      for (const Segment& s : route.segments) {
        if (s.kind != SegmentKind::kLiteral && s.text == name) {
          return InvalidArgument("route pattern '" + std::string(pattern) + "': parameter '" +
                                 std::string(name) + "' appears twice");
        }
      }
      route.segments.push_back({kind, std::string(name)});
    } else {
      if (part.find_first_of("{}") != std::string_view::npos) {
        return InvalidArgument("route pattern '" + std::string(pattern) + "': segment '" +
                               std::string(part) + "' mixes text and braces");
      }
      route.segments.push_back({SegmentKind::kLiteral, std::string(part)});
    }
  }
  for (const Route& r : routes_) {
    if (r.method != method || r.segments.size() != route.segments.size()) continue;
    bool same = true;
    for (size_t i = 0; i < r.segments.size() && same; ++i) {
      const Segment& a = r.segments[i];
      const Segment& b = route.segments[i];
      same = a.kind == b.kind && (a.kind != SegmentKind::kLiteral || a.text == b.text);
    }
    if (same) {
      return InvalidArgument("route " + std::string(MethodName(method)) + " " +
                             std::string(pattern) + " clashes with " + r.pattern);
    }
  }
  routes_.push_back(std::move(route));
  return Status::Ok();
}

bool Router::Matches(const Route& route, const std::vector<std::string>& segments,
                     std::map<std::string, std::string>& params) {
  params.clear();
  size_t i = 0;
  for (const Segment& s : route.segments) {
    if (s.kind == SegmentKind::kRest) {
      std::string rest;
      for (size_t j = i; j < segments.size(); ++j) {
        if (j > i) rest.push_back('/');
        rest += segments[j];
      }
      params[s.text] = std::move(rest);
      return true;
    }
    if (i >= segments.size()) return false;
    if (s.kind == SegmentKind::kLiteral) {
      if (s.text != segments[i]) return false;
    } else {
      if (segments[i].empty()) return false;
      params[s.text] = segments[i];
    }
    ++i;
  }
  return i == segments.size();
}

bool Router::MoreSpecific(const Route& a, const Route& b) {
  size_t n = std::min(a.segments.size(), b.segments.size());
  for (size_t i = 0; i < n; ++i) {
    if (a.segments[i].kind != b.segments[i].kind) {
      return a.segments[i].kind < b.segments[i].kind;
    }
  }
  return a.segments.size() > b.segments.size();
}

Router::Match Router::Find(Method method, std::string_view raw_path) const {
  Match match;
  std::vector<std::string> segments;
  for (std::string_view part : SplitPath(raw_path)) {
    Result<std::string> decoded = PercentDecode(part, false);
    if (!decoded.ok()) return match;
    segments.push_back(std::move(*decoded));
  }
  const Route* best = nullptr;
  std::vector<Method> allowed;
  std::map<std::string, std::string> params;
  for (const Route& route : routes_) {
    if (!Matches(route, segments, params)) continue;
    if (route.method != method) {
      if (std::find(allowed.begin(), allowed.end(), route.method) == allowed.end()) {
        allowed.push_back(route.method);
      }
      continue;
    }
    if (best == nullptr || MoreSpecific(route, *best)) {
      best = &route;
      match.params = params;
    }
  }
  if (best != nullptr) {
    match.outcome = Outcome::kFound;
    match.handler = &best->handler;
    return match;
  }
  if (!allowed.empty()) {
    std::sort(allowed.begin(), allowed.end());
    match.outcome = Outcome::kWrongMethod;
    for (Method m : allowed) {
      if (!match.allow.empty()) match.allow += ", ";
      match.allow += MethodName(m);
    }
  }
  return match;
}

}  // namespace tessera::net
