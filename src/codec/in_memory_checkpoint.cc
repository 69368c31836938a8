#include "codec/in_memory_checkpoint.h"

#include <cctype>
#include <limits>
#include <utility>

namespace tessera::codec {
namespace {

constexpr int64_t kMaxEverySteps = 1'000'000;
constexpr int64_t kMaxPeerCopies = 3;

Result<int64_t> GetCount(const nlohmann::json& obj, const char* key, int64_t fallback, int64_t min,
                         int64_t max, const char* example) {
  const std::string field = std::string("spec.checkpoint.inMemory.") + key;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_number_integer())
    return InvalidArgument(field + ": must be an integer from " + std::to_string(min) + " to " +
                           std::to_string(max) + ", e.g. " + example);
  const int64_t v = it->get<int64_t>();
  if (v < min || v > max)
    return InvalidArgument(field + ": " + std::to_string(v) + " is out of range; must be from " +
                           std::to_string(min) + " to " + std::to_string(max));
  return v;
}

}  // namespace

Result<int64_t> ParseByteQuantity(const std::string& field, const nlohmann::json& value) {
  const std::string hint = ": must be a size in bytes such as 8Gi, 512Mi or 1000000000";
  if (value.is_number_integer()) {
    const int64_t v = value.get<int64_t>();
    if (v <= 0) return InvalidArgument(field + hint);
    return v;
  }
  if (!value.is_string()) return InvalidArgument(field + hint);
  const std::string text = value.get<std::string>();
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0 || digits > 18) return InvalidArgument(field + ": '" + text + "'" + hint);
  const int64_t n = std::stoll(text.substr(0, digits));
  const std::string unit = text.substr(digits);
  static const std::pair<const char*, int64_t> kUnits[] = {{"", 1},
                                                           {"Ki", int64_t{1} << 10},
                                                           {"Mi", int64_t{1} << 20},
                                                           {"Gi", int64_t{1} << 30},
                                                           {"Ti", int64_t{1} << 40},
                                                           {"K", 1'000},
                                                           {"M", 1'000'000},
                                                           {"G", 1'000'000'000},
                                                           {"T", 1'000'000'000'000}};
  for (const auto& [name, scale] : kUnits) {
    if (unit != name) continue;
    if (n <= 0) return InvalidArgument(field + ": must be more than 0 bytes");
    if (n > std::numeric_limits<int64_t>::max() / scale)
      return InvalidArgument(field + ": '" + text + "' is too large");
    return n * scale;
  }
  return InvalidArgument(field + ": '" + text + "': unknown unit '" + unit +
                         "' (known: Ki, Mi, Gi, Ti, K, M, G, T)");
}

Status ParseInMemoryCheckpoint(const nlohmann::json& checkpoint, const std::string& dir,
                               std::map<std::string, std::string>& env) {
  auto im = checkpoint.find("inMemory");
  if (im == checkpoint.end() || im->is_null()) return Status::Ok();
  if (!im->is_object())
    return InvalidArgument(
        "spec.checkpoint.inMemory: must be an object such as {everySteps: 1, peerCopies: 1, "
        "maxBytesPerHost: 8Gi}");
  for (const auto& [key, value] : im->items())
    if (key != "everySteps" && key != "peerCopies" && key != "maxBytesPerHost")
      return InvalidArgument("spec.checkpoint.inMemory." + key +
                             ": unknown field (known: everySteps, peerCopies, maxBytesPerHost)");
  if (dir.empty())
    return InvalidArgument(
        "spec.checkpoint.inMemory: needs spec.checkpoint.dir (the disk checkpoints it falls back "
        "to, and where the hosts' keepers find each other)");
  auto every = GetCount(*im, "everySteps", 1, 1, kMaxEverySteps, "1 (every step)");
  if (!every.ok()) return every.status();
  auto copies = GetCount(*im, "peerCopies", 1, 0, kMaxPeerCopies, "1");
  if (!copies.ok()) return copies.status();
  int64_t max_bytes = kDefaultPeerCkptMaxBytes;
  if (im->contains("maxBytesPerHost")) {
    auto b =
        ParseByteQuantity("spec.checkpoint.inMemory.maxBytesPerHost", (*im)["maxBytesPerHost"]);
    if (!b.ok()) return b.status();
    max_bytes = *b;
  }
  env[kPeerCkptEveryEnv] = std::to_string(*every);
  env[kPeerCkptCopiesEnv] = std::to_string(*copies);
  env[kPeerCkptMaxBytesEnv] = std::to_string(max_bytes);
  return Status::Ok();
}

}  // namespace tessera::codec
