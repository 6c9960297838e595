#include "profiler/sampling.hpp"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>

namespace het::profiler {

std::int64_t nanoseconds_now(Clock clock) {
  if (clock == Clock::thread_cpu) {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return std::int64_t(t.tv_sec) * 1000000000 + t.tv_nsec;
  }
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double seconds_since(std::int64_t start, Clock clock) { return 1e-9 * double(nanoseconds_now(clock) - start); }

std::int64_t clock_overhead_ns(Clock clock) {
  std::vector<std::int64_t> empty;
  for (int i = 0; i < 201; ++i) {
    const std::int64_t t0 = nanoseconds_now(clock);
    empty.push_back(nanoseconds_now(clock) - t0);
  }
  std::sort(empty.begin(), empty.end());
  return empty[empty.size() / 2];
}

namespace {

// 1-based ranks [j, k] of the 95% interval of the median of n samples; j = 0 when none exists.
std::pair<int, int> median_interval(int n) {
  if (n >= 71) {  // Le Boudec, Theorem 2.1's approximation for n >= 71
    const double half = 0.98 * std::sqrt(double(n));
    return {std::max(1, int(std::floor(0.5 * n - half))), std::min(n, int(std::ceil(0.5 * n + 1 + half)))};
  }
  // Exact: the largest j with P(B <= j-1) <= 0.025, B ~ Binomial(n, 1/2); then [j, n+1-j].
  double below = 0;  // P(B <= j-1)
  int j = 0;
  for (int i = 0; 2 * i < n; ++i) {
    below += std::exp(std::lgamma(n + 1.0) - std::lgamma(i + 1.0) - std::lgamma(n - i + 1.0) - n * std::log(2.0));
    if (below > 0.025) break;
    j = i + 1;
  }
  return {j, n + 1 - j};
}

}  // namespace

MedianEstimate estimate_median(std::vector<double> samples) {
  MedianEstimate e;
  e.runs = int(samples.size());
  std::sort(samples.begin(), samples.end());
  const std::size_t n = samples.size();
  e.median = n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
  e.low = samples.front(), e.high = samples.back();
  const auto [j, k] = median_interval(int(n));
  if (j == 0) return e;
  e.low = samples[std::size_t(j - 1)], e.high = samples[std::size_t(k - 1)];
  const double width = e.high - e.low;
  if (e.median > 0) e.spread = width / (2 * e.median);
  else if (width == 0) e.spread = 0;
  return e;
}

std::vector<MedianEstimate> measure(const std::function<std::vector<double>()>& once, const StopRule& rule) {
  for (int i = 0; i < rule.warmups; ++i) once();
  std::vector<std::vector<double>> samples;
  std::vector<MedianEstimate> out;
  const std::int64_t start = nanoseconds_now(Clock::wall);
  // The stop rule is checked after every run until 70 and then every 5% more runs: sorting
  // every quantity's samples after each of thousands of runs would cost more than the runs.
  int next_check = std::max(1, rule.min_runs);
  for (int run = 1;; ++run) {
    const auto values = once();
    if (samples.empty()) samples.resize(values.size());
    for (std::size_t q = 0; q < values.size() && q < samples.size(); ++q) samples[q].push_back(values[q]);
    const bool capped = run >= rule.max_runs || (run >= rule.min_runs && seconds_since(start, Clock::wall) >= rule.max_seconds);
    if (run < next_check && !capped) continue;
    next_check = run < 70 ? run + 1 : run + std::max(1, run / 20);
    out.clear();
    bool settled = true;
    for (const auto& s : samples) {
      out.push_back(estimate_median(s));
      settled = settled && out.back().spread <= rule.target;
    }
    if ((settled && run >= rule.min_runs) || capped) return out;
  }
}

std::vector<std::vector<MedianEstimate>> measure_in_rounds(
    int points, const std::function<std::function<std::vector<double>()>(int point)>& start, const StopRule& rule) {
  struct Point {
    std::vector<std::vector<double>> samples;  // per quantity
    std::vector<MedianEstimate> estimates;
    double seconds = 0;
    int runs = 0, rounds = 0;
    bool settled = false;
  };
  std::vector<Point> all(static_cast<std::size_t>(points));
  for (bool left = points > 0; left;) {
    left = false;
    for (auto& p : all) {
      if (p.settled) continue;
      const std::int64_t t0 = nanoseconds_now(Clock::wall);
      {
        const auto once = start(int(&p - all.data()));
        for (int i = 0; i < rule.warmups; ++i) once();
        for (int i = 0; i < rule.min_runs && p.runs < rule.max_runs; ++i, ++p.runs) {
          const auto values = once();
          if (p.samples.empty()) p.samples.resize(values.size());
          for (std::size_t q = 0; q < values.size() && q < p.samples.size(); ++q) p.samples[q].push_back(values[q]);
        }
      }
      p.seconds += seconds_since(t0, Clock::wall);
      ++p.rounds;
      p.estimates.clear();
      bool known = true;
      for (const auto& s : p.samples) {
        p.estimates.push_back(estimate_median(s));
        known = known && p.estimates.back().spread <= rule.target;
      }
      p.settled = (p.rounds >= rule.min_rounds && known) || p.runs >= rule.max_runs ||
                  (p.rounds >= rule.min_rounds && p.seconds >= rule.max_seconds);
      left = left || !p.settled;
    }
  }
  std::vector<std::vector<MedianEstimate>> out;
  for (auto& p : all) out.push_back(std::move(p.estimates));
  return out;
}

}  // namespace het::profiler
