#include "cli/queue_describe.h"

#include <cstdio>
#include <string>

namespace tessera::cli {
namespace {

using Json = nlohmann::json;

std::string Str(const Json& obj, const char* key, const std::string& fallback) {
  if (!obj.is_object() || !obj.contains(key)) return fallback;
  const Json& v = obj[key];
  return v.is_string() ? v.get<std::string>() : v.dump();
}

long long Int(const Json& obj, const char* key) {
  if (!obj.is_object() || !obj.contains(key) || !obj[key].is_number()) return 0;
  return obj[key].get<long long>();
}

}  // namespace

std::string DescribeClusterQueue(const Json& queue) {
  const Json empty = Json::object();
  const Json& meta = queue.contains("metadata") ? queue["metadata"] : empty;
  const Json& spec = queue.contains("spec") ? queue["spec"] : empty;
  const Json& st = queue.contains("status") ? queue["status"] : empty;
  std::string out;
  out += "Name:        " + Str(meta, "name", "") + "\n";
  out += "Cohort:      " + Str(spec, "cohort", "(none)") + "\n";
  out += "Strategy:    " + Str(spec, "queueingStrategy", "BestEffortFIFO") + "\n";
  out += "Quotas:\n";
  char line[200];
  std::snprintf(line, sizeof line, "  %-11s %-9s %-16s %s\n", "GENERATION", "NOMINAL",
                "BORROWING LIMIT", "LENDING LIMIT");
  out += line;
  const Json quotas = spec.value("quotas", Json::array());
  for (const Json& q : quotas) {
    // A GPU quota's flavor is its GPU system; its figures are GPUs.
    const std::string flavor = Str(q, "generation", Str(q, "gpuSystem", ""));
    std::snprintf(line, sizeof line, "  %-11s %-9s %-16s %s\n", flavor.c_str(),
                  Str(q, "nominalQuota", "0").c_str(), Str(q, "borrowingLimit", "-").c_str(),
                  Str(q, "lendingLimit", "-").c_str());
    out += line;
  }
  if (quotas.empty()) out += "  (none: the queue admits nothing)\n";
  const Json& p = spec.contains("preemption") ? spec["preemption"] : empty;
  const Json& b = p.contains("borrowWithinCohort") ? p["borrowWithinCohort"] : empty;
  out += "Preemption:  withinClusterQueue " + Str(p, "withinClusterQueue", "Never") +
         ", reclaimWithinCohort " + Str(p, "reclaimWithinCohort", "Never") +
         ", borrowWithinCohort " + Str(b, "policy", "Never");
  if (b.contains("maxPriorityThreshold"))
    out += " (maxPriorityThreshold " + Str(b, "maxPriorityThreshold", "") + ")";
  out += "\n";
  const Json& fs = spec.contains("fairSharing") ? spec["fairSharing"] : empty;
  if (fs.contains("weight")) out += "Fair share:  weight " + Str(fs, "weight", "1") + "\n";
  std::snprintf(line, sizeof line,
                "Usage:       %lld of %lld nominal chips used, %lld borrowed, %lld lendable to "
                "the cohort, share %.3f\n",
                Int(st, "usedChips"), Int(st, "nominalChips"), Int(st, "borrowedChips"),
                Int(st, "lendableChips"), st.is_object() ? st.value("share", 0.0) : 0.0);
  out += line;
  out += "Workloads:   " + std::to_string(Int(st, "pendingWorkloads")) + " pending, " +
         std::to_string(Int(st, "admittedWorkloads")) + " admitted\n";
  // GPU jobs are admitted by a cycle per GPU system: its usage, in GPUs.
  const Json gpus = st.is_object() ? st.value("gpus", Json::array()) : Json::array();
  for (const Json& g : gpus) {
    std::snprintf(line, sizeof line,
                  "GPU usage:   %s: %lld of %lld nominal GPUs used, %lld borrowed, %lld lendable; "
                  "%lld pending, %lld admitted\n",
                  Str(g, "gpuSystem", "").c_str(), Int(g, "usedGpus"), Int(g, "nominalGpus"),
                  Int(g, "borrowedGpus"), Int(g, "lendableGpus"), Int(g, "pendingWorkloads"),
                  Int(g, "admittedWorkloads"));
    out += line;
  }
  const Json warnings = st.is_object() ? st.value("warnings", Json::array()) : Json::array();
  if (warnings.empty()) {
    out += "Warnings:    none (every setting takes effect)\n";
  } else {
    out += "Warnings (settings that cannot take effect):\n";
    for (const Json& w : warnings)
      out += "  " + Str(w, "field", "") + ": " + Str(w, "message", "") + "\n";
  }
  return out;
}

}  // namespace tessera::cli
