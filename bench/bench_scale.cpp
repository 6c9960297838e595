// Search time vs problem size: `auto` (and uniform, for the speed-up) on generated clusters
// of 64 to 10,000 devices and 2 to 8 device types (nodes of 8 devices, catalog devices, 25 GB/s
// inside a subcluster, 2-25 GB/s between), for HetAuto exp3's 96-layer Llama model.
//   build/bench/bench_scale [--budget S] [--devices N] [--types T] [--format json]
//   (budget: default, the search's own default; --devices/--types: only those rows)
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>

#include <nlohmann/json.hpp>

#include "instances.hpp"
#include "search/search.hpp"
#include "spec/catalog.hpp"
#include "spec/model.hpp"

using namespace het;


int main(int argc, char** argv) {
  double budget = 0;  // 0: search::default_time_budget
  bool json = false;
  int only_devices = 0, only_types = 0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--devices") && i + 1 < argc) only_devices = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--types") && i + 1 < argc) only_types = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--budget") && i + 1 < argc) budget = std::atof(argv[++i]);
    if (!std::strcmp(argv[i], "--format") && i + 1 < argc) json = !std::strcmp(argv[++i], "json");
  }
  auto catalog = builtin_catalog();
  auto model = load_model(HET_SOURCE_DIR "/configs/models/hetauto-exp3-llama-96l.yaml");
  if (!catalog || !model) return 2;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  if (!json) std::printf("%7s %5s %12s %12s %9s %9s %9s\n", "devices", "types", "uniform_s", "auto_s", "speedup", "budget_s", "search_s");
  for (int devices : {64, 256, 1024, 4096, 10000})
    for (int types : {2, 4, 8}) {
      if (devices / 8 < types || (only_devices && devices != only_devices) || (only_types && types != only_types)) continue;
      const ClusterSpec c = bench::scale_cluster(devices, types, *catalog);
      cost::ComputeModel cm(*model, {});
      search::Options o;
      o.time_budget_s = budget;
      auto uniform = search::run("uniform", *model, c, cm, o);
      const auto t0 = std::chrono::steady_clock::now();
      auto best = search::run("auto", *model, c, cm, o);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double u = uniform ? uniform->plans.front().plan.predicted->iteration_s : 0;
      const double a = best ? best->plans.front().plan.predicted->iteration_s : 0;
      const double b = budget > 0 ? budget : search::default_time_budget(c);
      rows.push_back({{"devices", devices}, {"types", types}, {"uniform_s", u}, {"auto_s", a}, {"budget_s", b}, {"search_s", s}});
      if (!json) std::printf("%7d %5d %12.3f %12.3f %8.2fx %9.1f %9.1f\n", devices, types, u, a, u > 0 && a > 0 ? u / a : 0.0, b, s), std::fflush(stdout);
    }
  if (json) std::cout << rows.dump(1) << "\n";
}
