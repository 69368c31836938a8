#include "api/list_pages.h"

#include <algorithm>
#include <charconv>

namespace tessera::api {
namespace {

constexpr char kBase64Url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

std::string Base64UrlEncode(const std::string& in) {
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kBase64Url[(v >> s) & 63];
  }
  if (i + 1 == in.size()) {
    const uint32_t v = uint8_t(in[i]) << 16;
    out += kBase64Url[(v >> 18) & 63];
    out += kBase64Url[(v >> 12) & 63];
  } else if (i + 2 == in.size()) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += kBase64Url[(v >> 18) & 63];
    out += kBase64Url[(v >> 12) & 63];
    out += kBase64Url[(v >> 6) & 63];
  }
  return out;
}

std::optional<std::string> Base64UrlDecode(const std::string& in) {
  if (in.size() % 4 == 1) return std::nullopt;
  std::string out;
  uint32_t bits = 0;
  int count = 0;
  for (char c : in) {
    const char* at = std::find(kBase64Url, kBase64Url + 64, c);
    if (at == kBase64Url + 64 || c == '\0') return std::nullopt;
    bits = (bits << 6) | uint32_t(at - kBase64Url);
    count += 6;
    if (count >= 8) {
      count -= 8;
      out += char((bits >> count) & 0xff);
    }
  }
  return out;
}

Status BadToken(const std::string& why) {
  return InvalidArgument("continue: " + why +
                         "; pass the metadata.continue of the previous page unchanged, or list "
                         "again without continue");
}

}  // namespace

std::string EncodeContinue(const ContinueToken& token) {
  const nlohmann::json doc = {{"k", token.kind},
                              {"n", token.namespace_name},
                              {"v", std::to_string(token.resource_version)},
                              {"a", token.after}};
  return Base64UrlEncode(doc.dump());
}

Result<ContinueToken> DecodeContinue(const std::string& text, const std::string& kind,
                                     const std::string& namespace_name) {
  const std::optional<std::string> raw = Base64UrlDecode(text);
  if (!raw) return BadToken("'" + text.substr(0, 40) + "' is not a continue token of this head");
  const nlohmann::json doc = nlohmann::json::parse(*raw, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("k") || !doc["k"].is_string() || !doc.contains("n") ||
      !doc["n"].is_string() || !doc.contains("v") || !doc["v"].is_string() || !doc.contains("a") ||
      !doc["a"].is_string())
    return BadToken("'" + text.substr(0, 40) + "' is not a continue token of this head");
  ContinueToken token;
  token.kind = doc["k"].get<std::string>();
  token.namespace_name = doc["n"].get<std::string>();
  token.after = doc["a"].get<std::string>();
  const std::string version = doc["v"].get<std::string>();
  const char* end = version.data() + version.size();
  auto [ptr, ec] = std::from_chars(version.data(), end, token.resource_version);
  if (version.empty() || ec != std::errc() || ptr != end)
    return BadToken("the token holds no resourceVersion");
  if (token.kind != kind)
    return BadToken("the token continues a list of " + token.kind + ", not of " + kind);
  if (token.namespace_name != namespace_name)
    return BadToken(
        "the token continues a list of " +
        (token.namespace_name.empty() ? std::string("every namespace")
                                      : "namespace " + token.namespace_name) +
        ", not of " +
        (namespace_name.empty() ? std::string("every namespace") : "namespace " + namespace_name));
  return token;
}

Result<size_t> ParseLimit(const std::optional<std::string>& text) {
  if (!text) return size_t{0};
  size_t value = 0;
  const char* end = text->data() + text->size();
  auto [ptr, ec] = std::from_chars(text->data(), end, value);
  if (text->empty() || ec != std::errc() || ptr != end)
    return InvalidArgument(
        "limit: must be a number of items (0 or none for the whole list), got '" + *text + "'");
  return value;
}

}  // namespace tessera::api
