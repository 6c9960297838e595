// HexiScale (§4): asymmetric data parallelism — several pipelines of different shapes.
//   Phase 1 (§4.2): the cluster's nodes cut by METIS into k parts of balanced compute
//     (search/partition.hpp), each part one pipeline; min-cut or max-cut (§4.4: which links
//     the data-parallel sync gets).
//   Phase 2 (§4.3): each part's pipeline searched on its own devices — the stage groups,
//     their intra-group (dp, cp, tp) and the stage order — by the per-type DFS of
//     search/heteroauto.cpp on a cluster made of the part's nodes. Departure: HexiScale orders
//     the stage groups by a top-τ greedy walk over inter-group bandwidth; here a part's groups
//     are its subclusters, between which there is one link each, so the order comes from the
//     DFS (memory-descending, H2 §4.3.3) rather than from bandwidth.
//   Batch shares: each pipeline takes a share of the global batch proportional to its speed
//     (§4.4): first to its compute power, then once more to its predicted throughput.
//   Iteration (§4.4): k from 1 up (one part per node at most, 8 at most), two balance factors
//     and both cut options, while the time budget lasts and k can still pay off (below);
//     every combined plan is predicted by the simulator.
#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <numeric>
#include <set>

#include <tbb/parallel_for.h>

#include "search/algorithms.hpp"
#include "search/partition.hpp"

