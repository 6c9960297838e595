// The CUDA backend's layer kernels (kernels.hpp). Written for clarity first: one thread block
// per row for the norms and cross-entropy, grid-stride loops for elementwise ops, tiled
// (flash-style) kernels for attention. tests/cuda_emulation compiles this very file as C++ and
// runs its kernels on CPU threads (the [kernels] part of tests/gpu_test.cpp, no GPU needed).
#include "backend/cuda/kernels.hpp"

#include <cmath>
#include <string>

#include "backend/cuda/device.hpp"

// kernel<<<grid, block, shared, stream>>>(...), spelled so that tests/cuda_emulation (which runs
// this file's kernels on CPU threads) can define it otherwise; so is the flash kernels' dynamic
// shared memory.
#ifndef HET_LAUNCH
#define HET_LAUNCH(kernel, grid, block, shared, stream) kernel<<<grid, block, shared, stream>>>
#endif
#ifndef HET_FLASH_SHARED
#define HET_FLASH_SHARED(name) extern __shared__ float4 name[]
#endif

namespace het::cuda {

namespace {

constexpr int kThreads = 256;  // every block-reducing kernel runs 256 threads
constexpr int kWarps = kThreads / 32;
constexpr int kMaxHeadDim = 256;  // the largest attention kernel instance (Dmax = 256)
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

// ---- attention: flash_attention.cuh --------------------------------------------------------
#include "backend/cuda/flash_attention.cuh"

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

// Element k of a chunk is local index start + (k / run)·stride + k % run (runtime::Elements).
__global__ void pack_elements_kernel(float* packed, const float* param, std::int64_t start, std::int64_t run, std::int64_t stride,
                                     std::int64_t n, float weight) {
  HET_GRID_STRIDE(k, n) packed[k] = param[start + (k / run) * stride + k % run] * weight;
}
__global__ void unpack_elements_kernel(float* param, const float* packed, std::int64_t start, std::int64_t run, std::int64_t stride,
                                       std::int64_t n) {
  HET_GRID_STRIDE(k, n) param[start + (k / run) * stride + k % run] = packed[k];
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
  if (N > 0) HET_LAUNCH(layernorm_forward_kernel, N, kThreads, 0, stream)(out, mean, rstd, inp, w, b, C);
}
void layernorm_backward(bf16* dinp, float* dw, float* db, const bf16* dout, const bf16* inp, const bf16* w, const float* mean,
                        const float* rstd, int N, int C, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  HET_LAUNCH(layernorm_backward_kernel, N, kThreads, 0, stream)(dinp, dout, inp, w, mean, rstd, C);
  HET_LAUNCH(norm_param_grad_kernel, (C + 31) / 32, kThreads, 0, stream)(dw, db, dout, inp, mean, rstd, N, C);
}
void rmsnorm_forward(bf16* out, float* rstd, const bf16* inp, const bf16* w, int N, int C, cudaStream_t stream) {
  if (N > 0) HET_LAUNCH(rmsnorm_forward_kernel, N, kThreads, 0, stream)(out, rstd, inp, w, C);
}
void rmsnorm_backward(bf16* dinp, float* dw, const bf16* dout, const bf16* inp, const bf16* w, const float* rstd, int N, int C,
                      cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  HET_LAUNCH(rmsnorm_backward_kernel, N, kThreads, 0, stream)(dinp, dout, inp, w, rstd, C);
  HET_LAUNCH(norm_param_grad_kernel, (C + 31) / 32, kThreads, 0, stream)(dw, nullptr, dout, inp, nullptr, rstd, N, C);
}
void gelu_forward(bf16* out, const bf16* inp, std::int64_t n, cudaStream_t stream) {
  HET_LAUNCH(gelu_forward_kernel, blocks_for(n), kThreads, 0, stream)(out, inp, n);
}
void gelu_backward(bf16* dinp, const bf16* inp, const bf16* dout, std::int64_t n, cudaStream_t stream) {
  HET_LAUNCH(gelu_backward_kernel, blocks_for(n), kThreads, 0, stream)(dinp, inp, dout, n);
}
void swiglu_forward(bf16* out, const bf16* gate, const bf16* up, std::int64_t n, cudaStream_t stream) {
  HET_LAUNCH(swiglu_forward_kernel, blocks_for(n), kThreads, 0, stream)(out, gate, up, n);
}
void swiglu_backward(bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate, const bf16* up, std::int64_t n,
                     cudaStream_t stream) {
  HET_LAUNCH(swiglu_backward_kernel, blocks_for(n), kThreads, 0, stream)(dgate, dup, dout, gate, up, n);
}
template <class T>
void rope_forward(T* x, int B, int Tn, int H, int D, int pos0, cudaStream_t stream) {
  const std::int64_t pairs = std::int64_t(B) * Tn * H * (D / 2);
  HET_LAUNCH(rope_kernel<T>, blocks_for(pairs), kThreads, 0, stream)(x, pairs, Tn, H, D, pos0, 1.f);
}
template <class T>
void rope_backward(T* dx, int B, int Tn, int H, int D, int pos0, cudaStream_t stream) {
  const std::int64_t pairs = std::int64_t(B) * Tn * H * (D / 2);
  HET_LAUNCH(rope_kernel<T>, blocks_for(pairs), kThreads, 0, stream)(dx, pairs, Tn, H, D, pos0, -1.f);  // orthogonal: transpose = inverse
}
template void rope_forward<bf16>(bf16*, int, int, int, int, int, cudaStream_t);
template void rope_forward<float>(float*, int, int, int, int, int, cudaStream_t);
template void rope_backward<bf16>(bf16*, int, int, int, int, int, cudaStream_t);
template void rope_backward<float>(float*, int, int, int, int, int, cudaStream_t);

namespace {
// Checks what one flash-attention launch needs against the limits (grid dimensions, shared
// memory; flash_check_shape did the head dimension and grouping) and opts the kernel in to more than 48 KiB of dynamic
// shared memory where it needs it; throws a CudaError with a sentence instead of enqueueing.
template <class Kernel>
void flash_prepare(Kernel kernel, std::size_t shared, int B, int heads, int H, int D, const char* what) {
  if (B > 65535 || heads > 65535)  // gridDim.y = heads, gridDim.z = B
    throw CudaError(std::string(what) + ": the CUDA attention kernel launches one block per (tile, head, sequence) and takes at most "
                    "65535 heads and sequences (got H = " + std::to_string(H) + ", B = " + std::to_string(B) + ")");
  if (shared > 48 * 1024) {
    int device = 0, optin = 0;
    check(cudaGetDevice(&device), what);
    check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), what);
    if (shared > std::size_t(optin))
      throw CudaError(std::string(what) + ": the CUDA attention kernel for head dimension " + std::to_string(D) + " needs " +
                      std::to_string(shared) + " bytes of shared memory per block and this device allows " + std::to_string(optin) +
                      "; the head dimension is too large for this device");
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared)), what);
  }
}

