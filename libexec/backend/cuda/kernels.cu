// The CUDA backend's layer kernels (kernels.hpp). Written for clarity first: one thread block
// per row for the norms, cross-entropy and attention, grid-stride loops for elementwise ops.
#include "backend/cuda/kernels.hpp"

#include <cmath>
#include <string>

#include "backend/cuda/device.hpp"

namespace het::cuda {

namespace {

constexpr int kThreads = 256;  // every block-reducing kernel runs 256 threads
constexpr int kWarps = kThreads / 32;
constexpr int kMaxHeadDim = 256;  // the attention kernels keep a query row in shared memory
constexpr float kEps = 1e-5f;
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)

__device__ float load(const bf16* p, std::int64_t i) { return __bfloat162float(p[i]); }
__device__ float load(const float* p, std::int64_t i) { return p[i]; }
__device__ void store(bf16* p, std::int64_t i, float x) { p[i] = __float2bfloat16(x); }
__device__ void store(float* p, std::int64_t i, float x) { p[i] = x; }

__device__ float warp_sum(float x) {
  for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ float warp_max(float x) {
  for (int o = 16; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
// Sum (or max) over a block of kThreads threads; every thread gets the result.
template <bool Max>
__device__ float block_reduce(float x) {
  __shared__ float partial[kWarps];
  __shared__ float result;
  x = Max ? warp_max(x) : warp_sum(x);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = x;
  __syncthreads();
  if (threadIdx.x < 32) {
    float y = threadIdx.x < kWarps ? partial[threadIdx.x] : (Max ? -INFINITY : 0.f);
    y = Max ? warp_max(y) : warp_sum(y);
    if (threadIdx.x == 0) result = y;
  }
  __syncthreads();
  const float r = result;
  __syncthreads();  // `result` and `partial` may be reused by the next call
  return r;
}
__device__ float block_sum(float x) { return block_reduce<false>(x); }
__device__ float block_max(float x) { return block_reduce<true>(x); }

int blocks_for(std::int64_t n) {
  const std::int64_t b = (n + kThreads - 1) / kThreads;
  return int(b < 65535 * 16 ? (b > 0 ? b : 1) : 65535 * 16);
}

// ---- LayerNorm: one block per row -----------------------------------------------------
__global__ void layernorm_forward_kernel(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* w, const bf16* b, int C) {
  const std::int64_t row = blockIdx.x;
  const bf16* x = inp + row * C;
  float s = 0;
  for (int c = threadIdx.x; c < C; c += kThreads) s += load(x, c);
  const float m = block_sum(s) / C;
  float v = 0;
  for (int c = threadIdx.x; c < C; c += kThreads) v += (load(x, c) - m) * (load(x, c) - m);
  const float r = rsqrtf(block_sum(v) / C + kEps);
  for (int c = threadIdx.x; c < C; c += kThreads) store(out, row * C + c, (load(x, c) - m) * r * load(w, c) + load(b, c));
  if (threadIdx.x == 0) mean[row] = m, rstd[row] = r;
}

// dinp only; dw, db come from norm_param_grad_kernel.
__global__ void layernorm_backward_kernel(bf16* dinp, const bf16* dout, const bf16* inp, const bf16* w, const float* mean,
                                          const float* rstd, int C) {
  const std::int64_t row = blockIdx.x;
  const bf16* x = inp + row * C;
  const bf16* d = dout + row * C;
  const float m = mean[row], r = rstd[row];
  float a = 0, bsum = 0;  // Σ dnorm, Σ dnorm·norm
  for (int c = threadIdx.x; c < C; c += kThreads) {
    const float norm = (load(x, c) - m) * r, dnorm = load(w, c) * load(d, c);
    a += dnorm, bsum += dnorm * norm;
  }
  const float dnorm_mean = block_sum(a) / C, dnorm_norm_mean = block_sum(bsum) / C;
  for (int c = threadIdx.x; c < C; c += kThreads) {
    const float norm = (load(x, c) - m) * r, dnorm = load(w, c) * load(d, c);
    store(dinp, row * C + c, load(dinp, row * C + c) + (dnorm - dnorm_mean - norm * dnorm_norm_mean) * r);
  }
}

// ---- RMSNorm: one block per row -------------------------------------------------------
__global__ void rmsnorm_forward_kernel(bf16* out, float* rstd, const bf16* inp, const bf16* w, int C) {
  const std::int64_t row = blockIdx.x;
  const bf16* x = inp + row * C;
  float ss = 0;
  for (int c = threadIdx.x; c < C; c += kThreads) ss += load(x, c) * load(x, c);
  const float r = rsqrtf(block_sum(ss) / C + kEps);
  for (int c = threadIdx.x; c < C; c += kThreads) store(out, row * C + c, load(x, c) * r * load(w, c));
  if (threadIdx.x == 0) rstd[row] = r;
}

// dinp only; dw comes from norm_param_grad_kernel.
__global__ void rmsnorm_backward_kernel(bf16* dinp, const bf16* dout, const bf16* inp, const bf16* w, const float* rstd, int C) {
  const std::int64_t row = blockIdx.x;
  const bf16* x = inp + row * C;
  const bf16* d = dout + row * C;
  const float r = rstd[row];
  float dot = 0;  // Σ_c d_c w_c x_c
  for (int c = threadIdx.x; c < C; c += kThreads) dot += load(d, c) * load(w, c) * load(x, c);
  dot = block_sum(dot);
  for (int c = threadIdx.x; c < C; c += kThreads)
    store(dinp, row * C + c, load(dinp, row * C + c) + r * (load(d, c) * load(w, c) - load(x, c) * r * r * dot / C));
}

// The norms' parameter gradients, column sums over the rows: dw[c] += Σ_n norm[n,c]·dout[n,c]
// with norm = (inp - mean[n]) · rstd[n] (mean null: RMSNorm, inp · rstd), db[c] += Σ_n dout[n,c]
// (db may be null). A block per 32 columns, lane = column, warp w takes rows w, w + kWarps, ...;
// the warps' sums are added in a fixed order (deterministic, no atomics).
__global__ void norm_param_grad_kernel(float* dw, float* db, const bf16* dout, const bf16* inp, const float* mean, const float* rstd,
                                       int N, int C) {
  __shared__ float pw[kWarps][32], pb[kWarps][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, c = blockIdx.x * 32 + lane;
  float sw = 0, sb = 0;
  if (c < C)
    for (int n = warp; n < N; n += kWarps) {
      const std::int64_t i = std::int64_t(n) * C + c;
      const float d = load(dout, i), norm = (load(inp, i) - (mean ? mean[n] : 0.f)) * rstd[n];
      sw += norm * d, sb += d;
    }
  pw[warp][lane] = sw, pb[warp][lane] = sb;
  __syncthreads();
  if (warp == 0 && c < C) {
    float tw = 0, tb = 0;
    for (int w = 0; w < kWarps; ++w) tw += pw[w][lane], tb += pb[w][lane];
    dw[c] += tw;
    if (db) db[c] += tb;
  }
}

// ---- elementwise ----------------------------------------------------------------------
#define HET_GRID_STRIDE(i, n) \
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < (n); i += std::int64_t(gridDim.x) * blockDim.x)

__global__ void gelu_forward_kernel(bf16* out, const bf16* inp, std::int64_t n) {
  HET_GRID_STRIDE(i, n) {
    const float x = load(inp, i);
    store(out, i, 0.5f * x * (1 + tanhf(kGeluScale * (x + 0.044715f * x * x * x))));
  }
}
__global__ void gelu_backward_kernel(bf16* dinp, const bf16* inp, const bf16* dout, std::int64_t n) {
  HET_GRID_STRIDE(i, n) {
    const float x = load(inp, i);
    const float th = tanhf(kGeluScale * (x + 0.044715f * x * x * x));
    const float grad = 0.5f * (1 + th) + 0.5f * x * (1 - th * th) * kGeluScale * (1 + 3 * 0.044715f * x * x);
    store(dinp, i, grad * load(dout, i));
  }
}
__global__ void swiglu_forward_kernel(bf16* out, const bf16* gate, const bf16* up, std::int64_t n) {
  HET_GRID_STRIDE(i, n) {
    const float g = load(gate, i), sig = 1 / (1 + expf(-g));
    store(out, i, g * sig * load(up, i));
  }
}
__global__ void swiglu_backward_kernel(bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate, const bf16* up, std::int64_t n) {
  HET_GRID_STRIDE(i, n) {
    const float g = load(gate, i), sig = 1 / (1 + expf(-g)), d = load(dout, i);
    store(dup, i, g * sig * d);
    store(dgate, i, load(up, i) * d * sig * (1 + g * (1 - sig)));
  }
}

// One thread per rotated pair: x[(b,t,h), 2i], x[(b,t,h), 2i+1].
template <class T>
__global__ void rope_kernel(T* x, std::int64_t pairs, int Tn, int H, int D, int pos0, float sign) {
  HET_GRID_STRIDE(p, pairs) {
    const int i = int(p % (D / 2));
    const std::int64_t row = p / (D / 2);  // (b·T + t)·H + h
    const int t = int((row / H) % Tn);
    // the angle in double precision, as ops.cpp: positions times small frequencies lose bits in fp32
    const double angle = sign * double(pos0 + t) * pow(10000.0, -2.0 * i / D);
    const float c = float(cos(angle)), s = float(sin(angle));
    const std::int64_t at = row * D + 2 * i;
    const float a = load(x, at), b = load(x, at + 1);
    store(x, at, a * c - b * s);
    store(x, at + 1, a * s + b * c);
  }
}

// ---- attention: one block per query row (b, h, t) ---------------------------------------
// Scores for the visible keys in shared memory (Tk floats), one warp per key with the lanes
// over the head dimension (k and v rows read coalesced); then the softmax; then
// out = Σ_s a_s v_s with the block's threads split into kThreads / D parts over the keys,
// whose partial sums are added in a fixed order (results do not depend on timing).
__global__ void attention_forward_kernel(bf16* out, float* att, const bf16* q, const bf16* k, const bf16* v, int Tq, int Tk, int q0,
                                         int H, int KH, int D, float scale) {
  extern __shared__ float score[];  // [Tk]
  __shared__ float qs[kMaxHeadDim];
  __shared__ float partial_out[kThreads];  // [parts, D]
  const int t = blockIdx.x, h = blockIdx.y, b = blockIdx.z, kh = h / (H / KH);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int visible = min(Tk, q0 + t + 1);
  const std::int64_t qrow = ((std::int64_t(b) * Tq + t) * H + h) * D;
  auto krow = [&](int s) { return ((std::int64_t(b) * Tk + s) * KH + kh) * D; };
  for (int d = threadIdx.x; d < D; d += kThreads) qs[d] = load(q, qrow + d);
  __syncthreads();
  float mx = -INFINITY;
  for (int s = warp; s < visible; s += kWarps) {  // uniform within a warp: the shuffles see all lanes
    float dot = 0;
    for (int d = lane; d < D; d += 32) dot += qs[d] * load(k, krow(s) + d);
    dot = warp_sum(dot) * scale;  // every lane holds it
    if (lane == 0) score[s] = dot;
    mx = fmaxf(mx, dot);
  }
  mx = block_max(mx);  // its barriers also publish score[] to the whole block
  float sum = 0;
  for (int s = threadIdx.x; s < visible; s += kThreads) sum += (score[s] = expf(score[s] - mx));
  sum = block_sum(sum);  // and these publish the exponentials
  float* a = att + ((std::int64_t(b) * H + h) * Tq + t) * Tk;
  for (int s = threadIdx.x; s < Tk; s += kThreads) a[s] = s < visible ? (score[s] /= sum) : 0.f;
  __syncthreads();
  const int parts = kThreads / D, part = threadIdx.x / D, dd = threadIdx.x % D;  // threadIdx.x = part·D + dd
  if (part < parts) {
    float o = 0;
    for (int s = part; s < visible; s += parts) o += score[s] * load(v, krow(s) + dd);
    partial_out[threadIdx.x] = o;
  }
  __syncthreads();
  for (int d = threadIdx.x; d < D; d += kThreads) {
    float o = 0;
    for (int p = 0; p < parts; ++p) o += partial_out[p * D + d];
    store(out, qrow + d, o);
  }
}

// datt_s = dout·v_s; dpre_s = a_s (datt_s - Σ_r a_r datt_r) · scale; dq += Σ_s dpre_s k_s;
// dk_s += dpre_s q; dv_s += a_s dout. Warps over keys as in the forward; the dk, dv atomics of
// one key are issued by one warp over consecutive addresses.
__global__ void attention_backward_kernel(float* dq, float* dk, float* dv, const bf16* dout, const float* att, const bf16* q,
                                          const bf16* k, const bf16* v, int Tq, int Tk, int q0, int H, int KH, int D, float scale) {
  extern __shared__ float dpre[];  // [Tk]
  __shared__ float ds[kMaxHeadDim], qs[kMaxHeadDim];
  __shared__ float partial_dq[kThreads];  // [parts, D]
  const int t = blockIdx.x, h = blockIdx.y, b = blockIdx.z, kh = h / (H / KH);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int visible = min(Tk, q0 + t + 1);
  const std::int64_t qrow = ((std::int64_t(b) * Tq + t) * H + h) * D;
  auto krow = [&](int s) { return ((std::int64_t(b) * Tk + s) * KH + kh) * D; };
  const float* a = att + ((std::int64_t(b) * H + h) * Tq + t) * Tk;
  for (int d = threadIdx.x; d < D; d += kThreads) ds[d] = load(dout, qrow + d), qs[d] = load(q, qrow + d);
  __syncthreads();
  float inner = 0;  // Σ a_s datt_s over this warp's keys, held by lane 0
  for (int s = warp; s < visible; s += kWarps) {
    const float as = a[s];
    float dot = 0;
    for (int d = lane; d < D; d += 32) {
      dot += ds[d] * load(v, krow(s) + d);
      atomicAdd(dv + krow(s) + d, as * ds[d]);
    }
    dot = warp_sum(dot);
    if (lane == 0) dpre[s] = dot, inner += as * dot;
  }
  inner = block_sum(inner);  // its barriers also publish dpre[]
  for (int s = threadIdx.x; s < visible; s += kThreads) dpre[s] = a[s] * (dpre[s] - inner) * scale;
  __syncthreads();
  for (int s = warp; s < visible; s += kWarps) {
    const float p = dpre[s];
    for (int d = lane; d < D; d += 32) atomicAdd(dk + krow(s) + d, p * qs[d]);
  }
  const int parts = kThreads / D, part = threadIdx.x / D, dd = threadIdx.x % D;  // threadIdx.x = part·D + dd
  if (part < parts) {
    float g = 0;
    for (int s = part; s < visible; s += parts) g += dpre[s] * load(k, krow(s) + dd);
    partial_dq[threadIdx.x] = g;
  }
  __syncthreads();
  for (int d = threadIdx.x; d < D; d += kThreads) {
    float g = 0;
    for (int p = 0; p < parts; ++p) g += partial_dq[p * D + d];
    dq[qrow + d] += g;  // one block owns the row: no atomics
  }
}

// ---- embedding ------------------------------------------------------------------------
__global__ void embedding_forward_kernel(bf16* out, const int* tokens, const bf16* wte, const bf16* wpe, std::int64_t n, int Tn,
                                         int C, int pos0) {
  HET_GRID_STRIDE(i, n) {
    const std::int64_t row = i / C;
    const int c = int(i % C);
    float x = load(wte, std::int64_t(tokens[row]) * C + c);
    if (wpe) x += load(wpe, std::int64_t(pos0 + row % Tn) * C + c);
    store(out, i, x);
  }
}
__global__ void embedding_backward_kernel(float* dwte, float* dwpe, const bf16* dout, const int* tokens, std::int64_t n, int Tn,
                                          int C, int pos0) {
  HET_GRID_STRIDE(i, n) {
    const std::int64_t row = i / C;
    const int c = int(i % C);
    const float d = load(dout, i);
    atomicAdd(dwte + std::int64_t(tokens[row]) * C + c, d);
    if (dwpe) atomicAdd(dwpe + std::int64_t(pos0 + row % Tn) * C + c, d);
  }
}

// ---- cross-entropy: one block per row --------------------------------------------------
__global__ void crossentropy_kernel(bf16* dlogits, float* losses, const bf16* logits, const int* targets, int V, float scale) {
  const std::int64_t row = blockIdx.x;
  const bf16* l = logits + row * V;
  float mx = -INFINITY;
  for (int i = threadIdx.x; i < V; i += kThreads) mx = fmaxf(mx, load(l, i));
  mx = block_max(mx);
  float sum = 0;
  for (int i = threadIdx.x; i < V; i += kThreads) sum += expf(load(l, i) - mx);
  sum = block_sum(sum);
  const int target = targets[row];
  if (threadIdx.x == 0) losses[row] = -(load(l, target) - mx - logf(sum));
  if (dlogits)
    for (int i = threadIdx.x; i < V; i += kThreads)
      store(dlogits, row * V + i, (expf(load(l, i) - mx) / sum - (i == target ? 1.f : 0.f)) * scale);
}

// A block per 32 output columns: lane = column, warp w sums rows w, w + kWarps, ... (coalesced
// 64-byte reads per warp), then the warps' sums are added in a fixed order.
__global__ void bias_backward_kernel(float* db, const bf16* dout, int N, int OC) {
  __shared__ float partial[kWarps][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, oc = blockIdx.x * 32 + lane;
  float s = 0;
  if (oc < OC)
    for (int n = warp; n < N; n += kWarps) s += load(dout, std::int64_t(n) * OC + oc);
  partial[warp][lane] = s;
  __syncthreads();
  if (warp == 0 && oc < OC) {
    float total = 0;
    for (int w = 0; w < kWarps; ++w) total += partial[w][lane];
    db[oc] += total;
  }
}

__global__ void add_inplace_kernel(bf16* x, const bf16* y, std::int64_t n) {
  HET_GRID_STRIDE(i, n) store(x, i, load(x, i) + load(y, i));
}
__global__ void to_bf16_kernel(bf16* out, const float* in, std::int64_t n) {
  HET_GRID_STRIDE(i, n) store(out, i, in[i]);
}
__global__ void to_float_kernel(float* out, const bf16* in, std::int64_t n) {
  HET_GRID_STRIDE(i, n) out[i] = load(in, i);
}

__global__ void adamw_kernel(float* value, const float* grad, float* mom1, float* mom2, std::int64_t n, AdamWArgs o, float c1,
                             float c2) {
  HET_GRID_STRIDE(i, n) {
    const float g = grad[i];
    const float m = o.beta1 * mom1[i] + (1 - o.beta1) * g;
    const float v = o.beta2 * mom2[i] + (1 - o.beta2) * g * g;
    mom1[i] = m, mom2[i] = v;
    const float update = (m / c1) / (sqrtf(v / c2) + o.eps) + (o.decay ? o.weight_decay * value[i] : 0.f);
    value[i] -= o.lr * update;
  }
}

__global__ void sum_squares_kernel(float* sum, const float* x, std::int64_t n) {
  float s = 0;
  HET_GRID_STRIDE(i, n) s += x[i] * x[i];
  s = block_sum(s);
  if (threadIdx.x == 0) atomicAdd(sum, s);
}

}  // namespace

void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* w, const bf16* b, int N, int C,
                       cudaStream_t stream) {
  if (N > 0) layernorm_forward_kernel<<<N, kThreads, 0, stream>>>(out, mean, rstd, inp, w, b, C);
}
void layernorm_backward(bf16* dinp, float* dw, float* db, const bf16* dout, const bf16* inp, const bf16* w, const float* mean,
                        const float* rstd, int N, int C, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  layernorm_backward_kernel<<<N, kThreads, 0, stream>>>(dinp, dout, inp, w, mean, rstd, C);
  norm_param_grad_kernel<<<(C + 31) / 32, kThreads, 0, stream>>>(dw, db, dout, inp, mean, rstd, N, C);
}
void rmsnorm_forward(bf16* out, float* rstd, const bf16* inp, const bf16* w, int N, int C, cudaStream_t stream) {
  if (N > 0) rmsnorm_forward_kernel<<<N, kThreads, 0, stream>>>(out, rstd, inp, w, C);
}
void rmsnorm_backward(bf16* dinp, float* dw, const bf16* dout, const bf16* inp, const bf16* w, const float* rstd, int N, int C,
                      cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  rmsnorm_backward_kernel<<<N, kThreads, 0, stream>>>(dinp, dout, inp, w, rstd, C);
  norm_param_grad_kernel<<<(C + 31) / 32, kThreads, 0, stream>>>(dw, nullptr, dout, inp, nullptr, rstd, N, C);
}
void gelu_forward(bf16* out, const bf16* inp, std::int64_t n, cudaStream_t stream) {
  gelu_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, inp, n);
}
void gelu_backward(bf16* dinp, const bf16* inp, const bf16* dout, std::int64_t n, cudaStream_t stream) {
  gelu_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dinp, inp, dout, n);
}
void swiglu_forward(bf16* out, const bf16* gate, const bf16* up, std::int64_t n, cudaStream_t stream) {
  swiglu_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, gate, up, n);
}
void swiglu_backward(bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate, const bf16* up, std::int64_t n,
                     cudaStream_t stream) {
  swiglu_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dgate, dup, dout, gate, up, n);
}
template <class T>
void rope_forward(T* x, int B, int Tn, int H, int D, int pos0, cudaStream_t stream) {
  const std::int64_t pairs = std::int64_t(B) * Tn * H * (D / 2);
  rope_kernel<<<blocks_for(pairs), kThreads, 0, stream>>>(x, pairs, Tn, H, D, pos0, 1.f);
}
template <class T>
void rope_backward(T* dx, int B, int Tn, int H, int D, int pos0, cudaStream_t stream) {
  const std::int64_t pairs = std::int64_t(B) * Tn * H * (D / 2);
  rope_kernel<<<blocks_for(pairs), kThreads, 0, stream>>>(dx, pairs, Tn, H, D, pos0, -1.f);  // orthogonal: transpose = inverse
}
template void rope_forward<bf16>(bf16*, int, int, int, int, int, cudaStream_t);
template void rope_forward<float>(float*, int, int, int, int, int, cudaStream_t);
template void rope_backward<bf16>(bf16*, int, int, int, int, int, cudaStream_t);
template void rope_backward<float>(float*, int, int, int, int, int, cudaStream_t);

