// Reports of a serving comparison (serving_sim.h): a text table, JSON with every figure, the
// replicas-over-time series and the scale events, and the series alone as CSV.
//
// Writers take a std::ostream; opening files is the shell's job. Thread-safety: functions.
#pragma once

#include <ostream>

#include "sim/serving_sim.h"

namespace tessera::sim {

void WriteServingText(std::ostream& out, const ServingComparison& c);
void WriteServingJson(std::ostream& out, const ServingComparison& c);
// config,time_s,desired,placed,ready,ongoing,queued
void WriteServingCsv(std::ostream& out, const ServingComparison& c);

}  // namespace tessera::sim
