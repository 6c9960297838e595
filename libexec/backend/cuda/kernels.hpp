#pragma once
// Layer kernels of the CUDA backend, each a forward/backward pair mirroring model/ops.hpp
// (llm.c style; same shape letters: N = rows (B·T), C channels, OC output channels, B batch,
// T time, H query heads, KH key/value heads, D head dimension, V vocabulary).
// Storage: activations bf16 (`bf16`), statistics and parameter gradients fp32; every kernel
// computes in fp32. Every function only enqueues work on `stream` and returns at once; a
// launch error shows at the next check_launch (device.hpp) — a stream synchronisation does not
// report a launch that never started — never as an abort. fp32 atomics make the embedding's and
// attention's gradients vary in their last bits between runs; every other kernel is deterministic.
// Outputs: forward outputs and activation gradients are OVERWRITTEN unless the comment says
// "+="; parameter gradients (fp32) always accumulate (+=), as in ops.hpp.
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace het::cuda {

using bf16 = __nv_bfloat16;

// out[N,C] = (inp - mean) * rstd * w + b; keeps mean[N], rstd[N] (fp32).
void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* w, const bf16* b, int N, int C,
                       cudaStream_t stream);
// dinp[N,C] += ...; dw[C] += ...; db[C] += ... (a block per row for dinp, then a column-sum
// kernel for dw, db: no atomics)
void layernorm_backward(bf16* dinp, float* dw, float* db, const bf16* dout, const bf16* inp, const bf16* w, const float* mean,
                        const float* rstd, int N, int C, cudaStream_t stream);
// out[N,C] = inp * rstd * w, rstd[N] = 1/sqrt(mean(inp²) + eps)
void rmsnorm_forward(bf16* out, float* rstd, const bf16* inp, const bf16* w, int N, int C, cudaStream_t stream);
// dinp[N,C] += ...; dw[C] += ...
void rmsnorm_backward(bf16* dinp, float* dw, const bf16* dout, const bf16* inp, const bf16* w, const float* rstd, int N, int C,
                      cudaStream_t stream);

// GELU (tanh approximation), elementwise over n; backward overwrites dinp.
void gelu_forward(bf16* out, const bf16* inp, std::int64_t n, cudaStream_t stream);
void gelu_backward(bf16* dinp, const bf16* inp, const bf16* dout, std::int64_t n, cudaStream_t stream);
// SwiGLU: out = silu(gate) * up, elementwise over n; backward overwrites dgate and dup.
void swiglu_forward(bf16* out, const bf16* gate, const bf16* up, std::int64_t n, cudaStream_t stream);
void swiglu_backward(bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate, const bf16* up, std::int64_t n,
                     cudaStream_t stream);

// Rotary embedding on x[B,T,H,D] in place, pairs (2i, 2i+1), theta 10000, time step t at
// position pos0 + t; backward rotates back. For bf16 (forward on q, k) and fp32 (gradients).
template <class T> void rope_forward(T* x, int B, int Tn, int H, int D, int pos0, cudaStream_t stream);
template <class T> void rope_backward(T* dx, int B, int Tn, int H, int D, int pos0, cudaStream_t stream);

// Causal grouped-query attention: q[B,Tq,H,D], k,v[B,Tk,KH,D] -> out[B,Tq,H,D]; query t at
// position q0 + t sees keys s <= q0 + t (query head h reads kv head h / (H/KH)). att[B,H,Tq,Tk]
// (fp32) keeps the probabilities (zero where masked). One thread block per (t, h, b) query row,
// a warp per key for the dot products — simple and correct, not fast. Known limits:
//  * memory: att is B·H·T² fp32 per layer and micro-batch (512 MiB at B 1, H 32, T 2048),
//    kept until the backward; a flash-attention kernel would keep O(B·H·T) instead;
//  * time: scores are recomputed from global k, v per query row (no tiling or tensor cores:
//    O(T²·D) scalar FMAs, read bandwidth-bound), and the backward adds to dk, dv with fp32
//    atomics from every query row of the group (contention grows with T and H/KH; results
//    vary in the last bits from run to run);
//  * shared memory: Tk·4 bytes of scores per block plus ~3 KiB, opted in above 48 KiB up to the
//    device's limit (Tk up to ~57k on H100, ~40k on A100). These throw a CudaError with a
//    sentence when the shapes do not fit (D > 256, H not a multiple of KH, H or B > 65535, Tk too
//    long for shared memory) instead of enqueueing.
void attention_forward(bf16* out, float* att, const bf16* q, const bf16* k, const bf16* v, int B, int Tq, int Tk, int q0, int H,
                       int KH, int D, cudaStream_t stream);
// dq[B,Tq,H,D] +=, dk, dv[B,Tk,KH,D] += (fp32; atomics, since a group's heads share k, v).
void attention_backward(float* dq, float* dk, float* dv, const bf16* dout, const float* att, const bf16* q, const bf16* k,
                        const bf16* v, int B, int Tq, int Tk, int q0, int H, int KH, int D, cudaStream_t stream);

// out[N,C] = wte[tokens[n]] (+ wpe[pos0 + n % T]; wpe may be null); N = B·T
void embedding_forward(bf16* out, const int* tokens, const bf16* wte, const bf16* wpe, int N, int Tn, int C, int pos0,
                       cudaStream_t stream);
// dwte[V,C] +=, dwpe[T,C] += (dwpe may be null)
void embedding_backward(float* dwte, float* dwpe, const bf16* dout, const int* tokens, int N, int Tn, int C, int pos0,
                        cudaStream_t stream);

// losses[N] = -log softmax(logits[N,V])[target]; when dlogits is not null it is overwritten
// with (softmax - onehot) * scale.
void crossentropy_forward_backward(bf16* dlogits, float* losses, const bf16* logits, const int* targets, int N, int V, float scale,
                                   cudaStream_t stream);

// db[OC] += Σ_n dout[n, OC] (the bias gradient of a GEMM, whose input gradients cuBLASLt makes);
// deterministic (fixed summation order)
void bias_backward(float* db, const bf16* dout, int N, int OC, cudaStream_t stream);

// x[n] += y[n]
void add_inplace(bf16* x, const bf16* y, std::int64_t n, cudaStream_t stream);
// Conversions between the fp32 master copies / host-staged tensors and bf16.
void to_bf16(bf16* out, const float* in, std::int64_t n, cudaStream_t stream);
void to_float(float* out, const bf16* in, std::int64_t n, cudaStream_t stream);

// AdamW on n elements (step counts from 1), as model::adamw_update: fp32 value, grad, m, v.
struct AdamWArgs {
  float lr, beta1, beta2, eps, weight_decay;
  int step;
  bool decay;
};
void adamw_update(float* value, const float* grad, float* m, float* v, std::int64_t n, const AdamWArgs& a, cudaStream_t stream);
// *sum += Σ x[i]² (fp32 accumulation per block, one atomic per block) — gradient norm.
void sum_squares(float* sum, const float* x, std::int64_t n, cudaStream_t stream);

}  // namespace het::cuda
