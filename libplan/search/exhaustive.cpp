// The oracle for small instances: k identical pipelines; every ordered subset of the
// subclusters; in each used subcluster a run of n stages of one (dp, cp, tp) that together use
// all its devices (divided by k); every micro-batch size and schedule; the best unit split
// and recomputation of each (Evaluator::evaluate, exact under the estimate). Layouts whose
// lower bound cannot enter the top k are skipped, which keeps the result exact.
#include <algorithm>
#include <numeric>

#include "search/algorithms.hpp"

namespace het::search {

namespace {

struct SubChoice {
  int n;  // stages
  Shape3 shape;
};

void each_order(int C, const std::function<void(const std::vector<int>&)>& visit) {
  for (int mask = 1; mask < (1 << C); ++mask) {
    std::vector<int> subset;
    for (int j = 0; j < C; ++j)
      if (mask & (1 << j)) subset.push_back(j);
    do visit(subset);
    while (std::next_permutation(subset.begin(), subset.end()));
  }
}

}  // namespace

void run_exhaustive(Work& w) {
  const ClusterSpec& c = w.eval.cluster();
  const int C = static_cast<int>(c.subclusters.size());
  const int U = w.eval.num_units();
  each_order(C, [&](const std::vector<int>& order) {
    if (w.expired()) return;
    int g = 0;
    for (int j : order) g = std::gcd(g, c.subclusters[j].num_devices());
    for (int k = 1; k <= g; ++k) {
      if (g % k) continue;
      // Choices per used subcluster.
      std::vector<std::vector<SubChoice>> choices;
      for (int j : order) {
        std::vector<SubChoice> cj;
        const int devices = c.subclusters[j].num_devices() / k;
        for (int n = 1; n <= devices && n <= U; ++n) {
          if (devices % n) continue;
          for (const Shape3& f : factorisations(w.eval, j, devices / n)) cj.push_back({n, f});
        }
        choices.push_back(std::move(cj));
      }
      if (std::any_of(choices.begin(), choices.end(), [](const auto& v) { return v.empty(); })) continue;
      // Cartesian product.
      std::vector<std::size_t> idx(order.size(), 0);
      while (true) {
        Layout l;
        l.pipelines = k;
        for (std::size_t q = 0; q < order.size(); ++q) {
          const SubChoice& ch = choices[q][idx[q]];
          for (int s = 0; s < ch.n; ++s) l.stages.push_back({order[q], ch.shape.dp, ch.shape.cp, ch.shape.tp});
        }
        if (static_cast<int>(l.stages.size()) <= U) w.consider(l);
        if (w.expired()) return;
        std::size_t q = 0;
        while (q < idx.size() && ++idx[q] == choices[q].size()) idx[q++] = 0;
        if (q == idx.size()) break;
      }
      w.note_progress("");
    }
  });
}

}  // namespace het::search
