#pragma once
// Which pipeline runs which sequence lengths (Hetu v2 §7.3, Hetu-B: long sequences to the
// pipelines whose stages have more tp/cp). Pipelines of different shapes run a bucket of a
// sequence-length distribution at different speeds: a pipeline of more tp·cp gains more on
// long sequences (attention grows with the square of the length) and loses more on short ones
// (its collectives' latency). Starting from the plan's counts, a steepest descent over swaps
// — one micro-batch of bucket a from pipeline P for one of bucket b ≠ a from pipeline Q (same
// micro-batch size; every pipeline keeps its micro-batches and every bucket its sequences) —
// takes the swap that lowers the predicted iteration most, until none does.
#include "cost/compute.hpp"
#include "plan/plan.hpp"
#include "predict/predict.hpp"

namespace het::search {

struct LengthAssignment {
  predict::Outcome outcome;   // the plan with its new counts, predicted
  double before_s = 0;        // the predicted iteration with the plan's own counts
  int swaps = 0;              // swaps taken
  int predictions = 0;        // plans predicted
};

// Precondition: validate_plan(plan) is empty. A plan without seq_lengths, or with one
// pipeline, comes back as predicted. At most `max_predictions` predictions. Errors: predict's.
Result<LengthAssignment> assign_lengths(const Plan& plan, const cost::ComputeModel& compute, const predict::Options& options,
                                        int max_predictions = 2000);

}  // namespace het::search
