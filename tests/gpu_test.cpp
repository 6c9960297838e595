// The CUDA backend against the CPU one (ctest -L gpu): every kernel of backend/cuda/kernels.hpp
// against its model/ops.hpp twin on random data, the cuBLASLt GEMMs against matmul_forward/
// backward, and a one-stage GPT and Llama forward+backward against model::StageModel<float>.
// Inputs are rounded to bf16 first, so the CPU computes on exactly what the GPU reads; outputs
// the GPU overwrites are poisoned with NaN before each run. Without a CUDA device the program
// exits 77, which ctest reports as skipped (SKIP_RETURN_CODE).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cost/memory.hpp"

#include "backend/cuda/device.hpp"
#include "backend/cuda/kernels.hpp"
#include "model/ops.hpp"
#include "model/params.hpp"
#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/gemm.hpp"
#include "model/stage.hpp"
#ifdef HET_CUDA_EMULATION  // tests/cuda_emulation: everything on CPU threads
#include <sys/wait.h>
#include <tbb/global_control.h>
#include <unistd.h>
#endif

namespace {

using het::cuda::bf16;
using het::cuda::check;
template <class T>
using Buf = het::cuda::DeviceBuffer<T>;
using Vec = std::vector<float>;

// Round to the nearest bf16 (ties to even), as __float2bfloat16 does.
float round_bf16(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  std::memcpy(&x, &u, 4);
  return x;
}

Vec random(std::size_t n, std::uint32_t seed, float scale = 1.f, bool bf = true) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  Vec v(n);
  for (auto& x : v) x = bf ? round_bf16(u(g)) : u(g);
  return v;
}

// One stream per test; everything runs on it (a non-blocking stream does not wait for the
// legacy default one), and the helpers below return after their copies are done.
struct Gpu {
  het::cuda::Stream stream;
  cudaStream_t s() const { return stream.get(); }

  Buf<float> f32(const Vec& h) {
    Buf<float> d(h.size());
    check(cudaMemcpyAsync(d.get(), h.data(), d.bytes(), cudaMemcpyHostToDevice, s()), "test upload");
    sync();
    return d;
  }
  Buf<bf16> b16(const Vec& h) {
    Buf<float> f = f32(h);
    Buf<bf16> d(h.size());
    het::cuda::to_bf16(d.get(), f.get(), std::int64_t(h.size()), s());
    sync();
    return d;
  }
  template <class T>
  Buf<T> poisoned(std::size_t n) {  // all bits set: NaN in fp32 and bf16
    Buf<T> d(n);
    check(cudaMemsetAsync(d.get(), 0xFF, d.bytes(), s()), "test poison");
    return d;
  }
  Vec host(const Buf<float>& d) {
    sync();
    Vec h(d.size());
    check(cudaMemcpyAsync(h.data(), d.get(), d.bytes(), cudaMemcpyDeviceToHost, s()), "test download");
    check(cudaStreamSynchronize(s()), "test download");
    return h;
  }
  Vec host(const Buf<bf16>& d) {
    Buf<float> f(d.size());
    het::cuda::to_float(f.get(), d.get(), std::int64_t(d.size()), s());
    return host(f);
  }
  void sync() {
    het::cuda::check_launch("a test kernel");
    check(cudaStreamSynchronize(s()), "test sync");
  }
};

// max |got - want| / max |want|; NaN anywhere fails.
double rel_error(const Vec& got, const Vec& want) {
  REQUIRE(got.size() == want.size());
  double err = 0, scale = 1e-12;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    err = std::max(err, double(std::fabs(got[i] - want[i])));
    scale = std::max(scale, double(std::fabs(want[i])));
  }
  return err / scale;
}
#define CHECK_CLOSE(got, want, tol) CHECK(rel_error(got, want) <= (tol))

constexpr double kBf16 = 2e-2;  // a few bf16 ulps (2^-8) of the largest value

}  // namespace

TEST_CASE("LayerNorm and RMSNorm match the CPU kernels", "[kernels]") {
  Gpu g;
  for (const int C : {320, 333}) {  // 333: a partial block of columns in the parameter gradients
    INFO("C " << C);
    const int N = 37;
    const Vec x = random(std::size_t(N) * C, 1), w = random(C, 2), b = random(C, 3), dout = random(std::size_t(N) * C, 4);
    const Vec dinp0 = random(std::size_t(N) * C, 5), dw0 = random(C, 6, 1, false), db0 = random(C, 7, 1, false);
    auto dx = g.b16(x), dwt = g.b16(w), dbs = g.b16(b), ddout = g.b16(dout);
    {  // LayerNorm
      Vec out(x.size()), mean(N), rstd(N), dinp = dinp0, dw = dw0, db = db0;
      het::model::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
      het::model::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
      auto gout = g.poisoned<bf16>(x.size());
      auto gmean = g.poisoned<float>(N), grstd = g.poisoned<float>(N);
      het::cuda::layernorm_forward(gout.get(), gmean.get(), grstd.get(), dx.get(), dwt.get(), dbs.get(), N, C, g.s());
      CHECK_CLOSE(g.host(gout), out, kBf16);
      CHECK_CLOSE(g.host(gmean), mean, 1e-5);
      CHECK_CLOSE(g.host(grstd), rstd, 1e-4);
      auto gdinp = g.b16(dinp0);
      auto gdw = g.f32(dw0), gdb = g.f32(db0);
      het::cuda::layernorm_backward(gdinp.get(), gdw.get(), gdb.get(), ddout.get(), dx.get(), dwt.get(), gmean.get(), grstd.get(), N, C, g.s());
      CHECK_CLOSE(g.host(gdinp), dinp, kBf16);
      CHECK_CLOSE(g.host(gdw), dw, 1e-4);
      CHECK_CLOSE(g.host(gdb), db, 1e-4);
    }
    {  // RMSNorm
      Vec out(x.size()), rstd(N), dinp = dinp0, dw = dw0;
      het::model::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C);
      het::model::rmsnorm_backward(dinp.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
      auto gout = g.poisoned<bf16>(x.size());
      auto grstd = g.poisoned<float>(N);
      het::cuda::rmsnorm_forward(gout.get(), grstd.get(), dx.get(), dwt.get(), N, C, g.s());
      CHECK_CLOSE(g.host(gout), out, kBf16);
      CHECK_CLOSE(g.host(grstd), rstd, 1e-4);
      auto gdinp = g.b16(dinp0);
      auto gdw = g.f32(dw0);
      het::cuda::rmsnorm_backward(gdinp.get(), gdw.get(), ddout.get(), dx.get(), dwt.get(), grstd.get(), N, C, g.s());
      CHECK_CLOSE(g.host(gdinp), dinp, kBf16);
      CHECK_CLOSE(g.host(gdw), dw, 1e-4);
    }
  }
}

