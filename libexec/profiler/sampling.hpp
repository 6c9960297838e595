#pragma once
// Measuring a quantity until its median is known: a point's runs are repeated until the 95%
// confidence interval of the median of every quantity it times is within ±target of that
// median, or a cap on runs or on time is reached, and each median is reported with the
// relative half-width of its interval (its "spread").
//
// The interval is distribution-free (run times are skewed and have outliers, so no normal
// assumption): from order statistics, the median of n samples x(1) <= ... <= x(n) lies in
// [x(j), x(n+1-j)] with probability 1 - 2 P(B <= j-1), B ~ Binomial(n, 1/2), j the largest
// index keeping that >= 95% (Le Boudec, Performance Evaluation of Computer and Communication
// Systems, EPFL Press 2010, §2.2.2, Theorem 2.1: the exact binomial up to 70 samples, the
// theorem's approximation j = floor(0.5n - 0.98 sqrt(n)) from 71). Below 6 samples no such
// interval exists and the spread is infinite.
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

namespace het::profiler {

// What a run is timed by. thread_cpu: CLOCK_THREAD_CPUTIME_ID, the CPU time of the calling
// thread, so time spent descheduled by other processes does not count; only right when the
// timed work runs on the calling thread alone (the CPU backend with one thread). wall: the
// steady clock.
enum class Clock { wall, thread_cpu };
// Nanoseconds on `clock` since an arbitrary origin (differences only; integers, so that a
// difference is exact).
std::int64_t nanoseconds_now(Clock clock);
// Seconds from `start` (nanoseconds_now) to now.
double seconds_since(std::int64_t start, Clock clock);
// What reading the clock adds to an interval, in nanoseconds: the median of many empty
// intervals (a thread's CPU time is a system call, a few hundred ns; the steady clock tens of
// ns). Measurements of microseconds subtract it.
std::int64_t clock_overhead_ns(Clock clock);

// The median of `samples` and the relative half-width of its 95% interval (see above):
// (x(n+1-j) - x(j)) / (2 median); infinity without an interval (fewer than 6 samples) or
// with a median of 0 and a non-empty interval. Precondition: samples is not empty.
struct MedianEstimate {
  double median = 0;
  double spread = std::numeric_limits<double>::infinity();
  double low = 0, high = 0;  // the interval, x(j) and x(n+1-j); the smallest and largest sample without one
  int runs = 0;              // samples it is taken from
};
MedianEstimate estimate_median(std::vector<double> samples);

struct StopRule {
  int warmups = 2;          // untimed runs first (caches, allocations, lazy initialisation)
  int min_runs = 10;        // timed runs at least (unless max_runs is smaller); per round in rounds
  int min_rounds = 2;       // measure_in_rounds: rounds every point takes part in
  double target = 0.01;     // then stop once every quantity's spread is at most this,
  double max_seconds = 1;   // or once this much wall time went into the point's runs,
  int max_runs = 100000;    // or after this many timed runs
};

// Calls `once` (which runs the point once and returns one sample per quantity, the same
// number every time) rule.warmups times, then until the rule stops it, and returns one
// estimate per quantity.
std::vector<MedianEstimate> measure(const std::function<std::vector<double>()>& once, const StopRule& rule);

// Several points measured in rounds, so that each point's runs are spread over the whole
// measurement instead of taken in one stretch: a slowdown of the machine shorter than a round
// (another process's burst of work, which slows a thread's CPU time too, through the caches
// and memory it shares) then falls on a minority of a point's runs, which the median leaves
// out, instead of shifting the whole point. In every round, each point not yet settled gets
// start(point) — a fresh `once` for the round (e.g. owning a fresh stage), dropped after it —
// run rule.warmups times untimed and rule.min_runs times timed. A point is settled after
// rule.min_rounds rounds once every quantity's spread is at most rule.target, or once
// rule.max_seconds of wall time or rule.max_runs timed runs went into it. Returns per point one
// estimate per quantity.
std::vector<std::vector<MedianEstimate>> measure_in_rounds(
    int points, const std::function<std::function<std::vector<double>()>(int point)>& start, const StopRule& rule);

}  // namespace het::profiler
