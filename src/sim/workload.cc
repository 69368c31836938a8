#include "sim/workload.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <optional>
#include <unordered_set>

#include "common/rng.h"
#include "common/text.h"

namespace tessera::sim {
namespace {

// Splits one CSV line on commas. The trace files have no quoted fields; a quote is rejected
// by the caller's number parsing or kept verbatim in a name.
std::vector<std::string_view> SplitCsv(std::string_view line) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t comma = line.find(',', start);
    out.push_back(line.substr(start, comma == std::string_view::npos ? line.npos : comma - start));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

class CsvTable {
 public:
  CsvTable(std::istream& in, std::string_view source) : in_(in), source_(source) {}

  // Reads the header line. Errors when the stream is empty.
  Status ReadHeader() {
    if (!NextLine()) return InvalidArgument(source_ + ": empty file, expected a header line");
    auto cols = SplitCsv(line_);
    for (size_t i = 0; i < cols.size(); ++i) header_.emplace_back(cols[i]);
    return Status::Ok();
  }
  bool Has(std::string_view column) const { return Index(column) >= 0; }
  Status Require(std::initializer_list<std::string_view> columns) const {
    for (auto c : columns)
      if (!Has(c))
        return InvalidArgument(source_ + ":1: missing column " + std::string(c) + " (header is " +
                               HeaderText() + ")");
    return Status::Ok();
  }
  // Next non-blank row; false at end of stream.
  bool NextRow() {
    while (NextLine()) {
      if (line_.empty()) continue;
      fields_ = SplitCsv(line_);
      return true;
    }
    return false;
  }
  int line_number() const { return line_number_; }
  Status RowError(std::string_view column, const std::string& what) const {
    return InvalidArgument(source_ + ":" + std::to_string(line_number_) + ": column " +
                           std::string(column) + ": " + what);
  }
  // The field of `column` in the current row, or an error when the row is short.
  Result<std::string_view> Field(std::string_view column) const {
    const int i = Index(column);
    if (i < 0 || static_cast<size_t>(i) >= fields_.size())
      return InvalidArgument(source_ + ":" + std::to_string(line_number_) + ": expected " +
                             std::to_string(header_.size()) + " fields, found " +
                             std::to_string(fields_.size()) + " (missing " + std::string(column) +
                             ")");
    return fields_[i];
  }
  // An integer field in [min, max]; empty allowed only when `empty_ok` (returns nullopt).
  Result<std::optional<int64_t>> Int(std::string_view column, int64_t min, int64_t max,
                                     bool empty_ok = false) const {
    auto f = Field(column);
    if (!f.ok()) return f.status();
    if (f->empty()) {
      if (empty_ok) return std::optional<int64_t>();
      return RowError(column, "empty, expected an integer");
    }
    auto v = ParseInt(*f);
    if (!v) return RowError(column, "'" + std::string(*f) + "' is not an integer");
    if (*v < min || *v > max)
      return RowError(column, std::to_string(*v) + " is out of range [" + std::to_string(min) +
                                  ", " + std::to_string(max) + "]");
    return std::optional<int64_t>(*v);
  }
  const std::string& source() const { return source_; }

 private:
  bool NextLine() {
    if (!std::getline(in_, line_)) return false;
    ++line_number_;
    if (!line_.empty() && line_.back() == '\r') line_.pop_back();
    return true;
  }
  int Index(std::string_view column) const {
    for (size_t i = 0; i < header_.size(); ++i)
      if (header_[i] == column) return static_cast<int>(i);
    return -1;
  }
  std::string HeaderText() const {
    std::string s;
    for (const auto& h : header_) s += (s.empty() ? "" : ",") + h;
    return s;
  }