TEST_CASE("GELU and SwiGLU match the CPU kernels", "[kernels]") {
  Gpu g;
  const int n = 5000;
  const Vec a = random(n, 11, 4), b = random(n, 12, 2), d = random(n, 13);
  auto ga = g.b16(a), gb = g.b16(b), gd = g.b16(d);
  {
    Vec out(n), din(n, 0.f);
    het::model::gelu_forward(out.data(), a.data(), n);
    het::model::gelu_backward(din.data(), a.data(), d.data(), n);
    auto gout = g.poisoned<bf16>(n), gdin = g.poisoned<bf16>(n);
    het::cuda::gelu_forward(gout.get(), ga.get(), n, g.s());
    het::cuda::gelu_backward(gdin.get(), ga.get(), gd.get(), n, g.s());
    CHECK_CLOSE(g.host(gout), out, kBf16);
    CHECK_CLOSE(g.host(gdin), din, kBf16);
  }
  {
    Vec out(n), dgate(n, 0.f), dup(n, 0.f);
    het::model::swiglu_forward(out.data(), a.data(), b.data(), n);
    het::model::swiglu_backward(dgate.data(), dup.data(), d.data(), a.data(), b.data(), n);
    auto gout = g.poisoned<bf16>(n), gdgate = g.poisoned<bf16>(n), gdup = g.poisoned<bf16>(n);
    het::cuda::swiglu_forward(gout.get(), ga.get(), gb.get(), n, g.s());
    het::cuda::swiglu_backward(gdgate.get(), gdup.get(), gd.get(), ga.get(), gb.get(), n, g.s());
    CHECK_CLOSE(g.host(gout), out, kBf16);
    CHECK_CLOSE(g.host(gdgate), dgate, kBf16);
    CHECK_CLOSE(g.host(gdup), dup, kBf16);
  }
}

TEST_CASE("RoPE matches the CPU kernel in bf16 and fp32", "[kernels]") {
  Gpu g;
  const int B = 2, T = 19, H = 3, D = 32, pos0 = 5;
  const Vec x = random(std::size_t(B) * T * H * D, 21);
  Vec fwd = x, bwd = x;
  het::model::rope_forward(fwd.data(), B, T, H, D, pos0);
  het::model::rope_backward(bwd.data(), B, T, H, D, pos0);
  auto gx = g.b16(x);
  het::cuda::rope_forward(gx.get(), B, T, H, D, pos0, g.s());
  CHECK_CLOSE(g.host(gx), fwd, kBf16);
  auto gf = g.f32(x);
  het::cuda::rope_backward(gf.get(), B, T, H, D, pos0, g.s());
  CHECK_CLOSE(g.host(gf), bwd, 1e-5);
}

