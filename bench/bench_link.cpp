// The TCP transport under emulated links (issue 16): a two-rank ring all-reduce on links shaped
// as `hetexec run-local --emulate-links --time-dilation X` shapes them (30 us x X, 2 GB/s / X:
// bench/fidelity/cluster.yaml's intra-node link), measured against the model hetplan predicts it
// with (fidelity::dilate: per message the shaped link plus the profile's transport), the
// transport measured two ways: unshaped (a hot ping-pong) and as `hetexec profile --time-dilation
// X` measures it (node::measure_loopback under X x 30 us of shaping). Ratios of one run.
//   bench_link [GAP_US=1000] [ALL_REDUCES=200] [FLOATS=4096] [OTHERS=0] [DILATION...]
// GAP_US: each all-reduce follows a pause of that long (a dilated rank's compute between them).
// OTHERS > 0: the other ranks of a dilated run sharing the cores. The two ranks then compute as a
// dilated rank does -- GAP_US of work, then a sleep of (X - 1) times it (clock::sleep_until, as
// runtime/pace.hpp stretches) -- beside OTHERS threads doing the same (each its own 0.5-1.4 x
// GAP_US of work): a wake-up that finds every core computing waits for one, and the all-reduces'
// mean rises above their median (the link model's). The table's "excess" is mean - median.
// DILATION...: the dilations to run (default 1 2 4 8 16).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <vector>

#include "clock/clock.hpp"
#include "node/measure.hpp"
#include "rendezvous/directory.hpp"
#include "transport/tcp.hpp"

using namespace het;

int main(int argc, char** argv) {
  const double gap_us = argc > 1 ? std::atof(argv[1]) : 1000;
  const int count = argc > 2 ? std::atoi(argv[2]) : 200;
  const std::size_t n = argc > 3 ? std::size_t(std::atol(argv[3])) : 4096;
  const int others = argc > 4 ? std::atoi(argv[4]) : 0;
  std::vector<double> dilations;
  for (int i = 5; i < argc; ++i) dilations.push_back(std::atof(argv[i]));
  if (dilations.empty()) dilations = {1, 2, 4, 8, 16};
  // A dilated rank's operation: `us` of work on this thread, then the stretch's sleep.
  auto dilated_op = [](double us, double x) {
    const auto start = clock::Clock::now(), end = start + std::chrono::nanoseconds(long(us * 1e3));
    volatile double sink = 0;
    while (clock::Clock::now() < end) sink = sink + 1;
    clock::sleep_until(end + std::chrono::nanoseconds(long((x - 1) * us * 1e3)));
  };
  auto hot = node::measure_loopback(0.5);
  if (!hot) return 1;
  if (others > 0)
    std::printf("two-rank all-reduce of %zu floats, %.0f us of dilated work before each, %d others computing alike, %d of them per dilation\n",
                n, gap_us, others, count);
  else
    std::printf("two-rank all-reduce of %zu floats, a pause of %.0f us before each, %d of them per dilation\n", n, gap_us, count);
  std::printf("transport unshaped: %.1f us, %.2f GB/s\n\n", hot->latency.value * 1e6, hot->bandwidth.value / 1e9);
  std::printf("| dilation | measured p50 us (p5-p95) | mean us | excess us | transport shaped us | model unshaped us | ratio | model shaped us | ratio |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  char dir_template[] = "/tmp/bench-link-XXXXXX";
  if (!mkdtemp(dir_template)) return 1;
  for (double x : dilations) {
    const double alpha = 30e-6 * x, beta = 2e9 / x;
    auto shaped = node::measure_loopback(0.5, alpha);
    if (!shaped) return 1;
    const std::string dir = std::string(dir_template) + "/" + std::to_string(int(x));
    std::filesystem::create_directories(dir);
    rendezvous::DirectoryRendezvous rdv(dir);
    std::vector<double> times;
    std::atomic<bool> done{false};
    std::vector<std::thread> load;
    for (int k = 0; k < others; ++k)
      load.emplace_back([&, k] {
        while (!done) dilated_op(gap_us * (0.5 + 0.1 * (k % 10)), x);
      });
    auto rank = [&](int r) {
      auto peers = transport::Peers::connect(r, 2, rdv, 10);
      if (!peers) std::abort();
      (*peers)->shape(1 - r, beta, alpha);
      std::vector<float> data(n, 1.0f);
      const std::vector<int> group{0, 1};
      for (int i = 0; i < count; ++i) {
        if (others > 0)
          dilated_op(gap_us, x);
        else
          clock::sleep_until(clock::Clock::now() + std::chrono::microseconds(int(gap_us)));
        const auto t0 = clock::Clock::now();
        if (!transport::all_reduce_sum(**peers, group, data.data(), n, 7)) std::abort();
        if (r == 0) times.push_back(std::chrono::duration<double>(clock::Clock::now() - t0).count());
      }
      (void)(*peers)->flush();
    };
    std::thread t1(rank, 1);
    rank(0);
    t1.join();
    done = true;
    for (auto& t : load) t.join();
    double mean = 0;
    for (double t : times) mean += t / double(times.size());
    std::sort(times.begin(), times.end());
    // A ring all-reduce of two ranks: two messages of half the buffer in sequence.
    const double chunk = double(n) * 4 / 2;
    auto model = [&](const node::LoopbackLink& t) {
      return 2 * (alpha + chunk / beta) + 2 * (t.latency.value + chunk / t.bandwidth.value);
    };
    auto q = [&](double f) { return times[std::size_t(f * double(times.size() - 1))]; };
    std::printf("| %g | %.0f (%.0f-%.0f) | %.0f | %.0f | %.1f | %.0f | %.2f | %.0f | %.2f |\n", x, q(.5) * 1e6, q(.05) * 1e6, q(.95) * 1e6,
                mean * 1e6, (mean - q(.5)) * 1e6, shaped->latency.value * 1e6, model(*hot) * 1e6, model(*hot) / q(.5), model(*shaped) * 1e6, model(*shaped) / q(.5));
    std::fflush(stdout);
  }
  std::filesystem::remove_all(dir_template);
}
