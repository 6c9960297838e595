#pragma once
// What the planner predicts of each rank's peak memory, for run-local and submit to print beside
// what the runtime measured (runtime/memory.hpp).
#include <string>
#include <utility>
#include <vector>

#include "plan/plan.hpp"

namespace het::cli {

// Per rank of the plan: its stage ("p0 s1 fast") and the planner's peak bytes per device for
// it on `backend` ("cpu": fp32; "cuda": bf16 with fp32 gradients, whatever the model's dtype):
// the plan's own prediction where it carries one made for that precision (hetplan search /
// simulate), else the analytic one (0 when the plan cannot be predicted).
std::pair<std::vector<std::string>, std::vector<double>> rank_memory_predictions(const Plan& plan, const std::string& backend = "cpu");

}  // namespace het::cli