TEST_CASE("flash attention (grouped-query, causal) matches the CPU kernel", "[kernels]") {
  Gpu g;
  struct Case { int B, Tq, Tk, q0, H, KH, D; };
  // Tiles are 32 queries × 32 keys: T = 33, 37, 45, 65, 70 leave partial tiles; q0 > 0 with
  // Tk > Tq (a context before the queries, and keys past the last query's view); D = 16, 80
  // use part of the D <= 64 and D <= 128 instances; H = KH and groups of 2, 3 and 4.
  for (const Case c : {Case{2, 33, 33, 0, 4, 2, 64}, Case{1, 16, 40, 24, 6, 3, 64}, Case{2, 8, 8, 0, 2, 2, 16},
                       Case{1, 37, 37, 0, 4, 1, 80}, Case{1, 70, 70, 0, 4, 2, 128}, Case{2, 45, 100, 55, 4, 4, 128},
                       Case{1, 10, 50, 5, 4, 2, 32}, Case{1, 9, 300, 291, 2, 2, 256}, Case{1, 65, 65, 0, 4, 2, 256}}) {
    INFO("B " << c.B << " Tq " << c.Tq << " Tk " << c.Tk << " q0 " << c.q0 << " H " << c.H << " KH " << c.KH << " D " << c.D);
    const std::size_t nq = std::size_t(c.B) * c.Tq * c.H * c.D, nk = std::size_t(c.B) * c.Tk * c.KH * c.D;
    const Vec q = random(nq, 31), k = random(nk, 32), v = random(nk, 33), dout = random(nq, 34);
    // the gradients ACCUMULATE: start from nonzero values
    const Vec dq0 = random(nq, 35, 0.1f, false), dk0 = random(nk, 36, 0.1f, false), dv0 = random(nk, 37, 0.1f, false);
    Vec out(nq), att(std::size_t(c.B) * c.H * c.Tq * c.Tk), dq = dq0, dk = dk0, dv = dv0;
    het::model::attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), c.B, c.Tq, c.Tk, c.q0, c.H, c.KH, c.D);
    het::model::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), att.data(), q.data(), k.data(), v.data(), c.B, c.Tq,
                                   c.Tk, c.q0, c.H, c.KH, c.D);
    // lse[b,h,t] = log Σ_{s visible} exp(q·k_s / sqrt(D)), in double on the host; the CPU's
    // probabilities must agree with it: att = exp(score - lse)
    Vec lse(std::size_t(c.B) * c.H * c.Tq);
    double att_err = 0;
    for (int b = 0; b < c.B; ++b)
      for (int h = 0; h < c.H; ++h)
        for (int t = 0; t < c.Tq; ++t) {
          const int kh = h / (c.H / c.KH), visible = std::min(c.Tk, c.q0 + t + 1);
          std::vector<double> score(static_cast<std::size_t>(visible));
          double mx = -1e300;
          for (int s = 0; s < visible; ++s) {
            double dot = 0;
            for (int d = 0; d < c.D; ++d)
              dot += double(q[((std::size_t(b) * c.Tq + t) * c.H + h) * c.D + d]) * k[((std::size_t(b) * c.Tk + s) * c.KH + kh) * c.D + d];
            score[std::size_t(s)] = dot / std::sqrt(double(c.D));
            mx = std::max(mx, score[std::size_t(s)]);
          }
          double sum = 0;
          for (const double x : score) sum += std::exp(x - mx);
          const double l = mx + std::log(sum);
          lse[(std::size_t(b) * c.H + h) * c.Tq + t] = float(l);
          const float* a = att.data() + ((std::size_t(b) * c.H + h) * c.Tq + t) * c.Tk;
          for (int s = 0; s < visible; ++s) att_err = std::max(att_err, std::fabs(a[s] - std::exp(score[std::size_t(s)] - l)));
        }
    CHECK(att_err <= 1e-5);
    auto gq = g.b16(q), gk = g.b16(k), gv = g.b16(v), gdout = g.b16(dout);
    auto gout = g.poisoned<bf16>(nq);
    auto glse = g.poisoned<float>(lse.size());
    het::cuda::attention_forward(gout.get(), glse.get(), gq.get(), gk.get(), gv.get(), c.B, c.Tq, c.Tk, c.q0, c.H, c.KH, c.D, g.s());
    CHECK_CLOSE(g.host(gout), out, 1e-2);
    CHECK_CLOSE(g.host(glse), lse, 1e-4);
    auto gdq = g.f32(dq0), gdk = g.f32(dk0), gdv = g.f32(dv0);
    het::cuda::attention_backward(gdq.get(), gdk.get(), gdv.get(), gdout.get(), gout.get(), glse.get(), gq.get(), gk.get(), gv.get(), c.B,
                                  c.Tq, c.Tk, c.q0, c.H, c.KH, c.D, g.s());
    const Vec hdq = g.host(gdq), hdk = g.host(gdk), hdv = g.host(gdv);
    CHECK_CLOSE(hdq, dq, 2e-2);  // delta = rowsum(dout ∘ out) reads the bf16 out
    CHECK_CLOSE(hdk, dk, 2e-2);
    CHECK_CLOSE(hdv, dv, 2e-2);
    // no atomics: a second run gives the same bits
    auto gdk2 = g.f32(dk0), gdv2 = g.f32(dv0), gdq2 = g.f32(dq0);
    het::cuda::attention_backward(gdq2.get(), gdk2.get(), gdv2.get(), gdout.get(), gout.get(), glse.get(), gq.get(), gk.get(), gv.get(),
                                  c.B, c.Tq, c.Tk, c.q0, c.H, c.KH, c.D, g.s());
    const bool same_dq = g.host(gdq2) == hdq, same_dk = g.host(gdk2) == hdk, same_dv = g.host(gdv2) == hdv;
    CHECK(same_dq);
    CHECK(same_dk);
    CHECK(same_dv);
  }
}

TEST_CASE("attention refuses the shapes it cannot launch with a sentence", "[kernels]") {
  Gpu g;
  // Checked before anything is enqueued, so no buffers are needed.
  CHECK_THROWS_WITH(het::cuda::attention_forward(nullptr, nullptr, nullptr, nullptr, nullptr, 1, 4, 4, 0, 2, 2, 320, g.s()),
                    Catch::Contains("head dimensions"));
  CHECK_THROWS_WITH(het::cuda::attention_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 1, 4,
                                                  4, 0, 6, 4, 64, g.s()),
                    Catch::Contains("multiple of the key/value heads"));
  CHECK_THROWS_WITH(het::cuda::attention_forward(nullptr, nullptr, nullptr, nullptr, nullptr, 70000, 4, 4, 0, 2, 2, 64, g.s()),
                    Catch::Contains("65535"));
  CHECK_THROWS_WITH(het::cuda::attention_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 70000,
                                                  4, 4, 0, 2, 2, 64, g.s()),
                    Catch::Contains("65535"));
  // A long sequence is no longer a limit (lse is O(T)): nothing to refuse there.
}

