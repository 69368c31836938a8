// The Philly cluster_job_log reader (workload.h, ReadPhilly): the trace README's own entry,
// skips by reason, errors by job and field, and an ITP trace written out as a Philly log and
// read back.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <tuple>

#include "sim/workload.h"

namespace tessera::sim {
namespace {

Result<Workload> ReadLog(const std::string& text, TraceFormat f = TraceFormat::kAuto) {
  std::istringstream in(text);
  return ReadTrace(in, "log", f);
}

std::string LogErrorOf(const std::string& text) {
  auto w = ReadLog(text, TraceFormat::kPhilly);
  EXPECT_FALSE(w.ok()) << text;
  return w.ok() ? "" : w.status().message();
}

// A job of the log: `attempts` is the JSON of its list of attempts.
std::string Job(const std::string& id, const std::string& submitted, const std::string& attempts) {
  return R"({"status": "Pass", "vc": "ee9e8c", "jobid": ")" + id + R"(", "attempts": )" + attempts +
         R"(, "submitted_time": )" + submitted + R"(, "user": "ce2f4c"})";
}

// An attempt on machines of `gpus` GPUs each.
std::string Attempt(const std::string& start, const std::string& end, std::vector<int> gpus) {
  std::string detail;
  for (size_t m = 0; m < gpus.size(); ++m) {
    std::string names;
    for (int g = 0; g < gpus[m]; ++g)
      names += (g ? ", " : "") + ("\"gpu" + std::to_string(g)) + "\"";
    detail += (m ? ", " : "") + std::string(R"({"ip": "m)") + std::to_string(m) +
              R"(", "gpus": [)" + names + "]}";
  }
  return R"({"start_time": )" + start + R"(, "end_time": )" + end + R"(, "detail": [)" + detail +
         "]}";
}

std::string Q(const std::string& s) { return "\"" + s + "\""; }

// The example entry of the trace's README, as it is printed there.
TEST(PhillyReader, ReadsTheReadmeEntry) {
  const std::string log =
      "[\n" +
      Job("application_1506638472019_14199", Q("2017-10-07 01:11:39"),
          "[" + Attempt(Q("2017-10-07 01:12:09"), Q("2017-10-07 01:13:23"), {8}) + ",\n" +
              Attempt(Q("2017-10-07 01:13:30"), Q("2017-10-09 06:53:12"), {8}) + "]") +
      "\n]\n";
  auto w = ReadLog(log);  // auto: the '[' says Philly
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->source, "log (philly)");
  ASSERT_EQ(w->jobs.size(), 1u);
  const JobSpec& j = w->jobs[0];
  EXPECT_EQ(j.name, "application_1506638472019_14199");
  EXPECT_EQ(j.submit_s, 0);
  EXPECT_EQ(j.duration_s, 193263);  // 01:12:09 on the 7th to 06:53:12 on the 9th
  EXPECT_EQ(j.accelerators, 8);
  EXPECT_EQ(w->skipped_rows, 0);
  EXPECT_EQ(w->skipped_reason, "");
  EXPECT_FALSE(w->has_priorities);
}

