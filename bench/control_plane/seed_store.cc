// tessera_seed_store: puts N TrainJobs (finished, some pending) into a head's store before the
// head starts, in the stored format the controller writes (seed_jobs.h), and says how long it
// took. For the failover benchmark (bench/control_plane/run.py --failover; bench/README.md
// "Failover at fleet scale").
//
//   tessera_seed_store --store etcd://127.0.0.1:2379,127.0.0.1:22379 --jobs 100000
//   tessera_seed_store --store sqlite:/path/to/state/tessera.db --jobs 10000 --pending 1000
//
// Prints one JSON object: jobs, pending, succeeded, events, commits, bytes, seconds.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "control_plane/flag_args.h"
#include "control_plane/seed_jobs.h"
#include "store/etcd_client.h"
#include "store/etcd_store.h"
#include "store/sqlite_store.h"

namespace {

int Usage(const std::string& why) {
  std::fprintf(stderr,
               "tessera_seed_store: %s\nusage: tessera_seed_store --store etcd://H:P[,H:P...] | "
               "sqlite:FILE [--prefix /tessera/] [--jobs N] [--pending K] [--batch-kib KIB] "
               "[--print-templates]\n",
               why.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tessera;
  std::string store_url, prefix = "/tessera/";
  bench::SeedOptions o;
  bool print_templates = false;
  bench::FlagArgs args(argc, argv, Usage);
  std::string arg;
  while (args.Next(arg)) {
    if (arg == "--store") {
      store_url = args.Value();
    } else if (arg == "--prefix") {
      prefix = args.Value();
    } else if (arg == "--jobs") {
      o.jobs = args.Number();
    } else if (arg == "--pending") {
      o.pending = args.Number();
    } else if (arg == "--batch-kib") {
      o.batch_bytes = static_cast<size_t>(args.Number(1)) * 1024;
    } else if (arg == "--print-templates") {
      print_templates = true;
    } else {
      return Usage("unknown argument " + arg);
    }
  }
  if (print_templates) {
    auto t = bench::MakeSeedTemplates();
    if (!t.ok()) return std::fprintf(stderr, "%s\n", t.status().ToString().c_str()), 1;
    std::printf("%s\n%s\n", t->succeeded.c_str(), t->pending.c_str());
    for (const std::string& e : t->events) std::printf("%s\n", e.c_str());
    return 0;
  }
  if (store_url.empty())
    return Usage("--store: required (etcd://HOST:PORT[,...] or sqlite:FILE, the head's store)");

  std::unique_ptr<store::Store> target;
  if (store_url.rfind("sqlite:", 0) == 0) {
    auto opened = store::SqliteStore::Open(store_url.substr(7));
    if (!opened.ok()) return std::fprintf(stderr, "%s\n", opened.status().ToString().c_str()), 1;
    target = std::move(opened).value();
  } else if (store_url.rfind("etcd://", 0) == 0) {
    auto endpoints = store::ParseEtcdEndpoints(store_url, "--store");
    if (!endpoints.ok())
      return std::fprintf(stderr, "%s\n", endpoints.status().ToString().c_str()), 1;
    store::EtcdStoreOptions so;
    so.etcd.endpoints = *std::move(endpoints);
    so.prefix = prefix;
    so.open_timeout = std::chrono::seconds(30);
    auto opened = store::EtcdStore::Open(so);
    if (!opened.ok()) return std::fprintf(stderr, "%s\n", opened.status().ToString().c_str()), 1;
    target = std::move(opened).value();
  } else {
    return Usage("--store: etcd://HOST:PORT[,...] or sqlite:FILE, not '" + store_url +
                 "' (etcds:// with TLS is not supported by this tool)");
  }

  const auto t0 = std::chrono::steady_clock::now();
  int64_t last = 0;
  o.on_batch = [&](int64_t written) {
    if (written - last >= 10'000) {
      last = written;
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(stderr, "[seed] %lld jobs in %.1f s\n", static_cast<long long>(written), s);
    }
  };
  auto report = bench::SeedJobs(*target, o);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!report.ok()) {
    std::fprintf(stderr, "tessera_seed_store: %s\n", report.status().ToString().c_str());
    return 1;
  }
  if (Status closed = target->Close(); !closed.ok()) {
    std::fprintf(stderr, "tessera_seed_store: closing the store: %s\n", closed.ToString().c_str());
    return 1;
  }
  const nlohmann::json out = {{"jobs", report->jobs},
                              {"pending", report->pending},
                              {"succeeded", report->succeeded},
                              {"events", report->events},
                              {"commits", report->commits},
                              {"jobBytes", report->body_bytes},
                              {"nextUid", report->next_uid},
                              {"revision", report->revision},
                              {"seconds", seconds}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