TEST_CASE("embedding, cross-entropy and the bias gradient match the CPU kernels", "[kernels]") {
  Gpu g;
  const int B = 2, T = 24, N = B * T, C = 64, V = 300, pos0 = 8;
  std::vector<int> tokens(N), targets(N);
  for (int i = 0; i < N; ++i) tokens[std::size_t(i)] = (i * 37 + 5) % V, targets[std::size_t(i)] = (i * 11 + 3) % V;
  Buf<int> gtok(tokens.size()), gtgt(targets.size());
  check(cudaMemcpyAsync(gtok.get(), tokens.data(), gtok.bytes(), cudaMemcpyHostToDevice, g.s()), "tokens");
  check(cudaMemcpyAsync(gtgt.get(), targets.data(), gtgt.bytes(), cudaMemcpyHostToDevice, g.s()), "targets");
  g.sync();
  {
    const Vec wte = random(std::size_t(V) * C, 41), wpe = random(std::size_t(T + pos0) * C, 42), dout = random(std::size_t(N) * C, 43);
    Vec out(std::size_t(N) * C), dwte(wte.size(), 0.f), dwpe(wpe.size(), 0.f);
    het::model::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), N, T, C, pos0);
    het::model::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), N, T, C, pos0);
    auto gwte = g.b16(wte), gwpe = g.b16(wpe), gdout = g.b16(dout);
    auto gout = g.poisoned<bf16>(out.size());
    het::cuda::embedding_forward(gout.get(), gtok.get(), gwte.get(), gwpe.get(), N, T, C, pos0, g.s());
    CHECK_CLOSE(g.host(gout), out, kBf16);
    auto gdwte = g.f32(Vec(wte.size(), 0.f)), gdwpe = g.f32(Vec(wpe.size(), 0.f));
    het::cuda::embedding_backward(gdwte.get(), gdwpe.get(), gdout.get(), gtok.get(), N, T, C, pos0, g.s());
    CHECK_CLOSE(g.host(gdwte), dwte, 1e-5);
    CHECK_CLOSE(g.host(gdwpe), dwpe, 1e-5);
  }
  {
    const Vec logits = random(std::size_t(N) * V, 44, 4);
    const double scale = 1.0 / N;
    Vec dlogits(logits.size(), 0.f);
    const double total = het::model::crossentropy_forward_backward(dlogits.data(), logits.data(), targets.data(), N, V, scale);
    auto glogits = g.b16(logits);
    auto gd = g.poisoned<bf16>(logits.size());
    auto glosses = g.poisoned<float>(std::size_t(N));
    het::cuda::crossentropy_forward_backward(gd.get(), glosses.get(), glogits.get(), gtgt.get(), N, V, float(scale), g.s());
    double sum = 0;
    for (float l : g.host(glosses)) sum += l;
    CHECK(std::fabs(sum - total) <= 1e-4 * std::fabs(total));
    CHECK_CLOSE(g.host(gd), dlogits, kBf16);
  }
  {
    const Vec dout = random(std::size_t(N) * 72, 45), db0 = random(72, 46, 1, false);
    Vec db = db0;
    for (int n = 0; n < N; ++n)
      for (int c = 0; c < 72; ++c) db[std::size_t(c)] += dout[std::size_t(n) * 72 + std::size_t(c)];
    auto gdout = g.b16(dout);
    auto gdb = g.f32(db0);
    het::cuda::bias_backward(gdb.get(), gdout.get(), N, 72, g.s());
    CHECK_CLOSE(g.host(gdb), db, 1e-5);
  }
}

TEST_CASE("AdamW and the squared gradient sum match the CPU", "[kernels]") {
  Gpu g;
  const std::size_t n = 10007;
  const Vec value0 = random(n, 51, 1, false), grad = random(n, 52, 1, false);
  const Vec m0 = random(n, 53, 0.1f, false);
  Vec v0 = random(n, 54, 0.1f, false);
  for (auto& x : v0) x = x * x;
  Vec value = value0, m = m0, v = v0;
  const het::model::AdamW opt;
  het::model::adamw_update(value.data(), grad.data(), m.data(), v.data(), n, opt, 3, true);
  auto gvalue = g.f32(value0), ggrad = g.f32(grad), gm = g.f32(m0), gv = g.f32(v0);
  het::cuda::adamw_update(gvalue.get(), ggrad.get(), gm.get(), gv.get(), std::int64_t(n),
                          {float(opt.lr), float(opt.beta1), float(opt.beta2), float(opt.eps), float(opt.weight_decay), 3, true}, g.s());
  CHECK_CLOSE(g.host(gvalue), value, 1e-6);
  CHECK_CLOSE(g.host(gm), m, 1e-6);
  CHECK_CLOSE(g.host(gv), v, 1e-6);
  double want = 0;
  for (float x : grad) want += double(x) * x;
  auto gsum = g.f32(Vec(1, 0.f));
  het::cuda::sum_squares(gsum.get(), ggrad.get(), std::int64_t(n), g.s());
  CHECK(std::fabs(g.host(gsum)[0] - want) <= 1e-4 * want);
}

