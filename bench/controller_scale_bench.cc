// Controller figures at fleet scale (issue 35), driving the controller directly (no HTTP, no
// agents: bench/control_plane measures those):
//   - `get jobs` with 100,000 stored jobs: the whole list against one page of 500
//     (Controller::ListPage), with the part of the whole list that holds the controller's lock
//     (the copy of every job);
//   - store writes per second from heartbeats at 10,000 hosts, idle, then with 1,000 running
//     jobs whose workers report progress every second: a FakeClock advanced 1 s per round,
//     every host heartbeating once a round, then the head's Tick; writes counted by
//     store::CountingStore over a MemoryStore.
// Prints one line per figure. Usage: controller_scale_bench [--jobs N] [--hosts N]
// [--running N] [--seconds N].
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "controller/controller.h"
#include "protocol/credential.h"
#include "store/counting_store.h"
#include "store/memory_store.h"

namespace tessera::controller {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void Check(const Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

template <typename T>
T Take(Result<T> r, const char* what) {
  Check(r.status(), what);
  return std::move(r).value();
}

Json ScaleJobDoc(const std::string& name) {
  return {{"apiVersion", "tessera/v1"},
          {"kind", "TrainJob"},
          {"metadata", {{"name", name}}},
          {"spec",
           {{"accelerator", "v6e"},
            {"topology", "4x4"},
            {"slices", 1},
            {"template", {{"command", {"python3", "train.py"}}}}}}};
}

std::string ScaleHostName(int i) {
  char name[32];
  std::snprintf(name, sizeof name, "h%05d", i);
  return name;
}

Json ScaleRegistration(int i) {
  return {{"name", ScaleHostName(i)},
          {"generation", "v6e"},
          {"chips", 4},
          {"address", "127.0.0.1"},
          {"agentPort", 9000},
          {"credential", protocol::Sha256Hex("bench credential " + std::to_string(i))},
          {"slice",
           {{"name", "slice-" + std::to_string(i / 4)}, {"topology", "4x4"}, {"worker", i % 4}}}};
}

// The list of 100,000 jobs: one job made through the controller gives the stored document;
// copies of it (names and uids changed) are written in batches, then a controller loads them.
void ListFigures(int jobs) {
  FakeClock clock;
  auto seed_store = Take(store::MemoryStore::Open(), "store");
  {
    Controller seed(*seed_store, clock, ControllerOptions{});
    Check(seed.Load(), "load");
    Take(seed.CreateJob(ScaleJobDoc("seed")), "create");
  }
  const Json stored = Json::parse(Take(seed_store->Get(codec::kTrainJobKind, "seed"), "get").body);
  auto store = Take(store::MemoryStore::Open(), "store");
  for (int from = 0; from < jobs; from += 1000) {
    store::WriteBatch batch;
    for (int i = from; i < std::min(jobs, from + 1000); ++i) {
      Json doc = stored;
      const std::string name = "job-" + std::to_string(i);
      doc["metadata"]["name"] = name;
      doc["metadata"]["uid"] = uint64_t(i + 1);
      batch.Put(codec::kTrainJobKind, name, doc.dump());
    }
    Take(store->Commit(batch), "commit");
  }
  Controller c(*store, clock, ControllerOptions{});
  const auto load_start = Clock::now();
  Check(c.Load(), "load");
  std::printf("jobs stored: %d (load %.0f ms)\n", jobs, MsSince(load_start));

  std::vector<double> whole, copy, page, last_page;
  size_t whole_items = 0, page_items = 0;
  for (int run = 0; run < 7; ++run) {
    auto t = Clock::now();
    auto listed = c.ListWithVersion(codec::kTrainJobKind);
    whole_items = listed->list["items"].size();
    const std::string text = listed->list.dump();  // the answer as the head sends it
    whole.push_back(MsSince(t));
    t = Clock::now();
    const std::vector<TrainJob> copied = c.CopyJobs();  // what the whole list does under the lock
    copy.push_back(MsSince(t));
    t = Clock::now();
    auto first = Take(c.ListPage(codec::kTrainJobKind, {"", 500, ""}), "page");
    page_items = first.list["items"].size();
    const std::string page_text = first.list.dump();
    page.push_back(MsSince(t));
    t = Clock::now();
    auto deep = Take(c.ListPage(codec::kTrainJobKind, {UidPosition(uint64_t(jobs - 500)), 500, ""}),
                     "page");
    const std::string deep_text = deep.list.dump();
    last_page.push_back(MsSince(t));
  }
  std::printf("get jobs, whole list (%zu items, JSON text included): median %.1f ms\n", whole_items,
              Median(whole));
  std::printf("  of which under the controller's lock (copy of every job): median %.1f ms\n",
              Median(copy));
  std::printf(
      "get jobs, first page of %zu (lock: scan of uids + copy of the page): median %.2f ms\n",
      page_items, Median(page));
  std::printf("get jobs, last page of 500: median %.2f ms\n", Median(last_page));
}

// Heartbeats of every host for `seconds` rounds; returns store writes per (simulated) second.
double WritesPerSecond(Controller& c, FakeClock& clock, const store::CountingStore& counting,
                       int hosts, int seconds, bool progress, double& wall_ms_per_round) {
  const uint64_t before = counting.counts().writes();
  std::vector<double> rounds;
  for (int s = 0; s < seconds; ++s) {
    clock.AdvanceMs(1000);
    const auto start = Clock::now();
    for (int i = 0; i < hosts; ++i) {
      const std::string name = ScaleHostName(i);
      const Json a = Take(c.Assignments(name), "assignments");
      Json workers = Json::array(), lines = Json::array();
      for (const Json& x : a["assignments"]) {
        workers.push_back({{"job", x["job"]},
                           {"uid", x["uid"]},
                           {"attempt", x["attempt"]},
                           {"rank", x["rank"]},
                           {"pid", 100},
                           {"startedAtMs", 0},
                           {"state", "Running"},
                           {"exitCode", 0},
                           {"signal", 0},
                           {"finishedAtMs", 0}});
        if (progress)
          lines.push_back({{"job", x["job"]},
                           {"uid", x["uid"]},
                           {"attempt", x["attempt"]},
                           {"rank", x["rank"]},
                           {"type", "progress"},
                           {"step", 10 * (s + 1)},
                           {"timeMs", clock.NowMs()}});
      }
      auto beat = Take(
          protocol::ParseHeartbeat(
              Json{{"workers", workers}, {"progress", lines}, {"revision", a["revision"]}}.dump()),
          "heartbeat");
      Take(c.Heartbeat(name, beat), "heartbeat");
    }
    Check(c.Tick(), "tick");
    rounds.push_back(MsSince(start));
  }
  wall_ms_per_round = Median(rounds);
  return double(counting.counts().writes() - before) / double(seconds);
}

// A fleet starting: hosts register in batches of 100 and the head ticks after each batch (as
// its loop does while registrations keep the inventory stale). The per-host cost stays flat
// only if a tick does not grow with the hosts already there.
void StormFigures(int hosts) {
  FakeClock clock;
  auto memory = Take(store::MemoryStore::Open(), "store");
  Controller c(*memory, clock, ControllerOptions{});
  Check(c.Load(), "load");
  c.SetChangeListener([](const std::string&, const std::string&, const Json&) {});
  constexpr int kBatch = 100;
  double tick_ms = 0;
  const auto start = Clock::now();
  for (int i = 0; i < hosts; ++i) {
    Take(c.RegisterHost(Take(protocol::ParseRegistration(ScaleRegistration(i).dump()), "reg")),
         "register");
    if ((i + 1) % kBatch == 0 || i + 1 == hosts) {
      const auto tick_start = Clock::now();
      Check(c.Tick(), "tick");
      tick_ms += MsSince(tick_start);
    }
  }
  const double total = MsSince(start);
  std::printf(
      "fleet start, %d hosts in batches of %d with a tick after each: %.0f ms (%.1f us a host; "
      "ticks %.0f ms of it)\n",
      hosts, kBatch, total, 1000.0 * total / hosts, tick_ms);
}

void HeartbeatFigures(int hosts, int running, int seconds) {
  FakeClock clock;
  auto counting = std::make_unique<store::CountingStore>(Take(store::MemoryStore::Open(), "store"));
  const store::CountingStore& counts = *counting;
  Controller c(*counting, clock, ControllerOptions{});
  Check(c.Load(), "load");
  // The head always listens (its watchers); with no listener the controller skips the work
  // of telling watchers what moved, which the head pays on every change.
  uint64_t changes = 0;
  c.SetChangeListener(
      [&changes](const std::string&, const std::string&, const Json&) { ++changes; });
  const auto reg_start = Clock::now();
  for (int i = 0; i < hosts; ++i)
    Take(c.RegisterHost(Take(protocol::ParseRegistration(ScaleRegistration(i).dump()), "reg")),
         "register");
  const double reg_ms = MsSince(reg_start);
  std::printf("hosts registered: %d (%.0f ms, %.1f us a host)\n", hosts, reg_ms,
              1000.0 * reg_ms / hosts);
  const auto tick_start = Clock::now();
  Check(c.Tick(), "tick");
  std::printf("first tick after that (the inventory built for %d hosts): %.1f ms\n", hosts,
              MsSince(tick_start));
  double wall = 0;
  // One round first: hosts' first heartbeats after registration.
  WritesPerSecond(c, clock, counts, hosts, 1, false, wall);
  const double idle = WritesPerSecond(c, clock, counts, hosts, seconds, false, wall);
  std::printf("idle: %d hosts, %d s: %.1f store writes/s (a round of heartbeats + tick: %.0f ms)\n",
              hosts, seconds, idle, wall);
  for (int j = 0; j < running; ++j)
    Take(c.CreateJob(ScaleJobDoc("run-" + std::to_string(j))), "job");
  Check(c.RunPass(), "pass");
  // Workers start: their Running reports are written once.
  WritesPerSecond(c, clock, counts, hosts, 2, false, wall);
  const double quiet = WritesPerSecond(c, clock, counts, hosts, seconds, false, wall);
  std::printf("%d running jobs, no new progress: %.1f store writes/s (round %.0f ms)\n", running,
              quiet, wall);
  const double busy = WritesPerSecond(c, clock, counts, hosts, seconds, true, wall);
  std::printf(
      "%d running jobs, progress every second: %.1f store writes/s (round %.0f ms, %.1f us a "
      "heartbeat)\n",
      running, busy, wall, 1000.0 * wall / hosts);
  std::printf("changes told to watchers since start: %llu\n",
              static_cast<unsigned long long>(changes));
  const auto totals = counts.counts();
  for (const auto& [kind, n] : totals.writes_by_kind)
    std::printf("  writes of %s since start: %llu\n", kind.c_str(),
                static_cast<unsigned long long>(n));
}

}  // namespace
}  // namespace tessera::controller

int main(int argc, char** argv) {
  int jobs = 100'000, hosts = 10'000, running = 1'000, seconds = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    const int v = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--jobs"))
      jobs = v;
    else if (!std::strcmp(argv[i], "--hosts"))
      hosts = v;
    else if (!std::strcmp(argv[i], "--running"))
      running = v;
    else if (!std::strcmp(argv[i], "--seconds"))
      seconds = v;
    else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (jobs > 0) tessera::controller::ListFigures(jobs);
  if (hosts > 0) tessera::controller::StormFigures(hosts);
  if (hosts > 0) tessera::controller::HeartbeatFigures(hosts, running, seconds);
  return 0;
}