template <int Dmax>
void flash_forward(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, int B, int Tq, int Tk, int q0, int H, int KH,
                   int D, cudaStream_t stream) {
  constexpr std::size_t shared = flash_forward_shared<Dmax>();
  flash_prepare(flash_forward_kernel<Dmax>, shared, B, H, H, D, "the attention forward");
  const dim3 grid(unsigned((Tq + kBq - 1) / kBq), unsigned(H), unsigned(B));
  HET_LAUNCH(flash_forward_kernel<Dmax>, grid, kFlashThreads, shared, stream)(out, lse, q, k, v, Tq, Tk, q0, H, KH, D, 1.f / sqrtf(float(D)));
}
template <int Dmax>
void flash_backward(float* dq, float* dk, float* dv, const bf16* dout, const bf16* out, const float* lse, const bf16* q, const bf16* k,
                    const bf16* v, int B, int Tq, int Tk, int q0, int H, int KH, int D, cudaStream_t stream) {
  constexpr std::size_t shared = flash_backward_shared<Dmax>(), dq_shared = flash_dq_shared<Dmax>();
  flash_prepare(flash_backward_kernel<Dmax>, shared, B, KH, H, D, "the attention backward");
  flash_prepare(flash_backward_dq_kernel<Dmax>, dq_shared, B, H, H, D, "the attention backward");
  const float scale = 1.f / sqrtf(float(D));
  const dim3 grid(unsigned((Tk + kBk - 1) / kBk), unsigned(KH), unsigned(B));
  HET_LAUNCH(flash_backward_kernel<Dmax>, grid, kFlashThreads, shared, stream)(dk, dv, dout, out, lse, q, k, v, Tq, Tk, q0, H, KH, D, scale);
  const dim3 dq_grid(unsigned((Tq + kBq - 1) / kBq), unsigned(H), unsigned(B));
  HET_LAUNCH(flash_backward_dq_kernel<Dmax>, dq_grid, kFlashThreads, dq_shared, stream)(dq, dout, out, lse, q, k, v, Tq, Tk, q0, H, KH, D, scale);
}
// The argument checks of both passes, before the head dimension picks a kernel.
void flash_check_shape(int H, int KH, int D, const char* what) {
  if (D > kMaxHeadDim || D < 1 || KH < 1 || H % KH != 0)
    throw CudaError(std::string(what) + ": the CUDA attention kernel takes head dimensions 1.." + std::to_string(kMaxHeadDim) +
                    " and query heads a multiple of the key/value heads (got D = " + std::to_string(D) + ", H = " + std::to_string(H) +
                    ", KH = " + std::to_string(KH) + ")");
}
}  // namespace

