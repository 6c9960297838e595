#pragma once
// Text for people about a predicted plan: the stage table of `hetplan show` and
// `hetplan simulate` (pipeline, stage, subcluster, devices, units, tp/cp/dp, recompute,
// warm-up, forward and backward ms, memory / usable capacity and the margin left, "!" past
// the limit) and the summary lines (with the tightest stage's memory margin).
#include <string>

#include "predict/predict.hpp"

namespace het::report {

std::string stage_table(const predict::Outcome& outcome);
std::string summary(const predict::Outcome& outcome);
// `v` printed with the printf format `f` (one double), e.g. fmt("%.4f s", 1.5).
std::string fmt(const char* f, double v);

}  // namespace het::report
