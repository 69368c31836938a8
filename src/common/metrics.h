// Metrics: counters, gauges and histograms, and their Prometheus text exposition (format
// 0.0.4: https://prometheus.io/docs/instrumenting/exposition_formats/).
//
// Two ways to publish a metric:
//   - Keep it: a CounterFamily or HistogramFamily accumulates between scrapes (events seen,
//     admission latency). They are thread-safe; Write() renders the current values.
//   - Compute it at scrape time: gauges read from live state (chips allocated, heartbeat age)
//     go straight to an ExpositionWriter, which enforces the format's rules: one HELP and one
//     TYPE line per family, its samples together, valid names, escaped label values, no
//     duplicate series. Misuse is a programming error and returns a Status from Finish().
//
// Ownership: the caller owns every object here. Thread-safety: the families are safe from any
// thread; an ExpositionWriter belongs to one scrape on one thread.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tessera::metrics {

enum class MetricType { kCounter, kGauge, kHistogram };
const char* MetricTypeName(MetricType type);  // "counter", "gauge", "histogram"

// Label name -> value, in the order they are written.
using Labels = std::vector<std::pair<std::string, std::string>>;

// [a-zA-Z_:][a-zA-Z0-9_:]*
bool IsValidMetricName(std::string_view name);
// [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__" (reserved).
bool IsValidLabelName(std::string_view name);
// Label values: backslash, double quote and newline escaped.
std::string EscapeLabelValue(std::string_view value);
// HELP text: backslash and newline escaped.
std::string EscapeHelp(std::string_view help);
// A sample value as Prometheus (and Go's strconv) reads it: "+Inf", "-Inf", "NaN", integers
// without a fraction, everything else with the shortest round-trip representation.
std::string FormatValue(double value);

// Renders one scrape. Call Family() then Sample() for each of its series, repeat, then
// Finish(). The first misuse (bad name, sample outside its family, duplicate series, a family
// declared twice) is remembered and reported by Finish(); the text written so far is kept.
class ExpositionWriter {
 public:
  void Family(std::string_view name, std::string_view help, MetricType type);
  // `name` is the family name, or for histograms the family name plus "_bucket", "_sum" or
  // "_count" (a "_bucket" sample needs an "le" label).
  void Sample(std::string_view name, const Labels& labels, double value);
  // The text, or the first misuse.
  Result<std::string> Finish();

 private:
  void Fail(std::string message);

  std::string out_;
  std::string family_;
  MetricType type_ = MetricType::kGauge;
  std::set<std::string> families_;
  std::set<std::string> series_;  // of the current family
  Status error_ = Status::Ok();
};

// A counter per label set: only goes up.
class CounterFamily {
 public:
  CounterFamily(std::string name, std::string help, std::vector<std::string> label_names);
  // Adds `by` (>= 0; negative values are ignored) to the series with these label values, in
  // the order of label_names. A wrong number of values is ignored too (a programming error
  // that must not take a scrape down).
  void Add(const std::vector<std::string>& label_values, double by = 1);
  double Value(const std::vector<std::string>& label_values) const;
  void Write(ExpositionWriter& writer) const;

 private:
  const std::string name_, help_;
  const std::vector<std::string> label_names_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, double> values_;
};

// Cumulative histograms per label set, with fixed upper bounds (the +Inf bucket is implicit).
class HistogramFamily {
 public:
  // `upper_bounds` must be increasing; they are sorted and deduplicated if not.
  HistogramFamily(std::string name, std::string help, std::vector<std::string> label_names,
                  std::vector<double> upper_bounds);
  void Observe(const std::vector<std::string>& label_values, double value);

  struct Snapshot {
    std::vector<uint64_t> cumulative;  // one per upper bound, then +Inf
    uint64_t count = 0;
    double sum = 0;
  };
  Snapshot Read(const std::vector<std::string>& label_values) const;
  const std::vector<double>& upper_bounds() const { return bounds_; }
  void Write(ExpositionWriter& writer) const;

 private:
  struct Series {
    std::vector<uint64_t> buckets;  // not cumulative; one per bound plus +Inf
    uint64_t count = 0;
    double sum = 0;
  };
  const std::string name_, help_;
  const std::vector<std::string> label_names_;
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, Series> series_;
};

}  // namespace tessera::metrics
