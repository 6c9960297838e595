#pragma once
// What the planner predicts of each rank's peak memory, for run-local and submit to print beside
// what the runtime measured (runtime/memory.hpp).
#include <string>
#include <utility>
#include <vector>

#include "plan/plan.hpp"

namespace het::cli {

// Per rank of the plan: its stage ("p0 s1 fast") and the planner's peak bytes per device for
// it: the plan's own prediction where it carries one (hetplan search / simulate), else the
// analytic one (0 when the plan cannot be predicted).
std::pair<std::vector<std::string>, std::vector<double>> rank_memory_predictions(const Plan& plan);

}  // namespace het::cli
