// Writers of pod-scale recovery results (recovery_sim.h) over std::ostream: a text table, side
// by side per (cost profile, tier), and JSON. Pure: the caller opens the streams.
//
// Thread-safety: stateless functions.
#pragma once

#include <ostream>
#include <vector>

#include "sim/recovery_sim.h"

namespace tessera::sim {

// `goal_ettr` and `goal_gap` (e.g. 0.97 and 0.01): each row says whether its ETTR reaches the
// goal and lies within the gap of its Young/Daly bound.
void WriteRecoveryText(std::ostream& out, const std::vector<RecoverySimResult>& runs,
                       double goal_ettr, double goal_gap);
void WriteRecoveryJson(std::ostream& out, const std::vector<RecoverySimResult>& runs,
                       double goal_ettr, double goal_gap);

}  // namespace tessera::sim
