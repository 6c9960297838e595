#pragma once
// Plans for what a user pays, not only for speed (issue 22): `hetplan search --objective
// time|cost [--max-cost-per-hour X] [--max-iteration-s Y] [--pareto]`.
//
// A plan's cost is the rent of the devices it uses (DeviceSpec::price) over its iteration:
// predict() reports USD/h and USD per million tokens. The cheapest plan per token often
// leaves a subcluster idle (a device 5% cheaper and 2.5x slower), which a search for time on
// the whole cluster never proposes. So run() searches for time on every non-empty subset of
// the cluster's subclusters — and, with at most 3 subclusters, also with a half and a quarter
// of each one's nodes (at most kMaxSearches searches: search::run, the same options; a plan
// may also leave devices unused by itself) — and keeps every plan those searches rank: each
// is a point of (time, cost). The constraints drop points; the objective picks among the rest: the least
// iteration time (time) or USD per million tokens (cost), ties to the other; the Pareto front
// is the points no other point beats in both.
// Searches: 2^C - 1 for C subclusters (at most kMaxSubclusters of them), 3^C - 1 or 4^C - 1 for
// fewer.
#include <optional>
#include <string>
#include <vector>

#include "search/search.hpp"

namespace het::search {

enum class Objective { time, cost };

struct Constraints {
  std::optional<double> max_cost_per_hour;  // USD/h of the devices a plan uses
  std::optional<double> max_iteration_s;
};

struct ObjectiveOutput {
  predict::Outcome best;                  // by the objective, within the constraints
  std::vector<std::string> unused;        // subclusters the best plan leaves idle
  std::vector<predict::Outcome> pareto;   // time/cost front within the constraints, fastest first
  int points = 0;                         // plans compared (after the constraints)
  int searches = 0;                       // parts of the cluster searched
  double seconds = 0;
};

inline constexpr int kMaxSubclusters = 6;
inline constexpr int kMaxSearches = 63;

// Errors: a subcluster of more than kMaxSubclusters; a device without a price (its
// subcluster named); no plan that fits, or none within the constraints (saying the nearest).
Result<ObjectiveOutput> run_objective(const std::string& algorithm, const ModelSpec& model, const ClusterSpec& cluster,
                                      const cost::ComputeModel& compute, const Options& options, Objective objective,
                                      const Constraints& constraints);

}  // namespace het::search
