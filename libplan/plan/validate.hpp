#pragma once
// Structural validation of a plan against its model and cluster (DESIGN.md §5):
//   - every stage's subcluster exists; its devices exist there and number dp·cp·tp;
//   - no device serves two stages (in any pipeline);
//   - each pipeline's stages cover the unit sequence contiguously, without gap or overlap;
//   - tp divides the attention and kv heads, cp divides the sequence length, dp divides
//     the pipeline's micro-batch size;
//   - Σ micro_batch_size × num_microbatches over pipelines equals the global batch;
//   - warm-up counts, when given, are in [1, num_microbatches] and do not increase along a
//     pipeline (a stage with more warm-ups than the one before it would deadlock);
//   - stages x num_microbatches summed over the pipelines within limits::kScheduleSteps.
// Returns every violation found (empty when valid); `file` names the plan in diagnostics.
#include <cstdint>
#include <optional>
#include <string>

#include "diag/diag.hpp"
#include "plan/plan.hpp"

namespace het {

Diagnostics validate_plan(const Plan& plan, const std::string& file);

// Σ over the pipelines of stages x num_microbatches, in 64 bits: the steps the simulator takes.
// validate_plan() and predict::predict() refuse a plan past limits::kScheduleSteps.
std::int64_t schedule_steps(const Plan& plan);
// The refusal, or nullopt when within the limit.
std::optional<Diagnostic> too_many_schedule_steps(const Plan& plan, const std::string& file);

}  // namespace het
