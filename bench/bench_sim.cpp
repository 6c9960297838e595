// Simulator speed: wall time of one simulate() call by pipeline size, the median of
// several runs. The simulator runs inside searches, so it must stay O(stages × micro-batches).
//   build/bench/bench_sim [--format json]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "schedule/schedule.hpp"
#include "sim/sim.hpp"

using namespace het;

int main(int argc, char** argv) {
  const bool json = argc > 2 && std::strcmp(argv[1], "--format") == 0 && std::strcmp(argv[2], "json") == 0;
  struct Size {
    int stages, microbatches;
  };
  const Size sizes[] = {{4, 32}, {16, 128}, {32, 256}, {64, 512}, {100, 1000}, {200, 2000}};
  if (!json) std::printf("%8s %8s %12s %14s %10s\n", "stages", "mbatches", "median_ms", "ns/(stage*mb)", "runs");
  else std::printf("[");
  bool first = true;
  for (auto [S, m] : sizes) {
    sim::PipelineInput p;
    p.num_microbatches = m;
    schedule::WarmupInput w;
    w.kind = ScheduleKind::h_1f1b;
    w.num_microbatches = m;
    for (int s = 0; s < S; ++s) {
      const double f = 1e-3 * (1 + 0.1 * (s % 3));
      p.stages.push_back({f, 2 * f, 4e-4, 4e-4, 0, ""});
      w.stage_s.push_back(3 * f);
      if (s + 1 < S) w.transfer_s.push_back(4e-4);
    }
    p.warmup = schedule::warmup_counts(w);
    sim::SimInput in;
    in.pipelines = {p};
    std::vector<double> ms;
    const int runs = S * m > 100000 ? 5 : 21;
    for (int r = 0; r < runs; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      auto res = sim::simulate(in);
      auto t1 = std::chrono::steady_clock::now();
      if (!res) return 1;
      ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    const double med = ms[ms.size() / 2];
    const double per = med * 1e6 / (double(S) * m);
    if (json)
      std::printf("%s{\"stages\": %d, \"microbatches\": %d, \"median_ms\": %.3f, \"ns_per_cell\": %.1f}", first ? "" : ", ", S, m, med, per);
    else
      std::printf("%8d %8d %12.3f %14.1f %10d\n", S, m, med, per, runs);
    first = false;
  }
  if (json) std::printf("]\n");
}
