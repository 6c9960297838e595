// This machine: the profiler's sampling (the median's interval, the stop rule, the thread's CPU
// clock), the quick measurements of a core and the loopback link, and the machine written as a
// cluster that reads back.
#include <catch2/catch.hpp>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <thread>

#include "job/placement.hpp"
#include "node/cluster_yaml.hpp"
#include "backend/backend.hpp"
#include "node/measure.hpp"
#include "profiler/profiler.hpp"
#include "profiler/sampling.hpp"
#include "spec/cluster.hpp"
#include "test_util.hpp"

using namespace het;
using profiler::estimate_median;

TEST_CASE("sampling: the median's 95% interval is the order statistics the binomial gives, and none below 6 samples") {
  auto few = estimate_median({3, 1, 2, 5, 4});
  CHECK(few.median == 3);
  CHECK(std::isinf(few.spread));
  CHECK(few.runs == 5);
  // n = 6: P(B <= 0) = 1/64 <= 2.5%, P(B <= 1) = 7/64 > 2.5%: [x(1), x(6)].
  auto six = estimate_median({6, 1, 5, 2, 4, 3});
  CHECK(six.median == 3.5);
  CHECK(six.low == 1);
  CHECK(six.high == 6);
  CHECK(six.spread == Approx(5.0 / 7.0));
  // n = 10: P(B <= 1) = 11/1024, P(B <= 2) = 56/1024 > 2.5%: [x(2), x(9)].
  auto ten = estimate_median({10, 9, 8, 7, 6, 5, 4, 3, 2, 1});
  CHECK(ten.median == 5.5);
  CHECK(ten.low == 2);
  CHECK(ten.high == 9);
  CHECK(ten.spread == Approx(7.0 / 11.0));
  // Identical samples: known exactly.
  CHECK(estimate_median(std::vector<double>(20, 2.5)).spread == 0);
}

TEST_CASE("sampling: the interval holds the true median of a skewed distribution in about 95% of samples") {
  std::mt19937 rng(20261124);
  std::exponential_distribution<double> run_time(1.0);  // skewed, as run times are; median ln 2
  for (int n : {12, 30, 100, 400}) {
    int covered = 0;
    const int trials = 2000;
    for (int t = 0; t < trials; ++t) {
      std::vector<double> s(static_cast<std::size_t>(n));
      for (auto& v : s) v = run_time(rng);
      auto e = estimate_median(s);
      covered += e.low <= std::log(2.0) && std::log(2.0) <= e.high;
    }
    INFO("n " << n << ": covered " << covered << " of " << trials);
    // At least 95% by construction (exact up to 70, the normal approximation above); the
    // bounds are 5 binomial standard deviations of 2000 trials away.
    CHECK(covered >= 0.93 * trials);
    CHECK(covered <= 0.995 * trials);  // and not the whole range (an interval that tells nothing)
  }
}

TEST_CASE("sampling: measure() runs until every quantity's median is known within the target, or a cap") {
  std::mt19937 rng(7);
  auto noisy = [&](double relative_sd, int& calls) {
    return [&rng, &calls, relative_sd]() -> std::vector<double> {
      ++calls;
      std::normal_distribution<double> a(1.0, relative_sd), b(2.0, relative_sd / 4);
      return {a(rng), b(rng)};
    };
  };
  profiler::StopRule rule;
  rule.warmups = 2;
  rule.min_runs = 10;
  rule.target = 0.01;
  rule.max_seconds = 60;
  // Exact samples: the minimum number of runs, after the warm-ups.
  int calls = 0;
  auto exact = profiler::measure([&]() -> std::vector<double> { ++calls; return {1.0}; }, rule);
  REQUIRE(exact.size() == 1);
  CHECK(exact[0].runs == 10);
  CHECK(exact[0].spread == 0);
  CHECK(calls == 12);
  // Noise of 5% and of 10%: both reach ±1% on both quantities; twice the noise takes about four
  // times the runs (the interval narrows as 1/sqrt(n)).
  int calls5 = 0, calls10 = 0;
  auto five = profiler::measure(noisy(0.05, calls5), rule);
  auto ten = profiler::measure(noisy(0.10, calls10), rule);
  REQUIRE(five.size() == 2);
  for (const auto& e : five) CHECK(e.spread <= 0.01);
  for (const auto& e : ten) CHECK(e.spread <= 0.01);
  CHECK(five[0].median == Approx(1.0).epsilon(0.02));
  CHECK(five[1].median == Approx(2.0).epsilon(0.02));
  INFO("runs at 5%: " << five[0].runs << ", at 10%: " << ten[0].runs);
  CHECK(five[0].runs > 30);
  CHECK(ten[0].runs > 2.5 * five[0].runs);
  CHECK(ten[0].runs < 6.0 * five[0].runs);
  // A cap on runs stops it short of the target, and the spread says so.
  rule.max_runs = 20;
  int capped_calls = 0;
  auto capped = profiler::measure(noisy(0.10, capped_calls), rule);
  CHECK(capped[0].runs == 20);
  CHECK(capped[0].spread > 0.01);
  // So does the cap on time, once the minimum number of runs is in.
  rule.max_runs = 100000;
  rule.max_seconds = 0;
  int timed_calls = 0;
  auto timed = profiler::measure(noisy(0.10, timed_calls), rule);
  CHECK(timed[0].runs == rule.min_runs);
}

