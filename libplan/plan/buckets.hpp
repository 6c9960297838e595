#pragma once
// Micro-batches of a sequence-length distribution (model.seq_lengths; Hetu v2 §7.3, Hetu-B's
// bucketing): a micro-batch holds sequences of one bucket, padded to its length, and each
// pipeline says how many micro-batches of each bucket it runs (Pipeline::bucket_microbatches).
// Together the pipelines run every bucket's share of the global batch (validate_plan checks).
#include <string>
#include <vector>

#include "plan/plan.hpp"

namespace het {

// The bucket of each of a pipeline's micro-batches, in the order it runs them: bucket by
// bucket, shortest first, as HotSPa and Hetu-A run a step's length intervals one after the
// other (Hetu v2 App. A.4). Spread evenly instead, each long micro-batch stalls the stages
// around it in 1F1B's steady state: Hetu v2 §7.3's 32B model on 16 H800 + 16 H20 simulated
// 12.91 s per step spread, 7.49 s grouped (either direction; shortest first 0.7% faster on
// another plan). All 0 without buckets.
std::vector<int> microbatch_buckets(const Pipeline& p);

// Sets every pipeline's bucket_microbatches (cleared when the model has no seq_lengths): each
// bucket's micro-batches dealt to the pipelines in proportion to their micro-batches, longest
// bucket first, each to the pipeline with the largest share of its slots still free (ties:
// the first). False, changing nothing, when it cannot: pipelines of different micro-batch
// sizes, or a bucket whose sequences are not a whole number of micro-batches.
bool spread_buckets(Plan& plan);

// A pipeline's micro-batches per length, for people: "36 x 2048, 9 x 8192" (lengths it runs
// none of left out); "" without buckets.
std::string length_counts(const ModelSpec& model, const Pipeline& p);

}  // namespace het
