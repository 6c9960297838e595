#include "runtime/pace.hpp"

#include <time.h>

#include <algorithm>
#include <chrono>

#include "clock/clock.hpp"

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
  const double compute = (cpu_clock_ ? seconds(CLOCK_THREAD_CPUTIME_ID) : seconds(CLOCK_MONOTONIC)) - mark_compute_;
  computed_s_ += factor_ * compute;
  if (factor_ > 1) {
    const double until = mark_wall_ + factor_ * compute;
    clock::sleep_until(clock::Clock::time_point(std::chrono::duration_cast<clock::Clock::duration>(std::chrono::duration<double>(until))));
  }
  mark();
}

}  // namespace het::runtime
