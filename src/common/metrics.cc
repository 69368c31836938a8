#include "common/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace tessera::metrics {
namespace {

bool NameChar(char c, bool first, bool colon) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') return true;
  if (colon && c == ':') return true;
  return !first && c >= '0' && c <= '9';
}

std::string SeriesKey(std::string_view name, const Labels& labels) {
  std::string key(name);
  for (const auto& [k, v] : labels) key += "\x1f" + k + "\x1e" + v;
  return key;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

Labels Zip(const std::vector<std::string>& names, const std::vector<std::string>& values) {
  Labels out;
  for (size_t i = 0; i < names.size() && i < values.size(); ++i)
    out.emplace_back(names[i], values[i]);
  return out;
}

}  // namespace

const char* MetricTypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

bool IsValidMetricName(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i)
    if (!NameChar(name[i], i == 0, true)) return false;
  return true;
}

bool IsValidLabelName(std::string_view name) {
  if (name.empty() || name.starts_with("__")) return false;
  for (size_t i = 0; i < name.size(); ++i)
    if (!NameChar(name[i], i == 0, false)) return false;
  return true;
}

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeHelp(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::trunc(value) && std::fabs(value) < 1e15)
    return std::to_string(static_cast<int64_t>(value));
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, value);
  return std::string(buf, r.ptr);
}

// ---------------------------------------------------------------------------------------------
// ExpositionWriter

void ExpositionWriter::Fail(std::string message) {
  if (error_.ok()) error_ = Internal("metrics: " + std::move(message));
}

void ExpositionWriter::Family(std::string_view name, std::string_view help, MetricType type) {
  if (!IsValidMetricName(name)) return Fail("invalid metric name '" + std::string(name) + "'");
  if (!families_.insert(std::string(name)).second)
    return Fail("family '" + std::string(name) + "' declared twice");
  family_ = name;
  type_ = type;
  series_.clear();
  out_ += "# HELP " + family_ + " " + EscapeHelp(help) + "\n";
  out_ += "# TYPE " + family_ + " " + MetricTypeName(type) + "\n";
}

void ExpositionWriter::Sample(std::string_view name, const Labels& labels, double value) {
  if (family_.empty()) return Fail("sample '" + std::string(name) + "' before any family");
  bool belongs = name == family_;
  bool bucket = false;
  if (type_ == MetricType::kHistogram) {
    belongs = false;
    for (std::string_view suffix : {"_bucket", "_sum", "_count"})
      if (name.size() == family_.size() + suffix.size() && name.starts_with(family_) &&
          EndsWith(name, suffix)) {
        belongs = true;
        bucket = suffix == "_bucket";
      }
  }
  if (!belongs)
    return Fail("sample '" + std::string(name) + "' outside its family '" + family_ + "'");
  bool has_le = false;
  for (const auto& [k, v] : labels) {
    if (!IsValidLabelName(k)) return Fail("invalid label name '" + k + "' on " + family_);
    has_le = has_le || k == "le";
  }
  if (bucket != has_le) return Fail(family_ + ": only _bucket samples carry an 'le' label");
  if (!series_.insert(SeriesKey(name, labels)).second)
    return Fail("duplicate series in " + family_);
  out_ += name;
  if (!labels.empty()) {
    out_ += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i) out_ += ',';
      out_ += labels[i].first + "=\"" + EscapeLabelValue(labels[i].second) + "\"";
    }
    out_ += '}';
  }
  out_ += ' ';
  out_ += FormatValue(value);
  out_ += '\n';
}

Result<std::string> ExpositionWriter::Finish() {
  if (!error_.ok()) return error_;
  return std::move(out_);
}

// ---------------------------------------------------------------------------------------------
// CounterFamily

CounterFamily::CounterFamily(std::string name, std::string help,
                             std::vector<std::string> label_names)
    : name_(std::move(name)), help_(std::move(help)), label_names_(std::move(label_names)) {}

void CounterFamily::Add(const std::vector<std::string>& label_values, double by) {
  if (!(by >= 0) || label_values.size() != label_names_.size()) return;
  std::lock_guard lock(mu_);
  values_[label_values] += by;
}

double CounterFamily::Value(const std::vector<std::string>& label_values) const {
  std::lock_guard lock(mu_);
  auto it = values_.find(label_values);
  return it == values_.end() ? 0 : it->second;
}

void CounterFamily::Write(ExpositionWriter& writer) const {
  writer.Family(name_, help_, MetricType::kCounter);
  std::lock_guard lock(mu_);
  if (label_names_.empty() && values_.empty()) writer.Sample(name_, {}, 0);
  for (const auto& [values, v] : values_) writer.Sample(name_, Zip(label_names_, values), v);
}

// ---------------------------------------------------------------------------------------------
// HistogramFamily

HistogramFamily::HistogramFamily(std::string name, std::string help,
                                 std::vector<std::string> label_names,
                                 std::vector<double> upper_bounds)
    : name_(std::move(name)),
      help_(std::move(help)),
      label_names_(std::move(label_names)),
      bounds_(std::move(upper_bounds)) {
  std::erase_if(bounds_, [](double b) { return std::isnan(b) || std::isinf(b); });
  std::sort(bounds_.begin(), bounds_.end());
  bounds_.erase(std::unique(bounds_.begin(), bounds_.end()), bounds_.end());
}

void HistogramFamily::Observe(const std::vector<std::string>& label_values, double value) {
  if (std::isnan(value) || label_values.size() != label_names_.size()) return;
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  std::lock_guard lock(mu_);
  Series& s = series_[label_values];
  if (s.buckets.empty()) s.buckets.assign(bounds_.size() + 1, 0);
  ++s.buckets[i];  // le is inclusive: value <= bounds_[i]
  ++s.count;
  s.sum += value;
}

HistogramFamily::Snapshot HistogramFamily::Read(
    const std::vector<std::string>& label_values) const {
  Snapshot out;
  out.cumulative.assign(bounds_.size() + 1, 0);
  std::lock_guard lock(mu_);
  auto it = series_.find(label_values);
  if (it == series_.end()) return out;
  uint64_t running = 0;
  for (size_t i = 0; i < it->second.buckets.size(); ++i) {
    running += it->second.buckets[i];
    out.cumulative[i] = running;
  }
  out.count = it->second.count;
  out.sum = it->second.sum;
  return out;
}

void HistogramFamily::Write(ExpositionWriter& writer) const {
  writer.Family(name_, help_, MetricType::kHistogram);
  std::map<std::vector<std::string>, Series> copy;
  {
    std::lock_guard lock(mu_);
    copy = series_;
  }
  if (label_names_.empty() && copy.empty()) copy[{}].buckets.assign(bounds_.size() + 1, 0);
  for (const auto& [values, s] : copy) {
    const Labels labels = Zip(label_names_, values);
    uint64_t running = 0;
    for (size_t i = 0; i <= bounds_.size(); ++i) {
      running += s.buckets[i];
      Labels with_le = labels;
      with_le.emplace_back("le", i < bounds_.size() ? FormatValue(bounds_[i]) : "+Inf");
      writer.Sample(name_ + "_bucket", with_le, static_cast<double>(running));
    }
    writer.Sample(name_ + "_sum", labels, s.sum);
    writer.Sample(name_ + "_count", labels, static_cast<double>(s.count));
  }
}

}  // namespace tessera::metrics
