#include "schedule/schedule.hpp"

#include <algorithm>
#include <cmath>

namespace het::schedule {

int held_in_flight(double limit, double one, double per, int most) {
  if (per <= 0) return most;
  return static_cast<int>(std::clamp(std::floor((limit - one) / per) + 1, 1.0, static_cast<double>(std::max(1, most))));
}

std::vector<int> warmup_counts(const WarmupInput& in) {
  const int S = in.num_stages();
  const int m = in.num_microbatches;
  std::vector<int> n(static_cast<std::size_t>(S), 1);
  switch (in.kind) {
    case ScheduleKind::gpipe:
      std::fill(n.begin(), n.end(), m);
      break;
    case ScheduleKind::one_f_one_b:
      for (int s = 0; s < S; ++s) n[s] = S - s;
      break;
    case ScheduleKind::eager_1f1b:
      for (int s = 0; s < S; ++s) n[s] = 2 * (S - s) - 1;
      break;
    case ScheduleKind::virtual_1f1b: {
      int boundaries_after = 0;  // cross-subcluster boundaries between s and the last stage
      for (int s = S - 1; s >= 0; --s) {
        if (s < S - 1 && static_cast<std::size_t>(s) < in.crosses_subcluster.size() && in.crosses_subcluster[s])
          ++boundaries_after;
        n[s] = S - s + boundaries_after;
      }
      break;
    }
    case ScheduleKind::h_1f1b: {
      // HAPT §4.1 eq. 1-2; beyond t_max, eq. 11's ⌈1 + 2c/t⌉.
      const double t_max = *std::max_element(in.stage_s.begin(), in.stage_s.end());
      n[S - 1] = 1;
      for (int s = S - 2; s >= 0; --s) {
        const double c = static_cast<std::size_t>(s) < in.transfer_s.size() ? in.transfer_s[s] : 0.0;
        int delta;
        if (c <= in.epsilon * t_max) delta = 1;
        else if (c <= t_max / 2) delta = 2;
        else if (c <= t_max) delta = 3;
        else delta = static_cast<int>(std::ceil(1 + 2 * c / t_max));
        n[s] = n[s + 1] + delta;
      }
      break;
    }
  }
  for (int s = 0; s < S; ++s) {
    if (static_cast<std::size_t>(s) < in.memory_limit.size()) n[s] = std::min(n[s], in.memory_limit[s]);
    n[s] = std::clamp(n[s], 1, std::max(1, m));
  }
  // A stage must run at least as many warm-up forwards as the next one, or the next one
  // waits for activations the stage only sends after its first backward: a deadlock. A
  // memory cap on stage s therefore caps every later stage too.
  for (int s = 0; s + 1 < S; ++s) n[s + 1] = std::min(n[s + 1], n[s]);
  return n;
}

std::vector<Op> stage_ops(int warmup, int num_microbatches) {
  const int m = num_microbatches;
  const int w = std::clamp(warmup, 1, std::max(1, m));
  std::vector<Op> ops;
  ops.reserve(2 * static_cast<std::size_t>(m));
  int next_f = 0, next_b = 0;
  while (next_f < w) ops.push_back({OpKind::forward, next_f++});
  while (next_b < m) {
    ops.push_back({OpKind::backward, next_b++});
    if (next_f < m) ops.push_back({OpKind::forward, next_f++});
  }
  return ops;
}

std::string to_string(const Op& op) {
  return (op.kind == OpKind::forward ? "F" : "B") + std::to_string(op.microbatch);
}

}  // namespace het::schedule
