#include "plan/buckets.hpp"

#include <algorithm>
#include <cstdint>
#include <queue>

namespace het {

std::vector<int> microbatch_buckets(const Pipeline& p) {
  std::vector<int> out;
  out.reserve(static_cast<std::size_t>(std::max(0, p.num_microbatches)));
  for (std::size_t b = 0; b < p.bucket_microbatches.size(); ++b) out.insert(out.end(), std::size_t(p.bucket_microbatches[b]), int(b));
  out.resize(static_cast<std::size_t>(std::max(0, p.num_microbatches)), 0);  // all 0 without buckets
  return out;
}

bool spread_buckets(Plan& plan) {
  const ModelSpec& m = plan.model;
  if (m.seq_lengths.empty()) {
    for (Pipeline& p : plan.pipelines) p.bucket_microbatches.clear();
    return true;
  }
  if (plan.pipelines.empty()) return false;
  const int mbs = plan.pipelines.front().micro_batch_size;
  for (const Pipeline& p : plan.pipelines)
    if (p.micro_batch_size != mbs) return false;
  std::vector<std::int64_t> free;
  std::int64_t slots = 0;
  for (const Pipeline& p : plan.pipelines) free.push_back(p.num_microbatches), slots += p.num_microbatches;
  std::int64_t total = 0;
  for (std::size_t b = 0; b < m.seq_lengths.size(); ++b) {
    if (bucket_sequences(m, b) % mbs != 0) return false;
    total += bucket_sequences(m, b) / mbs;
  }
  if (total != slots) return false;
  std::vector<std::vector<int>> count(plan.pipelines.size(), std::vector<int>(m.seq_lengths.size(), 0));
  // Pipelines by their share of slots still free (free_p / m_p, compared crosswise), the first
  // on a tie: a heap, so that a batch of 65,536 micro-batches over thousands of pipelines stays cheap.
  auto behind = [&](std::size_t a, std::size_t b) {  // whether b comes before a
    const std::int64_t x = free[b] * plan.pipelines[a].num_microbatches, y = free[a] * plan.pipelines[b].num_microbatches;
    return x != y ? x > y : b < a;
  };
  std::priority_queue<std::size_t, std::vector<std::size_t>, decltype(behind)> next(behind);
  for (std::size_t p = 0; p < plan.pipelines.size(); ++p) next.push(p);
  for (std::size_t b = m.seq_lengths.size(); b-- > 0;)
    for (int k = 0; k < bucket_sequences(m, b) / mbs; ++k) {
      const std::size_t best = next.top();
      next.pop();
      --free[best];
      ++count[best][b];
      next.push(best);
    }
  for (std::size_t p = 0; p < plan.pipelines.size(); ++p) plan.pipelines[p].bucket_microbatches = count[p];
  return true;
}

std::string length_counts(const ModelSpec& model, const Pipeline& p) {
  std::string out;
  for (std::size_t k = 0; k < p.bucket_microbatches.size() && k < model.seq_lengths.size(); ++k)
    if (p.bucket_microbatches[k] > 0)
      out += (out.empty() ? "" : ", ") + std::to_string(p.bucket_microbatches[k]) + " x " + std::to_string(model.seq_lengths[k].length);
  return out;
}

}  // namespace het