TEST_CASE("cuBLASLt GEMMs match matmul_forward and matmul_backward", "[gemm]") {
  Gpu g;
  het::cuda::Gemm gemm(g.s());
  const int N = 96, C = 160, OC = 224;
  const Vec inp = random(std::size_t(N) * C, 61), w = random(std::size_t(OC) * C, 62), b = random(OC, 63),
            res = random(std::size_t(N) * OC, 64), dout = random(std::size_t(N) * OC, 65), dinp0 = random(std::size_t(N) * C, 66),
            dw0 = random(std::size_t(OC) * C, 67, 1, false);
  auto ginp = g.b16(inp), gw = g.b16(w), gb = g.b16(b), gres = g.b16(res), gdout = g.b16(dout);
  {  // out = inp·wᵀ + b + residual
    Vec out(std::size_t(N) * OC);
    het::model::matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
    het::model::add_inplace(out.data(), res.data(), std::int64_t(out.size()));
    auto gout = g.poisoned<bf16>(out.size());
    gemm.forward(gout.get(), ginp.get(), gw.get(), gb.get(), gres.get(), N, C, OC);
    CHECK_CLOSE(g.host(gout), out, kBf16);
    Vec plain(out.size());
    het::model::matmul_forward(plain.data(), inp.data(), w.data(), static_cast<const float*>(nullptr), N, C, OC);
    auto gplain = g.poisoned<bf16>(out.size());
    gemm.forward(gplain.get(), ginp.get(), gw.get(), nullptr, nullptr, N, C, OC);
    CHECK_CLOSE(g.host(gplain), plain, kBf16);
  }
  {  // dinp = dout·w (overwrite, then +=); dw += doutᵀ·inp
    Vec dinp(inp.size(), 0.f), dw = dw0;
    het::model::matmul_backward(dinp.data(), dw.data(), static_cast<float*>(nullptr), dout.data(), inp.data(), w.data(), N, C, OC);
    auto gdinp = g.poisoned<bf16>(inp.size());
    gemm.backward_input(gdinp.get(), gdout.get(), gw.get(), N, C, OC, false);
    CHECK_CLOSE(g.host(gdinp), dinp, kBf16);
    Vec acc = dinp0;
    het::model::add_inplace(acc.data(), dinp.data(), std::int64_t(acc.size()));
    auto gacc = g.b16(dinp0);
    gemm.backward_input(gacc.get(), gdout.get(), gw.get(), N, C, OC, true);
    CHECK_CLOSE(g.host(gacc), acc, kBf16);
    auto gdw = g.f32(dw0);
    gemm.backward_weight(gdw.get(), gdout.get(), ginp.get(), N, C, OC);
    CHECK_CLOSE(g.host(gdw), dw, 1e-3);  // fp32 output, fp32 accumulation
  }
}

namespace {
het::ModelSpec tiny(het::Architecture arch) {
  het::ModelSpec m;
  m.name = "tiny";
  m.architecture = arch;
  m.num_layers = 2, m.hidden_size = 128, m.num_attention_heads = 4;
  m.num_kv_heads = arch == het::Architecture::gpt ? 4 : 2;
  m.ffn_hidden_size = arch == het::Architecture::gpt ? 512 : 256;
  m.vocab_size = 256, m.seq_length = 32;
  return m;
}
double l2(const Vec& v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return std::sqrt(s);
}
// Whether a gradient that is zero in exact arithmetic is zero up to rounding: a key bias adds
// q·bk to every score of a query's row, which the softmax ignores, so its gradient is rounding
// noise; against the layer's key weights' gradient it must be negligible.
bool negligible(const Vec& got, const Vec& reference) { return l2(got) <= 1e-3 * l2(reference); }
// ||got - want||₂ / ||want||₂
double rel_l2(const Vec& got, const Vec& want) {
  double e = 0, s = 1e-30;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    e += double(got[i] - want[i]) * (got[i] - want[i]), s += double(want[i]) * want[i];
  }
  return std::sqrt(e / s);
}
}  // namespace

