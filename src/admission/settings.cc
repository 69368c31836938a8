#include "admission/settings.h"

namespace tessera {

std::vector<SettingWarning> IneffectiveSettings(const ClusterQueueSpec& spec,
                                                const std::vector<ClusterQueueSpec>& all,
                                                FairSharing fair_sharing) {
  std::vector<SettingWarning> out;
  const bool fair = fair_sharing == FairSharing::kEnabled;
  const PreemptionPolicy& p = spec.preemption;
  const bool borrow_set = p.borrow_within_cohort.policy != BorrowWithinCohortPolicy::kNever;
  if (spec.cohort.empty()) {
    if (p.reclaim_within_cohort != ReclaimWithinCohort::kNever)
      out.push_back({"spec.preemption.reclaimWithinCohort",
                     "has no effect: the queue is in no cohort, so there is no lent quota to "
                     "reclaim; set spec.cohort or remove it"});
    if (borrow_set)
      out.push_back({"spec.preemption.borrowWithinCohort",
                     "has no effect: the queue is in no cohort, so it never borrows; set "
                     "spec.cohort or remove it"});
  } else {
    bool others = false;
    for (const ClusterQueueSpec& q : all)
      others = others || (q.cohort == spec.cohort && q.name != spec.name);
    if (!others)
      out.push_back({"spec.cohort",
                     "no other ClusterQueue is in cohort " + spec.cohort +
                         ": there is nothing to borrow or lend, so borrowingLimit, lendingLimit, "
                         "reclaimWithinCohort and borrowWithinCohort have no effect until another "
                         "queue joins it"});
    if (borrow_set && fair)
      out.push_back({"spec.preemption.borrowWithinCohort",
                     "ignored: the head runs with fair sharing (tessera head --fair-sharing), "
                     "under which a borrowing workload preempts by the share rule and "
                     "reclaimWithinCohort, as in Kueue; remove it, or run the head without "
                     "--fair-sharing"});
  }
  if (!fair && spec.fair_sharing_weight != 1.0)
    out.push_back({"spec.fairSharing.weight",
                   "has no effect: the head runs without fair sharing; start it with "
                   "--fair-sharing or remove the weight"});
  return out;
}

}  // namespace tessera