namespace {
// The shared memory one attention block needs: Tk fp32 scores (dynamic) plus the kernel's
// static arrays. Above the 48 KiB every kernel may use, the kernel must opt in, up to the
// device's per-block maximum; beyond that the sequence is refused with a sentence.
template <class Kernel>
std::size_t attention_shared(Kernel kernel, int B, int Tk, int H, int KH, int D, const char* what) {
  if (B > 65535 || H > 65535)  // gridDim.y = H, gridDim.z = B
    throw CudaError(std::string(what) + ": the CUDA attention kernel launches one block per (query, head, sequence) and takes at most "
                    "65535 heads and sequences (got H = " + std::to_string(H) + ", B = " + std::to_string(B) + ")");
  if (D > kMaxHeadDim || D < 1 || KH < 1 || H % KH != 0)
    throw CudaError(std::string(what) + ": the CUDA attention kernel takes head dimensions 1.." + std::to_string(kMaxHeadDim) +
                    " and query heads a multiple of the key/value heads (got D = " + std::to_string(D) + ", H = " + std::to_string(H) +
                    ", KH = " + std::to_string(KH) + ")");
  cudaFuncAttributes attr{};
  check(cudaFuncGetAttributes(&attr, kernel), what);
  const std::size_t dynamic = std::size_t(Tk) * sizeof(float), total = dynamic + attr.sharedSizeBytes;
  if (total > 48 * 1024) {
    int device = 0, optin = 0;
    check(cudaGetDevice(&device), what);
    check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), what);
    if (total > std::size_t(optin))
      throw CudaError(std::string(what) + ": the CUDA attention kernel keeps a row of " + std::to_string(Tk) +
                      " fp32 scores in shared memory, " + std::to_string(total) + " bytes, and this device allows " +
                      std::to_string(optin) + " per block; the sequence is too long for it");
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(dynamic)), what);
  }
  return dynamic;
}
}  // namespace

