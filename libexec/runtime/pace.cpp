#include "runtime/pace.hpp"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "clock/clock.hpp"

namespace het::runtime {

namespace {
double seconds(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}
}  // namespace

int quiet_dilation(int busy_threads, int cores) {
  int x = 8;
  while (double(busy_threads) * 8 > double(x) * std::max(1, cores)) x *= 2;
  return x;
}

Pace::Pace(double factor, bool cpu_clock) : factor_(std::max(1.0, factor)), cpu_clock_(cpu_clock) { mark(); }

void Pace::mark() {
  mark_wall_ = seconds(CLOCK_MONOTONIC);
  mark_compute_ = cpu_clock_ ? seconds(CLOCK_THREAD_CPUTIME_ID) : mark_wall_;
}

void Pace::begin(std::string_view op) {
  op_.assign(op);
  chunk_ = 0;
  busy_ = true;
  mark();
}

double Pace::typical(double compute) {
  Runs& r = runs_[op_ + '#' + std::to_string(chunk_++)];
  if (r.last.size() < kWindow) {
    r.last.push_back(compute);
  } else {
    r.last[r.next] = compute;
    r.next = (r.next + 1) % kWindow;
  }
  std::vector<double> sorted = r.last;
  const auto upper = sorted.begin() + std::ptrdiff_t(sorted.size() / 2);
  std::nth_element(sorted.begin(), upper, sorted.end());
  if (sorted.size() % 2 == 1) return *upper;
  return 0.5 * (*upper + *std::max_element(sorted.begin(), upper));  // an even count: the middle two's mean
}

void Pace::settle() {
  if (!busy_) return mark();
  const double measured = (cpu_clock_ ? seconds(CLOCK_THREAD_CPUTIME_ID) : seconds(CLOCK_MONOTONIC)) - mark_compute_;
  const double compute = factor_ > 1 ? typical(measured) : measured;
  computed_s_ += factor_ * compute;
  if (factor_ > 1) {
    const double until = mark_wall_ + factor_ * compute;
    clock::sleep_until(clock::Clock::time_point(std::chrono::duration_cast<clock::Clock::duration>(std::chrono::duration<double>(until))));
  }
  mark();
}

}  // namespace het::runtime
