// Transformer blocks: finite-difference gradient checks in double precision, for both
// architectures, without and with tensor and context parallelism (shards on threads, their
// collectives through shared memory), and shards reproducing the unsharded block.
#include <catch2/catch.hpp>

#include <barrier>
#include <memory>
#include <random>
#include <thread>

#include <tbb/global_control.h>

#include "model/block.hpp"
#include "model/ops.hpp"

using namespace het;
using namespace het::model;

namespace {

Shape tiny(Architecture arch) {
  Shape s;
  s.arch = arch;
  s.C = 16, s.H = 4, s.KH = arch == Architecture::gpt ? 4 : 2, s.D = 4, s.F = arch == Architecture::gpt ? 64 : 48;
  s.V = 32, s.T = 6, s.L = 2;
  return s;
}

// Collectives among `n` threads through shared memory.
class InMemoryGroup {
 public:
  explicit InMemoryGroup(int n) : n_(n), barrier_(n), slots_(std::size_t(n)) {}
  void all_reduce(int r, double* data, std::size_t count) {
    exchange(r, data, [&] {
      sum_.assign(count, 0);
      for (int k = 0; k < n_; ++k)
        for (std::size_t i = 0; i < count; ++i) sum_[i] += slots_[std::size_t(k)][i];
    });
    std::copy(sum_.begin(), sum_.end(), data);
    barrier_.arrive_and_wait();
  }
  void all_gather(int r, const double* mine, double* all, std::size_t count) {
    exchange(r, mine, [] {});
    for (int k = 0; k < n_; ++k) std::copy_n(slots_[std::size_t(k)], count, all + std::size_t(k) * count);
    barrier_.arrive_and_wait();
  }
  void reduce_scatter(int r, const double* all, double* mine, std::size_t count) {
    exchange(r, all, [] {});
    for (std::size_t i = 0; i < count; ++i) {
      mine[i] = 0;
      for (int k = 0; k < n_; ++k) mine[i] += slots_[std::size_t(k)][std::size_t(r) * count + i];
    }
    barrier_.arrive_and_wait();
  }

