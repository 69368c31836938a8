// tessera_takeover_bench: a new leader's start over a large store, step by step, in process (no
// etcd, no agents): where the time between an election and the first accepted write goes (issue
// 35, bench/README.md "Failover at fleet scale"). run.py --failover measures the whole takeover
// on a real etcd; this one splits the head's own part of it and runs in seconds, under perf too.
//
// A MemoryStore gets --jobs stored TrainJobs (--pending of them Pending; tessera_seed_store's
// documents, seed_jobs.h) and --hosts registered hosts (v6e, 4 chips, 4x4 slices). Each job is
// decoded first, as a warm standby's cache holds them (ha/job_cache.h). Then, timed: the
// controller's Load taking the decoded jobs, the metrics' seed, the first tick, and a write (a
// new PriorityClass, as run.py's probe). Prints one JSON object.
//
//   tessera_takeover_bench [--jobs 100000] [--pending 10000] [--hosts 1000] [--repeat 3]
//       [--ticks 0]   (ticks after the probe's write, for a profile of the steady state)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "api/metrics.h"
#include "codec/resource_json.h"
#include "common/clock.h"
#include "control_plane/seed_jobs.h"
#include "controller/controller.h"
#include "protocol/credential.h"
#include "protocol/wire.h"
#include "store/memory_store.h"

namespace {

using namespace tessera;
using Json = nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

double MsSince(SteadyClock::time_point start) {
  return std::chrono::duration<double, std::milli>(SteadyClock::now() - start).count();
}

void Check(const Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "tessera_takeover_bench: %s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

template <typename T>
T Take(Result<T> r, const char* what) {
  Check(r.status(), what);
  return std::move(r).value();
}

std::string Registration(int i) {
  char name[32];
  std::snprintf(name, sizeof name, "host-%05d", i);
  return Json{
      {"name", name},
      {"generation", "v6e"},
      {"chips", 4},
      {"address", "127.0.0.1"},
      {"agentPort", 9000},
      {"credential", protocol::Sha256Hex("bench credential " + std::to_string(i))},
      {"slice",
       {{"name", "slice-" + std::to_string(i / 4)}, {"topology", "4x4"}, {"worker", i % 4}}}}
      .dump();
}

int Usage(const std::string& why) {
  std::fprintf(stderr,
               "tessera_takeover_bench: %s\nusage: tessera_takeover_bench [--jobs N] [--pending K] "
               "[--hosts H] [--repeat R] [--ticks T]\n",
               why.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t jobs = 100'000, pending = 10'000, hosts = 1000, repeat = 3, ticks = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) return Usage(arg + ": needs a value");
    char* end = nullptr;
    const long long v = std::strtoll(argv[++i], &end, 10);
    if (*end != '\0' || v < 0) return Usage(arg + ": a whole number >= 0");
    if (arg == "--jobs")
      jobs = v;
    else if (arg == "--pending")
      pending = v;
    else if (arg == "--hosts")
      hosts = v;
    else if (arg == "--repeat")
      repeat = v;
    else if (arg == "--ticks")
      ticks = v;
    else
      return Usage("unknown option " + arg);
  }
  if (pending > jobs) return Usage("--pending: at most --jobs");

  auto store = Take(store::MemoryStore::Open(), "store");
  FakeClock clock(std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count());
  bench::SeedOptions so;
  so.jobs = jobs;
  so.pending = pending;
  const auto seeded = Take(bench::SeedJobs(*store, so), "seed");

  {
    controller::Controller first(*store, clock, controller::ControllerOptions{});
    Check(first.Load(), "load after the seed");
    std::vector<protocol::Registration> regs;
    for (int64_t i = 0; i < hosts; ++i)
      regs.push_back(Take(protocol::ParseRegistration(Registration(int(i))), "registration"));
    for (auto& answer : first.RegisterHosts(regs)) Check(answer.status(), "register");
  }
  Json runs = Json::array();
  for (int64_t run = 0; run < repeat; ++run) {
    // The warm standby's cache: every stored job decoded, by name and version.
    std::map<std::string, std::pair<int64_t, TrainJob>, std::less<>> cache;
    for (const auto& obj : Take(store->List(codec::kTrainJobKind), "list")) {
      const Json doc = Json::parse(obj.body);
      cache.emplace(obj.name,
                    std::pair{obj.resource_version, Take(codec::TrainJobFromJson(doc), "decode")});
    }
    controller::ControllerOptions co;
    co.decoded_job = [&cache](const store::Object& obj) -> std::optional<TrainJob> {
      auto it = cache.find(obj.name);
      if (it == cache.end() || it->second.first != obj.resource_version) return std::nullopt;
      std::optional<TrainJob> job(std::move(it->second.second));
      cache.erase(it);
      return job;
    };
    co.term = uint64_t(run + 2);
    controller::Controller c(*store, clock, co);
    api::HeadMetrics metrics(clock);
    c.SetChangeListener([&metrics](const std::string& kind, const std::string& type,
                                   const Json& object) { metrics.OnChange(kind, type, object); });
    auto t = SteadyClock::now();
    Check(c.Load(), "load");
    const double load_ms = MsSince(t);
    t = SteadyClock::now();
    c.VisitJobs([&metrics](const TrainJob& job) { metrics.SeedJob(job); });  // as the head does
    const double seed_ms = MsSince(t);
    clock.AdvanceMs(100);
    t = SteadyClock::now();
    Check(c.Tick(), "first tick");
    const double tick_ms = MsSince(t);
    t = SteadyClock::now();
    Take(c.Apply(Json{{"apiVersion", "tessera/v1"},
                      {"kind", "PriorityClass"},
                      {"metadata", {{"name", "probe-" + std::to_string(run)}}},
                      {"value", 1}}),
         "apply");
    const double write_ms = MsSince(t);
    clock.AdvanceMs(100);
    t = SteadyClock::now();
    Check(c.Tick(), "second tick");
    const double tick2_ms = MsSince(t);
    // More ticks, for a profile of the steady state (perf record ... --ticks 20).
    t = SteadyClock::now();
    for (int64_t i = 0; i < ticks; ++i) {
      clock.AdvanceMs(100);
      Check(c.Tick(), "tick");
    }
    const double more_ticks_ms = ticks > 0 ? MsSince(t) / double(ticks) : 0.0;
    runs.push_back({{"loadMs", load_ms},
                    {"metricsSeedMs", seed_ms},
                    {"firstTickMs", tick_ms},
                    {"writeMs", write_ms},
                    {"secondTickMs", tick2_ms},
                    {"laterTickMs", more_ticks_ms}});
  }
  std::printf(
      "%s\n",
      Json{{"jobs", seeded.jobs}, {"pending", seeded.pending}, {"hosts", hosts}, {"runs", runs}}
          .dump()
          .c_str());
  return 0;
}
