// The Microsoft Philly trace (msr-fiddle/philly-traces, ATC'19) as a simulator workload:
// `cluster_job_log`, a JSON list of jobs, each with its scheduling attempts. The job's size and
// run time are those of the trace's own analysis notebook: the GPUs of its first attempt, and
// the time from the first attempt's start to the last attempt's end.
#include <algorithm>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/civil_time.h"
#include "common/json_limits.h"
#include "sim/workload.h"

namespace tessera::sim {
namespace {

using nlohmann::json;

// Why a job of the log is left out. The log has jobs that never started, attempts whose times
// were not recorded, and jobs still running when it was taken (its README says so).
enum Skip {
  kNoAttempt,
  kNoSubmitted,
  kNoStart,
  kStillRunning,
  kNoGpu,
  kEndsBeforeStart,
  kSkipKinds
};
constexpr const char* kSkipText[kSkipKinds] = {"with no attempt",
                                               "with no submitted_time",
                                               "whose first attempt has no start_time",
                                               "still running (the last attempt has no end_time)",
                                               "whose first attempt lists no GPU",
                                               "whose last attempt ends before the first starts"};

class JobReader {
 public:
  explicit JobReader(std::string_view source) : source_(source) {}

  // The job at `index` of the list, or the reason it is skipped (`skip`), or an error.
  Result<std::optional<JobSpec>> Read(const json& job, size_t index, Skip& skip) {
    index_ = index;
    name_.clear();
    if (!job.is_object()) return Error("", "is " + Kind(job) + ", expected an object");
    auto id = job.find("jobid");
    if (id == job.end() || !id->is_string() || id->get_ref<const std::string&>().empty())
      return Error("jobid", "missing or not a non-empty string");
    name_ = id->get<std::string>();

    auto submitted = Time(job, "submitted_time");
    if (!submitted.ok()) return submitted.status();
    auto attempts = job.find("attempts");
    if (attempts == job.end() || !attempts->is_array())
      return Error("attempts", "missing or not a list (an empty list: the job never started)");
    if (attempts->empty()) return Skipped(skip, kNoAttempt);
    for (size_t i = 0; i < attempts->size(); ++i)
      if (!(*attempts)[i].is_object())
        return Error("attempts[" + std::to_string(i) + "]",
                     "is " + Kind((*attempts)[i]) + ", expected an object");

    auto gpus = Gpus(attempts->front());
    if (!gpus.ok()) return gpus.status();
    auto start = Time(attempts->front(), "start_time", "attempts[0].");
    if (!start.ok()) return start.status();
    const std::string last = "attempts[" + std::to_string(attempts->size() - 1) + "].";
    auto end = Time(attempts->back(), "end_time", last);
    if (!end.ok()) return end.status();
    if (!*submitted) return Skipped(skip, kNoSubmitted);
    if (!*start) return Skipped(skip, kNoStart);
    if (!*end) return Skipped(skip, kStillRunning);
    if (*gpus == 0) return Skipped(skip, kNoGpu);
    if (**end < **start) return Skipped(skip, kEndsBeforeStart);

    JobSpec j;
    j.name = name_;
    j.submit_s = **submitted;  // absolute here; made relative once every job is read
    j.duration_s = std::max<int64_t>(1, **end - **start);
    j.accelerators = *gpus;
    return std::optional<JobSpec>(std::move(j));
  }

 private:
  static std::string Kind(const json& v) { return std::string("a ") + v.type_name(); }

  Status Error(const std::string& field, const std::string& what) const {
    std::string where = source_ + ": job " + std::to_string(index_);
    if (!name_.empty()) where += " (" + name_ + ")";
    return InvalidArgument(where + (field.empty() ? "" : ": " + field) + ": " + what);
  }

  static Result<std::optional<JobSpec>> Skipped(Skip& skip, Skip why) {
    skip = why;
    return std::optional<JobSpec>();
  }

