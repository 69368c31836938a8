#include "sim/report.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace tessera::sim {
namespace {

std::string Fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// 45s, 12.5m, 3.2h, 4.1d: short enough for a table, exact figures are in the JSON.
std::string Duration(double s) {
  if (s < 120) return Fmt("%.0fs", s);
  if (s < 7200) return Fmt("%.1fm", s / 60);
  if (s < 172800) return Fmt("%.1fh", s / 3600);
  return Fmt("%.1fd", s / 86400);
}

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

std::string RunName(const SimResult& r) { return r.policy + "/" + r.admission; }

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;
};

const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                         "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

// A line chart as inline SVG. x_log: log10 scale on x (values must be > 0).
std::string LineChart(const std::string& title, const std::string& x_label,
                      const std::string& y_label, const std::vector<Series>& series, bool x_log,
                      double y_max_hint) {
  const double w = 760, h = 300, left = 60, right = 170, top = 30, bottom = 45;
  double x0 = 1e300, x1 = -1e300, y1 = y_max_hint;
  auto tx = [&](double x) { return x_log ? std::log10(std::max(x, 1.0)) : x; };
  for (const auto& s : series)
    for (auto [x, y] : s.points) {
      x0 = std::min(x0, tx(x));
      x1 = std::max(x1, tx(x));
      y1 = std::max(y1, y);
    }
  if (x0 > x1) x0 = 0, x1 = 1;
  if (x1 == x0) x1 = x0 + 1;
  if (y1 <= 0) y1 = 1;
  const double pw = w - left - right, ph = h - top - bottom;
  auto px = [&](double x) { return left + (tx(x) - x0) / (x1 - x0) * pw; };
  auto py = [&](double y) { return top + ph - y / y1 * ph; };
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + Fmt("%.0f", w) +
                    "\" height=\"" + Fmt("%.0f", h) +
                    "\" font-family=\"sans-serif\" font-size=\"11\">";
  svg += "<text x=\"" + Fmt("%.0f", left) + "\" y=\"18\" font-size=\"13\" font-weight=\"bold\">" +
         Escape(title) + "</text>";
  svg += "<rect x=\"" + Fmt("%.0f", left) + "\" y=\"" + Fmt("%.0f", top) + "\" width=\"" +
         Fmt("%.0f", pw) + "\" height=\"" + Fmt("%.0f", ph) + "\" fill=\"none\" stroke=\"#999\"/>";
  for (int i = 0; i <= 4; ++i) {
    const double y = y1 * i / 4;
    svg += "<text x=\"" + Fmt("%.0f", left - 5) + "\" y=\"" + Fmt("%.1f", py(y) + 4) +
           "\" text-anchor=\"end\">" + Fmt(y1 <= 1.0001 ? "%.2f" : "%.3g", y) + "</text>";
    svg += "<line x1=\"" + Fmt("%.0f", left) + "\" x2=\"" + Fmt("%.0f", left + pw) + "\" y1=\"" +
           Fmt("%.1f", py(y)) + "\" y2=\"" + Fmt("%.1f", py(y)) + "\" stroke=\"#eee\"/>";
    const double xv = x0 + (x1 - x0) * i / 4;
    const double label = x_log ? std::pow(10, xv) : xv;
    svg += "<text x=\"" + Fmt("%.1f", left + pw * i / 4) + "\" y=\"" + Fmt("%.0f", top + ph + 15) +
           "\" text-anchor=\"middle\">" + Escape(Duration(label)) + "</text>";
  }
  svg += "<text x=\"" + Fmt("%.0f", left + pw / 2) + "\" y=\"" + Fmt("%.0f", h - 8) +
         "\" text-anchor=\"middle\">" + Escape(x_label) + "</text>";
  svg += "<text x=\"12\" y=\"" + Fmt("%.0f", top + ph / 2) + "\" transform=\"rotate(-90 12 " +
         Fmt("%.0f", top + ph / 2) + ")\" text-anchor=\"middle\">" + Escape(y_label) + "</text>";
  for (size_t i = 0; i < series.size(); ++i) {
    const char* color = kColors[i % std::size(kColors)];
    const auto& pts = series[i].points;
    const size_t step = std::max<size_t>(1, pts.size() / 1500);
    std::string d;
    for (size_t k = 0; k < pts.size(); k += step)
      d += (d.empty() ? "M" : "L") + Fmt("%.1f", px(pts[k].first)) + "," +
           Fmt("%.1f", py(pts[k].second));
    if (!pts.empty())
      d += "L" + Fmt("%.1f", px(pts.back().first)) + "," + Fmt("%.1f", py(pts.back().second));
    svg += "<path d=\"" + d + "\" fill=\"none\" stroke=\"" + color + "\" stroke-width=\"1.3\"/>";
    const double ly = top + 12 + 15 * static_cast<double>(i);
    svg += "<line x1=\"" + Fmt("%.0f", left + pw + 10) + "\" x2=\"" + Fmt("%.0f", left + pw + 28) +
           "\" y1=\"" + Fmt("%.0f", ly - 4) + "\" y2=\"" + Fmt("%.0f", ly - 4) + "\" stroke=\"" +
           color + "\" stroke-width=\"2\"/><text x=\"" + Fmt("%.0f", left + pw + 32) + "\" y=\"" +
           Fmt("%.0f", ly) + "\">" + Escape(series[i].name) + "</text>";
  }
  return svg + "</svg>";
}

