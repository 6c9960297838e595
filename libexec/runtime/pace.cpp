#include "runtime/pace.hpp"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <thread>

namespace het::runtime {

namespace {
double seconds(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}
}  // namespace

Pace::Pace(double factor, bool cpu_clock) : factor_(std::max(1.0, factor)), cpu_clock_(cpu_clock) { mark(); }

void Pace::mark() {
  mark_wall_ = seconds(CLOCK_MONOTONIC);
  mark_compute_ = cpu_clock_ ? seconds(CLOCK_THREAD_CPUTIME_ID) : mark_wall_;
}

void Pace::settle() {
  if (factor_ > 1) {
    const double compute = (cpu_clock_ ? seconds(CLOCK_THREAD_CPUTIME_ID) : seconds(CLOCK_MONOTONIC)) - mark_compute_;
    const double until = mark_wall_ + factor_ * compute, now = seconds(CLOCK_MONOTONIC);
    // A sleep ends late by the wake-up's latency (on the 2-core VM of docs/executor.md: median
    // 70-80 us, 90th percentile ~200 us, for sleeps of 50 us to 3 ms): sleep to kSpin before the
    // end and spin the rest, so that a stretched operation ends on time.
    constexpr double kSpin = 150e-6;
    if (until - now > kSpin) std::this_thread::sleep_for(std::chrono::duration<double>(until - now - kSpin));
    while (seconds(CLOCK_MONOTONIC) < until) {
    }
  }
  mark();
}

}  // namespace het::runtime
