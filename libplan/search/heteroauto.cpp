// HeteroAuto (H2 §4.3.3): DFS over the data-parallel degree s_dp | B, then per chip type
// (subcluster), in descending order of device memory, a power-of-two tp ≤ TP_MAX (the node
// size), giving s_pp,i = N_i / (tp_i · s_dp) stages of equal layer counts. The layer
// allocation equalises compute between types under memory (§4.3.3 step 2); recomputation is
// chosen per stage. The two-stage refinement then keeps the best s_dp and splits each large
// type into two groups of its own tp (the earlier group's tp ≥ the later's), searching again.
#include <algorithm>
#include <cmath>
#include <numeric>

#include <tbb/parallel_for.h>

#include "search/algorithms.hpp"

namespace het::search {

namespace {

struct Group {
  int sub;      // subcluster
  int devices;  // devices of this group (all of the subcluster, or part after refinement)
};

// Layers per stage of each group: equalise x_g · t_g (t_g: a layer's time on the group's
// stage shape) subject to Σ_g pp_g · x_g = L and each stage's memory; nullopt if none fits.
std::optional<std::vector<int>> equal_compute_split(Work& w, const Layout& l, const std::vector<int>& stages_of_group,
                                                    const std::vector<int>& first_stage_of_group) {
  const int G = static_cast<int>(stages_of_group.size());
  const int L = w.eval.num_units() - 2;
  std::vector<double> t(G);
  std::vector<int> cap(G);
  std::vector<int> offset(w.eval.cluster().subclusters.size(), 0);
  std::vector<int> stage_offset(l.stages.size());
  for (std::size_t i = 0; i < l.stages.size(); ++i)
    stage_offset[i] = offset[l.stages[i].sub], offset[l.stages[i].sub] += l.pipelines * l.stages[i].devices();
  for (int g = 0; g < G; ++g) {
    const int i = first_stage_of_group[g];
    // The cheapest recomputation that still holds a reasonable warm-up: the max layers per
    // stage that fit with 1f1b's worst warm-up (the stage count) under full recomputation.
    const auto& opts = w.eval.recompute_options();
    const StageTable& fast = w.eval.table(l, i, stage_offset[i], opts.front());
    const StageTable& lean = w.eval.table(l, i, stage_offset[i], opts.back());
    t[g] = fast.sum(fast.time, 1, 1);
    int x = 0;
    const int in_flight = static_cast<int>(l.stages.size()) - i;
    while (x < L && lean.memory(1, x + 1, in_flight, false) <= lean.capacity) ++x;
    cap[g] = x;
  }
  // Smallest τ with Σ pp_g · min(cap_g, floor(τ / t_g)) ≥ L, by bisection on τ.
  auto layers_at = [&](double tau, std::vector<int>& x) {
    long total = 0;
    for (int g = 0; g < G; ++g) x[g] = std::min(cap[g], static_cast<int>(std::floor(tau / t[g] + 1e-9))), total += long(x[g]) * stages_of_group[g];
    return total;
  };
  std::vector<int> x(G);
  double lo = 0, hi = *std::max_element(t.begin(), t.end()) * L;
  if (layers_at(hi, x) < L) return std::nullopt;
  for (int it = 0; it < 60; ++it) {
    double mid = (lo + hi) / 2;
    if (layers_at(mid, x) >= L) hi = mid;
    else lo = mid;
  }
  layers_at(hi, x);
  // Trim the surplus from the groups whose stages are slowest, keeping at least one layer.
  long total = 0;
  for (int g = 0; g < G; ++g) total += long(x[g]) * stages_of_group[g];
  while (total > L) {
    int worst = -1;
    for (int g = 0; g < G; ++g)
      if (x[g] > 1 && stages_of_group[g] <= total - L && (worst < 0 || x[g] * t[g] > x[worst] * t[worst])) worst = g;
    if (worst < 0) return std::nullopt;  // cannot reach L exactly with equal layers per type
    --x[worst];
    total -= stages_of_group[worst];
  }
  if (std::any_of(x.begin(), x.end(), [](int v) { return v < 1; })) return std::nullopt;
  // First unit of every stage: unit 0 is the embedding, then layers, the head last.
  std::vector<int> first;
  int unit = 0;
  for (int g = 0; g < G; ++g)
    for (int s = 0; s < stages_of_group[g]; ++s) {
      first.push_back(first.empty() ? 0 : unit);
      unit = (first.size() == 1 ? 1 : unit) + x[g];
    }
  return first;
}

// DFS over tp per group for a fixed s_dp; every layout goes through the common evaluator.
// `stages`: those of groups 0..g-1. A branch past one stage per layer is cut where it grows
// so (groups only add stages): on 10,000 devices of 8 types the leaves of 4^8 tp choices
// built thousands of stages each to be rejected (issue 20: 0.46 s of the search's start).
void dfs(Work& w, const std::vector<Group>& groups, int dp, std::size_t g, std::vector<int>& tp, int stages) {
  if (w.expired()) return;
  const ClusterSpec& c = w.eval.cluster();
  if (g == groups.size()) {
    Layout l;
    l.pipelines = dp;
    std::vector<int> count, first_stage;
    for (std::size_t q = 0; q < groups.size(); ++q) {
      const int pp = groups[q].devices / (tp[q] * dp);
      first_stage.push_back(static_cast<int>(l.stages.size()));
      count.push_back(pp);
      for (int s = 0; s < pp; ++s) l.stages.push_back({groups[q].sub, 1, 1, tp[q]});
    }
    l.micro_batch_size = w.micro_batch_sizes.front();
    if (!w.eval.admissible(l)) return;
    if (auto first = equal_compute_split(w, l, count, first_stage)) w.consider_split(l, *first, true);
    w.note_progress("dp " + std::to_string(dp));
    return;
  }
  const SubclusterSpec& s = c.subclusters[groups[g].sub];
  for (int t = 1; t <= s.devices_per_node; t *= 2) {
    if (groups[g].devices % (t * dp) || s.devices_per_node % t) continue;
    // Groups of one chip type: an earlier group's tp is at least a later one's (§4.3.3).
    if (g > 0 && groups[g - 1].sub == groups[g].sub && t > tp[g - 1]) continue;
    const ModelSpec& m = w.eval.model();
    if (m.num_attention_heads % t || m.num_kv_heads % t) continue;
    const int pp = groups[g].devices / (t * dp);
    if (stages + pp > w.eval.num_units() - 2) continue;
    tp[g] = t;
    dfs(w, groups, dp, g + 1, tp, stages + pp);
  }
}

// The data-parallel degrees in parallel (oneTBB): Work keeps the same k best in any order.
void search_groups(Work& w, const std::vector<Group>& groups, const std::vector<int>& dps) {
  tbb::parallel_for(std::size_t(0), dps.size(), [&](std::size_t i) {
    std::vector<int> tp(groups.size(), 1);
    dfs(w, groups, dps[i], 0, tp, 0);
  });
}

}  // namespace

void run_heteroauto(Work& w) {
  const ClusterSpec& c = w.eval.cluster();
  std::vector<Group> groups;
  for (std::size_t j = 0; j < c.subclusters.size(); ++j) groups.push_back({int(j), c.subclusters[j].num_devices()});
  // Chip types in descending memory (H2 places the largest memories first).
  std::stable_sort(groups.begin(), groups.end(), [&](const Group& a, const Group& b) {
    return c.subclusters[a.sub].device.memory > c.subclusters[b.sub].device.memory;
  });
  const int B = w.eval.model().training.global_batch_size;
  int g = 0;
  for (const auto& gr : groups) g = std::gcd(g, gr.devices);
  std::vector<int> dps;
  for (int dp = 1; dp <= g; ++dp)
    if (g % dp == 0 && B % dp == 0) dps.push_back(dp);
  // Stage one: the data-parallel degree.
  search_groups(w, groups, dps);
  auto best = w.take();
  if (best.empty()) return;
  const int dp = best.front().layout.pipelines;
  for (const auto& cand : best) w.offer(cand);
  // Stage two: split each large group into two halves treated as distinct types.
  for (std::size_t q = 0; q < groups.size() && !w.expired(); ++q) {
    if (groups[q].devices < 4 * dp || (groups[q].devices / 2) % dp) continue;
    std::vector<Group> split = groups;
    split[q].devices /= 2;
    split.insert(split.begin() + static_cast<long>(q) + 1, split[q]);
    search_groups(w, split, {dp});
  }
}

}  // namespace het::search