struct Column {
  std::string header;
  std::string (*value)(const SimResult&);
};

std::vector<Column> Columns(bool failures, bool moves) {
  std::vector<Column> cols = {
      {"policy", [](const SimResult& r) { return r.policy; }},
      {"admission", [](const SimResult& r) { return r.admission; }},
      {"util", [](const SimResult& r) { return Fmt("%.1f%%", 100 * r.utilization); }},
      {"wait p50", [](const SimResult& r) { return Duration(r.wait_p50_s); }},
      {"wait p95", [](const SimResult& r) { return Duration(r.wait_p95_s); }},
      {"wait p99", [](const SimResult& r) { return Duration(r.wait_p99_s); }},
      {"mean JCT", [](const SimResult& r) { return Duration(r.mean_jct_s); }},
      {"makespan", [](const SimResult& r) { return Duration(static_cast<double>(r.makespan_s)); }},
      {"never placed", [](const SimResult& r) { return std::to_string(r.never_placed); }},
      {"frag (mean)", [](const SimResult& r) { return Fmt("%.3f", r.mean_fragmentation); }},
      {"round waste", [](const SimResult& r) { return Fmt("%.1f%%", 100 * r.rounding_waste); }},
      {"preempt", [](const SimResult& r) { return std::to_string(r.preemptions); }},
  };
  if (moves) {
    cols.push_back({"moves", [](const SimResult& r) { return std::to_string(r.moves); }});
    cols.push_back(
        {"moved chip-h", [](const SimResult& r) { return Fmt("%.1f", r.moved_chip_hours); }});
    cols.push_back({"moved/capacity", [](const SimResult& r) {
                      const double cap = static_cast<double>(r.total_chips) *
                                         static_cast<double>(r.makespan_s) / 3600;
                      return Fmt("%.4f%%", cap > 0 ? 100 * r.moved_chip_hours / cap : 0);
                    }});
  }
  if (failures) {
    cols.push_back({"goodput", [](const SimResult& r) { return Fmt("%.2f%%", 100 * r.goodput); }});
    cols.push_back(
        {"lost chip-h", [](const SimResult& r) { return Fmt("%.0f", r.lost_chip_hours); }});
    cols.push_back({"recoveries", [](const SimResult& r) { return std::to_string(r.recoveries); }});
    cols.push_back({"failed", [](const SimResult& r) { return std::to_string(r.failed); }});
    cols.push_back({"MTTR", [](const SimResult& r) { return Duration(r.mean_time_to_recover_s); }});
  }
  cols.push_back({"event hash", [](const SimResult& r) { return Hex(r.event_hash); }});
  return cols;
}

bool AnyMoves(const Comparison& c) {
  for (const SimResult& r : c.runs)
    if (r.admission == "easy") return true;
  return false;
}

// The class tables: one row per (run, class), size classes first, then priority classes.
struct ClassRow {
  const SimResult* run;
  const char* split;  // "size" or "priority"
  const ClassStats* stats;
};

