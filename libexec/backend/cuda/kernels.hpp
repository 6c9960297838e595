#pragma once
// Layer kernels of the CUDA backend, each a forward/backward pair mirroring model/ops.hpp
// (llm.c style; same shape letters: N = rows (B·T), C channels, OC output channels, B batch,
// T time, H query heads, KH key/value heads, D head dimension, V vocabulary).
// Storage: activations bf16 (`bf16`), statistics and parameter gradients fp32; every kernel
// computes in fp32. Every function only enqueues work on `stream` and returns at once; a
// launch error shows at the next check_launch (device.hpp) — a stream synchronisation does not
// report a launch that never started — never as an abort. fp32 atomics make the embedding's
// gradients and sum_squares vary in their last bits between runs; every other kernel (attention's
// included) is deterministic.
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

// Causal grouped-query attention, FlashAttention-2 style (Dao 2023): q[B,Tq,H,D],
// k,v[B,Tk,KH,D] -> out[B,Tq,H,D] (bf16, overwritten); query t at position q0 + t sees keys
// s <= q0 + t (and s < Tk); query head h reads kv head h / (H/KH); scale 1/sqrt(D).
// lse[B,H,Tq] (fp32, overwritten) keeps each query row's log Σ_s exp(score_s) for the backward
// (-inf for a row that sees no key, whose out is 0) — O(B·H·T) instead of the B·H·T² matrix of
// probabilities (64 KiB rather than 512 MiB per layer at B 1, H 32, T 2048).
// Tiles of 32 queries × 32 keys in shared memory (bf16, as in global memory), fp32 scores and
// online softmax on CUDA cores (no tensor cores), 128 threads per block; instances for head
// dimensions up to 64, 128 and 256 (D is a runtime value, picked at launch). The forward runs
// a block per (query tile, head, sequence); shared memory ~12 KiB (D <= 64), ~24 KiB (<= 128),
// ~48 KiB (<= 256).
void attention_forward(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, int B, int Tq, int Tk, int q0, int H,
                       int KH, int D, cudaStream_t stream);
// dq[B,Tq,H,D] +=, dk, dv[B,Tk,KH,D] += (fp32, ACCUMULATED), given dout and out[B,Tq,H,D] (bf16)
// and lse from the forward with the same arguments. Probabilities are recomputed tile by tile
// (p = exp(score - lse)); delta = rowsum(dout ∘ out); ds = p ∘ (dout·vᵀ - delta). Two kernels,
// no atomics, deterministic: a block per (key tile, kv head, sequence) loops over the query
// heads of its group and the query tiles that see the tile, accumulates its dk, dv rows in
// shared memory and adds them once at the end (~42 KiB of shared memory for D <= 64, ~74 KiB
// for <= 128, ~138 KiB for <= 256); then a block per (query tile, head, sequence) recomputes ds
// over the key tiles its rows see and adds dq (~17, ~33, ~65 KiB). The recomputation costs two
// extra products (7 instead of 5 T²·D products) for the determinism and the absence of atomics.
// Known limits (both passes throw a CudaError with a sentence before enqueueing anything):
// D in 1..256, H a multiple of KH, H and B at most 65535, and the shared memory above within
// the device's opt-in limit per block (D <= 256 fits H100 and A100; devices with ~99 KiB per
// block, e.g. sm_86/sm_89, take D <= 128 in the backward). Any sequence length. Not tuned:
// fp32 CUDA-core math, roughly an order of magnitude below a tensor-core flash kernel.
void attention_backward(float* dq, float* dk, float* dv, const bf16* dout, const bf16* out, const float* lse, const bf16* q,
                        const bf16* k, const bf16* v, int B, int Tq, int Tk, int q0, int H, int KH, int D, cudaStream_t stream);

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
// A parameter's chunk and a bucket's packed floats (runtime/buckets.hpp): element k of the
// chunk is the parameter's element start + (k / run)·stride + k % run, k < n.
struct ElementRuns {
  std::int64_t start, run, stride, n;
};
// packed[k] = param[element k] · weight.
void pack_elements(float* packed, const float* param, const ElementRuns& e, float weight, cudaStream_t stream);
// param[element k] = packed[k].
void unpack_elements(float* param, const float* packed, const ElementRuns& e, cudaStream_t stream);
// *sum += Σ x[i]² (fp32 accumulation per block, one atomic per block) — gradient norm.
void sum_squares(float* sum, const float* x, std::int64_t n, cudaStream_t stream);

}  // namespace het::cuda
