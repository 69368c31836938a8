// The pure part of `describe job`: the goodput lines, which say what the figure is made of so a
// short job's start-up is not read as lost work (docs/elastic.md "Goodput"). cli_core_test.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace tessera::cli {

// A duration as describe prints it: "850ms", "31.0s", "12.5m", "2.1h"; "-" when negative.
std::string Duration(int64_t ms);

// The "Goodput:" lines of a TrainJob's status (status.recovery.goodput, status.attempts,
// status.failures, status.completionTimeMs), each ending in "\n": the percentage as time in kept
// steps over the time since the first placement, then what the rest was (start-up before each
// attempt's first step; steps lost and recovery time when it failed). `now_ms` ends the time of a
// job still running. Before a figure exists: "-" and when it will.
std::string GoodputLines(const nlohmann::json& status, int64_t now_ms);

}  // namespace tessera::cli