// Whether the "cube or larger" row says more than one size class's row does: its jobs span
// two or more classes (cube and super-slice, or multi-slice of cubes).
bool WholeCubesRowNeeded(const SimResult& r) {
  if (r.whole_cubes.jobs == 0) return false;
  for (const ClassStats& s : r.by_size)
    if ((s.name == "cube" || s.name == "super-slice") && s.jobs == r.whole_cubes.jobs) return false;
  return true;
}

std::vector<ClassRow> ClassRows(const Comparison& c) {
  std::vector<ClassRow> rows;
  for (const SimResult& r : c.runs) {
    for (const ClassStats& s : r.by_size) rows.push_back({&r, "size", &s});
    if (WholeCubesRowNeeded(r)) rows.push_back({&r, "size", &r.whole_cubes});
  }
  for (const SimResult& r : c.runs)
    for (const ClassStats& s : r.by_priority) rows.push_back({&r, "priority", &s});
  return rows;
}

const std::vector<std::string>& ClassHeaders() {
  static const std::vector<std::string> h = {"policy",   "admission", "class",         "jobs",
                                             "started",  "finished",  "wait p50",      "wait p95",
                                             "wait p99", "mean wait", "JCT p50",       "JCT p95",
                                             "mean JCT", "preempt",   "preempted jobs"};
  return h;
}

std::vector<std::string> ClassCells(const ClassRow& row) {
  const ClassStats& s = *row.stats;
  return {row.run->policy,
          row.run->admission,
          s.name,
          std::to_string(s.jobs),
          std::to_string(s.started),
          std::to_string(s.finished),
          Duration(s.wait_p50_s),
          Duration(s.wait_p95_s),
          Duration(s.wait_p99_s),
          Duration(s.wait_mean_s),
          Duration(s.jct_p50_s),
          Duration(s.jct_p95_s),
          Duration(s.jct_mean_s),
          std::to_string(s.preemptions),
          std::to_string(s.preempted_jobs)};
}

nlohmann::json ClassJson(const ClassStats& s) {
  return {{"class", s.name},
          {"jobs", s.jobs},
          {"started", s.started},
          {"finished", s.finished},
          {"waitP50S", s.wait_p50_s},
          {"waitP95S", s.wait_p95_s},
          {"waitP99S", s.wait_p99_s},
          {"waitMeanS", s.wait_mean_s},
          {"jctP50S", s.jct_p50_s},
          {"jctP95S", s.jct_p95_s},
          {"jctMeanS", s.jct_mean_s},
          {"preemptions", s.preemptions},
          {"preemptedJobs", s.preempted_jobs}};
}

// A plain text table with columns padded to their widest cell.
void TextTable(std::ostream& out, const std::vector<std::string>& headers,
               const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (size_t i = 0; i < headers.size(); ++i) {
    size_t w = headers[i].size();
    for (const auto& r : rows) w = std::max(w, r[i].size());
    width.push_back(w);
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string l;
    for (size_t i = 0; i < cells.size(); ++i)
      l += (i == 0 ? "" : "  ") + cells[i] + std::string(width[i] - cells[i].size(), ' ');
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out << l << "\n";
  };
  line(headers);
  for (const auto& r : rows) line(r);
}

}  // namespace

