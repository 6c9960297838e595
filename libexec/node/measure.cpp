#include "node/measure.hpp"

#include <tbb/task_arena.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <thread>
#include <vector>

#include "clock/clock.hpp"
#include "model/ops.hpp"
#include "profiler/sampling.hpp"
#include "rendezvous/directory.hpp"
#include "transport/tcp.hpp"

namespace het::node {

namespace {

// The rule for every measurement here: a few warm-ups, then until the median is known within
// ±1% or the time is up.
profiler::StopRule quick(double seconds) {
  profiler::StopRule rule;
  rule.warmups = 2;
  rule.min_runs = 10;
  rule.target = 0.01;
  rule.max_seconds = seconds;
  return rule;
}

}  // namespace

CoreRates measure_core(double seconds_each) {
  CoreRates rates;
  tbb::task_arena one_thread(1);  // the GEMM's row blocks run on this thread alone
  one_thread.execute([&] {
    const int n = rates.gemm_n;
    std::vector<float> a(std::size_t(n) * n), b(a.size()), c(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = 0.001f * float(i % 97), b[i] = 0.002f * float(i % 89);
    const auto gemm = profiler::measure(
        [&]() -> std::vector<double> {
          const std::int64_t t0 = profiler::nanoseconds_now(profiler::Clock::thread_cpu);
          model::matmul_forward<float>(c.data(), a.data(), b.data(), nullptr, n, n, n);
          return {profiler::seconds_since(t0, profiler::Clock::thread_cpu)};
        },
        quick(seconds_each));
    rates.gemm_flops = {2.0 * n * n * n / gemm[0].median, gemm[0].spread, gemm[0].runs};
  });
  std::vector<char> from(rates.copy_bytes, 1), to(rates.copy_bytes, 0);
  const auto copy = profiler::measure(
      [&]() -> std::vector<double> {
        const std::int64_t t0 = profiler::nanoseconds_now(profiler::Clock::thread_cpu);
        std::memcpy(to.data(), from.data(), from.size());
        return {profiler::seconds_since(t0, profiler::Clock::thread_cpu)};
      },
      quick(seconds_each));
  rates.copy_bandwidth = {2.0 * double(rates.copy_bytes) / copy[0].median, copy[0].spread, copy[0].runs};
  return rates;
}

Result<LoopbackLink> measure_loopback(double seconds_each, double shaped_latency) {
  auto fail = [](const std::string& why) { return Diagnostic{"", 0, 0, "loopback", why}; };
  std::error_code ec;
  const std::string dir = (std::filesystem::temp_directory_path(ec) / "hetexec-loopback-XXXXXX").string();
  std::vector<char> name(dir.begin(), dir.end());
  name.push_back('\0');
  if (ec || !mkdtemp(name.data())) return fail("cannot make a temporary directory for the rendezvous");
  const std::string rendezvous_dir = name.data();
  struct Remove {
    std::string dir;
    ~Remove() {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  } remove{rendezvous_dir};
  rendezvous::DirectoryRendezvous rendezvous(rendezvous_dir);
  constexpr double kTimeout = 10;  // seconds: connecting, and waiting for any one message
  constexpr std::uint32_t kBatch = 1, kPayload = 2;
  // Rank 1 echoes: a batch header {bytes, count} (count 0: the end), then `count` messages
  // of `bytes`, each sent back as it comes.
  std::string echo_error;
  std::thread echo([&] {
    auto peers = transport::Peers::connect(1, 2, rendezvous, kTimeout);
    if (!peers) {
      echo_error = to_string(peers.errors());
      return;
    }
    if (shaped_latency > 0) (*peers)->shape(0, std::numeric_limits<double>::infinity(), shaped_latency);
    std::vector<char> buffer;
    for (;;) {
      std::uint64_t batch[2] = {0, 0};
      if (auto got = (*peers)->recv(0, kBatch, batch, sizeof batch); !got) {
        echo_error = got.errors().front().message;
        return;
      }
      if (batch[1] == 0) return;
      buffer.resize(batch[0]);
      for (std::uint64_t i = 0; i < batch[1]; ++i) {
        if (auto got = (*peers)->recv(0, kPayload, buffer.data(), buffer.size()); !got) {
          echo_error = got.errors().front().message;
          return;
        }
        (*peers)->send(0, kPayload, buffer.data(), buffer.size());
      }
      (void)(*peers)->flush();  // a failed write shows as the next receive's error
    }
  });
  auto peers = transport::Peers::connect(0, 2, rendezvous, kTimeout);
  if (!peers) {
    echo.join();
    return fail("cannot connect two ranks over 127.0.0.1: " + to_string(peers.errors()));
  }
  if (shaped_latency > 0) (*peers)->shape(1, std::numeric_limits<double>::infinity(), shaped_latency);
  std::string error;
  // One batch: `count` round trips of `bytes`; their one-way times (half the round trip).
  auto batch = [&](std::size_t bytes, int count) {
    std::vector<double> one_way;
    const std::uint64_t header[2] = {bytes, std::uint64_t(count)};
    (*peers)->send(1, kBatch, header, sizeof header);
    std::vector<char> out(bytes, 'x'), back(bytes);
    for (int i = 0; i < count && error.empty(); ++i) {
      if (shaped_latency > 0) clock::sleep_until(clock::Clock::now() + std::chrono::milliseconds(1));  // as a rank computes between messages
      const std::int64_t t0 = profiler::nanoseconds_now(profiler::Clock::wall);
      (*peers)->send(1, kPayload, out.data(), out.size());
      if (auto got = (*peers)->recv(1, kPayload, back.data(), back.size()); !got) error = got.errors().front().message;
      one_way.push_back(0.5 * profiler::seconds_since(t0, profiler::Clock::wall) - shaped_latency);
    }
    return one_way;
  };
  // Per size: a warm-up batch, then batches of 10 round trips until the median one-way time
  // is known within ±1% (at least 30 round trips) or the time is up.
  const std::vector<std::size_t> sizes = {8, std::size_t(256) << 10, std::size_t(1) << 20, std::size_t(4) << 20};
  std::vector<profiler::MedianEstimate> medians;
  for (std::size_t bytes : sizes) {
    batch(bytes, 2);
    std::vector<double> all;
    const std::int64_t start = profiler::nanoseconds_now(profiler::Clock::wall);
    profiler::MedianEstimate median;
    do {
      const auto times = batch(bytes, 10);
      all.insert(all.end(), times.begin(), times.end());
      median = profiler::estimate_median(all);
    } while (error.empty() && (all.size() < 30 || median.spread > 0.01) &&
             profiler::seconds_since(start, profiler::Clock::wall) < seconds_each);
    if (!error.empty()) break;
    medians.push_back(median);
  }
  const std::uint64_t end[2] = {0, 0};
  (*peers)->send(1, kBatch, end, sizeof end);
  if (auto flushed = (*peers)->flush(); !flushed && error.empty()) error = flushed.errors().front().message;
  echo.join();
  if (!error.empty() || !echo_error.empty())
    return fail("a message between two ranks over 127.0.0.1 failed: " + (error.empty() ? echo_error : error));
  // One-way time t(s) = latency + s / bandwidth: least squares over the sizes' medians.
  double mean_s = 0, mean_t = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) mean_s += double(sizes[i]) / sizes.size(), mean_t += medians[i].median / sizes.size();
  double sst = 0, sss = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i)
    sst += (double(sizes[i]) - mean_s) * (medians[i].median - mean_t), sss += (double(sizes[i]) - mean_s) * (double(sizes[i]) - mean_s);
  const double seconds_per_byte = sst / sss;
  if (!(seconds_per_byte > 0)) return fail("larger messages did not take longer over 127.0.0.1; the machine is too busy to measure");
  LoopbackLink link;
  link.latency = {medians[0].median, medians[0].spread, medians[0].runs};
  // The slope's uncertainty, roughly: the largest size's median uncertainty over its time.
  link.bandwidth = {1 / seconds_per_byte, medians.back().spread, medians.back().runs};
  link.largest = sizes.back();
  for (std::size_t i = 0; i < sizes.size(); ++i) link.one_way.push_back({sizes[i], {medians[i].median, medians[i].spread, medians[i].runs}});
  return link;
}

}  // namespace het::node
