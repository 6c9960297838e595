// One GPT layer on the CUDA backend (hidden 4096, 32 heads, seq 2048, micro-batch 1, bf16):
// forward+backward time through backend::Stage and its MFU against the peak this GPU reaches on
// a large cuBLASLt bf16 GEMM (8192³), measured here. The Stage time includes what the interface
// costs (host-staged activations, and finish_backward()'s gradient copy to the host, as a step
// of one micro-batch pays it), so it is a floor on MFU, not the kernels' own. Then the flash
// attention kernels alone (kernels.hpp) at the layer's shape and with 8 kv heads: forward and
// backward times and their FLOP rates. Exits 77 without a CUDA device.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/device.hpp"
#include "backend/cuda/gemm.hpp"
#include "backend/cuda/kernels.hpp"

namespace {

double gemm_peak_flops(int n) {
  using namespace het::cuda;
  Stream stream;
  Gemm gemm(stream.get());
  DeviceBuffer<bf16> a(std::size_t(n) * n), b(std::size_t(n) * n), c(std::size_t(n) * n);
  check(cudaMemsetAsync(a.get(), 0, a.bytes(), stream.get()), "memset"), check(cudaMemsetAsync(b.get(), 0, b.bytes(), stream.get()), "memset");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event"), check(cudaEventCreate(&stop), "event");
  for (int i = 0; i < 3; ++i) gemm.forward(c.get(), a.get(), b.get(), nullptr, nullptr, n, n, n);
  const int reps = 20;
  check(cudaEventRecord(start, stream.get()), "event");
  for (int i = 0; i < reps; ++i) gemm.forward(c.get(), a.get(), b.get(), nullptr, nullptr, n, n, n);
  check(cudaEventRecord(stop, stream.get()), "event");
  check(cudaEventSynchronize(stop), "event");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start, stop), "event");
  cudaEventDestroy(start), cudaEventDestroy(stop);
  return 2.0 * n * n * double(n) * reps / (ms * 1e-3);
}

// The mean of `reps` runs of the flash attention forward and backward (after 2 warm-up
// runs) on zero inputs, in seconds each; returns {forward, backward}.
std::pair<double, double> attention_seconds(int B, int T, int H, int KH, int D) {
  using namespace het::cuda;
  Stream stream;
  const cudaStream_t s = stream.get();
  const std::size_t nq = std::size_t(B) * T * H * D, nk = std::size_t(B) * T * KH * D;
  DeviceBuffer<bf16> q(nq), k(nk), v(nk), out(nq), dout(nq);
  DeviceBuffer<float> lse(std::size_t(B) * H * T), dq(nq), dk(nk), dv(nk);
  for (auto* b : {&q, &k, &v, &dout}) check(cudaMemsetAsync(b->get(), 0, b->bytes(), s), "memset");
  for (auto* b : {&dq, &dk, &dv}) check(cudaMemsetAsync(b->get(), 0, b->bytes(), s), "memset");
  cudaEvent_t e0, e1, e2;
  check(cudaEventCreate(&e0), "event"), check(cudaEventCreate(&e1), "event"), check(cudaEventCreate(&e2), "event");
  auto fwd = [&] { attention_forward(out.get(), lse.get(), q.get(), k.get(), v.get(), B, T, T, 0, H, KH, D, s); };
  auto bwd = [&] {
    attention_backward(dq.get(), dk.get(), dv.get(), dout.get(), out.get(), lse.get(), q.get(), k.get(), v.get(), B, T, T, 0, H, KH, D, s);
  };
  for (int i = 0; i < 2; ++i) fwd(), bwd();
  const int reps = 5;
  check(cudaEventRecord(e0, s), "event");
  for (int i = 0; i < reps; ++i) fwd();
  check(cudaEventRecord(e1, s), "event");
  for (int i = 0; i < reps; ++i) bwd();
  check(cudaEventRecord(e2, s), "event");
  check_launch("the attention kernels");
  check(cudaEventSynchronize(e2), "event");
  float f = 0, b = 0;
  check(cudaEventElapsedTime(&f, e0, e1), "event"), check(cudaEventElapsedTime(&b, e1, e2), "event");
  cudaEventDestroy(e0), cudaEventDestroy(e1), cudaEventDestroy(e2);
  return {f * 1e-3 / reps, b * 1e-3 / reps};
}

}  // namespace

int main() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("SKIPPED: no CUDA device\n");
    return 77;
  }
  try {
    het::ModelSpec m;
    m.name = "gpt-layer-4096";
    m.architecture = het::Architecture::gpt;
    m.num_layers = 1, m.hidden_size = 4096, m.num_attention_heads = 32, m.num_kv_heads = 32, m.ffn_hidden_size = 4 * 4096;
    m.vocab_size = 256, m.seq_length = 2048;
    const int B = 1, T = m.seq_length, C = m.hidden_size;
    const double peak = gemm_peak_flops(8192);

    auto backend = het::backend::open_cuda(-1);
    if (!backend.ok()) {
      std::fprintf(stderr, "%s\n", backend.errors().front().message.c_str());
      return 1;
    }
    auto stage = (*backend)->make_stage({m, 1, 1, 0, 1, 1, het::Recompute::none, {}, {}});
    std::size_t params = 0;
    for (auto* p : stage->params()) params += p->value.size();
    std::vector<float> x(std::size_t(B) * T * C, 0.01f), dy(x.size(), 1e-4f);
    std::vector<double> times;
    for (int r = 0; r < 7; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      stage->forward(r, B, nullptr, x.data(), nullptr, nullptr);
      stage->backward(r, dy.data(), 1.0);
      stage->finish_backward();
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::vector<double> kept(times.begin() + 2, times.end());  // two warm-up runs
    std::sort(kept.begin(), kept.end());
    const double t = kept[kept.size() / 2];
    // Forward: 2 FLOPs per parameter per token, plus causal attention (QKᵀ and AV: 2·2·T²·C,
    // halved by the mask); backward twice the forward.
    const double tokens = double(B) * T;
    const double flops = 3 * (2 * tokens * double(params) + 2 * double(B) * T * double(T) * C);
    std::printf("cuBLASLt bf16 GEMM peak (8192^3): %.1f TFLOP/s\n", peak / 1e12);
    std::printf("GPT layer h=%d T=%d b=%d: %.2f ms forward+backward (median of 5), %.1f TFLOP/s, MFU %.1f%%\n", C, T, B, t * 1e3,
                flops / t / 1e12, 100 * flops / t / peak);
    for (const int KH : {32, 8}) {
      const int H = 32, D = 128;
      const auto [f, b] = attention_seconds(B, T, H, KH, D);
      // causal: QKᵀ and PV, 2·2·B·H·T²·D FLOPs halved by the mask; the backward has 5 such products
      const double fl = 2.0 * B * H * double(T) * T * D;
      std::printf("flash attention B=%d T=%d H=%d KH=%d D=%d: forward %.2f ms (%.1f TFLOP/s), backward %.2f ms (%.1f TFLOP/s)\n", B, T,
                  H, KH, D, f * 1e3, fl / f / 1e12, b * 1e3, 2.5 * fl / b / 1e12);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpu_layer: %s\n", e.what());
    return 1;
  }
}