TEST(PhillyReader, SortsBySubmissionAndSkipsJobsWithoutARunTime) {
  const std::string t = Q("2017-10-07 00:00:00");
  const std::string log =
      "[" +
      Job("late", Q("2017-10-08 00:00:10"),
          "[" + Attempt(Q("2017-10-08 00:01:00"), Q("2017-10-08 00:02:00"), {8, 8}) + "]") +
      "," +
      Job("first", Q("2017-10-08 00:00:00"),
          "[" + Attempt(Q("2017-10-08 00:00:05"), "null", {2}) + "," +
              Attempt(Q("2017-10-08 00:30:00"), Q("2017-10-08 01:00:05"), {4}) + "]") +
      "," + Job("tie-a", Q("2017-10-08 00:00:10"), "[" + Attempt(t, t, {1}) + "]") + "," +
      Job("never", Q("2017-10-07 00:00:00"), "[]") + "," +
      Job("no-start", Q("2017-10-07 00:00:00"), "[" + Attempt("null", t, {1}) + "]") + "," +
      Job("running", Q("2017-10-07 00:00:00"), "[" + Attempt(t, Q("None"), {1}) + "]") + "," +
      Job("running2", Q("2017-10-07 00:00:00"), "[" + Attempt(t, Q(""), {1}) + "]") + "," +
      Job("no-gpu", Q("2017-10-07 00:00:00"), "[" + Attempt(t, t, {}) + "]") + "," +
      Job("backwards", Q("2017-10-07 00:00:00"),
          "[" + Attempt(t, Q("2017-10-06 23:59:59"), {1}) + "]") +
      "," + Job("no-submit", "null", "[" + Attempt(t, t, {1}) + "]") + "]";
  auto w = ReadLog(log);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_EQ(w->jobs.size(), 3u);
  // Sorted by submission, ties in the log's order, timed from the first kept submission.
  EXPECT_EQ(w->jobs[0].name, "first");
  EXPECT_EQ(w->jobs[0].submit_s, 0);
  EXPECT_EQ(w->jobs[0].accelerators, 2);   // the first attempt's GPUs
  EXPECT_EQ(w->jobs[0].duration_s, 3600);  // first start to last end, the gap included
  EXPECT_EQ(w->jobs[1].name, "late");
  EXPECT_EQ(w->jobs[1].submit_s, 10);
  EXPECT_EQ(w->jobs[1].accelerators, 16);  // two machines of 8
  EXPECT_EQ(w->jobs[2].name, "tie-a");
  EXPECT_EQ(w->jobs[2].duration_s, 1);  // a zero-length attempt runs one second
  EXPECT_EQ(w->skipped_rows, 7);
  EXPECT_EQ(w->skipped_reason,
            "7 jobs skipped: 1 with no attempt, 1 with no submitted_time, 1 whose first attempt "
            "has no start_time, 2 still running (the last attempt has no end_time), 1 whose "
            "first attempt lists no GPU, 1 whose last attempt ends before the first starts");
}

TEST(PhillyReader, ErrorsNameTheJobAndTheField) {
  const std::string t = Q("2017-10-07 00:00:00");
  const std::string ok = Attempt(t, t, {1});
  EXPECT_EQ(LogErrorOf(R"({"jobs": []})"),
            "log: is a JSON object, expected the Philly cluster_job_log: a list of jobs");
  EXPECT_EQ(LogErrorOf("[" + Job("a", t, "[" + ok + "]") + ", 7]"),
            "log: job 1: is a number, expected an object");
  EXPECT_EQ(LogErrorOf(R"([{"attempts": []}])"),
            "log: job 0: jobid: missing or not a non-empty string");
  EXPECT_EQ(LogErrorOf("[" + Job("a", Q("2017-13-01 00:00:00"), "[]") + "]"),
            "log: job 0 (a): submitted_time: '2017-13-01 00:00:00' is not a time "
            "YYYY-MM-DD HH:MM:SS");
  EXPECT_EQ(LogErrorOf("[" + Job("a", Q("2017-02-29 00:00:00"), "[]") + "]"),
            "log: job 0 (a): submitted_time: '2017-02-29 00:00:00' is not a time "
            "YYYY-MM-DD HH:MM:SS");
  EXPECT_EQ(LogErrorOf("[" + Job("a", "1507338699", "[]") + "]"),
            "log: job 0 (a): submitted_time: is a number, expected a time YYYY-MM-DD HH:MM:SS");
  EXPECT_EQ(LogErrorOf("[" + Job("a", t, "{}") + "]"),
            "log: job 0 (a): attempts: missing or not a list (an empty list: the job never "
            "started)");
  EXPECT_EQ(LogErrorOf("[" + Job("a", t, "[" + ok + ", 3]") + "]"),
            "log: job 0 (a): attempts[1]: is a number, expected an object");
  EXPECT_EQ(
      LogErrorOf("[" + Job("a", t, "[" + Attempt(t, Q("2017-10-07T00:00:00"), {1}) + "]") + "]"),
      "log: job 0 (a): attempts[0].end_time: '2017-10-07T00:00:00' is not a time "
      "YYYY-MM-DD HH:MM:SS");
  EXPECT_EQ(
      LogErrorOf("[" + Job("a", t, R"([{"start_time": )" + t + R"(, "detail": [{"ip": "m1"}]}])") +
                 "]"),
      "log: job 0 (a): attempts[0].detail[0].gpus: missing or not a list of GPU names");
  EXPECT_NE(LogErrorOf("[" + Job("a", t, "[" + ok + "]")).find("log: malformed JSON"),
            std::string::npos);
  // A leap day is a day.
  auto w = ReadLog("[" + Job("a", Q("2016-02-29 23:59:59"), "[" + ok + "]") + "]");
  EXPECT_TRUE(w.ok()) << w.status().ToString();
}

