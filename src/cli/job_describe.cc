#include "cli/job_describe.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace tessera::cli {

using Json = nlohmann::json;

std::string Duration(int64_t ms) {
  if (ms < 0) return "-";
  char buf[32];
  if (ms < 1'000)
    std::snprintf(buf, sizeof buf, "%lldms", static_cast<long long>(ms));
  else if (ms < 120'000)
    std::snprintf(buf, sizeof buf, "%.1fs", static_cast<double>(ms) / 1e3);
  else if (ms < 7'200'000)
    std::snprintf(buf, sizeof buf, "%.1fm", static_cast<double>(ms) / 6e4);
  else
    std::snprintf(buf, sizeof buf, "%.1fh", static_cast<double>(ms) / 3.6e6);
  return buf;
}

std::string GoodputLines(const Json& status, int64_t now_ms) {
  const Json rec = status.value("recovery", Json::object());
  const Json attempts = status.value("attempts", Json::array());
  const double goodput = rec.value("goodput", -1.0);
  const std::string indent = "             ";
  if (goodput < 0 || attempts.empty())
    return "Goodput:     - (known once an attempt has reported two completed steps)\n";
  const int64_t placed = attempts[0].value("placedMs", int64_t{0});
  const int64_t done = status.value("completionTimeMs", int64_t{0});
  const int64_t end = done > 0 ? done : now_ms;
  const int64_t wall = end - placed;
  if (placed <= 0 || wall <= 0)
    return "Goodput:     " + std::to_string(std::lround(goodput * 100)) + "%\n";
  const auto kept = static_cast<int64_t>(std::llround(goodput * static_cast<double>(wall)));
  // Start-up: each attempt's placement to its first completed step (processes, imports,
  // rendezvous, a restore); an attempt without a step yet counts until it ended or now.
  int64_t startup = 0;
  for (const Json& a : attempts) {
    const int64_t p = a.value("placedMs", int64_t{0});
    if (p <= 0) continue;
    int64_t until = a.value("firstStepMs", int64_t{0});
    if (until <= 0) until = a.value("endedMs", int64_t{0});
    if (until <= 0) until = end;
    startup += std::max<int64_t>(0, until - p);
  }
  std::string out = "Goodput:     " + std::to_string(std::lround(goodput * 100)) +
                    "% = " + Duration(kept) + " in kept steps / " + Duration(wall) +
                    " since the first placement" + (done > 0 ? "" : " (running)") + "\n";
  out += indent + "start-up (placement to first step, every attempt): " + Duration(startup);
  const int failures = status.value("failures", 0);
  if (failures == 0) {
    out += "; no failure, so nothing was lost to recovery\n";
  } else {
    out += "; " + std::to_string(failures) +
           " failure(s): " + std::to_string(rec.value("stepsLost", int64_t{0})) +
           " steps lost, mean time to recover " +
           Duration(rec.value("meanTimeToRecoverMs", int64_t{-1})) + "\n";
  }
  return out;
}

}  // namespace tessera::cli