  // A time field: nullopt when absent, null, "" or "None" (the trace's notebook reads all three
  // as no time), an error when it is anything but a "YYYY-MM-DD HH:MM:SS" string.
  Result<std::optional<int64_t>> Time(const json& object, const char* field,
                                      const std::string& prefix = "") const {
    auto it = object.find(field);
    if (it == object.end() || it->is_null()) return std::optional<int64_t>();
    if (!it->is_string())
      return Error(prefix + field, "is " + Kind(*it) + ", expected a time YYYY-MM-DD HH:MM:SS");
    const auto& text = it->get_ref<const std::string&>();
    if (text.empty() || text == "None") return std::optional<int64_t>();
    auto t = ParseDateTime(text);  // the log's local time, as written
    if (!t) return Error(prefix + field, ShownText(text) + " is not a time YYYY-MM-DD HH:MM:SS");
    return std::optional<int64_t>(*t);
  }

  // The GPUs of an attempt: the lengths of its machines' `gpus` lists, summed.
  Result<int> Gpus(const json& attempt) const {
    auto detail = attempt.find("detail");
    if (detail == attempt.end() || detail->is_null()) return 0;
    if (!detail->is_array())
      return Error("attempts[0].detail", "is " + Kind(*detail) + ", expected a list of machines");
    int64_t total = 0;
    for (size_t i = 0; i < detail->size(); ++i) {
      const json& machine = (*detail)[i];
      const std::string at = "attempts[0].detail[" + std::to_string(i) + "]";
      if (!machine.is_object()) return Error(at, "is " + Kind(machine) + ", expected an object");
      auto gpus = machine.find("gpus");
      if (gpus == machine.end() || !gpus->is_array())
        return Error(at + ".gpus", "missing or not a list of GPU names");
      total += static_cast<int64_t>(gpus->size());
    }
    if (total > (1 << 20)) return Error("attempts[0].detail", "more than 1,048,576 GPUs");
    return static_cast<int>(total);
  }

  std::string source_;
  size_t index_ = 0;
  std::string name_;
};

}  // namespace

Result<Workload> ReadPhilly(std::istream& in, std::string_view source) {
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  auto doc = ParseJson(text, source);
  if (!doc.ok()) return doc.status();
  if (!doc->is_array())
    return InvalidArgument(std::string(source) + ": is a JSON " + doc->type_name() +
                           ", expected the Philly cluster_job_log: a list of jobs");
  Workload w;
  w.source = std::string(source) + " (philly)";
  JobReader reader(source);
  int64_t skipped[kSkipKinds] = {};
  for (size_t i = 0; i < doc->size(); ++i) {
    Skip why = kNoAttempt;
    auto job = reader.Read((*doc)[i], i, why);
    if (!job.ok()) return job.status();
    if (!*job) {
      ++skipped[why];
      ++w.skipped_rows;
      continue;
    }
    w.jobs.push_back(std::move(**job));
  }
  // Nothing says the log is in submission order (the notebook does not rely on it): sort it
  // (stably, so ties keep the log's order) and count time from the first submission.
  std::stable_sort(w.jobs.begin(), w.jobs.end(),
                   [](const JobSpec& a, const JobSpec& b) { return a.submit_s < b.submit_s; });
  const int64_t first = w.jobs.empty() ? 0 : w.jobs.front().submit_s;
  for (JobSpec& j : w.jobs) j.submit_s -= first;
  for (int k = 0; k < kSkipKinds; ++k) {
    if (skipped[k] == 0) continue;
    w.skipped_reason +=
        (w.skipped_reason.empty() ? "" : ", ") + std::to_string(skipped[k]) + " " + kSkipText[k];
  }
  if (w.skipped_rows > 0)
    w.skipped_reason = std::to_string(w.skipped_rows) + " jobs skipped: " + w.skipped_reason;
  return w;
}

}  // namespace tessera::sim
