#include "net/http.h"

#include <cctype>
#include <nlohmann/json.hpp>
#include <utility>

namespace tessera::net {

const char* MethodName(Method method) {
  switch (method) {
    case Method::kGet:
      return "GET";
    case Method::kHead:
      return "HEAD";
    case Method::kPost:
      return "POST";
    case Method::kPut:
      return "PUT";
    case Method::kPatch:
      return "PATCH";
    case Method::kDelete:
      return "DELETE";
    case Method::kOptions:
      return "OPTIONS";
  }
  return "GET";
}

Result<Method> ParseMethod(std::string_view name) {
  for (Method m : {Method::kGet, Method::kHead, Method::kPost, Method::kPut, Method::kPatch,
                   Method::kDelete, Method::kOptions}) {
    if (name == MethodName(m)) return m;
  }
  return InvalidArgument("unsupported HTTP method '" + std::string(name) + "'");
}

bool CaseInsensitiveLess::operator()(std::string_view a, std::string_view b) const {
  size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    int ca = std::tolower(static_cast<unsigned char>(a[i]));
    int cb = std::tolower(static_cast<unsigned char>(b[i]));
    if (ca != cb) return ca < cb;
  }
  return a.size() < b.size();
}

std::string Request::Header(std::string_view name) const {
  auto it = headers.find(name);
  return it == headers.end() ? std::string() : it->second;
}

std::optional<std::string> Request::Query(std::string_view key) const {
  auto it = query.find(std::string(key));
  if (it == query.end()) return std::nullopt;
  return it->second;
}

bool HasBearerToken(const Request& request, std::string_view token) {
  if (token.empty()) return false;
  const std::string header = request.Header("Authorization");
  constexpr std::string_view kScheme = "bearer";
  if (header.size() <= kScheme.size()) return false;
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(header[i])) != kScheme[i]) return false;
  }
  size_t start = kScheme.size();
  if (header[start] != ' ') return false;  // "Bearerx" is another scheme
  while (start < header.size() && header[start] == ' ') ++start;
  const std::string_view given = std::string_view(header).substr(start);
  if (given.size() != token.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < token.size(); ++i) {
    diff |= static_cast<unsigned char>(given[i] ^ token[i]);
  }
  return diff == 0;
}

Response Response::Json(int status, std::string body) {
  Response r;
  r.status = status;
  r.content_type = "application/json";
  r.body = std::move(body);
  return r;
}

Response Response::Text(int status, std::string body) {
  Response r;
  r.status = status;
  r.content_type = "text/plain; charset=utf-8";
  r.body = std::move(body);
  return r;
}

Response Response::Error(int status, std::string_view message, std::string_view field) {
  nlohmann::json j;
  j["error"] = std::string(message);
  if (field.empty()) {
    j["field"] = nullptr;
  } else {
    j["field"] = std::string(field);
  }
  // Replace, not throw, on invalid UTF-8: the message may quote client input.
  return Json(status, j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

Response Response::Stream(std::function<void(std::shared_ptr<StreamWriter>)> on_stream) {
  Response r;
  r.content_type = "application/x-ndjson";
  r.on_stream = std::move(on_stream);
  return r;
}

Response Response::Deferred(std::function<void(std::function<void(Response)>)> on_deferred) {
  Response r;
  r.on_deferred = std::move(on_deferred);
  return r;
}

std::string_view StatusReason(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 202:
      return "Accepted";
    case 204:
      return "No Content";
    case 301:
      return "Moved Permanently";
    case 302:
      return "Found";
    case 304:
      return "Not Modified";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 412:
      return "Precondition Failed";
    case 413:
      return "Payload Too Large";
    case 415:
      return "Unsupported Media Type";
    case 422:
      return "Unprocessable Entity";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "";
  }
}

}  // namespace tessera::net