TEST_CASE("sampling: points measured in rounds take a passing slowdown in a few runs each, not in all runs of one") {
  // Three points of 1.0 (plus 0.2% noise); the machine is 1.5 times slower during 20 runs of
  // all the runs made, starting at the 14th: as long as one point takes in one stretch.
  std::mt19937 rng(11);
  std::normal_distribution<double> noise(0.0, 0.002);
  int made = 0;
  auto run = [&]() -> std::vector<double> {
    const bool slow = made >= 14 && made < 34;
    ++made;
    return {(slow ? 1.5 : 1.0) + noise(rng)};
  };
  profiler::StopRule rule;
  rule.warmups = 2;
  rule.min_runs = 10;
  rule.min_rounds = 2;
  rule.target = 0.01;
  rule.max_seconds = 60;
  // One point after the other: the second is measured during the slowdown, all of it.
  std::vector<double> one_by_one;
  for (int p = 0; p < 3; ++p) one_by_one.push_back(profiler::measure(run, rule)[0].median);
  CHECK(*std::max_element(one_by_one.begin(), one_by_one.end()) > 1.4);
  // In rounds: every point's median is the machine's usual time; each point started once per round.
  made = 0;
  std::vector<int> starts(3, 0);
  auto rounds = profiler::measure_in_rounds(
      3, [&](int point) { ++starts[std::size_t(point)]; return std::function<std::vector<double>()>(run); }, rule);
  REQUIRE(rounds.size() == 3);
  for (int p = 0; p < 3; ++p) {
    INFO("point " << p << ": " << rounds[std::size_t(p)][0].median << " from " << rounds[std::size_t(p)][0].runs << " runs in "
                  << starts[std::size_t(p)] << " rounds");
    CHECK(rounds[std::size_t(p)][0].median == Approx(1.0).epsilon(0.02));
    CHECK(rounds[std::size_t(p)][0].spread <= 0.01);
    CHECK(starts[std::size_t(p)] >= 2);
    CHECK(rounds[std::size_t(p)][0].runs == 10 * starts[std::size_t(p)]);
  }
  // Exact samples: settled after the minimum of rounds.
  std::vector<int> exact_starts(2, 0);
  auto exact = profiler::measure_in_rounds(
      2,
      [&](int point) {
        ++exact_starts[std::size_t(point)];
        return std::function<std::vector<double>()>([] { return std::vector<double>{2.0, 3.0}; });
      },
      rule);
  CHECK(exact_starts == std::vector<int>{2, 2});
  CHECK(exact[1][1].median == 3.0);
  CHECK(exact[1][1].spread == 0);
}

TEST_CASE("sampling: the thread's CPU clock leaves out the time the thread does not run, the wall clock does not") {
  using profiler::Clock;
  auto interval = [](Clock clock) {
    const std::int64_t t0 = profiler::nanoseconds_now(clock);
    // 5 ms of computing on this thread (by its own CPU clock), then 20 ms asleep.
    const std::int64_t spin_from = profiler::nanoseconds_now(Clock::thread_cpu);
    volatile double sink = 0;
    while (profiler::nanoseconds_now(Clock::thread_cpu) - spin_from < 5'000'000) sink = sink + 1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return profiler::seconds_since(t0, clock);
  };
  const double cpu = interval(Clock::thread_cpu), wall = interval(Clock::wall);
  INFO("thread CPU " << cpu << " s, wall " << wall << " s");
  CHECK(cpu < 0.5 * wall);
  CHECK(profiler::clock_overhead_ns(Clock::thread_cpu) >= 0);
  CHECK(profiler::clock_overhead_ns(Clock::wall) >= 0);
}

