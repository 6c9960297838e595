// runtime/pace.hpp: how an emulated device stretches the compute it is given.
#include <catch2/catch.hpp>
#include <time.h>

#include <chrono>

#include "runtime/pace.hpp"

// Spins until the thread has used `s` seconds of CPU time (what a cpu_clock Pace measures).
static void spin_cpu(double s) {
  auto cpu = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
  };
  const double until = cpu() + s;
  while (cpu() < until) {
  }
}

TEST_CASE("a paced device takes the median of the same run of compute's last times, not each one's own") {
  het::runtime::Pace pace(4, /*cpu_clock=*/true);
  // Step after step, the forward's first run of compute takes 2 ms of CPU time, its second 1 ms.
  for (int step = 0; step < 4; ++step) {
    pace.begin("F0");
    spin_cpu(2e-3);
    pace.settle();
    spin_cpu(1e-3);
    pace.settle();
  }
  // Once it takes 6 ms (the host was slow): the device still takes 4 x 2 ms, not 4 x 6 ms.
  double before = pace.computed_s();
  const auto wall = std::chrono::steady_clock::now();
  pace.begin("F0");
  spin_cpu(6e-3);
  pace.settle();
  const double first = pace.computed_s() - before;
  CHECK(first >= 4 * 2e-3);
  CHECK(first < 4 * 3e-3);
  CHECK(std::chrono::steady_clock::now() - wall >= std::chrono::duration<double>(6e-3));  // never shorter than its CPU time
  // The second run of compute of the same operation is a run of its own (1 ms, not 2).
  before = pace.computed_s();
  spin_cpu(1e-3);
  pace.settle();
  CHECK(pace.computed_s() - before < 4 * 1.5e-3);
  // Another operation's first run has no history: its own time.
  before = pace.computed_s();
  pace.begin("B0");
  spin_cpu(6e-3);
  pace.settle();
  CHECK(pace.computed_s() - before >= 4 * 6e-3);
  // Of an even count, the middle two's mean: 2 ms then 6 ms makes the second 4 ms (neither the
  // slower nor the faster of the two).
  pace.begin("B1");
  spin_cpu(2e-3);
  pace.settle();
  before = pace.computed_s();
  pace.begin("B1");
  spin_cpu(6e-3);
  pace.settle();
  CHECK(pace.computed_s() - before >= 4 * 3.9e-3);
  CHECK(pace.computed_s() - before < 4 * 5e-3);
  // Without dilation nothing is stretched or smoothed.
  het::runtime::Pace plain(1, true);
  for (double s : {2e-3, 2e-3, 6e-3}) {
    plain.begin("F0");
    before = plain.computed_s();
    spin_cpu(s);
    plain.settle();
  }
  CHECK(plain.computed_s() - before >= 6e-3);
}

TEST_CASE("a paced device stretches its operations' compute, never the host's between them") {
  het::runtime::Pace pace(4, /*cpu_clock=*/true);
  pace.begin("B0");
  spin_cpu(1e-3);
  pace.end();
  // Between operations the host records the trace, copies a send, builds the next batch: a
  // wait for the next micro-batch's data then stretches none of it (the device is idle).
  const double idle = pace.computed_s();
  spin_cpu(3e-3);
  pace.wait([] { return 0; });
  CHECK(pace.computed_s() == idle);
  spin_cpu(1e-3);
  pace.settle();
  CHECK(pace.computed_s() == idle);
  // Inside an operation a wait (a collective) settles the compute before it, stretched.
  pace.begin("B1");
  spin_cpu(2e-3);
  pace.wait([] { return 0; });
  CHECK(pace.computed_s() - idle >= 4 * 2e-3);
  // The operation's compute after the wait is its own run, settled by end().
  const double waited = pace.computed_s();
  spin_cpu(1e-3);
  pace.end();
  CHECK(pace.computed_s() - waited >= 4 * 1e-3);
}

TEST_CASE("the quiet dilation keeps at most an eighth of the cores busy, and the benches use the same rule") {
  using het::runtime::quiet_dilation;
  CHECK(quiet_dilation(1, 2) == 8);
  CHECK(quiet_dilation(2, 2) == 8);
  CHECK(quiet_dilation(3, 2) == 16);
  CHECK(quiet_dilation(4, 2) == 16);
  CHECK(quiet_dilation(5, 2) == 32);
  CHECK(quiet_dilation(8, 2) == 32);
  CHECK(quiet_dilation(9, 2) == 64);
  CHECK(quiet_dilation(8, 16) == 8);
  CHECK(quiet_dilation(4, 0) == 32);  // no cores reported: counted as one
  // bench/fidelity/report.py quiet_dilation, which bench-fidelity.sh and bench-ranking.sh dilate by.
  for (int cores : {1, 2, 3, 16})
    for (int busy = 1; busy <= 20; ++busy) {
      const std::string cmd = std::string("python3 ") + HET_SOURCE_DIR + "/bench/fidelity/report.py quiet-dilation " +
                              std::to_string(busy) + " " + std::to_string(cores);
      FILE* p = popen(cmd.c_str(), "r");
      REQUIRE(p);
      int x = 0;
      const int read = fscanf(p, "%d", &x);
      REQUIRE(pclose(p) == 0);
      REQUIRE(read == 1);
      INFO(busy << " threads on " << cores << " cores");
      CHECK(x == quiet_dilation(busy, cores));
    }
}