void attention_forward(bf16* out, float* att, const bf16* q, const bf16* k, const bf16* v, int B, int Tq, int Tk, int q0, int H,
                       int KH, int D, cudaStream_t stream) {
  if (B == 0 || Tq == 0) return;
  const std::size_t shared = attention_shared(attention_forward_kernel, B, Tk, H, KH, D, "the attention forward");
  attention_forward_kernel<<<dim3(Tq, H, B), kThreads, shared, stream>>>(out, att, q, k, v, Tq, Tk, q0, H, KH, D,
                                                                         1.f / sqrtf(float(D)));
}
void attention_backward(float* dq, float* dk, float* dv, const bf16* dout, const float* att, const bf16* q, const bf16* k,
                        const bf16* v, int B, int Tq, int Tk, int q0, int H, int KH, int D, cudaStream_t stream) {
  if (B == 0 || Tq == 0) return;
  const std::size_t shared = attention_shared(attention_backward_kernel, B, Tk, H, KH, D, "the attention backward");
  attention_backward_kernel<<<dim3(Tq, H, B), kThreads, shared, stream>>>(dq, dk, dv, dout, att, q, k, v, Tq, Tk, q0, H, KH, D,
                                                                          1.f / sqrtf(float(D)));
}
void embedding_forward(bf16* out, const int* tokens, const bf16* wte, const bf16* wpe, int N, int Tn, int C, int pos0,
                       cudaStream_t stream) {
  const std::int64_t n = std::int64_t(N) * C;
  embedding_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, tokens, wte, wpe, n, Tn, C, pos0);
}
void embedding_backward(float* dwte, float* dwpe, const bf16* dout, const int* tokens, int N, int Tn, int C, int pos0,
                        cudaStream_t stream) {
  const std::int64_t n = std::int64_t(N) * C;
  embedding_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dwte, dwpe, dout, tokens, n, Tn, C, pos0);
}
void crossentropy_forward_backward(bf16* dlogits, float* losses, const bf16* logits, const int* targets, int N, int V, float scale,
                                   cudaStream_t stream) {
  if (N > 0) crossentropy_kernel<<<N, kThreads, 0, stream>>>(dlogits, losses, logits, targets, V, scale);
}
void bias_backward(float* db, const bf16* dout, int N, int OC, cudaStream_t stream) {
  if (OC > 0) bias_backward_kernel<<<(OC + 31) / 32, kThreads, 0, stream>>>(db, dout, N, OC);
}
void add_inplace(bf16* x, const bf16* y, std::int64_t n, cudaStream_t stream) {
  add_inplace_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, y, n);
}
void to_bf16(bf16* out, const float* in, std::int64_t n, cudaStream_t stream) {
  to_bf16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, in, n);
}
void to_float(float* out, const bf16* in, std::int64_t n, cudaStream_t stream) {
  to_float_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, in, n);
}
void adamw_update(float* value, const float* grad, float* m, float* v, std::int64_t n, const AdamWArgs& a, cudaStream_t stream) {
  const float c1 = float(1 - std::pow(double(a.beta1), a.step)), c2 = float(1 - std::pow(double(a.beta2), a.step));
  adamw_kernel<<<blocks_for(n), kThreads, 0, stream>>>(value, grad, m, v, n, a, c1, c2);
}
void sum_squares(float* sum, const float* x, std::int64_t n, cudaStream_t stream) {
  sum_squares_kernel<<<blocks_for(n), kThreads, 0, stream>>>(sum, x, n);
}

}  // namespace het::cuda