TEST_CASE("node: one core's GEMM and memcpy rates and the loopback link are measured, with their intervals") {
  const auto core = node::measure_core(0.05);
  CHECK(core.gemm_flops.value > 0);
  CHECK(core.gemm_flops.runs >= 10);
  CHECK(std::isfinite(core.gemm_flops.spread));
  CHECK(core.copy_bandwidth.value > 0);
  CHECK(core.copy_bandwidth.runs >= 10);
  auto link = node::measure_loopback(0.05);
  REQUIRE(link.ok());
  CHECK(link->latency.value > 0);
  CHECK(link->bandwidth.value > 0);
  REQUIRE(link->one_way.size() == 4);
  CHECK(link->one_way.front().first == 8);
  CHECK(link->one_way.back().first == link->largest);
  // 4 MiB take longer than 8 bytes, and the fitted line passes near the 4 MiB median.
  CHECK(link->one_way.back().second.value > link->one_way.front().second.value);
  const double fitted = link->latency.value + double(link->largest) / link->bandwidth.value;
  CHECK(fitted == Approx(link->one_way.back().second.value).epsilon(0.5));
}

TEST_CASE("node: the loopback link under a shaped latency reports what the transport adds to it") {
  // 4 ms of shaping each way: a round trip takes more than 8 ms, and what is reported is the rest
  // (positive: a message is written after its latency), which a busy machine keeps well under 4 ms.
  constexpr double kShaped = 4e-3;
  auto link = node::measure_loopback(0.05, kShaped);
  REQUIRE(link.ok());
  REQUIRE(link->one_way.size() == 4);
  CHECK(link->one_way.front().second.value > 0);
  CHECK(link->one_way.front().second.value < kShaped);
  CHECK(link->latency.value == link->one_way.front().second.value);
  CHECK(link->bandwidth.value > 0);
}

namespace {

node::MachineFacts cpu_machine() {
  node::MachineFacts f;
  f.node.hostname = "build box#1";
  f.node.cpu = {"Test CPU 9000", 8, false, 32.0 * (1 << 30)};
  node::CoreRates core;
  core.gemm_flops = {51.234e9, 0.004, 80};
  core.copy_bandwidth = {20.56e9, 0.01, 20};
  f.core = core;
  node::LoopbackLink link;
  link.latency = {23.44e-6, 0.01, 300};
  link.bandwidth = {1.876e9, 0.05, 12};
  link.one_way = {{8, {23.44e-6, 0.01, 300}}, {link.largest, {2.26e-3, 0.05, 12}}};
  f.loopback = link;
  f.measured_at = "2026-11-24T10:00:00Z";
  f.version = "9.9.9";
  return f;
}

Result<ClusterSpec> read_back(const std::string& text) {
  auto d = input::parse(text, "machine.yaml");
  if (!d) return d.errors();
  return read_cluster(d->file, d->root, "", test::catalog());
}

}  // namespace

TEST_CASE("node: a machine without GPUs is a cluster of one cpu device per core with its measured rates and link") {
  auto text = node::cluster_yaml(cpu_machine(), test::catalog());
  REQUIRE(text.ok());
  INFO(*text);
  auto c = read_back(*text);
  INFO((c ? "" : test::text(c.errors())));
  REQUIRE(c.ok());
  CHECK(c->name == "build-box-1");
  REQUIRE(c->subclusters.size() == 1);
  const auto& s = c->subclusters[0];
  CHECK(s.name == "build-box-1");
  CHECK(s.device.type == "cpu");  // what `hetexec profile` names its profile by default
  CHECK(s.nodes == 1);
  CHECK(s.devices_per_node == 8);
  CHECK(s.device.memory <= 4.0 * (1 << 30));  // MemTotal / 8, never rounded up
  CHECK(s.device.memory > 0.99 * 4.0 * (1 << 30));
  CHECK(s.device.peak == Approx(51.2e9));
  CHECK(s.device.mem_bandwidth == Approx(20.6e9));
  CHECK(s.intra_node.bandwidth == Approx(1.88e9));
  CHECK(s.intra_node.latency == Approx(23.4e-6));
  CHECK_FALSE(s.inter_node.has_value());
  // The comments say what was measured, how and when.
  CHECK_THAT(*text, Catch::Contains("2026-11-24T10:00:00Z") && Catch::Contains("hetexec 9.9.9") &&
                        Catch::Contains("Test CPU 9000") && Catch::Contains("8 online cores"));
  CHECK_THAT(*text, Catch::Contains("256x256x256") && Catch::Contains("±0.4%, 80 runs") && Catch::Contains("memcpy") &&
                        Catch::Contains("127.0.0.1") && Catch::Contains("hetexec profile --threads 1"));
  // Without measurements there is nothing true to write.
  auto unmeasured = cpu_machine();
  unmeasured.loopback.reset();
  CHECK_FALSE(node::cluster_yaml(unmeasured, test::catalog()).ok());
  // SMT is said when it is on.
  auto smt = cpu_machine();
  smt.node.cpu.smt = true;
  CHECK_THAT(*node::cluster_yaml(smt, test::catalog()), Catch::Contains("SMT on"));
}

