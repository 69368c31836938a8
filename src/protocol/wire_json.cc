// The shared JSON readers and writers of the wire codecs (wire_json.h).
#include "protocol/wire_json.h"

#include <algorithm>
#include <cmath>

namespace tessera::protocol::wire_json {

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json CoordJson(const Coord& c) { return json::array({c.x, c.y, c.z}); }

bool IsInt(const json& j) { return j.is_number_integer(); }

std::string Shown(const json& j) {
  std::string text = Dump(j);
  if (text.size() > 40) text = text.substr(0, 40) + "...";
  return text;
}

std::string Quoted(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "'";
  for (size_t i = 0; i < text.size() && i < 64; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c >= 0x7f || c == '\\') {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (text.size() > 64) out += "...";
  return out + "'";
}

bool Printable(std::string_view text) {
  return std::none_of(text.begin(), text.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u < 0x20 || u == 0x7f;
  });
}

std::optional<int64_t> AsInt(const json& j) {
  if (j.is_number_unsigned()) {
    const uint64_t u = j.get<uint64_t>();
    if (u > static_cast<uint64_t>(kNoMax)) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (j.is_number_integer()) return j.get<int64_t>();
  return std::nullopt;
}

std::string RangeText(int64_t min, int64_t max) {
  if (max == kNoMax) return "an integer >= " + std::to_string(min);
  return "an integer in " + std::to_string(min) + ".." + std::to_string(max);
}

const json* Member(const json& o, const char* key) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return nullptr;
  return &*it;
}

Status ReadString(const json& o, const char* key, const std::string& path, Presence presence,
                  std::string& out) {
  const json* v = Member(o, key);
  if (v == nullptr) {
    if (presence == Presence::kOptional) return Status::Ok();
    return InvalidArgument(path + ": required, a string");
  }
  if (!v->is_string()) return InvalidArgument(path + ": must be a string, got " + Shown(*v));
  out = v->get<std::string>();
  return Status::Ok();
}

Status ReadSafeName(const json& o, const char* key, const std::string& path, Presence presence,
                    std::string& out) {
  TESSERA_RETURN_IF_ERROR(ReadString(o, key, path, presence, out));
  if (Member(o, key) != nullptr && !IsSafeName(out)) {
    return InvalidArgument(path + ": " + Quoted(out) +
                           " must be 1..253 characters of [A-Za-z0-9._-], not '.' or '..'");
  }
  return Status::Ok();
}

Status ReadNumber(const json& o, const char* key, const std::string& path, double max,
                  Presence presence, double& out) {
  const std::string want = "a number in 0.." + Dump(json(max));
  const json* v = Member(o, key);
  if (v == nullptr) {
    if (presence == Presence::kOptional) return Status::Ok();
    return InvalidArgument(path + ": required, " + want);
  }
  if (!v->is_number() || !std::isfinite(v->get<double>()) || v->get<double>() < 0 ||
      v->get<double>() > max) {
    return InvalidArgument(path + ": must be " + want + ", got " + Shown(*v));
  }
  out = v->get<double>();
  return Status::Ok();
}

Status ReadCoord(const json& o, const char* key, const std::string& path,
                 const std::array<int, 3>& max, Coord& out) {
  const std::string want = "[x, y, z], integers with x in 0.." + std::to_string(max[0]) +
                           ", y in 0.." + std::to_string(max[1]) + ", z in 0.." +
                           std::to_string(max[2]);
  const json* v = Member(o, key);
  if (v == nullptr) return InvalidArgument(path + ": required, " + want);
  if (!v->is_array() || v->size() != 3) {
    return InvalidArgument(path + ": must be " + want + ", got " + Shown(*v));
  }
  int* parts[3] = {&out.x, &out.y, &out.z};
  for (size_t i = 0; i < 3; ++i) {
    std::optional<int64_t> value = AsInt((*v)[i]);
    if (!value || *value < 0 || *value > max[i]) {
      return InvalidArgument(path + ": must be " + want + ", got " + Shown(*v));
    }
    *parts[i] = static_cast<int>(*value);
  }
  return Status::Ok();
}

Result<const json*> ReadObject(const json& o, const char* key, const std::string& path) {
  const json* v = Member(o, key);
  if (v != nullptr && !v->is_object()) {
    return InvalidArgument(path + ": must be an object, got " + Shown(*v));
  }
  return v;
}

Result<const json*> ReadList(const json& o, const char* key, const std::string& path) {
  const json* v = Member(o, key);
  if (v != nullptr && !v->is_array()) {
    return InvalidArgument(path + ": must be a list, got " + Shown(*v));
  }
  return v;
}

std::string Item(const std::string& list, size_t i) { return list + "[" + std::to_string(i) + "]"; }

std::optional<uint64_t> UidOf(const json& o) {
  auto uid = o.find("uid");
  if (uid == o.end()) return std::nullopt;
  std::optional<int64_t> value = AsInt(*uid);
  if (!value || *value < 1 || static_cast<uint64_t>(*value) > kMaxUid) return std::nullopt;
  return static_cast<uint64_t>(*value);
}

}  // namespace tessera::protocol::wire_json
