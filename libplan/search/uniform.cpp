// Megatron-like baseline: one (tp, dp) everywhere, every device used in the cluster's order,
// layers split equally (the embedding rides with the first stage, the head with the last).
#include "search/algorithms.hpp"

namespace het::search {

void run_uniform(Work& w) {
  const ClusterSpec& c = w.eval.cluster();
  const int U = w.eval.num_units();
  int min_node = 1 << 30, total = 0;
  for (const auto& s : c.subclusters) min_node = std::min(min_node, s.devices_per_node), total += s.num_devices();
  for (int g = 1; g <= total; ++g) {  // devices per stage
    bool divides = true;
    for (const auto& s : c.subclusters) divides &= s.num_devices() % g == 0;
    if (!divides) continue;
    for (const Shape3& f : factorisations(w.eval, 0, g)) {
      if (f.tp > min_node || f.cp != 1) continue;  // the same tp must fit every node
      Layout l;
      for (std::size_t j = 0; j < c.subclusters.size(); ++j)
        for (int k = 0; k < c.subclusters[j].num_devices() / g; ++k) l.stages.push_back({int(j), f.dp, 1, f.tp});
      const int S = static_cast<int>(l.stages.size());
      if (S > U - 2 && S > 1) continue;  // at least one layer per stage
      // Equal layers: L layers over S stages; units 1..L are layers.
      const int L = U - 2;
      std::vector<int> first(S);
      for (int i = 0; i < S; ++i) first[i] = i == 0 ? 0 : 1 + (L * i) / S;
      w.consider_split(l, first, false);
      if (w.expired()) return;
      w.note_progress("");
    }
  }
}

}  // namespace het::search
