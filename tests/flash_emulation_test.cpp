// The CUDA backend's flash attention kernels (libexec/backend/cuda/flash_attention.cuh), their
// very source, run on CPU threads (cuda_emulation.hpp) against a double-precision reference:
// the output, the log-sum-exp and the gradients, for tiles cut by the sequence length, a query
// offset with more keys than queries, grouped-query heads and head dimensions 16 to 256. Built
// twice, with AddressSanitizer (an access outside a tile, a global buffer or the shared memory
// fails) and with ThreadSanitizer (a missing __syncthreads between a write and another thread's
// read of shared memory is a race). What it cannot show: the device's limits and rounding —
// `ctest -L gpu` runs the same kernels on a GPU.
#include "cuda_emulation.hpp"

#include <algorithm>
#include <cstdio>
#include <random>
#include <type_traits>

namespace kernels {
#include "backend/cuda/flash_attention.cuh"
}  // namespace kernels
using namespace kernels;

float rb(float x) { return __bfloat162float(__float2bfloat16(x)); }
int fails = 0;
void cmp(const char* what, const std::vector<float>& got, const std::vector<double>& want, double tol) {
  double err = 0, sc = 1e-12;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) { err = INFINITY; break; }
    err = std::max(err, std::fabs(got[i] - want[i]));
    sc = std::max(sc, std::fabs(want[i]));
  }
  const bool ok = err / sc <= tol;
  if (!ok) ++fails;
  std::printf("  %-4s rel %.2e %s\n", what, err / sc, ok ? "ok" : "FAIL");
}

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  struct Case { int B, Tq, Tk, q0, H, KH, D; };
  for (const Case c : {Case{2, 33, 33, 0, 4, 2, 64}, Case{1, 16, 40, 24, 6, 3, 64}, Case{2, 8, 8, 0, 2, 2, 16},
                       Case{1, 37, 37, 0, 4, 1, 80}, Case{1, 70, 70, 0, 2, 2, 128}, Case{1, 45, 100, 55, 2, 2, 128},
                       Case{1, 10, 50, 5, 4, 2, 32}, Case{1, 9, 100, 91, 2, 2, 256}, Case{1, 65, 65, 0, 2, 1, 256}}) {
    std::printf("B %d Tq %d Tk %d q0 %d H %d KH %d D %d\n", c.B, c.Tq, c.Tk, c.q0, c.H, c.KH, c.D);
    const std::size_t nq = std::size_t(c.B) * c.Tq * c.H * c.D, nk = std::size_t(c.B) * c.Tk * c.KH * c.D;
    std::mt19937 g(7);
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> q(nq), k(nk), v(nk), dout(nq);
    for (auto* x : {&q, &k, &v, &dout}) for (auto& e : *x) e = rb(u(g));
    // reference in double
    const double scale = 1 / std::sqrt(double(c.D));
    std::vector<double> out(nq, 0), lse(std::size_t(c.B) * c.H * c.Tq), dq(nq, 0), dk(nk, 0), dv(nk, 0);
    auto qi = [&](int b, int t, int h) { return ((std::size_t(b) * c.Tq + t) * c.H + h) * c.D; };
    auto ki = [&](int b, int s, int kh) { return ((std::size_t(b) * c.Tk + s) * c.KH + kh) * c.D; };
    for (int b = 0; b < c.B; ++b)
      for (int h = 0; h < c.H; ++h)
        for (int t = 0; t < c.Tq; ++t) {
          const int kh = h / (c.H / c.KH), vis = std::min(c.Tk, c.q0 + t + 1);
          std::vector<double> a(static_cast<std::size_t>(vis)), dp(static_cast<std::size_t>(vis));
          double mx = -1e300;
          for (int s = 0; s < vis; ++s) {
            double d = 0;
            for (int i = 0; i < c.D; ++i) d += double(q[qi(b, t, h) + i]) * k[ki(b, s, kh) + i];
            a[s] = d * scale, mx = std::max(mx, a[s]);
          }
          double sum = 0;
          for (auto& x : a) x = std::exp(x - mx), sum += x;
          for (auto& x : a) x /= sum;
          lse[(std::size_t(b) * c.H + h) * c.Tq + t] = mx + std::log(sum);
          double inner = 0;
          for (int s = 0; s < vis; ++s) {
            double d = 0;
            for (int i = 0; i < c.D; ++i) {
              out[qi(b, t, h) + i] += a[s] * v[ki(b, s, kh) + i];
              d += double(dout[qi(b, t, h) + i]) * v[ki(b, s, kh) + i];
              dv[ki(b, s, kh) + i] += a[s] * dout[qi(b, t, h) + i];
            }
            dp[s] = d, inner += a[s] * d;
          }
          for (int s = 0; s < vis; ++s) {
            const double ds = a[s] * (dp[s] - inner) * scale;
            for (int i = 0; i < c.D; ++i) dq[qi(b, t, h) + i] += ds * k[ki(b, s, kh) + i], dk[ki(b, s, kh) + i] += ds * q[qi(b, t, h) + i];
          }
        }
    std::vector<bf16> bq(nq), bk(nk), bv(nk), bdout(nq), bout(nq, bf16{0x7fc0});
    for (std::size_t i = 0; i < nq; ++i) bq[i] = __float2bfloat16(q[i]), bdout[i] = __float2bfloat16(dout[i]);
    for (std::size_t i = 0; i < nk; ++i) bk[i] = __float2bfloat16(k[i]), bv[i] = __float2bfloat16(v[i]);
    std::vector<float> glse(lse.size(), NAN), gdq(nq, 0.f), gdk(nk, 0.f), gdv(nk, 0.f);
    const float fs = 1.f / std::sqrt(float(c.D));
    auto run = [&](auto Dm) {
      constexpr int Dmax = decltype(Dm)::value;
      emu::launch({unsigned((c.Tq + kBq - 1) / kBq), unsigned(c.H), unsigned(c.B)}, kFlashThreads, flash_forward_shared<Dmax>(), [&] {
        flash_forward_kernel<Dmax>(bout.data(), glse.data(), bq.data(), bk.data(), bv.data(), c.Tq, c.Tk, c.q0, c.H, c.KH, c.D, fs);
      });
      emu::launch({unsigned((c.Tk + kBk - 1) / kBk), unsigned(c.KH), unsigned(c.B)}, kFlashThreads, flash_backward_shared<Dmax>(), [&] {
        flash_backward_kernel<Dmax>(gdk.data(), gdv.data(), bdout.data(), bout.data(), glse.data(), bq.data(), bk.data(),
                                    bv.data(), c.Tq, c.Tk, c.q0, c.H, c.KH, c.D, fs);
      });
      emu::launch({unsigned((c.Tq + kBq - 1) / kBq), unsigned(c.H), unsigned(c.B)}, kFlashThreads, flash_dq_shared<Dmax>(), [&] {
        flash_backward_dq_kernel<Dmax>(gdq.data(), bdout.data(), bout.data(), glse.data(), bq.data(), bk.data(),
                                    bv.data(), c.Tq, c.Tk, c.q0, c.H, c.KH, c.D, fs);
      });
    };
    if (c.D <= 64) run(std::integral_constant<int, 64>{});
    else if (c.D <= 128) run(std::integral_constant<int, 128>{});
    else run(std::integral_constant<int, 256>{});
    std::vector<float> fo(nq);
    for (std::size_t i = 0; i < nq; ++i) fo[i] = __bfloat162float(bout[i]);
    cmp("out", fo, out, 1e-2);
    cmp("lse", glse, lse, 1e-4);
    cmp("dq", gdq, dq, 2e-2);
    cmp("dk", gdk, dk, 2e-2);
    cmp("dv", gdv, dv, 2e-2);
  }
  std::printf("%s\n", fails ? "FAILURES" : "all ok");
  return fails != 0;
}
