#include "search/objective.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>

#include "report/report.hpp"

namespace het::search {

namespace {

using report::fmt;

// The cluster with nodes[j] nodes of subcluster j (its first ones; 0: none) and the links
// among those kept.
ClusterSpec subset(const ClusterSpec& c, const std::vector<int>& nodes) {
  ClusterSpec out;
  out.name = c.name;
  out.default_link = c.default_link;
  std::set<std::string> kept;
  for (std::size_t j = 0; j < c.subclusters.size(); ++j)
    if (nodes[j] > 0) {
      out.subclusters.push_back(c.subclusters[j]);
      out.subclusters.back().nodes = nodes[j];
      kept.insert(c.subclusters[j].name);
    }
  for (const auto& l : c.links)
    if (kept.count(l.a) && kept.count(l.b)) out.links.push_back(l);
  return out;
}

// What may be rented of each subcluster: none or all of it, and with few subclusters also a
// half and a quarter of its nodes (whole nodes), so that the searches stay within kMaxSearches.
std::vector<std::vector<int>> node_choices(const ClusterSpec& c) {
  const std::size_t C = c.subclusters.size();
  std::size_t per = 2;
  while (per < 4 && std::pow(double(per + 1), double(C)) <= kMaxSearches + 1) ++per;
  std::vector<std::vector<int>> out;
  for (const auto& s : c.subclusters) {
    std::vector<int> levels = {0, s.nodes};
    for (int d : {2, 4})
      if (levels.size() < per && (s.nodes + d - 1) / d < levels.back() && (s.nodes + d - 1) / d >= 1)
        levels.push_back((s.nodes + d - 1) / d);
    out.push_back(levels);
  }
  return out;
}

double cost_of(const predict::Outcome& o) { return o.plan.predicted->usd_per_million_tokens.value_or(0); }
double hourly(const predict::Outcome& o) { return o.plan.predicted->cost_usd_per_hour.value_or(0); }
double time_of(const predict::Outcome& o) { return o.plan.predicted->iteration_s; }

}  // namespace

Result<ObjectiveOutput> run_objective(const std::string& algorithm, const ModelSpec& model, const ClusterSpec& cluster,
                                      const cost::ComputeModel& compute, const Options& options, Objective objective,
                                      const Constraints& constraints) {
  const auto start = std::chrono::steady_clock::now();
  const int C = static_cast<int>(cluster.subclusters.size());
  if (C > kMaxSubclusters)
    return failure(ErrorKind::invalid_input, "planning for cost or under constraints searches every subset of the subclusters; " +
                                                 std::to_string(C) + " subclusters are more than " + std::to_string(kMaxSubclusters) +
                                                 " (2^" + std::to_string(C) + " - 1 searches)");
  const bool needs_price = objective == Objective::cost || constraints.max_cost_per_hour;
  if (needs_price)
    for (const auto& s : cluster.subclusters)
      if (s.device.price <= 0)
        return Diagnostic{"", 0, 0, "subclusters[" + s.name + "].device.price",
                          "the device " + s.device.type + " has no price, so no plan's cost is known: give one in the cluster "
                          "(device: {type: " + s.device.type + ", price: 2.21USD/h}) or the catalog"};
  ObjectiveOutput out;
  std::vector<predict::Outcome> points;
  Diagnostics last_errors;
  const auto choices = node_choices(cluster);
  std::vector<std::size_t> at(choices.size(), 0);  // an odometer over the choices
  for (;;) {
    std::size_t j = 0;
    while (j < at.size() && ++at[j] == choices[j].size()) at[j++] = 0;
    if (j == at.size()) break;  // every combination seen (all zero is skipped: it comes last)
    std::vector<int> nodes(choices.size());
    for (std::size_t k = 0; k < nodes.size(); ++k) nodes[k] = choices[k][at[k]];
    const ClusterSpec part = subset(cluster, nodes);
    if (options.progress) options.progress("cost: search " + std::to_string(out.searches + 1) + " (" + part.name + ")");
    auto found = run(algorithm, model, part, compute, options);
    ++out.searches;
    if (!found) {
      last_errors = found.errors();
      continue;
    }
    for (auto& o : found->plans) {
      // Each plan on the whole cluster: the same devices (subcluster names and node indices
      // are the cluster's), the others idle.
      o.plan.cluster = cluster;
      points.push_back(std::move(o));
    }
  }
  if (points.empty()) {
    if (!last_errors.empty()) return last_errors;
    return failure(ErrorKind::invalid_input, "no plan fits on any subset of the cluster");
  }
  // The constraints.
  std::vector<predict::Outcome> kept;
  const predict::Outcome* nearest = nullptr;  // the least violating, for the error
  double nearest_excess = 1e300;
  for (auto& o : points) {
    double excess = 0;
    if (constraints.max_cost_per_hour) excess = std::max(excess, hourly(o) / *constraints.max_cost_per_hour - 1);
    if (constraints.max_iteration_s) excess = std::max(excess, time_of(o) / *constraints.max_iteration_s - 1);
    if (excess <= 1e-12) kept.push_back(std::move(o));
    else if (excess < nearest_excess) nearest_excess = excess, nearest = &o;
  }
  if (kept.empty()) {
    std::string what = "no plan meets";
    if (constraints.max_cost_per_hour) what += " --max-cost-per-hour " + fmt("%g", *constraints.max_cost_per_hour);
    if (constraints.max_iteration_s) what += std::string(constraints.max_cost_per_hour ? " and" : "") + " --max-iteration-s " +
                                            fmt("%g", *constraints.max_iteration_s);
    if (nearest)
      what += "; the nearest: " + fmt("%.4f s per iteration", time_of(*nearest)) +
              (nearest->plan.predicted->cost_usd_per_hour ? " at " + fmt("%.2f USD/h", hourly(*nearest)) : "");
    return failure(ErrorKind::invalid_input, what);
  }
  out.points = static_cast<int>(kept.size());
  // Pareto front in (time, USD per million tokens), where costs are known.
  if (needs_price || std::all_of(kept.begin(), kept.end(), [](const auto& o) { return o.plan.predicted->usd_per_million_tokens.has_value(); })) {
    std::vector<std::size_t> order(kept.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return time_of(kept[a]) != time_of(kept[b]) ? time_of(kept[a]) < time_of(kept[b]) : cost_of(kept[a]) < cost_of(kept[b]);
    });
    double cheapest = 1e300;
    for (std::size_t i : order)
      if (cost_of(kept[i]) < cheapest * (1 - 1e-9)) cheapest = cost_of(kept[i]), out.pareto.push_back(kept[i]);
  }
  auto better = [&](const predict::Outcome& a, const predict::Outcome& b) {
    if (objective == Objective::cost)
      return cost_of(a) != cost_of(b) ? cost_of(a) < cost_of(b) : time_of(a) < time_of(b);
    return time_of(a) != time_of(b) ? time_of(a) < time_of(b) : cost_of(a) < cost_of(b);
  };
  out.best = *std::min_element(kept.begin(), kept.end(), better);
  std::set<std::string> used;
  for (const auto& p : out.best.plan.pipelines)
    for (const auto& st : p.stages) used.insert(st.subcluster);
  for (const auto& s : cluster.subclusters)
    if (!used.count(s.name)) out.unused.push_back(s.name);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace het::search
