// Settings of a ClusterQueue that pass validation but cannot take effect as configured: a
// borrowWithinCohort under fair sharing (fair sharing ignores it, as in Kueue), a cohort no
// other ClusterQueue is in (nothing to borrow or lend), cohort preemption without a cohort, a
// fair-sharing weight with fair sharing off. Settings that can never make sense are refused by
// Validate(ClusterQueueSpec) instead (a lendingLimit above the nominal quota, limits without a
// cohort). The head returns these warnings in the apply answer and in the ClusterQueue's
// status (docs/admission.md, "Settings that cannot take effect").
//
// Pure. Thread-safety: a function of its arguments.
#pragma once

#include <string>
#include <vector>

#include "admission/admission.h"
#include "admission/model.h"

namespace tessera {

struct SettingWarning {
  std::string field;    // the document field, e.g. "spec.preemption.borrowWithinCohort"
  std::string message;  // why it has no effect and what to do, for people
};

// The warnings for `spec`, given every ClusterQueue of the cluster (`all`, which may or may not
// include `spec` itself; matched by name) and the cluster-wide fair-sharing setting. In field
// order; empty when every setting takes effect.
std::vector<SettingWarning> IneffectiveSettings(const ClusterQueueSpec& spec,
                                                const std::vector<ClusterQueueSpec>& all,
                                                FairSharing fair_sharing);

}  // namespace tessera
