// tessera_flush_commit_bench: how long a status flush's commit takes on etcd once the change log
// is full, the commit a head's tick makes under its lock for 1,000 running jobs (bench/README.md,
// "etcd at 1,000 running jobs"). A plain program against a running etcd:
//
//   tessera_flush_commit_bench --store etcd://127.0.0.1:2379 [--jobs 1000] [--doc-bytes 4096]
//       [--batch 100] [--commits 60] [--log-limit 10000]
//
// It creates `jobs` documents of `doc-bytes` under a fresh prefix, then updates them `batch` to a
// commit, in turn as the flush writes them, until the change log holds `log-limit` entries (the
// head's default), and then times `commits` more such commits. A standby (a second store on the
// prefix, as an HA head's warm copy) follows once the log is full and once more after the timed
// commits: that second Follow reads the `commits` logged flushes, as a standby behind by them.
// Prints one JSON object: the commit times (p50, p90, max, mean in ms), the standby's catch-up
// (its time, or the error), and etcd's database size before and after.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "control_plane/flag_args.h"
#include "store/etcd_client.h"
#include "store/etcd_store.h"

namespace {

int Usage(const std::string& why) {
  std::fprintf(stderr,
               "tessera_flush_commit_bench: %s\nusage: tessera_flush_commit_bench --store "
               "etcd://H:P[,H:P...] [--jobs N] [--doc-bytes B] [--batch K] [--commits C] "
               "[--log-limit L]\n",
               why.c_str());
  return 2;
}

double Percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  return v[i];
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tessera;
  std::string store_url;
  long long jobs = 1000, doc_bytes = 4096, batch = 100, commits = 60, log_limit = 10000;
  bench::FlagArgs args(argc, argv, Usage);
  std::string arg;
  while (args.Next(arg)) {
    if (arg == "--store") {
      store_url = args.Value();
    } else if (arg == "--jobs") {
      jobs = args.Number(1);
    } else if (arg == "--doc-bytes") {
      doc_bytes = args.Number(1);
    } else if (arg == "--batch") {
      batch = args.Number(1);
    } else if (arg == "--commits") {
      commits = args.Number(1);
    } else if (arg == "--log-limit") {
      log_limit = args.Number(1);
    } else {
      return Usage("unknown argument " + arg);
    }
  }
  if (store_url.empty()) return Usage("--store etcd://... is required");
  if (batch > jobs) return Usage("--batch: at most --jobs");
  auto endpoints = store::ParseEtcdEndpoints(store_url, "--store");
  if (!endpoints.ok()) return Usage(endpoints.status().message());
  store::EtcdStoreOptions so;
  so.etcd.endpoints = *endpoints;
  so.prefix = "/flush-bench-" + std::to_string(::getpid()) + "/";
  store::Options options;
  options.change_log_limit = static_cast<size_t>(log_limit);
  auto opened = store::EtcdStore::Open(so, options);
  if (!opened.ok()) return Usage(opened.status().ToString());
  store::EtcdStore& s = **opened;
  auto db_mib = [&]() -> double {
    auto status = s.client().Call("/v3/maintenance/status", nlohmann::json::object());
    return status.ok() ? static_cast<double>(store::etcd::Int(*status, "dbSize")) / (1 << 20) : 0;
  };
  const double db_before = db_mib();

  auto body = [&](long long job, long long step) {
    std::string b = "{\"job\":" + std::to_string(job) + ",\"step\":" + std::to_string(step) + ",";
    b.resize(static_cast<size_t>(doc_bytes), 'x');
    return b;
  };
  std::vector<int64_t> versions(static_cast<size_t>(jobs), 0);
  for (long long j = 0; j < jobs; j += batch) {
    store::WriteBatch create;
    for (long long k = j; k < std::min(jobs, j + batch); ++k)
      create.Create("TrainJob", "job-" + std::to_string(k), body(k, 0));
    auto committed = s.Commit(create);
    if (!committed.ok()) return Usage("creating the jobs: " + committed.status().ToString());
    for (long long k = j; k < std::min(jobs, j + batch); ++k) versions[k] = *committed;
  }
  long long next = 0, step = 0;
  auto flush = [&]() -> double {
    store::WriteBatch b;
    std::vector<long long> written;
    for (long long k = 0; k < batch; ++k, next = (next + 1) % jobs) {
      b.Update("TrainJob", "job-" + std::to_string(next), body(next, ++step), versions[next]);
      written.push_back(next);
    }
    const auto start = std::chrono::steady_clock::now();
    auto committed = s.Commit(b);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!committed.ok()) {
      std::fprintf(stderr, "tessera_flush_commit_bench: %s\n",
                   committed.status().ToString().c_str());
      std::exit(1);
    }
    for (long long k : written) versions[k] = *committed;
    return ms;
  };
  // Until the log holds log_limit entries: every commit after that drops old revisions.
  for (long long entries = jobs; entries < log_limit; entries += batch) flush();
  auto standby = store::EtcdStore::Open(so, options);
  if (!standby.ok()) return Usage("the standby: " + standby.status().ToString());
  auto copied = (*standby)->Follow();  // its first copy: every object
  if (!copied.ok()) return Usage("the standby's first copy: " + copied.status().ToString());
  std::vector<double> times;
  for (long long c = 0; c < commits; ++c) times.push_back(flush());
  const auto follow_start = std::chrono::steady_clock::now();
  auto followed = (*standby)->Follow();  // behind by the timed commits
  const double follow_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - follow_start)
          .count();
  double sum = 0;
  for (double t : times) sum += t;
  nlohmann::json out = {{"jobs", jobs},
                        {"docBytes", doc_bytes},
                        {"batch", batch},
                        {"logLimit", log_limit},
                        {"commits", commits},
                        {"commitMsP50", Percentile(times, 0.5)},
                        {"commitMsP90", Percentile(times, 0.9)},
                        {"commitMsMax", Percentile(times, 1.0)},
                        {"commitMsMean", sum / static_cast<double>(times.size())},
                        {"standbyFollowMs", follow_ms},
                        {"standbyFollowed", followed.ok() ? *followed : -1},
                        {"standbyFollowError", followed.ok() ? "" : followed.status().ToString()},
                        {"etcdDbMiBBefore", db_before},
                        {"etcdDbMiBAfter", db_mib()}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