TEST(PhillyReader, IsAFormatByName) {
  auto f = ParseTraceFormat("philly");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f, TraceFormat::kPhilly);
  EXPECT_EQ(ParseTraceFormat("json").status().message(),
            "trace format: 'json' is not one of auto, itp, openb, philly");
  // A CSV is not taken for a Philly log, and an unknown header names the Philly format too.
  std::istringstream csv("a,b\n1,2\n");
  auto w = ReadTrace(csv, "t.csv");
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("or a Philly cluster_job_log"), std::string::npos);
}

// "YYYY-MM-DD HH:MM:SS" of `s` seconds after 1970-01-01 (the civil-from-days inverse of the
// reader's conversion, written independently for the round trip below).
std::string FormatTime(int64_t s) {
  int64_t days = s / 86400, rest = s % 86400;
  int y = 1970, m = 1;
  auto month_days = [](int year, int month) {
    static const int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    const bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    return kDays[month - 1] + (month == 2 && leap ? 1 : 0);
  };
  while (days >= month_days(y, m)) {
    days -= month_days(y, m);
    if (++m == 13) m = 1, ++y;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02d %02lld:%02lld:%02lld", y, m,
                static_cast<int>(days) + 1, static_cast<long long>(rest / 3600),
                static_cast<long long>(rest / 60 % 60), static_cast<long long>(rest % 60));
  return buf;
}

// A real trace written out as a Philly log (one attempt each, machines of up to 8 GPUs, from
// 2016-02-20 so the times cross a leap day and months), in reverse order, reads back as the
// same jobs.
TEST(PhillyReader, AnItpTraceWrittenAsALogReadsBackTheSame) {
  std::ifstream file(std::string(TESSERA_TRACES_DIR) + "/microsoft-itp-elasticflow/cluster01.csv");
  if (!file) GTEST_SKIP() << "traces not present";
  auto itp = ReadTrace(file, "cluster01.csv");
  ASSERT_TRUE(itp.ok()) << itp.status().ToString();
  const int64_t base = 1455926400;  // 2016-02-20 00:00:00
  ASSERT_EQ(FormatTime(base), "2016-02-20 00:00:00");
  std::string log = "[";
  for (size_t i = itp->jobs.size(); i-- > 0;) {
    const JobSpec& j = itp->jobs[i];
    std::vector<int> machines(static_cast<size_t>(j.accelerators / 8), 8);
    if (j.accelerators % 8) machines.push_back(j.accelerators % 8);
    const int64_t start = base + j.submit_s + 60;
    log += Job(
        j.name, Q(FormatTime(base + j.submit_s)),
        "[" + Attempt(Q(FormatTime(start)), Q(FormatTime(start + j.duration_s)), machines) + "]");
    log += i ? ",\n" : "]\n";
  }
  auto philly = ReadLog(log);
  ASSERT_TRUE(philly.ok()) << philly.status().ToString();
  auto key = [](const JobSpec& j) {
    return std::make_tuple(j.submit_s, j.name, j.duration_s, j.accelerators);
  };
  std::vector<std::tuple<int64_t, std::string, int64_t, int>> want, got;
  const int64_t first = itp->jobs.front().submit_s;
  for (JobSpec j : itp->jobs) {
    j.submit_s -= first;
    want.push_back(key(j));
  }
  for (const JobSpec& j : philly->jobs) got.push_back(key(j));
  std::sort(want.begin(), want.end());
  EXPECT_TRUE(
      std::is_sorted(philly->jobs.begin(), philly->jobs.end(),
                     [](const JobSpec& a, const JobSpec& b) { return a.submit_s < b.submit_s; }));
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, want);
  EXPECT_GT(want.size(), 100u);
  EXPECT_EQ(philly->skipped_rows, 0);
}

}  // namespace
}  // namespace tessera::sim
