#pragma once
// Searching for the best plan (DESIGN.md §8): one interface over several algorithms so that
// they are compared on the same inputs and cost model.
//
//   uniform     Megatron-like baseline: one (tp, dp) for all stages over every device in the
//               cluster's order, layers split equally.
//   exhaustive  every layout of identical pipelines in which each used subcluster holds a run
//               of stages of one (dp, cp, tp), in every subcluster order, with the best unit
//               split and recomputation for each — the oracle for small instances.
//   hapt        HAPT §5.2: one pipeline; stages on submeshes (1,1),(1,2)..(1,M),(2,M)..(N,M)
//               of each subcluster, each with its best intra-op option; a DP over units and
//               submeshes for each candidate t_max under the schedule's memory constraint.
//   heteroauto  H2 §4.3: DFS over dp | global batch, tp per device type, pipeline stages per
//               type (types ordered by memory, descending), the split equalising compute under
//               memory; then the refinement that splits a type's stages into two groups.
//   mcts        HetAuto §4.1: Monte Carlo tree search over pipelines k → micro-batch (q) →
//               order of the subclusters used → per subcluster (#stages, (dp, cp, tp)) under
//               principles P1–P4; UCB with λ, reward 1/(1+ℓ), 0 on out-of-memory; root subtrees
//               (one per k) in parallel, each until it converges (mcts_patience); deterministic
//               for a seed, monotone in the budget.
//   hexiscale   HexiScale §4: METIS parts of the cluster's nodes as pipelines of different
//               shapes, each searched on its part, batch shares by speed.
//   auto        the portfolio: uniform and heteroauto, a refinement of their best plans (local
//               search over neighbouring layouts) until it converges, then the others side
//               by side behind the refinement of what they find (it takes the cores when it
//               has work) — until each ends by itself or, converged (Options::converge), for
//               half the time they had so far — and a last refinement; where every member
//               ended by itself, a second refinement of their final plans from a fresh
//               state (the same plans in every run; the first's depend on when the members'
//               plans came); the best wins. With converge off each member runs as it would
//               alone, so auto is at least as good as any of them unless the budget cuts one
//               short.
// Candidates are ranked by the analytic estimate (search/evaluator.hpp); the best top_k of
// each algorithm are re-ranked by the simulator. Every returned plan is complete (derived
// fields filled by predict()), validates, and fits memory by the memory model.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cost/compute.hpp"
#include "plan/plan.hpp"
#include "predict/predict.hpp"

namespace het::search {

struct Options {
  double time_budget_s = 0;               // 0: default_time_budget(cluster)
  int threads = 0;                        // 0: all cores
  std::uint64_t seed = 1;                 // for algorithms that sample (mcts)
  std::vector<ScheduleKind> schedules;    // empty: 1f1b and h-1f1b
  std::vector<int> micro_batch_sizes;     // empty: the model's training.micro_batch_sizes
  std::vector<Recompute> recompute;       // empty: the model's training.recompute
  int top_k = 16;                         // candidates per algorithm re-ranked by the simulator
  Granularity granularity = Granularity::layer;
  predict::Options predict;
  std::vector<std::string> auto_algorithms;  // empty: all that apply
  double mcts_lambda = 10;                // mcts: UCB exploration weight λ (HetAuto eq. 1)
  std::int64_t mcts_iterations = 0;       // mcts: iterations per root subtree; 0: no cap
  // mcts: a root subtree stops once it has evaluated max(patience, i) layouts without a
  // better best simulated plan than the one found after i evaluations; 0: only the budget,
  // the cap or an exhausted tree stop it.
  std::int64_t mcts_patience = 256;
  // auto: the slower members (hapt, mcts, hexiscale) are stopped once the refinement has
  // converged on what they found and the portfolio's best estimate has not improved by 0.1% for
  // half the time it took to reach it, counting only the time in which they had the cores (the
  // refinement waiting; at least 0.5 s; exhaustive never), instead of running to their own end
  // or 80% of the budget (issue 20).
  // false: each runs as it would alone, so auto is at least as good as every one of them.
  bool converge = true;
  // auto: plans made for a neighbouring problem (hetplan sweep: the point before) whose layouts,
  // where admissible here, join the refinement's last call and the final ranking (search.cpp
  // warm_candidates). The portfolio runs as without them; the result is at least as good as
  // their plans on this problem.
  std::vector<Plan> warm_start;
  // Progress for people: called from any thread, at most a few times per second.
  std::function<void(const std::string&)> progress;
};

struct AlgorithmReport {
  std::string name;
  double seconds = 0;
  std::int64_t candidates = 0;         // layouts considered (× micro-batch sizes × schedules)
  std::optional<double> iteration_s;   // its best plan, simulated; none when it found nothing
  bool timed_out = false;
  std::string note;                    // why it did not apply or found nothing
};

struct SearchOutput {
  std::vector<predict::Outcome> plans;  // best first
  std::vector<AlgorithmReport> algorithms;
  double lower_bound_s = 0;             // search::lower_bound: no plan of the search's space is faster
  double seconds = 0;
};

// The budget when none is given: 8 s, or one second per 200 devices beyond 1,600, at most 45 s.
double default_time_budget(const ClusterSpec& cluster);

// Names: "auto", "uniform", "exhaustive", "hapt", "heteroauto", "mcts", "hexiscale".
const std::vector<std::string>& algorithm_names();

// Errors: an unknown algorithm; nothing fits (naming the binding constraint).
Result<SearchOutput> run(const std::string& algorithm, const ModelSpec& model, const ClusterSpec& cluster,
                         const cost::ComputeModel& compute, const Options& options);

}  // namespace het::search
