// Search quality and speed on random instances: each algorithm's gap to the exhaustive
// oracle (same cost model), and search seconds. Prints a table, or JSON with --format json.
// Then, on instances whose best plan needs pipelines of two shapes (instances.hpp), the best
// plan of identical pipelines (the exhaustive oracle) against hexiscale and auto.
//   build/bench/bench_search [--instances N] [--asymmetric N] [--format json]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "instances.hpp"
#include "search/search.hpp"

using namespace het;

int main(int argc, char** argv) {
  int n = 200, n_asym = 12;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--instances") && i + 1 < argc) n = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--asymmetric") && i + 1 < argc) n_asym = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--format") && i + 1 < argc) json = !std::strcmp(argv[++i], "json");
  }
  auto catalog = builtin_catalog();
  const std::vector<std::string> algos = {"uniform", "heteroauto", "hapt", "mcts", "hexiscale", "portfolio"};
  std::map<std::string, std::vector<double>> gaps, secs;
  int compared = 0, infeasible = 0;
  // Instances whose oracle plan gives a stage no layer (only the embedding or the head): outside
  // HetAuto's P1, so outside mcts's space.
  std::vector<bool> outside_p1;
  for (int k = 0; k < n; ++k) {
    auto in = bench::random_instance(1000 + k, *catalog);
    cost::ComputeModel cm(in.model, {});
    search::Options o;
    o.time_budget_s = 60;
    auto oracle = search::run("exhaustive", in.model, in.cluster, cm, o);
    if (!oracle) {
      ++infeasible;
      continue;
    }
    ++compared;
    const double best = oracle->plans.front().plan.predicted->iteration_s;
    bool layerless = false;
    for (const auto& st : oracle->plans.front().plan.pipelines.front().stages)
      layerless |= st.first == st.last && (st.first == 0 || st.first == in.model.num_layers + 1);
    outside_p1.push_back(layerless);
    for (const auto& a : algos) {
      search::Options oa = o;
      if (a == "portfolio") oa.auto_algorithms = {"uniform", "heteroauto", "hapt", "mcts", "hexiscale"};
      const auto t0 = std::chrono::steady_clock::now();
      auto r = search::run(a == "portfolio" ? "auto" : a, in.model, in.cluster, cm, oa);
      secs[a].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      gaps[a].push_back(r ? r->plans.front().plan.predicted->iteration_s / best - 1 : 1e9);
    }
  }
  if (!json) std::printf("%d instances (%d where nothing fits)\n%-12s %10s %10s %10s %12s %10s\n", compared, infeasible,
                         "algorithm", "mean_gap", "worst_gap", "<=1%", "found", "mean_s");
  else std::printf("{\"instances\": %d, \"infeasible\": %d, \"algorithms\": [", compared, infeasible);
  bool first = true;
  for (const auto& a : algos) {
    auto& g = gaps[a];
    std::vector<double> found;
    for (double x : g)
      if (x < 1e8) found.push_back(x);
    double mean = 0, worst = 0;
    int within = 0;
    for (double x : found) mean += x, worst = std::max(worst, x), within += x <= 0.01;
    mean = found.empty() ? 0 : mean / found.size();
    double s = 0;
    for (double x : secs[a]) s += x;
    s = secs[a].empty() ? 0 : s / secs[a].size();
    if (json)
      std::printf("%s{\"name\": \"%s\", \"mean_gap\": %.5f, \"worst_gap\": %.5f, \"within_1pct\": %d, \"found\": %zu, \"mean_s\": %.4f}",
                  first ? "" : ", ", a.c_str(), mean, worst, within, found.size(), s);
    else
      std::printf("%-12s %9.2f%% %9.2f%% %6d/%-3zu %8zu/%-3zu %10.4f\n", a.c_str(), 100 * mean, 100 * worst, within,
                  g.size(), found.size(), g.size(), s);
    first = false;
  }
  double worst_p1 = 0;
  int p1 = 0;
  for (std::size_t i = 0; i < outside_p1.size(); ++i)
    if (!outside_p1[i]) worst_p1 = std::max(worst_p1, gaps["mcts"][i]);
    else ++p1;
  if (json) std::printf("], \"outside_p1\": %d, \"mcts_worst_gap_within_p1\": %.5f, \"asymmetric\": [", p1, worst_p1);
  else
    std::printf("mcts: worst gap %.2f%% where the oracle's plan keeps HetAuto's P1 (%d instances where it gives a stage no layer)\n"
                "\n%d instances where pipelines of two shapes win (iteration s; shapes = distinct pipeline layouts)\n"
                "%-14s %10s %10s %10s %7s %14s\n",
                100 * worst_p1, p1, n_asym, "instance", "identical", "hexiscale", "auto", "shapes", "auto/identical");
  for (int k = 0; k < n_asym; ++k) {
    auto in = bench::asymmetric_instance(9000 + k, *catalog);
    cost::ComputeModel cm(in.model, {});
    search::Options o;
    o.time_budget_s = 60;
    auto oracle = search::run("exhaustive", in.model, in.cluster, cm, o);
    auto hexi = search::run("hexiscale", in.model, in.cluster, cm, o);
    auto best = search::run("auto", in.model, in.cluster, cm, o);
    auto t = [](const auto& r) { return r ? r->plans.front().plan.predicted->iteration_s : 0.0; };
    std::set<std::string> shapes;
    if (best)
      for (const auto& pipe : best->plans.front().plan.pipelines) {
        std::string shape;
        for (const auto& st : pipe.stages)
          shape += st.subcluster + std::to_string(st.first) + "-" + std::to_string(st.last) + "/" + std::to_string(st.tp) + " ";
        shapes.insert(shape);
      }
    const double ratio = t(oracle) > 0 ? t(best) / t(oracle) : 0;
    if (json)
      std::printf("%s{\"instance\": \"%s\", \"identical_s\": %.5f, \"hexiscale_s\": %.5f, \"auto_s\": %.5f, \"shapes\": %zu}",
                  k ? ", " : "", in.model.name.c_str(), t(oracle), t(hexi), t(best), shapes.size());
    else
      std::printf("%-14s %10.4f %10.4f %10.4f %7zu %13.3fx\n", in.model.name.c_str(), t(oracle), t(hexi), t(best), shapes.size(), ratio);
  }
  if (json) std::printf("]}\n");
}