TEST_CASE("a one-stage GPT and Llama forward+backward on the GPU match the CPU StageModel", "[stage]") {
  for (auto arch : {het::Architecture::gpt, het::Architecture::llama}) {
    const het::ModelSpec m = tiny(arch);
    INFO((arch == het::Architecture::gpt ? "gpt" : "llama"));
    const int B = 2, T = m.seq_length, L = m.num_layers;
    std::vector<int> tokens(std::size_t(B) * T), targets(tokens.size());
    for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = int((i * 31 + 7) % 256), targets[i] = int((i * 17 + 1) % 256);
    const double scale = 1.0 / (double(B) * T);
    het::model::StageModel<float> cpu(m, 0, L + 1, 0, 1, 7);
    double cpu_loss = 0;
    cpu.forward(0, B, tokens.data(), nullptr, targets.data(), &cpu_loss);
    cpu.backward(0, nullptr, scale);

    auto backend = het::backend::open_cuda(-1);
    REQUIRE(backend.ok());
    auto stage = (*backend)->make_stage({m, 0, L + 1, 0, 1, 7, het::Recompute::none, {}, {}});
    // Every device buffer of the stage is counted (issue 17: cuda::DeviceLedger): made, it holds
    // the parameters (bf16 values, fp32 gradients) and the fp32 staging buffer the values are
    // uploaded through (all of them, or 32 Mi floats at a time); a forward adds exactly its
    // activations; a backward gives back those and every temporary of its own, which the peak
    // shows it held on top.
    std::size_t params = 0, elements = 0;
    for (const auto* q : stage->params()) params += q->value.size() * (2 + 4), elements += q->value.size();
    auto made = stage->device_memory();
    REQUIRE(made);
    const std::size_t base = params + std::min(elements, std::size_t(32) << 20) * sizeof(float);
    CHECK(made->in_use == base);
    double gpu_loss = 0;
    CHECK(stage->forward(0, B, tokens.data(), nullptr, targets.data(), &gpu_loss).empty());
    const std::size_t acts = stage->activation_bytes();
    CHECK(acts > 0);
    CHECK(stage->device_memory()->in_use == base + acts);
    // The planner's bf16 memory model (cost/memory.hpp) is this backend's: the layers and the
    // head of one micro-batch in flight (the model leaves out the tokens and targets, 8 bytes a
    // token), and the backward's temporaries on top of them at its peak.
    het::cost::StageShape shape;
    shape.layers = L, shape.has_embedding = shape.has_head = true, shape.sequences = B, shape.in_flight = 1;
    het::ModelSpec bf16 = m;
    bf16.dtype = het::DType::bf16;
    const auto model = het::cost::stage_memory(bf16, shape);
    CHECK(double(acts) == Approx(model.activations + model.stage_buffers).epsilon(0.01));
    CHECK(stage->backward(0, nullptr, scale).empty());
    CHECK(stage->activation_bytes() == 0);
    CHECK(stage->device_memory()->in_use == base);
    CHECK(double(stage->device_memory()->peak) == Approx(double(base + acts) + model.workspace).epsilon(0.02));
    CHECK(std::fabs(gpu_loss - cpu_loss) <= 1e-2 * std::fabs(cpu_loss));
    const auto want = cpu.params();
    const auto got = stage->params();
    REQUIRE(got.size() == want.size());
    for (const auto* q : got)  // the host grads are made whole only by finish_backward()
      CHECK(std::all_of(q->grad.begin(), q->grad.end(), [](float x) { return x == 0.f; }));
    stage->finish_backward();
    // The key weights' gradient of a key bias's layer ("layer0.bk" -> "layer0.wk").
    auto key_weights = [&](const std::string& bias) -> const Vec& {
      for (const auto* q : want)
        if (q->name == bias.substr(0, bias.size() - 2) + "wk") return q->grad;
      FAIL("no key weights for " << bias);
      return want.front()->grad;
    };
    auto is_key_bias = [](const std::string& n) { return n.size() > 3 && n.compare(n.size() - 3, 3, ".bk") == 0; };
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO(want[i]->name);
      REQUIRE(got[i]->name == want[i]->name);
      CHECK(got[i]->value == want[i]->value);  // identical fp32 masters
      if (is_key_bias(want[i]->name)) {
        CHECK(negligible(got[i]->grad, key_weights(want[i]->name)));
        CHECK(negligible(want[i]->grad, key_weights(want[i]->name)));
      } else {
        CHECK(rel_l2(got[i]->grad, want[i]->grad) <= 5e-2);
      }
    }
    // A second micro-batch (the same data) accumulates on the device: twice the gradients.
    stage->forward(1, B, tokens.data(), nullptr, targets.data(), &gpu_loss);
    stage->backward(1, nullptr, scale);
    stage->finish_backward();
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO(want[i]->name);
      Vec twice = want[i]->grad;
      for (auto& x : twice) x *= 2;
      if (is_key_bias(want[i]->name)) CHECK(negligible(got[i]->grad, key_weights(want[i]->name)));
      else CHECK(rel_l2(got[i]->grad, twice) <= 5e-2);
    }
    stage->zero_grad();  // the device gradients cleared; the host's made whole again (all zero) only by finish_backward
    stage->finish_backward();
    for (const auto* q : got) CHECK(std::all_of(q->grad.begin(), q->grad.end(), [](float x) { return x == 0.f; }));
    // Two stages (embedding + layer 1 | layer 2 + head) pass host activations and gradients.
    auto s1 = (*backend)->make_stage({m, 0, 1, 0, 1, 7, het::Recompute::none, {}, {}});
    auto s2 = (*backend)->make_stage({m, 2, L + 1, 0, 1, 7, het::Recompute::none, {}, {}});
    double split_loss = 0;
    const Vec x = s1->forward(0, B, tokens.data(), nullptr, targets.data(), nullptr);
    CHECK(x.size() == std::size_t(B) * T * m.hidden_size);
    s2->forward(0, B, nullptr, x.data(), targets.data(), &split_loss);
    const Vec dx = s2->backward(0, nullptr, scale);
    s1->backward(0, dx.data(), scale);
    CHECK(std::fabs(split_loss - cpu_loss) <= 1e-2 * std::fabs(cpu_loss));
    // With device activations every call returns when the device has done its work, the first
    // stage's backward too, which gives nothing to wait for (the runtime's trace times the device,
    // not the launches): one synchronisation after its launches, none inside it.
    auto y = s1->forward_device(1, B, tokens.data(), {}, targets.data(), nullptr);
    double device_loss = 0;
    s2->forward_device(1, B, nullptr, std::move(y), targets.data(), &device_loss);
    auto dy = s2->backward_device(1, {}, scale);
    const auto before = s1->device_counters().value();
    CHECK(s1->backward_device(1, std::move(dy), scale).empty());
    const auto waited = s1->device_counters().value() - before;
    CHECK(waited.syncs == 1);
    CHECK(waited.compute_syncs == 0);
  }
}

