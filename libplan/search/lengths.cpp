#include "search/lengths.hpp"

#include <array>

namespace het::search {

Result<LengthAssignment> assign_lengths(const Plan& plan, const cost::ComputeModel& compute, const predict::Options& options,
                                        int max_predictions) {
  LengthAssignment out;
  auto first = predict::predict(plan, compute, options);
  if (!first) return first.errors();
  out.predictions = 1;
  out.before_s = first->plan.predicted->iteration_s;
  out.outcome = std::move(*first);
  const std::size_t buckets = plan.model.seq_lengths.size(), P = plan.pipelines.size();
  if (buckets < 2 || P < 2) return out;

  // The trials are predicted without a trace; the winner again with the caller's options.
  predict::Options quiet = options;
  quiet.trace = false;
  // Whether every stage of pipeline q can run micro-batches of bucket b (cp divides its length).
  auto runs = [&](const Pipeline& q, std::size_t b) {
    for (const Stage& s : q.stages)
      if (plan.model.seq_lengths[b].length % s.cp != 0) return false;
    return true;
  };
  Plan current = plan;
  // One micro-batch of bucket a from pipeline p for one of bucket b from pipeline q (undone by
  // the swap of b from p for a from q).
  auto swap = [&](std::size_t p, std::size_t a, std::size_t q, std::size_t b) {
    --current.pipelines[p].bucket_microbatches[a], ++current.pipelines[q].bucket_microbatches[a];
    --current.pipelines[q].bucket_microbatches[b], ++current.pipelines[p].bucket_microbatches[b];
  };
  double best_s = out.before_s;
  while (out.predictions < max_predictions) {
    std::optional<predict::Outcome> best;
    std::array<std::size_t, 4> best_swap{};
    for (std::size_t p = 0; p < P && out.predictions < max_predictions; ++p)
      for (std::size_t q = p + 1; q < P && out.predictions < max_predictions; ++q) {
        if (current.pipelines[p].micro_batch_size != current.pipelines[q].micro_batch_size) continue;
        for (std::size_t a = 0; a < buckets && out.predictions < max_predictions; ++a)
          for (std::size_t b = 0; b < buckets && out.predictions < max_predictions; ++b) {
            if (a == b || current.pipelines[p].bucket_microbatches[a] == 0 || current.pipelines[q].bucket_microbatches[b] == 0 ||
                !runs(current.pipelines[q], a) || !runs(current.pipelines[p], b))
              continue;
            swap(p, a, q, b);
            auto o = predict::predict(current, compute, quiet);
            swap(p, b, q, a);
            ++out.predictions;
            if (!o) return o.errors();
            // An improvement beyond rounding, and no plan that stops fitting memory.
            const double t = o->plan.predicted->iteration_s;
            if (t < best_s * (1 - 1e-9) && (o->fits_memory() || !out.outcome.fits_memory())) {
              best_s = t;
              best = std::move(*o);
              best_swap = {p, a, q, b};
            }
          }
      }
    if (!best) break;
    swap(best_swap[0], best_swap[1], best_swap[2], best_swap[3]);
    out.outcome = std::move(*best);
    ++out.swaps;
  }
  if (out.swaps > 0 && options.trace) {
    auto traced = predict::predict(current, compute, options);
    if (!traced) return traced.errors();
    out.outcome = std::move(*traced);
  }
  return out;
}

}  // namespace het::search