void attention_forward(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, int B, int Tq, int Tk, int q0, int H,
                       int KH, int D, cudaStream_t stream) {
  flash_check_shape(H, KH, D, "the attention forward");
  if (B == 0 || Tq == 0) return;
  if (D <= 64) flash_forward<64>(out, lse, q, k, v, B, Tq, Tk, q0, H, KH, D, stream);
  else if (D <= 128) flash_forward<128>(out, lse, q, k, v, B, Tq, Tk, q0, H, KH, D, stream);
  else flash_forward<256>(out, lse, q, k, v, B, Tq, Tk, q0, H, KH, D, stream);
}
void attention_backward(float* dq, float* dk, float* dv, const bf16* dout, const bf16* out, const float* lse, const bf16* q,
                        const bf16* k, const bf16* v, int B, int Tq, int Tk, int q0, int H, int KH, int D, cudaStream_t stream) {
  flash_check_shape(H, KH, D, "the attention backward");
  if (B == 0 || Tq == 0 || Tk == 0) return;
  if (D <= 64) flash_backward<64>(dq, dk, dv, dout, out, lse, q, k, v, B, Tq, Tk, q0, H, KH, D, stream);
  else if (D <= 128) flash_backward<128>(dq, dk, dv, dout, out, lse, q, k, v, B, Tq, Tk, q0, H, KH, D, stream);
  else flash_backward<256>(dq, dk, dv, dout, out, lse, q, k, v, B, Tq, Tk, q0, H, KH, D, stream);
}
void embedding_forward(bf16* out, const int* tokens, const bf16* wte, const bf16* wpe, int N, int Tn, int C, int pos0,
                       cudaStream_t stream) {
  const std::int64_t n = std::int64_t(N) * C;
  HET_LAUNCH(embedding_forward_kernel, blocks_for(n), kThreads, 0, stream)(out, tokens, wte, wpe, n, Tn, C, pos0);
}
void embedding_backward(float* dwte, float* dwpe, const bf16* dout, const int* tokens, int N, int Tn, int C, int pos0,
                        cudaStream_t stream) {
  const std::int64_t n = std::int64_t(N) * C;
  HET_LAUNCH(embedding_backward_kernel, blocks_for(n), kThreads, 0, stream)(dwte, dwpe, dout, tokens, n, Tn, C, pos0);
}
void crossentropy_forward_backward(bf16* dlogits, float* losses, const bf16* logits, const int* targets, int N, int V, float scale,
                                   cudaStream_t stream) {
  if (N > 0) HET_LAUNCH(crossentropy_kernel, N, kThreads, 0, stream)(dlogits, losses, logits, targets, V, scale);
}
void bias_backward(float* db, const bf16* dout, int N, int OC, cudaStream_t stream) {
  if (OC > 0) HET_LAUNCH(bias_backward_kernel, (OC + 31) / 32, kThreads, 0, stream)(db, dout, N, OC);
}
void add_inplace(bf16* x, const bf16* y, std::int64_t n, cudaStream_t stream) {
  HET_LAUNCH(add_inplace_kernel, blocks_for(n), kThreads, 0, stream)(x, y, n);
}
void to_bf16(bf16* out, const float* in, std::int64_t n, cudaStream_t stream) {
  HET_LAUNCH(to_bf16_kernel, blocks_for(n), kThreads, 0, stream)(out, in, n);
}
void to_float(float* out, const bf16* in, std::int64_t n, cudaStream_t stream) {
  HET_LAUNCH(to_float_kernel, blocks_for(n), kThreads, 0, stream)(out, in, n);
}
void adamw_update(float* value, const float* grad, float* m, float* v, std::int64_t n, const AdamWArgs& a, cudaStream_t stream) {
  const float c1 = float(1 - std::pow(double(a.beta1), a.step)), c2 = float(1 - std::pow(double(a.beta2), a.step));
  HET_LAUNCH(adamw_kernel, blocks_for(n), kThreads, 0, stream)(value, grad, m, v, n, a, c1, c2);
}
void pack_elements(float* packed, const float* param, const ElementRuns& e, float weight, cudaStream_t stream) {
  if (e.n > 0) HET_LAUNCH(pack_elements_kernel, blocks_for(e.n), kThreads, 0, stream)(packed, param, e.start, e.run, e.stride, e.n, weight);
}
void unpack_elements(float* param, const float* packed, const ElementRuns& e, cudaStream_t stream) {
  if (e.n > 0) HET_LAUNCH(unpack_elements_kernel, blocks_for(e.n), kThreads, 0, stream)(param, packed, e.start, e.run, e.stride, e.n);
}
void sum_squares(float* sum, const float* x, std::int64_t n, cudaStream_t stream) {
  HET_LAUNCH(sum_squares_kernel, blocks_for(n), kThreads, 0, stream)(sum, x, n);
}

}  // namespace het::cuda
