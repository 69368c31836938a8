// admission_hash: runs admission cycles on the benchmark's snapshots (admission_inputs.h) and
// prints one hash per cycle over everything it decides and says: every admission with its
// placement and waits_for, every preemption with its victims, cost and message, every
// eviction, every pending reason with its message, numbers and what-would-help list, the usage
// rows and the owner of every host of the working inventory. A change meant to make the cycle
// faster without changing a decision must print the same lines before and after.
//
//   admission_hash            the 10,000-pending snapshots and the 100,000-pending ones
//   admission_hash --small    the 10,000-pending snapshots only
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "admission/admission.h"
#include "admission_inputs.h"

namespace tessera {
namespace {

// FNV-1a over the fields, each followed by a separator so that adjacent fields cannot run into
// each other.
class Hasher {
 public:
  void Bytes(std::string_view s) {
    for (unsigned char c : s) Mix(c);
    Mix(0xff);
  }
  void Int(int64_t v) { Bytes(std::to_string(v)); }
  void Double(double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    Bytes(buf);
  }
  uint64_t value() const { return h_; }

 private:
  void Mix(unsigned char c) {
    h_ ^= c;
    h_ *= 0x100000001b3ull;
  }
  uint64_t h_ = 0xcbf29ce484222325ull;
};

void HashPlacement(Hasher& h, const PlanResult& p) {
  h.Int(static_cast<int>(p.reason));
  h.Bytes(p.message);
  h.Bytes(p.largest_free);
  for (const SlicePlacement& s : p.slices) {
    for (HostId x : s.hosts) h.Int(x.value());
    for (CubeId c : s.cubes) h.Int(c.value());
    h.Int(s.block.value());
    h.Int(s.fixed_slice.value());
    h.Bytes(s.physical.ToString());
    h.Int(s.offset.x);
    h.Int(s.offset.y);
    h.Int(s.offset.z);
  }
}

void HashCost(Hasher& h, const VictimCost& c) {
  h.Int(c.max_rank);
  h.Int(c.max_priority);
  h.Int(c.chips);
  h.Int(c.lost_work_chip_ms);
}

uint64_t HashCycle(const AdmissionCycle& c) {
  Hasher h;
  h.Bytes("admissions");
  for (const Admission& a : c.admissions) {
    h.Int(a.workload.value());
    h.Bytes(a.cluster_queue);
    HashPlacement(h, a.placement);
    h.Int(a.gpu_placement.placed);
    for (int x : a.gpu_placement.hosts) h.Int(x);
    for (WorkloadId w : a.waits_for) h.Int(w.value());
    h.Int(a.borrowed_chips);
  }
  h.Bytes("preemptions");
  for (const Preemption& p : c.preemptions) {
    h.Int(p.preemptor.value());
    for (WorkloadId w : p.victims) h.Int(w.value());
    h.Int(p.grace_ms);
    h.Int(static_cast<int>(p.kind));
    HashCost(h, p.cost);
    h.Bytes(p.message);
  }
  h.Bytes("evictions");
  for (const Eviction& e : c.evictions) {
    h.Int(e.workload.value());
    h.Int(static_cast<int>(e.cause));
    h.Int(e.preemptor.value());
    h.Int(e.grace_ms);
    h.Int(e.start_guard.retries);
    h.Int(e.start_guard.backoff_until_ms);
    h.Bytes(e.start_guard.last_eviction);
    h.Int(e.deactivated);
    h.Bytes(e.message);
  }
  h.Bytes("pending");
  for (const PendingStatus& p : c.pending) {
    h.Int(p.workload.value());
    h.Bytes(p.name);
    h.Bytes(p.cluster_queue);
    h.Int(static_cast<int>(p.reason));
    h.Bytes(p.message);
    h.Int(p.position);
    h.Int(p.waiting_behind);
    h.Int(p.over_quota_chips);
    h.Bytes(p.largest_free);
    h.Int(p.backoff_until_ms);
    h.Int(p.retries);
    for (const Blocker& b : p.would_help) {
      h.Int(b.workload.value());
      h.Bytes(b.name);
      h.Bytes(b.cluster_queue);
      h.Int(b.priority);
      h.Int(b.chips);
      h.Int(b.preemptible);
    }
    h.Bytes("/");
  }
  h.Bytes("usage");
  for (const ClusterQueueUsage& u : c.usage) {
    h.Bytes(u.name);
    h.Bytes(u.cohort);
    h.Int(u.nominal_chips);
    h.Int(u.used_chips);
    h.Int(u.borrowed_chips);
    h.Int(u.lendable_chips);
    h.Int(u.pending_workloads);
    h.Int(u.admitted_workloads);
    h.Double(u.share);
  }
  h.Bytes("inventory");
  for (const Host& x : c.inventory.hosts()) h.Int(static_cast<int64_t>(x.owner.value()));
  return h.value();
}

const char* ExplainName(Explain e) {
  switch (e) {
    case Explain::kFitsNextCycleOnly:
      return "fits-only";
    case Explain::kReasons:
      return "reasons";
    case Explain::kReasonsAndWhatHelps:
      return "reasons+help";
  }
  return "?";
}

// Runs every explain level and fair-sharing setting on one snapshot; false on an error.
bool HashSnapshot(const std::string& label, const Snapshot& s) {
  for (FairSharing fair : {FairSharing::kDisabled, FairSharing::kEnabled}) {
    for (Explain explain :
         {Explain::kFitsNextCycleOnly, Explain::kReasons, Explain::kReasonsAndWhatHelps}) {
      AdmissionOptions o;
      o.fair_sharing = fair;
      o.explain = explain;
      Result<AdmissionCycle> c = Admitter(o).Run(s, 3'600'000);
      if (!c.ok()) {
        std::fprintf(stderr, "%s: %s\n", label.c_str(), c.status().ToString().c_str());
        return false;
      }
      std::printf("%-40s fair=%d %-13s admitted=%zu preempted=%zu pending=%zu hash=%016llx\n",
                  label.c_str(), fair == FairSharing::kEnabled, ExplainName(explain),
                  c->admissions.size(), c->preemptions.size(), c->pending.size(),
                  static_cast<unsigned long long>(HashCycle(*c)));
      std::fflush(stdout);
    }
  }
  return true;
}

int Main(int argc, char** argv) {
  const bool small = argc > 1 && std::string_view(argv[1]) == "--small";
  bool ok = true;
  for (bench::CycleVariant v : {bench::CycleVariant::kBench, bench::CycleVariant::kMixed}) {
    const std::string variant = v == bench::CycleVariant::kBench ? "bench" : "mixed";
    for (uint64_t seed : {7, 3, 11})
      for (double load : {0.8, 0.95})
        ok = HashSnapshot("10k " + variant + " seed=" + std::to_string(seed) +
                              " load=" + std::to_string(load).substr(0, 4),
                          bench::LoadedCycle(10'000, load, seed, {}, v)) &&
             ok;
    if (small) continue;
    ok = HashSnapshot("100k " + variant + " seed=7 load=0.80",
                      bench::LoadedCycle(100'000, 0.8, 7, {.blocks = 98, .queues = 500}, v)) &&
         ok;
  }
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) { return tessera::Main(argc, argv); }
