#pragma once
// Micro-batches of a sequence-length distribution (model.seq_lengths; Hetu v2 §7.3, Hetu-B's
// bucketing): a micro-batch holds sequences of one bucket, padded to its length, and each
// pipeline says how many micro-batches of each bucket it runs (Pipeline::bucket_microbatches).
// Together the pipelines run every bucket's share of the global batch (validate_plan checks).
#include <vector>

#include "plan/plan.hpp"

namespace het {

// The bucket of each of a pipeline's micro-batches, in the order it runs them: buckets spread
// evenly (micro-batch i takes the bucket furthest behind its share of the first i + 1; ties to
// the longer). All 0 without buckets.
std::vector<int> microbatch_buckets(const Pipeline& p);

// Sets every pipeline's bucket_microbatches (cleared when the model has no seq_lengths): each
// bucket's micro-batches dealt to the pipelines in proportion to their micro-batches, longest
// bucket first, each to the pipeline with the largest share of its slots still free (ties:
// the first). False, changing nothing, when it cannot: pipelines of different micro-batch
// sizes, or a bucket whose sequences are not a whole number of micro-batches.
bool spread_buckets(Plan& plan);

}  // namespace het