  std::istream& in_;
  std::string source_;
  std::string line_;
  int line_number_ = 0;
  std::vector<std::string> header_;
  std::vector<std::string_view> fields_;
};

constexpr int64_t kMaxSeconds = int64_t{1} << 40;  // ~35,000 years: room for sums, no overflow
constexpr int64_t kMaxAccelerators = 1 << 20;

#define SIM_ASSIGN_OR_RETURN(lhs, expr)       \
  auto lhs##_r = (expr);                      \
  if (!lhs##_r.ok()) return lhs##_r.status(); \
  auto lhs = **lhs##_r

Status CheckOrder(const CsvTable& t, std::string_view column, int64_t submit, int64_t previous) {
  if (submit < previous)
    return t.RowError(column, std::to_string(submit) + " is earlier than the previous row's " +
                                  std::to_string(previous) +
                                  "; traces must be sorted by submission time");
  return Status::Ok();
}

Result<Workload> ReadItp(CsvTable& t) {
  TESSERA_RETURN_IF_ERROR(t.Require({"job_id", "submission_time", "duration", "num_gpu"}));
  Workload w;
  w.source = t.source() + " (itp)";
  std::unordered_set<std::string> ids;
  int64_t previous = 0;
  while (t.NextRow()) {
    auto id = t.Field("job_id");
    if (!id.ok()) return id.status();
    if (id->empty()) return t.RowError("job_id", "empty");
    if (!ids.emplace(*id).second)
      return t.RowError("job_id", "'" + std::string(*id) + "' appears twice");
    SIM_ASSIGN_OR_RETURN(submit, t.Int("submission_time", 0, kMaxSeconds));
    SIM_ASSIGN_OR_RETURN(duration, t.Int("duration", 1, kMaxSeconds));
    SIM_ASSIGN_OR_RETURN(gpus, t.Int("num_gpu", 1, kMaxAccelerators));
    TESSERA_RETURN_IF_ERROR(CheckOrder(t, "submission_time", submit, previous));
    previous = submit;
    JobSpec j;
    j.name = std::string(*id);
    j.submit_s = submit;
    j.duration_s = duration;
    j.accelerators = static_cast<int>(gpus);
    w.jobs.push_back(std::move(j));
  }
  return w;
}

Result<Workload> ReadOpenb(CsvTable& t) {
  if (!t.Has("creation_time") || !t.Has("deletion_time"))
    return InvalidArgument(t.source() +
                           ":1: no creation_time/deletion_time columns: this pod list has no "
                           "time axis (openb_pod_list_multigpu50.csv is meant for "
                           "fill-to-saturation, not replay); use a list with time columns");
  TESSERA_RETURN_IF_ERROR(t.Require({"name", "num_gpu", "gpu_milli"}));
  Workload w;
  w.source = t.source() + " (openb)";
  w.has_priorities = t.Has("qos");
  int64_t previous = 0;
  while (t.NextRow()) {
    auto name = t.Field("name");
    if (!name.ok()) return name.status();
    SIM_ASSIGN_OR_RETURN(gpus, t.Int("num_gpu", 0, kMaxAccelerators));
    SIM_ASSIGN_OR_RETURN(milli, t.Int("gpu_milli", 0, 1000));
    SIM_ASSIGN_OR_RETURN(created, t.Int("creation_time", 0, kMaxSeconds));
    SIM_ASSIGN_OR_RETURN(deleted, t.Int("deletion_time", 0, kMaxSeconds));
    std::optional<int64_t> scheduled;
    if (t.Has("scheduled_time")) {
      auto s = t.Int("scheduled_time", 0, kMaxSeconds, /*empty_ok=*/true);
      if (!s.ok()) return s.status();
      scheduled = *s;
    }
    TESSERA_RETURN_IF_ERROR(CheckOrder(t, "creation_time", created, previous));
    previous = created;
    if (gpus == 0 && milli == 0) {
      ++w.skipped_rows;
      continue;
    }
    const int64_t start = scheduled.value_or(created);
    if (deleted < start)
      return t.RowError("deletion_time", std::to_string(deleted) + " is before the pod started (" +
                                             std::to_string(start) + ")");
    JobSpec j;
    j.name = std::string(*name);
    j.submit_s = created;
    j.duration_s = std::max<int64_t>(1, deleted - start);
    j.accelerators = static_cast<int>(std::max<int64_t>(1, gpus));
    if (t.Has("qos")) {
      auto qos = t.Field("qos");
      if (!qos.ok()) return qos.status();
      j.priority = (*qos == "LS" || *qos == "Guaranteed") ? 1 : 0;
    }
    w.jobs.push_back(std::move(j));
  }
  if (w.skipped_rows > 0)
    w.skipped_reason = std::to_string(w.skipped_rows) + " rows without accelerators skipped";
  return w;
}

}  // namespace

Result<TraceFormat> ParseTraceFormat(std::string_view text) {
  if (text == "auto") return TraceFormat::kAuto;
  if (text == "itp") return TraceFormat::kItp;
  if (text == "openb") return TraceFormat::kOpenb;
  if (text == "philly") return TraceFormat::kPhilly;
  return InvalidArgument("trace format: '" + std::string(text) +
                         "' is not one of auto, itp, openb, philly");
}

Result<Workload> ReadTrace(std::istream& in, std::string_view source, TraceFormat format) {
  if (format == TraceFormat::kPhilly ||
      (format == TraceFormat::kAuto && in.peek() == std::char_traits<char>::to_int_type('[')))
    return ReadPhilly(in, source);
  CsvTable t(in, source);
  TESSERA_RETURN_IF_ERROR(t.ReadHeader());
  if (format == TraceFormat::kAuto) {
    if (t.Has("submission_time"))
      format = TraceFormat::kItp;
    else if (t.Has("creation_time") || t.Has("gpu_milli"))
      format = TraceFormat::kOpenb;
    else
      return InvalidArgument(std::string(source) +
                             ":1: unknown trace format: expected an ITP header "
                             "(job_id,submission_time,duration,num_gpu), an openb pod list "
                             "(name,...,num_gpu,gpu_milli,...,creation_time,deletion_time,...) "
                             "or a Philly cluster_job_log (a JSON list; --trace-format philly)");
  }
  return format == TraceFormat::kItp ? ReadItp(t) : ReadOpenb(t);
}

ShapeMap ShapeMap::Default(Generation g) {
  ShapeMap m;
  if (Info(g).rank == 3) {
    for (const Shape& s :
         {Shape::Of(2, 2, 1), Shape::Of(2, 2, 2), Shape::Of(2, 2, 4), Shape::Of(2, 4, 4),
          Shape::Of(4, 4, 4), Shape::Of(4, 4, 8), Shape::Of(4, 8, 8), Shape::Of(8, 8, 8)})
      if (ValidateShape(g, s).ok()) m.entries.push_back({static_cast<int>(s.chips()), s});
  } else {
    for (const Shape& s : {Shape::Of(4, 4), Shape::Of(8, 8), Shape::Of(8, 16), Shape::Of(16, 16)})
      if (ValidateShape(g, s).ok()) m.entries.push_back({static_cast<int>(s.chips()), s});
  }
  return m;
}

Result<ShapeMap> ShapeMap::Parse(Generation g, std::string_view text) {
  ShapeMap m;
  for (std::string_view entry : SplitCsv(text)) {
    const std::string e(entry);
    const size_t colon = entry.find(':');
    if (colon == entry.npos)
      return InvalidArgument("shape map: entry '" + e + "' is not count:shape, e.g. 8:2x2x2");
    auto count = ParseInt(entry.substr(0, colon));
    if (!count || *count < 1 || *count > kMaxAccelerators)
      return InvalidArgument("shape map: entry '" + e + "': the count must be a positive integer");
    auto shape = ParseShape(entry.substr(colon + 1));
    if (!shape.ok())
      return InvalidArgument("shape map: entry '" + e + "': " + shape.status().message());
    Status valid = ValidateShape(g, *shape);
    if (!valid.ok()) return InvalidArgument("shape map: entry '" + e + "': " + valid.message());
    if (*count > shape->chips())
      return InvalidArgument("shape map: entry '" + e + "': " + shape->ToString() + " holds " +
                             std::to_string(shape->chips()) + " chips, fewer than " +
                             std::to_string(*count));
    if (!m.entries.empty() && *count <= m.entries.back().accelerators)
      return InvalidArgument("shape map: entry '" + e + "': counts must ascend");
    m.entries.push_back({static_cast<int>(*count), *shape});
  }
  if (m.entries.empty()) return InvalidArgument("shape map: needs at least one count:shape");
  return m;
}

const ShapeMap::Entry* ShapeMap::Find(int accelerators) const {
  for (const Entry& e : entries)
    if (accelerators <= e.accelerators) return &e;
  return nullptr;
}

std::string ShapeMap::ToString() const {
  std::string s;
  for (const Entry& e : entries)
    s += (s.empty() ? "" : ",") + std::to_string(e.accelerators) + ":" + e.shape.ToString();
  return s;
}

Result<std::vector<std::pair<int, double>>> ParseSizeMix(std::string_view text) {
  std::vector<std::pair<int, double>> out;
  for (std::string_view entry : SplitCsv(text)) {
    const std::string e(entry);
    const size_t colon = entry.find(':');
    auto count = ParseInt(entry.substr(0, colon));
    double weight = 1;
    if (colon != entry.npos) {
      const std::string w(entry.substr(colon + 1));
      char* end = nullptr;
      weight = std::strtod(w.c_str(), &end);
      if (w.empty() || end != w.c_str() + w.size() || !(weight > 0))
        return InvalidArgument("size mix: entry '" + e + "': the weight must be a positive number");
    }
    if (!count || *count < 1 || *count > kMaxAccelerators)
      return InvalidArgument("size mix: entry '" + e +
                             "' is not count[:weight] with a positive count, e.g. 8:4");
    out.emplace_back(static_cast<int>(*count), weight);
  }
  return out;
}

namespace {
std::vector<std::pair<int, double>> SizesOrDefault(const GeneratorOptions& o) {
  if (!o.sizes.empty()) return o.sizes;
  return {{4, 8}, {8, 4}, {16, 2}, {32, 1}, {64, 1}};
}
}  // namespace

Workload Generate(const GeneratorOptions& o) {
  Workload w;
  w.source = "generated (" + std::to_string(o.jobs) + " jobs, seed " + std::to_string(o.seed) + ")";
  w.has_priorities = true;
  const auto sizes = SizesOrDefault(o);
  double total = 0;
  for (const auto& [count, weight] : sizes) total += weight;
  Rng rng(o.seed);
  double t = 0;
  w.jobs.reserve(static_cast<size_t>(o.jobs));
  for (int64_t i = 0; i < o.jobs; ++i) {
    t += Exponential(rng, o.mean_interarrival_s);
    JobSpec j;
    j.name = "job-" + std::to_string(i);
    j.submit_s = static_cast<int64_t>(t);
    j.duration_s = std::max<int64_t>(60, static_cast<int64_t>(Exponential(rng, o.mean_duration_s)));
    double pick = rng.UniformDouble() * total;
    j.accelerators = sizes.back().first;
    for (const auto& [count, weight] : sizes) {
      if (pick < weight) {
        j.accelerators = count;
        break;
      }
      pick -= weight;
    }
    j.priority = rng.UniformDouble() < o.high_priority_fraction ? 1 : 0;
    if (rng.UniformDouble() < o.multi_slice_fraction) {
      j.accelerators = 64;
      j.num_slices = 2 + static_cast<int>(rng.Uniform(3));
      j.min_slices = 1;
    }
    w.jobs.push_back(std::move(j));
  }
  return w;
}

double MeanChipSeconds(const GeneratorOptions& o, const ShapeMap& map) {
  const auto sizes = SizesOrDefault(o);
  double total = 0, chips = 0;
  for (const auto& [count, weight] : sizes) {
    const ShapeMap::Entry* e = map.Find(count);
    total += weight;
    chips += weight * static_cast<double>(e ? e->shape.chips() : 0);
  }
  const ShapeMap::Entry* big = map.Find(64);
  const double multi = big ? 3.0 * static_cast<double>(big->shape.chips()) : 0;
  const double mean_chips =
      (1 - o.multi_slice_fraction) * chips / total + o.multi_slice_fraction * multi;
  return mean_chips * o.mean_duration_s;
}

}  // namespace tessera::sim
