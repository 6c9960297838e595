// Transformer blocks: finite-difference gradient checks in double precision, for both
// architectures, without and with tensor parallelism (two shards on two threads summing
// through an in-memory all-reduce), and TP shards reproducing the unsharded block.
#include <catch2/catch.hpp>

#include <barrier>
#include <random>
#include <thread>

#include "model/block.hpp"
#include "model/ops.hpp"

using namespace het;
using namespace het::model;

namespace {

Shape tiny(Architecture arch) {
  Shape s;
  s.arch = arch;
  s.C = 16, s.H = 4, s.KH = arch == Architecture::gpt ? 4 : 2, s.D = 4, s.F = arch == Architecture::gpt ? 64 : 48;
  s.V = 32, s.T = 5, s.L = 2;
  return s;
}

// Sums buffers across `n` threads.
class InMemoryAllReduce {
 public:
  explicit InMemoryAllReduce(int n) : n_(n), barrier_(n), slots_(n) {}
  AllReduce<double> for_rank(int r) {
    if (n_ == 1) return [](double*, std::size_t) {};
    return [this, r](double* data, std::size_t count) {
      slots_[r] = data;
      barrier_.arrive_and_wait();
      if (r == 0) {
        sum_.assign(count, 0);
        for (int k = 0; k < n_; ++k)
          for (std::size_t i = 0; i < count; ++i) sum_[i] += slots_[k][i];
      }
      barrier_.arrive_and_wait();
      std::copy(sum_.begin(), sum_.end(), data);
      barrier_.arrive_and_wait();
    };
  }

 private:
  int n_;
  std::barrier<> barrier_;
  std::vector<double*> slots_;
  std::vector<double> sum_;
};

struct Run {
  std::vector<std::vector<double>> y;  // per shard
};

// Runs forward (and backward with dL/dy = r) of all shards concurrently.
void run_shards(std::vector<Block<double>>& shards, const std::vector<double>& x, const std::vector<double>& r, int B,
                std::vector<std::vector<double>>& y, std::vector<std::vector<double>>* dx) {
  const int tp = static_cast<int>(shards.size());
  InMemoryAllReduce ar(tp);
  y.assign(tp, std::vector<double>(x.size()));
  if (dx) dx->assign(tp, std::vector<double>(x.size()));
  std::vector<std::thread> threads;
  for (int k = 0; k < tp; ++k)
    threads.emplace_back([&, k] {
      BlockActs<double> acts;
      auto reduce = ar.for_rank(k);
      shards[k].forward(x.data(), y[k].data(), B, acts, reduce);
      if (dx) shards[k].backward(r.data(), (*dx)[k].data(), acts, reduce);
    });
  for (auto& t : threads) t.join();
}

double loss(std::vector<Block<double>>& shards, const std::vector<double>& x, const std::vector<double>& r, int B) {
  std::vector<std::vector<double>> y;
  run_shards(shards, x, r, B, y, nullptr);
  double l = 0;
  for (std::size_t i = 0; i < r.size(); ++i) l += y[0][i] * r[i];
  return l;
}

void gradient_check(Architecture arch, int tp) {
  const Shape s = tiny(arch);
  const int B = 2;
  std::vector<Block<double>> shards;
  for (int k = 0; k < tp; ++k) shards.emplace_back(s, 1, k, tp, 42);
  std::mt19937 rng(3);
  std::normal_distribution<double> nd(0, 1);
  std::vector<double> x(std::size_t(B) * s.T * s.C), r(x.size());
  for (auto& v : x) v = nd(rng);
  for (auto& v : r) v = nd(rng);
  // Larger weights than the 0.02 initialisation so every path matters; parameters that every
  // shard holds whole (norms, the row-parallel biases) get the same values on all shards.
  auto replicated = [&](const Param<double>& p) {
    return tp > 1 && (p.name.find("ln") != std::string::npos || p.name.find(".bo") != std::string::npos ||
                      p.name.find(".bproj") != std::string::npos);
  };
  for (std::size_t i = 0; i < shards[0].params().size(); ++i) {
    std::vector<double> noise(shards[0].params()[i].value.size());
    for (auto& v : noise) v = 0.3 * nd(rng);
    for (int k = 0; k < tp; ++k) {
      auto& p = shards[k].params()[i];
      for (std::size_t j = 0; j < p.value.size(); ++j)
        p.value[j] += replicated(shards[0].params()[i]) ? noise[j] : (k == 0 ? noise[j] : 0.3 * nd(rng));
    }
  }
  std::vector<std::vector<double>> y, dx;
  run_shards(shards, x, r, B, y, &dx);
  const double h = 1e-6;
  auto check = [&](double analytic, double numeric, const std::string& what) {
    INFO(what << ": analytic " << analytic << " numeric " << numeric);
    CHECK(std::abs(analytic - numeric) <= 1e-6 * std::max(1.0, std::abs(numeric)));
  };
  // The input gradient (identical on all shards after the all-reduce).
  for (int t = 0; t < 12; ++t) {
    const std::size_t i = std::uniform_int_distribution<std::size_t>(0, x.size() - 1)(rng);
    const double keep = x[i];
    x[i] = keep + h;
    const double up = loss(shards, x, r, B);
    x[i] = keep - h;
    const double down = loss(shards, x, r, B);
    x[i] = keep;
    for (int k = 0; k < tp; ++k) check(dx[k][i], (up - down) / (2 * h), "dx[" + std::to_string(i) + "]");
  }
  // Every parameter of every shard, a few elements each; a replicated parameter is moved on
  // every shard at once (its copies stay equal in training too).
  for (int k = 0; k < tp; ++k)
    for (std::size_t pi = 0; pi < shards[k].params().size(); ++pi) {
      auto& p = shards[k].params()[pi];
      if (p.value.empty()) continue;
      const bool all = replicated(shards[0].params()[pi]);
      if (all && k > 0) continue;
      for (int t = 0; t < 4; ++t) {
        const std::size_t i = std::uniform_int_distribution<std::size_t>(0, p.value.size() - 1)(rng);
        const double keep = p.value[i];
        auto set = [&](double v) {
          for (int q = 0; q < tp; ++q)
            if (all || q == k) shards[q].params()[pi].value[i] = v;
        };
        set(keep + h);
        const double up = loss(shards, x, r, B);
        set(keep - h);
        const double down = loss(shards, x, r, B);
        set(keep);
        check(p.grad[i], (up - down) / (2 * h), p.name + "[" + std::to_string(i) + "] shard " + std::to_string(k));
      }
    }
}

}  // namespace