namespace het::search {

namespace {

// The part's nodes as a cluster of their own: per subcluster, how many nodes the part has.
ClusterSpec part_cluster(const ClusterSpec& c, const std::map<int, int>& nodes_per_sub) {
  ClusterSpec out;
  out.name = c.name + "-part";
  out.default_link = c.default_link;
  for (auto [sub, n] : nodes_per_sub) {
    SubclusterSpec s = c.subclusters[std::size_t(sub)];
    s.nodes = n;
    out.subclusters.push_back(s);
  }
  for (const auto& l : c.links)
    if (out.find(l.a) && out.find(l.b)) out.links.push_back(l);
  return out;
}

// Global batch shares proportional to `weight`, each at least 1, summing to G.
std::vector<int> shares(const std::vector<double>& weight, int G) {
  const double total = std::accumulate(weight.begin(), weight.end(), 0.0);
  std::vector<int> out(weight.size());
  int given = 0;
  for (std::size_t i = 0; i < weight.size(); ++i) given += out[i] = std::max(1, int(std::floor(G * weight[i] / total)));
  for (std::size_t i = 0; given < G; i = (i + 1) % out.size()) ++out[i], ++given;  // the remainder, round robin
  for (std::size_t i = 0; given > G; i = (i + 1) % out.size())
    if (out[i] > 1) --out[i], --given;
  return out;
}

struct PartPlan {
  Plan plan;          // on the part's own cluster
  double per_sequence_s;  // predicted iteration / its sequences
};

// Phase 2 for one part: the best plan for `sequences` of the global batch on its nodes.
std::optional<PartPlan> search_part(Work& w, const ClusterSpec& part, int sequences) {
  ModelSpec m = w.eval.model();
  m.training.global_batch_size = sequences;
  Evaluator eval(m, part, w.eval.compute(), w.eval.recompute_options(), w.eval.granularity(), w.eval.predict_options());
  Options o = w.opt;
  o.progress = nullptr;
  Work inner(eval, o, w.deadline(), "hexiscale-part");
  run_heteroauto(inner);
  w.count(inner.layouts());
  // Its best candidates by the estimate, re-ranked by the simulator (as run() does).
  std::optional<PartPlan> best;
  for (const Candidate& c : inner.take()) {
    auto outcome = predict::predict(eval.to_plan(c), w.eval.compute(), w.eval.ranking_options());
    if (!outcome || !outcome->fits_memory()) continue;
    const double t = outcome->plan.predicted->iteration_s;
    if (!best || t / sequences < best->per_sequence_s) best = PartPlan{std::move(outcome->plan), t / sequences};
  }
  return best;
}

}  // namespace

void run_hexiscale(Work& w) {
  // Its parts take uneven shares of the global batch, which a sequence-length distribution's
  // buckets need not divide into whole sequences: not tried then.
  if (!w.eval.model().seq_lengths.empty()) {
    w.skipped = "not tried: its parts' shares of the batch would split the sequence-length buckets unevenly";
    return;
  }
  const ClusterSpec& c = w.eval.cluster();
  const auto nodes = all_nodes(c);
  const int G = w.eval.model().training.global_batch_size;
  const int k_max = std::min({int(nodes.size()), 8, G});
  using Key = std::pair<std::map<int, int>, int>;  // a part's nodes per subcluster, its sequences
  std::map<Key, std::optional<PartPlan>> memo;
  std::mutex mutex;
  std::set<std::vector<std::map<int, int>>> seen;
  // The balance factor is HexiScale's hyperparameter (§4.2): tight, or loose enough to cut
  // along the slow links between unequal subclusters (the batch shares then even the speeds).
  // Stopping (ours): k grows while it can still pay off: once the combined plans of two k in
  // a row, simulated, stay above 1.5× the best so far, larger k are not tried. Shares are not
  // refined when even perfectly shared (G / Σ_i 1 / seconds per sequence of part i) the
  // pipelines would stay above that.
  double best = 1e300;
  int hopeless = 0;
  for (int k = 1; k <= k_max && !w.expired() && hopeless < 2; ++k) {
    double best_k = 1e300;
    for (double balance : {1.05, 3.0})
    for (bool max_cut : {false, true}) {
      if (w.expired() || (k == 1 && (max_cut || balance > 1.05))) break;
      auto partition = partition_nodes(c, nodes, k, max_cut, balance);
      if (!partition) continue;
      // Each part's nodes per subcluster; nodes of a subcluster are interchangeable (the same
      // links everywhere), so part i gets a contiguous range of them.
      std::vector<std::map<int, int>> per_sub(static_cast<std::size_t>(k));
      std::vector<double> power(static_cast<std::size_t>(k), 0.0);
      for (int i = 0; i < k; ++i)
        for (const auto& n : partition->parts[std::size_t(i)]) {
          ++per_sub[std::size_t(i)][n.sub];
          const auto& s = c.subclusters[std::size_t(n.sub)];
          power[std::size_t(i)] += s.devices_per_node * s.device.peak;
        }
      // Partitions met before (another balance or cut giving the same parts) add nothing.
      {
        auto parts_key = per_sub;
        std::sort(parts_key.begin(), parts_key.end());
        if (!seen.insert(parts_key).second) continue;
      }
      std::vector<double> weight = power;
      std::optional<std::vector<PartPlan>> parts;
      for (int round = 0; round < 2 && !w.expired(); ++round) {  // shares by compute, then by predicted speed
        if (round == 1) {  // not when even perfectly shared the pipelines are far too slow
          double rate = 0;
          for (const auto& p : *parts) rate += 1 / p.per_sequence_s;
          if (G / rate > 1.5 * best) break;
        }
        const auto seqs = shares(weight, G);
        // Parts are searched in parallel, each (nodes per subcluster, sequences) once.
        std::vector<std::optional<PartPlan>> found(static_cast<std::size_t>(k));
        tbb::parallel_for(0, k, [&](int i) {
          const Key key{per_sub[std::size_t(i)], seqs[std::size_t(i)]};
          {
            std::lock_guard lock(mutex);
            if (auto it = memo.find(key); it != memo.end()) {
              found[std::size_t(i)] = it->second;
              return;
            }
          }
          if (w.expired()) return;
          auto p = search_part(w, part_cluster(c, key.first), key.second);
          std::lock_guard lock(mutex);
          if (!w.expired() || p) memo.emplace(key, p);
          found[std::size_t(i)] = std::move(p);
        });
        if (!std::all_of(found.begin(), found.end(), [](const auto& f) { return f.has_value(); })) break;
        parts.emplace();
        for (auto& f : found) parts->push_back(std::move(*f));
        for (int i = 0; i < k; ++i) weight[std::size_t(i)] = 1 / (*parts)[std::size_t(i)].per_sequence_s;
      }
      if (!parts) continue;
      // The pipelines together on the whole cluster: part i's node j of a subcluster is node
      // offset(i, subcluster) + j.
      Plan plan;
      plan.model = w.eval.model();
      plan.cluster = c;
      plan.schedule = parts->front().plan.schedule;
      plan.granularity = parts->front().plan.granularity;
      std::map<std::string, int> offset;
      for (int i = 0; i < k; ++i) {
        const Plan& p = (*parts)[std::size_t(i)].plan;
        for (Pipeline pipe : p.pipelines) {
          for (auto& st : pipe.stages) {
            for (auto& d : st.devices) d.node += offset[st.subcluster];
            st.warmup.reset(), st.predicted.reset();
          }
          plan.pipelines.push_back(std::move(pipe));
        }
        for (const auto& s : p.cluster.subclusters) offset[s.name] += s.nodes;
      }
      if (auto o = predict::predict(plan, w.eval.compute(), w.eval.ranking_options()); o && o->fits_memory())
        best_k = std::min(best_k, o->plan.predicted->iteration_s);
      w.offer_plan(std::move(plan));
      w.note_progress("k = " + std::to_string(k) + (max_cut ? ", max-cut" : ", min-cut"));
    }
    best = std::min(best, best_k);
    hopeless = best_k > 1.5 * best ? hopeless + 1 : 0;
  }
}

}  // namespace het::search
