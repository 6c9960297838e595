#pragma once
// Structural validation of a plan against its model and cluster (DESIGN.md §5):
//   - every stage's subcluster exists; its devices exist there and number dp·cp·tp;
//   - no device serves two stages (in any pipeline);
//   - each pipeline's stages cover the unit sequence contiguously, without gap or overlap;
//   - tp divides the attention and kv heads, cp divides the sequence length, dp divides
//     the pipeline's micro-batch size;
//   - Σ micro_batch_size × num_microbatches over pipelines equals the global batch;
//   - warm-up counts, when given, are in [1, num_microbatches] and do not increase along a
//     pipeline (a stage with more warm-ups than the one before it would deadlock).
// Returns every violation found (empty when valid); `file` names the plan in diagnostics.
#include <string>

#include "diag/diag.hpp"
#include "plan/plan.hpp"

namespace het {

Diagnostics validate_plan(const Plan& plan, const std::string& file);

}  // namespace het