TEST_CASE("gpt block gradients match finite differences") { gradient_check(Architecture::gpt, 1); }
TEST_CASE("llama block gradients match finite differences (RMSNorm, RoPE, SwiGLU, GQA)") {
  gradient_check(Architecture::llama, 1);
}
TEST_CASE("gpt block gradients with tensor parallelism 2 match finite differences") { gradient_check(Architecture::gpt, 2); }
TEST_CASE("llama block gradients with tensor parallelism 2 match finite differences") {
  gradient_check(Architecture::llama, 2);
}

TEST_CASE("TP shards start from the unsharded block's weights and reproduce its output") {
  for (auto arch : {Architecture::gpt, Architecture::llama}) {
    const Shape s = tiny(arch);
    const int B = 2;
    std::vector<Block<double>> one, two;
    one.emplace_back(s, 0, 0, 1, 7);
    two.emplace_back(s, 0, 0, 2, 7);
    two.emplace_back(s, 0, 1, 2, 7);
    std::mt19937 rng(5);
    std::normal_distribution<double> nd(0, 1);
    std::vector<double> x(std::size_t(B) * s.T * s.C), r(x.size());
    for (auto& v : x) v = nd(rng);
    for (auto& v : r) v = nd(rng);
    std::vector<std::vector<double>> y1, y2, dx1, dx2;
    run_shards(one, x, r, B, y1, &dx1);
    run_shards(two, x, r, B, y2, &dx2);
    for (std::size_t i = 0; i < x.size(); ++i) {
      REQUIRE(y2[0][i] == Approx(y1[0][i]).epsilon(1e-12).margin(1e-14));
      REQUIRE(y2[1][i] == Approx(y1[0][i]).epsilon(1e-12).margin(1e-14));
      REQUIRE(dx2[0][i] == Approx(dx1[0][i]).epsilon(1e-12).margin(1e-14));
    }
  }
}

TEST_CASE("cross-entropy gradient is softmax minus one-hot, scaled") {
  std::vector<double> logits = {1.0, 2.0, 0.5, -1.0, 0.0, 3.0}, d(6, 0.0);
  std::vector<int> targets = {1, 2};
  const double total = crossentropy_forward_backward(d.data(), logits.data(), targets.data(), 2, 3, 0.5);
  const double z0 = std::exp(1.0) + std::exp(2.0) + std::exp(0.5);
  CHECK(total == Approx(-std::log(std::exp(2.0) / z0) - std::log(std::exp(3.0) / (std::exp(-1.0) + 1 + std::exp(3.0)))));
  CHECK(d[1] == Approx(0.5 * (std::exp(2.0) / z0 - 1)));
  CHECK(d[0] == Approx(0.5 * std::exp(1.0) / z0));
}