TEST_CASE("node: a machine with GPUs is a cluster of them, of the catalog type `hetexec profile --backend cuda` names") {
  node::MachineFacts f;
  f.node.hostname = "gpu-node";
  f.node.cpu = {"Some CPU", 64, true, 512.0 * (1 << 30)};
  const double memory = 79.19 * (1 << 30);
  f.node.gpus = {{0, "NVIDIA H100 80GB HBM3", memory, 90, "0000:1a:00.0"}, {1, "NVIDIA H100 80GB HBM3", memory, 90, "0000:1b:00.0"}};
  for (const auto& g : f.node.gpus) f.gpu_types.push_back(job::catalog_type(g.name, g.memory_bytes, test::catalog()));
  f.measured_at = "2026-11-24T10:00:00Z";
  f.version = "9.9.9";
  auto text = node::cluster_yaml(f, test::catalog());
  REQUIRE(text.ok());
  INFO(*text);
  auto c = read_back(*text);
  REQUIRE(c.ok());
  const auto& s = c->subclusters[0];
  CHECK(s.name == "gpu-node");
  CHECK(s.device.type == "H100-SXM-80GB");
  CHECK(s.devices_per_node == 2);
  CHECK(s.device.memory <= memory);  // what CUDA reports, not the datasheet's 80 GiB
  CHECK(s.device.memory > 0.99 * memory);
  const auto* entry = test::catalog().find("H100-SXM-80GB");
  REQUIRE(entry);
  CHECK(s.device.peak == entry->device.peak);
  CHECK(s.intra_node.bandwidth == entry->intra_node.bandwidth);
  // A GPU the catalog does not know, or two types on one machine: refused in words.
  auto unknown = f;
  unknown.gpu_types[1] = "";
  unknown.node.gpus[1].name = "Mystery Accelerator";
  auto u = node::cluster_yaml(unknown, test::catalog());
  REQUIRE_FALSE(u.ok());
  CHECK_THAT(test::text(u.errors()), Catch::Contains("no type for CUDA device 1 (Mystery Accelerator)"));
  auto mixed = f;
  mixed.gpu_types[1] = "A100-40GB";
  auto m = node::cluster_yaml(mixed, test::catalog());
  REQUIRE_FALSE(m.ok());
  CHECK_THAT(test::text(m.errors()), Catch::Contains("GPUs of two types"));
}

TEST_CASE("node: subcluster names from hostnames") {
  CHECK(node::name_from_hostname("node-7.cluster.local") == "node-7.cluster.local");
  CHECK(node::name_from_hostname("my box") == "my-box");
  CHECK(node::name_from_hostname("") == "host");
  CHECK(node::name_from_hostname("@@") == "host");
}

// `hetexec profile --time-dilation X` pauses after every operation and inside it at every TP or
// CP collective (as the dilated run does), and leaves every pause out of the times, on the wall
// clock too: a tp 2 x cp 2 layer (4 collectives in its forward, 6 in its backward) profiled at
// dilation 6 is not 6 times the undilated one. A pause does cool the caches, so the dilated times
// may be somewhat longer; with the pauses counted they would be about 6x.
TEST_CASE("profiler: under time dilation the pauses, after an operation and at its collectives, are left out of the times") {
  auto model = load_model(HET_SOURCE_DIR "/configs/models/tiny-llama.yaml");
  REQUIRE(model.ok());
  auto backend = backend::open("cpu", 1);
  REQUIRE(backend.ok());
  profiler::Options o;
  o.micro_batch_sizes = {1};
  o.tp = {2}, o.cp = {2};
  o.stop.max_seconds = 0.3, o.stop.min_runs = 6;
  auto layer = [&](double dilation) {
    o.time_dilation = dilation;
    auto p = profiler::profile(**backend, *model, o);
    REQUIRE(p.ok());
    for (const auto& r : p->spec.units)
      if (r.unit == UnitKind::layer) return std::pair{r.forward, r.backward};
    FAIL("no layer row");
    return std::pair{0.0, 0.0};
  };
  const auto plain = layer(1), dilated = layer(6);
  INFO("layer forward " << plain.first << " s -> " << dilated.first << " s, backward " << plain.second << " s -> " << dilated.second);
  CHECK(dilated.first < 2.5 * plain.first);
  CHECK(dilated.second < 2.5 * plain.second);
}