TEST_CASE("four training steps of a one-stage model on the GPU follow the CPU StageModel's loss curve", "[stage]") {
  // As the runtime trains a one-stage plan: per step zero_grad, the micro-batches' forwards and
  // backwards (1F1B order does not change the sums), finish_backward, AdamW on the fp32 masters.
  for (auto arch : {het::Architecture::gpt, het::Architecture::llama}) {
    const het::ModelSpec m = tiny(arch);
    INFO((arch == het::Architecture::gpt ? "gpt" : "llama"));
    const int B = 2, T = m.seq_length, L = m.num_layers, steps = 4, micro = 1;
    const double scale = 1.0 / (double(micro) * B * T);
    het::model::AdamW opt;
    opt.lr = 5e-3;  // the loss moves visibly within four steps
    het::model::StageModel<float> cpu(m, 0, L + 1, 0, 1, 7);
    auto backend = het::backend::open_cuda(-1);
    REQUIRE(backend.ok());
    auto gpu = (*backend)->make_stage({m, 0, L + 1, 0, 1, 7, het::Recompute::none, {}, {}});
    std::vector<int> tokens(std::size_t(B) * T), targets(tokens.size());
    auto batch = [&](int mb) {  // the same repeating text every step, so the loss must fall
      for (std::size_t i = 0; i < tokens.size(); ++i) {
        const std::size_t at = i + std::size_t(mb) * 5;
        tokens[i] = int((at * 7) % 61), targets[i] = int(((at + 1) * 7) % 61);
      }
    };
    std::vector<double> cpu_curve, gpu_curve;
    for (int step = 0; step < steps; ++step) {
      cpu.zero_grad(), gpu->zero_grad();
      double cpu_sum = 0, gpu_sum = 0;
      for (int mb = 0; mb < micro; ++mb) {
        batch(mb);
        double c = 0, g = 0;
        cpu.forward(mb, B, tokens.data(), nullptr, targets.data(), &c);
        gpu->forward(mb, B, tokens.data(), nullptr, targets.data(), &g);
        cpu_sum += c, gpu_sum += g;
      }
      for (int mb = 0; mb < micro; ++mb) cpu.backward(mb, nullptr, scale), gpu->backward(mb, nullptr, scale);
      gpu->finish_backward();
      for (auto* q : cpu.params()) het::model::adamw_step(*q, opt, step + 1);
      for (auto* q : gpu->params()) het::model::adamw_step(*q, opt, step + 1);
      cpu_curve.push_back(cpu_sum * scale), gpu_curve.push_back(gpu_sum * scale);
    }
    for (int step = 0; step < steps; ++step) {
      INFO("step " << step << ": cpu " << cpu_curve[std::size_t(step)] << ", gpu " << gpu_curve[std::size_t(step)]);
      CHECK(std::fabs(gpu_curve[std::size_t(step)] - cpu_curve[std::size_t(step)]) <= 2e-2 * cpu_curve[std::size_t(step)]);
    }
    CHECK(gpu_curve.back() < 0.9 * gpu_curve.front());  // it learns (AdamW's first steps may overshoot on the way)
  }
}

