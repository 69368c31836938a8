// ReadReplicaProfile (serving_profile.h): the profile file of bench/serving/profile.py, its
// fields and the errors that name the file, the field and the fix.
#include "sim/serving_profile.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

namespace tessera::sim {
namespace {

using Json = nlohmann::json;

constexpr const char* kProfileWrite =
    "bench/serving/profile.py writes a profile (docs/simulator.md, \"Profiles\")";

std::string ProfileNumber(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// The value as the file has it, for messages ("-3", "\"fast\"", "null").
std::string ProfileShown(const Json& v) {
  std::string text = v.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return text;
}

class ProfileReader {
 public:
  explicit ProfileReader(std::string_view source) : source_(source) {}

  Status Error(const std::string& field, const std::string& what) const {
    return InvalidArgument(source_ + ": " + field + ": " + what);
  }

  // Keys of `object` outside `known`: an error naming the first, the known ones and the fix.
  Status OnlyKnown(const Json& object, const std::string& where,
                   const std::vector<std::string>& known) const {
    for (const auto& [key, value] : object.items()) {
      if (std::find(known.begin(), known.end(), key) != known.end()) continue;
      std::string list;
      for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
      return InvalidArgument(source_ + ": " + (where.empty() ? "" : where + ": ") +
                             "unknown field '" + key + "'; the fields are " + list +
                             ": fix its spelling or remove it");
    }
    return Status::Ok();
  }

  Result<const Json*> Field(const Json& object, const std::string& key, const std::string& field,
                            const std::string& what) const {
    auto it = object.find(key);
    if (it == object.end())
      return InvalidArgument(source_ + ": no field " + field + ": add it (" + what + ")");
    return &*it;
  }

  Result<std::string> String(const Json& object, const std::string& key,
                             const std::string& what) const {
    auto v = Field(object, key, key, what);
    if (!v.ok()) return v.status();
    if (!(*v)->is_string() || (*v)->get<std::string>().empty())
      return Error(key, "must be a non-empty string (" + what + "), got " + ProfileShown(**v));
    return (*v)->get<std::string>();
  }

  // A number > 0 (or >= 0 with allow_zero).
  Result<double> Rate(const Json& v, const std::string& field, const std::string& what,
                      bool allow_zero = false) const {
    if (!v.is_number())
      return Error(field, "must be a number (" + what + "), got " + ProfileShown(v));
    const double x = v.get<double>();
    if (!std::isfinite(x) || x < 0 || (x == 0 && !allow_zero))
      return Error(field, std::string("must be ") + (allow_zero ? "0 or more" : "positive") + " (" +
                              what + "), got " + ProfileNumber(x) +
                              ": measure it again with bench/serving/profile.py");
    return x;
  }

  Result<int> WholeNumber(const Json& v, const std::string& field, const std::string& what) const {
    const bool whole =
        v.is_number_integer() || (v.is_number_float() && std::isfinite(v.get<double>()) &&
                                  std::floor(v.get<double>()) == v.get<double>());
    if (!whole || v.get<double>() < 1 || v.get<double>() > 1e9)
      return Error(field, "must be a whole number from 1 (" + what + "), got " + ProfileShown(v));
    return static_cast<int>(v.get<double>());
  }

  Result<ReplicaProfile> Read(std::istream& in) {
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    Json doc;
    try {
      doc = Json::parse(text);
    } catch (const Json::parse_error& e) {
      std::string why = e.what();
      const size_t bracket = why.find("] ");
      if (why.rfind("[json.exception", 0) == 0 && bracket != std::string::npos)
        why = why.substr(bracket + 2);
      return InvalidArgument(source_ + ": not JSON (" + why + "); " + kProfileWrite);
    }
    if (!doc.is_object())
      return InvalidArgument(source_ + ": a profile is a JSON object, got " + ProfileShown(doc) +
                             "; " + kProfileWrite);
    TESSERA_RETURN_IF_ERROR(
        OnlyKnown(doc, "",
                  {"name", "measuredOn", "command", "server", "groupSize", "loadAverage",
                   "prefillTokensPerSecond", "decode", "startupSeconds", "details"}));
    ReplicaProfile p;
    p.label.file = source_;
    auto name = String(doc, "name", "what was measured, e.g. \"example-cpu\"");
    if (!name.ok()) return name.status();
    p.label.name = *name;
    auto measured_on = String(doc, "measuredOn", "when and on what machine it was measured");
    if (!measured_on.ok()) return measured_on.status();
    p.label.measured_on = *measured_on;
    auto command = String(doc, "command", "the command that measured it");
    if (!command.ok()) return command.status();
    p.label.command = *command;

    auto prefill_field = Field(doc, "prefillTokensPerSecond", "prefillTokensPerSecond",
                               "prompt tokens one replica prefills per second");
    if (!prefill_field.ok()) return prefill_field.status();
    auto prefill = Rate(**prefill_field, "prefillTokensPerSecond",
                        "prompt tokens one replica prefills per second");
    if (!prefill.ok()) return prefill.status();
    p.model.prefill_tokens_per_s = *prefill;

    auto startup_field = Field(doc, "startupSeconds", "startupSeconds",
                               "seconds from the group's start to its readiness");
    if (!startup_field.ok()) return startup_field.status();
    auto startup = Rate(**startup_field, "startupSeconds",
                        "seconds from the group's start to its readiness", /*allow_zero=*/true);
    if (!startup.ok()) return startup.status();
    if (*startup > 86'400)
      return Error("startupSeconds",
                   "must be at most 86400 (a day), got " + ProfileNumber(*startup));
    p.model.startup_ms = std::llround(*startup * 1000);

    auto decode = Field(doc, "decode", "decode",
                        "rows {concurrency, perRequestTokensPerSecond, perGroupTokensPerSecond} "
                        "from concurrency 1");
    if (!decode.ok()) return decode.status();
    TESSERA_RETURN_IF_ERROR(ReadDecode(**decode, p.model));

    if (auto it = doc.find("server"); it != doc.end() && !it->is_string())
      return Error("server", "must be a string (what was measured), got " + ProfileShown(*it));
    if (auto it = doc.find("groupSize"); it != doc.end()) {
      auto size = WholeNumber(*it, "groupSize", "processes of the measured group");
      if (!size.ok()) return size.status();
    }
    if (auto it = doc.find("details"); it != doc.end() && !it->is_object())
      return Error("details",
                   "must be an object (the samples behind the medians), got " + ProfileShown(*it));
    if (auto it = doc.find("loadAverage"); it != doc.end())
      TESSERA_RETURN_IF_ERROR(ReadLoadAverage(*it));
    return p;
  }

 private:
  Status ReadDecode(const Json& decode, ReplicaModel& model) const {
    if (!decode.is_array() || decode.empty())
      return Error("decode",
                   "must be a non-empty array of rows {concurrency, perRequestTokensPerSecond, "
                   "perGroupTokensPerSecond}, got " +
                       ProfileShown(decode));
    for (size_t i = 0; i < decode.size(); ++i) {
      const Json& row = decode[i];
      const std::string at = "decode[" + std::to_string(i) + "]";
      if (!row.is_object())
        return Error(at,
                     "must be an object {concurrency, perRequestTokensPerSecond, "
                     "perGroupTokensPerSecond}, got " +
                         ProfileShown(row));
      TESSERA_RETURN_IF_ERROR(OnlyKnown(
          row, at, {"concurrency", "perRequestTokensPerSecond", "perGroupTokensPerSecond"}));
      DecodeRow r;
      auto concurrency_field =
          Field(row, "concurrency", at + ".concurrency", "how many requests decoded at once");
      if (!concurrency_field.ok()) return concurrency_field.status();
      auto concurrency = WholeNumber(**concurrency_field, at + ".concurrency",
                                     "how many requests decoded at once");
      if (!concurrency.ok()) return concurrency.status();
      r.concurrency = *concurrency;
      if (i == 0 && r.concurrency != 1)
        return Error(at + ".concurrency",
                     "the first row must be concurrency 1 (one request alone), got " +
                         std::to_string(r.concurrency) + ": measure it, or add that row");
      if (i > 0 && r.concurrency <= model.decode_table.back().concurrency)
        return Error(at + ".concurrency",
                     std::to_string(r.concurrency) + " is not above decode[" +
                         std::to_string(i - 1) + "].concurrency " +
                         std::to_string(model.decode_table.back().concurrency) +
                         ": rows go in increasing concurrency, each once");
      const struct {
        const char* key;
        double* out;
        const char* what;
      } rates[] = {{"perRequestTokensPerSecond", &r.per_request_tokens_per_s,
                    "output tokens per second of one of the requests decoding at once"},
                   {"perGroupTokensPerSecond", &r.per_group_tokens_per_s,
                    "output tokens per second of the group, summed over those requests"}};
      for (const auto& rate : rates) {
        const std::string field = at + "." + rate.key;
        auto value = Field(row, rate.key, field, rate.what);
        if (!value.ok()) return value.status();
        auto v = Rate(**value, field, rate.what);
        if (!v.ok()) return v.status();
        *rate.out = *v;
      }
      model.decode_table.push_back(r);
    }
    return Status::Ok();
  }

  Status ReadLoadAverage(const Json& v) const {
    if (!v.is_object())
      return Error("loadAverage",
                   "must be an object {\"before\": [1, 5, 15 minutes], \"after\": [...]}, got " +
                       ProfileShown(v));
    TESSERA_RETURN_IF_ERROR(OnlyKnown(v, "loadAverage", {"before", "after"}));
    for (const auto& [key, value] : v.items()) {
      bool ok = value.is_array();
      for (const Json& x : value) ok = ok && x.is_number() && x.get<double>() >= 0;
      if (!ok)
        return Error(
            "loadAverage." + key,
            "must be an array of load averages (numbers >= 0), got " + ProfileShown(value));
    }
    return Status::Ok();
  }

  std::string source_;
};

}  // namespace

Result<ReplicaProfile> ReadReplicaProfile(std::istream& in, std::string_view source) {
  return ProfileReader(source).Read(in);
}

}  // namespace tessera::sim
