// Internal to tessera_protocol (not part of its API): the JSON readers and writers that every
// message codec of wire.h shares, and the protocol's bounds. Each reader names the field's
// path in its error and says what the field must be ("hosts[2].chips: must be an integer in
// 1..4096, got -1"). Pure; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "protocol/wire.h"

namespace tessera::protocol::wire_json {

using nlohmann::json;

inline constexpr int64_t kNoMax = std::numeric_limits<int64_t>::max();
inline constexpr int64_t kMaxAttempt = 1'000'000'000;
inline constexpr int64_t kMaxChips = 4096;
inline constexpr int64_t kMaxGraceMs = 86'400'000;  // a day
inline constexpr int64_t kMaxNice = 19;             // Linux's lowest CPU priority
inline constexpr double kMaxSeconds = 1e7;          // a checkpoint save or restore: 115 days
inline constexpr double kMaxCpuPercent = 1e6;       // 10,000 busy cores
inline constexpr size_t kMaxLabelKey = 253, kMaxLabelValue = 1024, kMaxAddress = 253;
inline constexpr char kDefaultBlock[] = "block-00";
inline constexpr int64_t kMinFenceMs = 1000, kMaxFenceMs = 86'400'000;
inline constexpr size_t kMaxRefusals = 64, kMaxReason = 1024;

// Encoders replace invalid UTF-8 instead of throwing.
std::string Dump(const json& j);

json CoordJson(const Coord& c);

bool IsInt(const json& j);

// A value as it may appear in an error message: short, and printable whatever it holds.
std::string Shown(const json& j);

// Text quoted for an error message: non-printable bytes escaped, long text cut.
std::string Quoted(std::string_view text);

// No control characters (bytes below 0x20, and 0x7f); UTF-8 beyond ASCII is allowed.
bool Printable(std::string_view text);

// The value of an integer JSON number, if it fits int64.
std::optional<int64_t> AsInt(const json& j);

std::string RangeText(int64_t min, int64_t max);

enum class Presence { kRequired, kOptional };

// The member `key` of object `o`, or null when it is absent or JSON null (both mean "not
// given").
const json* Member(const json& o, const char* key);

// Reads the integer `key` of `o` into `out` when it is given; `path` names it in errors.
template <typename T>
Status ReadInt(const json& o, const char* key, const std::string& path, int64_t min, int64_t max,
               Presence presence, T& out) {
  const json* v = Member(o, key);
  if (v == nullptr) {
    if (presence == Presence::kOptional) return Status::Ok();
    return InvalidArgument(path + ": required, " + RangeText(min, max));
  }
  std::optional<int64_t> value = AsInt(*v);
  if (!value || *value < min || *value > max) {
    return InvalidArgument(path + ": must be " + RangeText(min, max) + ", got " + Shown(*v));
  }
  out = static_cast<T>(*value);
  return Status::Ok();
}

Status ReadString(const json& o, const char* key, const std::string& path, Presence presence,
                  std::string& out);

// A name of [A-Za-z0-9._-] (a path segment), required.
Status ReadSafeName(const json& o, const char* key, const std::string& path, Presence presence,
                    std::string& out);

// A finite number in 0..max.
Status ReadNumber(const json& o, const char* key, const std::string& path, double max,
                  Presence presence, double& out);

// [x, y, z], three integers, each in min..max[i].
Status ReadCoord(const json& o, const char* key, const std::string& path,
                 const std::array<int, 3>& max, Coord& out);

// The object member `key` of `o`, or null when not given; InvalidArgument when not an object.
Result<const json*> ReadObject(const json& o, const char* key, const std::string& path);

Result<const json*> ReadList(const json& o, const char* key, const std::string& path);

std::string Item(const std::string& list, size_t i);

// The uid of an assignment or stop entry, 1..kMaxUid; nullopt when it is not one.
std::optional<uint64_t> UidOf(const json& o);

}  // namespace tessera::protocol::wire_json