TEST_CASE("the step on the device follows the host's, and packed (strided) buckets give the bits of whole-parameter ones", "[stage]") {
  // Three ways to train one stage for three steps: AdamW on the host's masters (the stage's
  // host mode), the device optimizer over one bucket of whole parameters (their gradients and
  // masters live in it; padded as an NCCL group pads), and over two buckets holding every
  // parameter's even and odd elements (packed by the strided kernels).
  const het::ModelSpec m = tiny(het::Architecture::gpt);
  const int B = 2, T = m.seq_length, L = m.num_layers, steps = 3;
  const double scale = 1.0 / (double(B) * T);
  het::model::AdamW opt;
  opt.lr = 5e-3;
  auto backend = het::backend::open_cuda(-1);
  REQUIRE(backend.ok());
  std::vector<int> tokens(std::size_t(B) * T), targets(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = int((i * 7) % 61), targets[i] = int(((i + 1) * 7) % 61);
  // weighted: the whole-parameter bucket with every part weighted 1/2 (as a parameter every TP
  // shard holds whole is, 1/tp) and the loss scaled 2x, which gives whole's gradients exactly.
  enum How { host, whole, packed, weighted };
  std::size_t peak[4] = {};  // the device peak of each How's last stage
  auto train = [&](How how, int count, std::vector<Vec>* masters) {
    auto stage = (*backend)->make_stage({m, 0, L + 1, 0, 1, 7, het::Recompute::none, {}, {}});
    const auto params = stage->params();
    std::vector<het::backend::BucketLayout> layouts;
    if (how == whole || how == weighted) {
      auto& l = layouts.emplace_back();
      for (std::size_t i = 0; i < params.size(); ++i) {
        const std::size_t n = params[i]->value.size();
        l.parts.push_back({i, 0, n, n, 1, how == weighted ? 0.5f : 1.f, l.size});
        l.size += n;
      }
      l.padded = l.size + 3, l.hi = l.size;
    } else if (how == packed) {
      for (std::size_t parity : {0, 1}) {
        auto& l = layouts.emplace_back();
        for (std::size_t i = 0; i < params.size(); ++i) {
          const std::size_t elements = (params[i]->value.size() + 1 - parity) / 2;
          if (elements == 0) continue;
          l.parts.push_back({i, parity, 1, 2, elements, 1.f, l.size});
          l.size += elements;
        }
        l.padded = l.hi = l.size;
      }
    }
    het::backend::DeviceOptimizer* device = how == host ? nullptr : stage->device_optimizer(layouts);
    CHECK((how == host) == (device == nullptr));
    std::vector<double> losses;
    for (int step = 0; step < count; ++step) {
      stage->zero_grad();
      double loss = 0;
      stage->forward(0, B, tokens.data(), nullptr, targets.data(), &loss);
      stage->backward(0, nullptr, how == weighted ? 2 * scale : scale);
      stage->finish_backward();
      if (!device)
        for (auto* q : params) het::model::adamw_step(*q, opt, step + 1);
      else
        for (std::size_t i = 0; i < layouts.size(); ++i) device->pack_gradients(i), device->update(i, opt, step + 1, true);
      losses.push_back(loss * scale);
    }
    if (device) device->pull_values();
    for (auto* q : params) masters->push_back(q->value);
    peak[how] = stage->device_memory().value().peak;
    return losses;
  };
  std::vector<Vec> in_whole, in_packed, ignored;
  const auto a = train(host, steps, &ignored), b = train(whole, steps, &in_whole), c = train(packed, steps, &in_packed);
  for (int step = 0; step < steps; ++step) {
    INFO("step " << step << ": host " << a[std::size_t(step)] << ", device " << b[std::size_t(step)]);
    CHECK(b[std::size_t(step)] == Approx(a[std::size_t(step)]).epsilon(1e-3));
  }
  CHECK(b.back() < b.front());  // it learns
  // The share of elements on which two sets of masters differ by more than 1e-6 (1 + |x|): on a
  // GPU two runs differ in the last bits (the embedding's backward adds with atomics), and
  // AdamW's normalisation turns that into visible steps wherever a gradient is tiny (the key
  // biases' is zero in exact arithmetic); a wrong element in packing or unpacking, or a wrong
  // decay, moves most of a parameter's elements.
  auto differing = [](const std::vector<Vec>& x, const std::vector<Vec>& y) {
    REQUIRE(x.size() == y.size());
    std::size_t n = 0, off = 0;
    for (std::size_t i = 0; i < x.size(); ++i)
      for (std::size_t k = 0; k < x[i].size(); ++k, ++n)
        off += std::fabs(double(x[i][k]) - y[i][k]) > 1e-6 * (1 + std::fabs(double(x[i][k])));
    return double(off) / double(n);
  };
  for (int step = 0; step < steps; ++step) CHECK(c[std::size_t(step)] == Approx(b[std::size_t(step)]).epsilon(1e-5));
  CHECK(differing(in_packed, in_whole) <= 0.005);  // in the emulation (deterministic kernels): 0, the same bits
  // Weighted parts stay views of the bucket: the same masters, and not a byte more on the device
  // (packed copies of the gradients and masters would add 8 bytes per parameter).
  std::vector<Vec> in_weighted;
  const auto d = train(weighted, steps, &in_weighted);
  for (int step = 0; step < steps; ++step) CHECK(d[std::size_t(step)] == Approx(b[std::size_t(step)]).epsilon(1e-5));
  CHECK(differing(in_weighted, in_whole) <= 0.005);
  CHECK(peak[weighted] == peak[whole]);
  // After one step, host and device AdamW agree to the kernel's rounding (its test's 1e-6).
  std::vector<Vec> host1, device1;
  train(host, 1, &host1), train(whole, 1, &device1);
  CHECK(differing(host1, device1) <= 0.005);
}

TEST_CASE("the CUDA stage refuses a tp that does not divide the heads and a cp that does not divide the sequence with a sentence",
          "[stage]") {
  auto backend = het::backend::open_cuda(-1);
  REQUIRE(backend.ok());
  const het::ModelSpec m = tiny(het::Architecture::gpt);
  het::model::Comm<float> context;
  context.cp = 3;
  CHECK_THROWS_WITH((*backend)->make_stage({m, 1, 2, 0, 1, 7, het::Recompute::none, context, {}}),
                    Catch::Contains("cp = 3 (member 0) does not divide the 32 time steps"));
  context.cp = 2, context.cp_rank = 1;
  CHECK_NOTHROW((*backend)->make_stage({m, 1, 2, 0, 1, 7, het::Recompute::none, context, {}}));
  CHECK_THROWS_WITH((*backend)->make_stage({m, 1, 2, 0, 3, 7, het::Recompute::none, {}, {}}),
                    Catch::Contains("tp = 3 (shard 0) does not divide"));
  CHECK_NOTHROW((*backend)->make_stage({m, 1, 2, 1, 2, 7, het::Recompute::none, {}, {}}));
}

#ifdef HET_EMULATION_FIBERS
// A kernel whose thread 0 skips a barrier the others wait at: a hang on a device, and with OS
// threads; with fibers the launch names the deadlock and aborts.
__global__ void skips_a_barrier(float* out) {
  if (threadIdx.x != 0) __syncthreads();
  out[threadIdx.x] = 1;
}

TEST_CASE("emulation with fibers: a kernel whose threads miss a barrier aborts, naming the deadlock", "[kernels]") {
  std::fflush(nullptr);
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::dup2(pipe_fds[1], 2);
    float out[64];
    HET_LAUNCH(skips_a_barrier, 1, 64, 0, nullptr)(out);
    std::_Exit(0);
  }
  ::close(pipe_fds[1]);
  std::string err;
  char buf[256];
  for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof buf)) > 0;) err.append(buf, std::size_t(n));
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  CHECK(WIFSIGNALED(status));
  CHECK_THAT(err, Catch::Contains("a deadlock in a kernel: 63 of 64 threads wait at a barrier the others never reach"));
}
#endif

int main(int argc, char* argv[]) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    std::printf("SKIPPED: no CUDA device (%s)\n", err != cudaSuccess ? cudaGetErrorString(err) : "the runtime sees none");
    return 77;
  }
#ifdef HET_CUDA_EMULATION
  // The CPU ops on one thread: their oneTBB workers are not instrumented by the sanitizers.
  tbb::global_control one_thread(tbb::global_control::max_allowed_parallelism, 1);
#endif
  return Catch::Session().run(argc, argv);
}