void WriteText(std::ostream& out, const Comparison& c) {
  out << "tessera sim: " << c.cluster << "\n";
  out << "workload: " << c.workload << ", " << c.jobs << " jobs";
  if (!c.skipped_reason.empty()) out << " (" << c.skipped_reason << ")";
  out << ", seed " << c.seed << "\n\n";
  const auto cols = Columns(c.failures, AnyMoves(c));
  std::vector<size_t> width;
  for (const auto& col : cols) {
    size_t w = col.header.size();
    for (const auto& r : c.runs) w = std::max(w, col.value(r).size());
    width.push_back(w);
  }
  auto row = [&](auto cell) {
    std::string line;
    for (size_t i = 0; i < cols.size(); ++i) {
      std::string v = cell(i);
      line += (i == 0 ? "" : "  ") + v + std::string(width[i] - v.size(), ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  };
  row([&](size_t i) { return cols[i].header; });
  for (const auto& r : c.runs) row([&](size_t i) { return cols[i].value(r); });
  if (c.failures) {
    out << "\nfailures: ";
    if (!c.runs.empty())
      out << c.runs.front().host_failures << " host and " << c.runs.front().cube_failures
          << " cube failures (the same for every run)";
    out << "\n";
  }
  const std::vector<ClassRow> class_rows = ClassRows(c);
  if (!class_rows.empty()) {
    std::vector<std::vector<std::string>> cells;
    for (const ClassRow& r : class_rows) cells.push_back(ClassCells(r));
    out << "\nby size class (one host, sub-cube, cube = 64 chips, super-slice, multi-slice) and "
           "by priority:\n";
    TextTable(out, ClassHeaders(), cells);
  }
  out << "\nutil: allocated chip-time over capacity x makespan; wait: submit to first start; "
         "JCT: submit to finish;\nfrag: free chips no shape of the mix can use; round "
         "waste: allocated chip-time the shape map added over the ask.\n";
}

void WriteJson(std::ostream& out, const Comparison& c) {
  nlohmann::json j = {
      {"cluster", c.cluster},          {"workload", c.workload},         {"jobs", c.jobs},
      {"skippedRows", c.skipped_rows}, {"submitSpanS", c.submit_span_s}, {"seed", c.seed},
      {"failures", c.failures},        {"runs", nlohmann::json::array()}};
  for (const SimResult& r : c.runs) {
    nlohmann::json run = {{"policy", r.policy},
                          {"admission", r.admission},
                          {"totalChips", r.total_chips},
                          {"jobs", r.jobs},
                          {"finished", r.finished},
                          {"failed", r.failed},
                          {"neverPlaced", r.never_placed},
                          {"utilization", r.utilization},
                          {"waitP50S", r.wait_p50_s},
                          {"waitP95S", r.wait_p95_s},
                          {"waitP99S", r.wait_p99_s},
                          {"meanJctS", r.mean_jct_s},
                          {"makespanS", r.makespan_s},
                          {"meanFragmentation", r.mean_fragmentation},
                          {"allocatedChipHours", r.allocated_chip_hours},
                          {"roundingWaste", r.rounding_waste},
                          {"goodput", r.goodput},
                          {"lostChipHours", r.lost_chip_hours},
                          {"hostFailures", r.host_failures},
                          {"cubeFailures", r.cube_failures},
                          {"interruptedJobs", r.interrupted_jobs},
                          {"recoveries", r.recoveries},
                          {"meanTimeToRecoverS", r.mean_time_to_recover_s},
                          {"preemptions", r.preemptions},
                          {"moves", r.moves},
                          {"movedChipHours", r.moved_chip_hours},
                          {"shrinks", r.shrinks},
                          {"grows", r.grows},
                          {"events", r.events},
                          {"eventHash", Hex(r.event_hash)}};
    nlohmann::json never = nlohmann::json::array();
    for (size_t i = 0; i < r.outcomes.size() && never.size() < 20; ++i)
      if (r.outcomes[i].state != JobOutcome::State::kFinished)
        never.push_back({{"job", i}, {"reason", r.outcomes[i].reason}});
    run["notFinishedExamples"] = never;
    run["bySize"] = nlohmann::json::array();
    for (const ClassStats& s : r.by_size) run["bySize"].push_back(ClassJson(s));
    run["wholeCubes"] = ClassJson(r.whole_cubes);
    run["byPriority"] = nlohmann::json::array();
    for (const ClassStats& s : r.by_priority) run["byPriority"].push_back(ClassJson(s));
    j["runs"].push_back(run);
  }
  out << j.dump(2) << "\n";
}

void WriteCsv(std::ostream& out, const Comparison& c) {
  out << "policy,admission,time_s,utilization,fragmentation,queued,running,down_hosts\n";
  for (const SimResult& r : c.runs)
    for (const Sample& s : r.series)
      out << r.policy << "," << r.admission << "," << s.time_s << "," << Fmt("%.6f", s.utilization)
          << "," << Fmt("%.6f", s.fragmentation) << "," << s.queued << "," << s.running << ","
          << s.down_hosts << "\n";
}

void WriteClassCsv(std::ostream& out, const Comparison& c) {
  out << "policy,admission,split,class,jobs,started,finished,wait_p50_s,wait_p95_s,wait_p99_s,"
         "wait_mean_s,jct_p50_s,jct_p95_s,jct_mean_s,preemptions,preempted_jobs\n";
  for (const ClassRow& row : ClassRows(c)) {
    const ClassStats& s = *row.stats;
    out << row.run->policy << "," << row.run->admission << "," << row.split << "," << s.name << ","
        << s.jobs << "," << s.started << "," << s.finished << "," << Fmt("%.0f", s.wait_p50_s)
        << "," << Fmt("%.0f", s.wait_p95_s) << "," << Fmt("%.0f", s.wait_p99_s) << ","
        << Fmt("%.1f", s.wait_mean_s) << "," << Fmt("%.0f", s.jct_p50_s) << ","
        << Fmt("%.0f", s.jct_p95_s) << "," << Fmt("%.1f", s.jct_mean_s) << "," << s.preemptions
        << "," << s.preempted_jobs << "\n";
  }
}

void WriteHtml(std::ostream& out, const Comparison& c) {
  std::vector<Series> util, frag, wait;
  for (const SimResult& r : c.runs) {
    Series u{RunName(r), {}}, f{RunName(r), {}}, w{RunName(r), {}};
    for (const Sample& s : r.series) {
      u.points.emplace_back(static_cast<double>(s.time_s - r.start_s), s.utilization);
      f.points.emplace_back(static_cast<double>(s.time_s - r.start_s), s.fragmentation);
    }
    // Empirical CDF of waiting time; waits of 0 s plot at 1 s on the log axis.
    const size_t n = r.waits_s.size();
    const size_t step = std::max<size_t>(1, n / 1000);
    for (size_t i = 0; i < n; i += step)
      w.points.emplace_back(static_cast<double>(std::max<int64_t>(1, r.waits_s[i])),
                            static_cast<double>(i + 1) / static_cast<double>(n));
    if (n > 0)
      w.points.emplace_back(static_cast<double>(std::max<int64_t>(1, r.waits_s.back())), 1.0);
    util.push_back(std::move(u));
    frag.push_back(std::move(f));
    wait.push_back(std::move(w));
  }
  out << "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>tessera sim report</title>"
         "<style>body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:"
         "collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}"
         "th{background:#f3f3f3}td:first-child,td:nth-child(2){text-align:left}"
         "code{background:#f5f5f5;padding:2px 4px}</style></head><body>";
  out << "<h1>tessera sim</h1><p>" << Escape(c.cluster) << "<br>workload: " << Escape(c.workload)
      << ", " << c.jobs << " jobs, seed " << c.seed << "</p>";
  if (!c.command.empty()) out << "<p><code>" << Escape(c.command) << "</code></p>";
  out << "<table><tr>";
  const auto cols = Columns(c.failures, AnyMoves(c));
  for (const auto& col : cols) out << "<th>" << Escape(col.header) << "</th>";
  out << "</tr>";
  for (const auto& r : c.runs) {
    out << "<tr>";
    for (const auto& col : cols) out << "<td>" << Escape(col.value(r)) << "</td>";
    out << "</tr>";
  }
  out << "</table>";
  const std::vector<ClassRow> class_rows = ClassRows(c);
  if (!class_rows.empty()) {
    out << "<h2>By size class and by priority</h2><p>Size classes: one host (at most 4 chips), "
           "sub-cube (under 64), cube (64), super-slice (one slice over 64), multi-slice; "
           "cube or larger (every job that needs whole cubes) when that spans two classes.</p>"
           "<table><tr>";
    for (const std::string& h : ClassHeaders()) out << "<th>" << Escape(h) << "</th>";
    out << "</tr>";
    for (const ClassRow& r : class_rows) {
      out << "<tr>";
      for (const std::string& v : ClassCells(r)) out << "<td>" << Escape(v) << "</td>";
      out << "</tr>";
    }
    out << "</table>";
  }
  out << "<h2>Utilization over time</h2>"
      << LineChart("allocated chips / total chips", "time since the first submission",
                   "utilization", util, false, 1.0);
  out << "<h2>Waiting time distribution</h2>"
      << LineChart("CDF of waiting time (submit to first start), log scale", "waiting time",
                   "fraction of started jobs", wait, true, 1.0);
  out << "<h2>Fragmentation over time</h2>"
      << LineChart("free chips no shape of the mix can use, over free chips",
                   "time since the first submission", "fragmentation", frag, false, 0.0);
  out << "<p>Made by <code>tessera sim</code>; docs/simulator.md defines every metric.</p>"
         "</body></html>\n";
}

}  // namespace tessera::sim