 private:
  template <class F>
  void exchange(int r, const double* data, F&& on_first) {
    slots_[std::size_t(r)] = data;
    barrier_.arrive_and_wait();
    if (r == 0) on_first();
    barrier_.arrive_and_wait();
  }
  int n_;
  std::barrier<> barrier_;
  std::vector<const double*> slots_;
  std::vector<double> sum_;
};

// Runs forward (and backward with dL/dy = r) of tp·cp shards concurrently; shard k is TP
// rank k % tp of context member k / tp, which gets time steps [c·T/cp, (c+1)·T/cp) of x.
// y and dx come back whole ([B,T,C]), one per TP rank.
void run_shards(std::vector<Block<double>>& shards, int cp, const std::vector<double>& x, const std::vector<double>& r, int B,
                int Tn, int C, std::vector<std::vector<double>>& y, std::vector<std::vector<double>>* dx) {
  const int tp = static_cast<int>(shards.size()) / cp, Tl = Tn / cp;
  std::vector<std::unique_ptr<InMemoryGroup>> tp_groups, cp_groups;
  for (int c = 0; c < cp; ++c) tp_groups.push_back(std::make_unique<InMemoryGroup>(tp));
  for (int t = 0; t < tp; ++t) cp_groups.push_back(std::make_unique<InMemoryGroup>(cp));
  y.assign(std::size_t(tp), std::vector<double>(x.size()));
  if (dx) dx->assign(std::size_t(tp), std::vector<double>(x.size()));
  // [B, Tl, C] slice c of a [B, T, C] tensor, and back.
  const std::size_t row = std::size_t(Tl) * C;
  auto slice = [&](const std::vector<double>& full, int c) {
    std::vector<double> out(std::size_t(B) * row);
    for (int b = 0; b < B; ++b) std::copy_n(full.data() + (std::size_t(b) * cp + c) * row, row, out.data() + b * row);
    return out;
  };
  auto unslice = [&](const std::vector<double>& part, int c, std::vector<double>& full) {
    for (int b = 0; b < B; ++b) std::copy_n(part.data() + b * row, row, full.data() + (std::size_t(b) * cp + c) * row);
  };
  std::vector<std::thread> threads;
  for (int k = 0; k < tp * cp; ++k)
    threads.emplace_back([&, k] {
      const int t = k % tp, c = k / tp;
      Comm<double> comm;
      comm.tp_all_reduce = [&, t, c](double* d, std::size_t n) { tp_groups[std::size_t(c)]->all_reduce(t, d, n); };
      comm.cp_rank = c, comm.cp = cp;
      comm.cp_all_gather = [&, t, c](const double* mine, double* all, std::size_t n) { cp_groups[std::size_t(t)]->all_gather(c, mine, all, n); };
      comm.cp_reduce_scatter = [&, t, c](const double* all, double* mine, std::size_t n) {
        cp_groups[std::size_t(t)]->reduce_scatter(c, all, mine, n);
      };
      BlockActs<double> acts;
      const std::vector<double> xs = slice(x, c), rs = slice(r, c);
      std::vector<double> ys(xs.size()), dxs(xs.size());
      shards[std::size_t(k)].forward(xs.data(), ys.data(), B, acts, comm);
      unslice(ys, c, y[std::size_t(t)]);
      if (dx) {
        shards[std::size_t(k)].backward(rs.data(), dxs.data(), acts, comm);
        unslice(dxs, c, (*dx)[std::size_t(t)]);
      }
    });
  for (auto& th : threads) th.join();
}

double loss(std::vector<Block<double>>& shards, int cp, const Shape& s, const std::vector<double>& x, const std::vector<double>& r,
            int B) {
  std::vector<std::vector<double>> y;
  run_shards(shards, cp, x, r, B, s.T, s.C, y, nullptr);
  double l = 0;
  for (std::size_t i = 0; i < r.size(); ++i) l += y[0][i] * r[i];
  return l;
}

// Finite differences against the backward of tp·cp shards. Context members hold the same
// weights (moved together here); a parameter's gradient is the sum over the members.
void gradient_check(Architecture arch, int tp, int cp = 1) {
  const Shape s = tiny(arch);
  const int B = 2;
  std::vector<Block<double>> shards;
  for (int k = 0; k < tp * cp; ++k) shards.emplace_back(s, 1, k % tp, tp, 42);
  std::mt19937 rng(3);
  std::normal_distribution<double> nd(0, 1);
  std::vector<double> x(std::size_t(B) * s.T * s.C), r(x.size());
  for (auto& v : x) v = nd(rng);
  for (auto& v : r) v = nd(rng);
  // Larger weights than the 0.02 initialisation so every path matters; parameters that every
  // TP shard holds whole (norms, the row-parallel biases) get the same values on all shards.
  auto replicated = [&](const Param<double>& p) {
    return tp > 1 && (p.name.find("ln") != std::string::npos || p.name.find(".bo") != std::string::npos ||
                      p.name.find(".bproj") != std::string::npos);
  };
  const std::size_t P = shards[0].params().size();
  for (std::size_t i = 0; i < P; ++i) {
    std::vector<std::vector<double>> noise(std::size_t(tp), std::vector<double>(shards[0].params()[i].value.size()));
    for (int t = 0; t < tp; ++t)
      for (std::size_t j = 0; j < noise[0].size(); ++j) noise[std::size_t(t)][j] = replicated(shards[0].params()[i]) && t > 0 ? noise[0][j] : 0.3 * nd(rng);
    for (int k = 0; k < tp * cp; ++k) {
      auto& p = shards[std::size_t(k)].params()[i];
      for (std::size_t j = 0; j < p.value.size(); ++j) p.value[j] += noise[std::size_t(k % tp)][j];
    }
  }
  std::vector<std::vector<double>> y, dx;
  run_shards(shards, cp, x, r, B, s.T, s.C, y, &dx);
  const double h = 1e-6;
  auto check = [&](double analytic, double numeric, const std::string& what) {
    INFO(what << ": analytic " << analytic << " numeric " << numeric);
    CHECK(std::abs(analytic - numeric) <= 1e-6 * std::max(1.0, std::abs(numeric)));
  };
  // The input gradient (identical on all TP shards after the all-reduce).
  for (int t = 0; t < 12; ++t) {
    const std::size_t i = std::uniform_int_distribution<std::size_t>(0, x.size() - 1)(rng);
    const double keep = x[i];
    x[i] = keep + h;
    const double up = loss(shards, cp, s, x, r, B);
    x[i] = keep - h;
    const double down = loss(shards, cp, s, x, r, B);
    x[i] = keep;
    for (int k = 0; k < tp; ++k) check(dx[std::size_t(k)][i], (up - down) / (2 * h), "dx[" + std::to_string(i) + "]");
  }
  // Every parameter of every TP shard, a few elements each; a TP-replicated parameter is moved
  // on every shard at once (its copies stay equal in training too).
  for (int k = 0; k < tp; ++k)
    for (std::size_t pi = 0; pi < P; ++pi) {
      if (shards[std::size_t(k)].params()[pi].value.empty()) continue;
      const bool all = replicated(shards[0].params()[pi]);
      if (all && k > 0) continue;
      for (int t = 0; t < 4; ++t) {
        const std::size_t i = std::uniform_int_distribution<std::size_t>(0, shards[std::size_t(k)].params()[pi].value.size() - 1)(rng);
        const double keep = shards[std::size_t(k)].params()[pi].value[i];
        auto set = [&](double v) {
          for (int q = 0; q < tp * cp; ++q)
            if (all || q % tp == k) shards[std::size_t(q)].params()[pi].value[i] = v;
        };
        set(keep + h);
        const double up = loss(shards, cp, s, x, r, B);
        set(keep - h);
        const double down = loss(shards, cp, s, x, r, B);
        set(keep);
        double grad = 0;
        for (int c = 0; c < cp; ++c) grad += shards[std::size_t(c * tp + k)].params()[pi].grad[i];
        check(grad, (up - down) / (2 * h), shards[std::size_t(k)].params()[pi].name + "[" + std::to_string(i) + "] shard " + std::to_string(k));
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
TEST_CASE("block gradients with context parallelism 2 match finite differences") {
  gradient_check(Architecture::gpt, 1, 2);
  gradient_check(Architecture::llama, 1, 2);
}
TEST_CASE("block gradients with context parallelism 3 and tensor parallelism 2 match finite differences") {
  gradient_check(Architecture::gpt, 2, 3);
  gradient_check(Architecture::llama, 2, 3);
}

TEST_CASE("TP shards and context members reproduce the unsharded block's output") {
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
    std::vector<Block<double>> context;  // cp = 3, tp = 1: each member holds two time steps
    for (int c = 0; c < 3; ++c) context.emplace_back(s, 0, 0, 1, 7);
    std::vector<std::vector<double>> y1, y2, y3, dx1, dx2, dx3;
    run_shards(one, 1, x, r, B, s.T, s.C, y1, &dx1);
    run_shards(two, 1, x, r, B, s.T, s.C, y2, &dx2);
    run_shards(context, 3, x, r, B, s.T, s.C, y3, &dx3);
    for (std::size_t i = 0; i < x.size(); ++i) {
      REQUIRE(y3[0][i] == Approx(y1[0][i]).epsilon(1e-12).margin(1e-14));
      REQUIRE(dx3[0][i] == Approx(dx1[0][i]).epsilon(1e-12).margin(1e-14));
      REQUIRE(y2[0][i] == Approx(y1[0][i]).epsilon(1e-12).margin(1e-14));
      REQUIRE(y2[1][i] == Approx(y1[0][i]).epsilon(1e-12).margin(1e-14));
      REQUIRE(dx2[0][i] == Approx(dx1[0][i]).epsilon(1e-12).margin(1e-14));
    }
  }
}

TEST_CASE("parallel GEMMs and attention give the same bits on one thread and on several") {
  const int N = 256, C = 96, OC = 160;  // large enough to run as oneTBB tasks
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> inp(std::size_t(N) * C), w(std::size_t(OC) * C), b(static_cast<std::size_t>(OC)), dout(std::size_t(N) * OC);
  for (auto* v : {&inp, &w, &b, &dout})
    for (auto& x : *v) x = nd(rng);
  const int B = 2, T = 64, H = 4, KH = 2, D = 16;
  std::vector<float> q(std::size_t(B) * T * H * D), k(std::size_t(B) * T * KH * D), v(k.size()), dq_out(q.size());
  for (auto* vec : {&q, &k, &v, &dq_out})
    for (auto& x : *vec) x = nd(rng);
  auto run = [&](int threads) {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, std::size_t(threads));
    std::vector<float> out(std::size_t(N) * OC), dinp(inp.size(), 0.f), dw(w.size(), 0.f), db(b.size(), 0.f);
    matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
    matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C, OC);
    std::vector<float> att(std::size_t(B) * H * T * T), o(q.size()), dq(q.size(), 0.f), dk(k.size(), 0.f), dv(v.size(), 0.f);
    attention_forward(o.data(), att.data(), q.data(), k.data(), v.data(), B, T, T, 0, H, KH, D);
    attention_backward(dq.data(), dk.data(), dv.data(), dq_out.data(), att.data(), q.data(), k.data(), v.data(), B, T, T, 0, H, KH, D);
    return std::vector<std::vector<float>>{out, dinp, dw, db, o, dq, dk, dv};
  };
  const auto one = run(1), several = run(4);
  for (std::size_t i = 0; i < one.size(); ++i) CHECK(one[i] == several[i]);
  // And the blocked product is the product: against a plain loop in double.
  for (int n = 0; n < N; n += 37)
    for (int oc = 0; oc < OC; oc += 23) {
      double want = b[std::size_t(oc)];
      for (int c = 0; c < C; ++c) want += double(inp[std::size_t(n) * C + c]) * w[std::size_t(oc) * C + c];
      CHECK(one[0][std::size_t(n) * OC + oc] == Approx(want).epsilon(1e-4).margin(1e-4));
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
