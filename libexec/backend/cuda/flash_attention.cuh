// The flash attention kernels of the CUDA backend (kernels.hpp: attention_forward/backward),
// included by kernels.cu inside its anonymous namespace (tests/cuda_emulation runs kernels.cu,
// this file included, on CPU threads under sanitizers). It
// uses only: threadIdx/blockIdx/blockDim, __syncthreads, __shfl_xor_sync, the bf16 conversions,
// fmaxf/expf/logf, std::int64_t, and HET_FLASH_SHARED(name), which declares the block's dynamic
// shared memory as `float4 name[]` (kernels.cu: extern __shared__; the emulation: a buffer).
#pragma once

// ---- attention: FlashAttention-2 style (Dao 2023), fp32 math on CUDA cores -----------------
// Tiles of kBq queries × kBk keys. q, k, v, dout tiles sit in shared memory as bf16 (what global
// memory holds, so no rounding), rows padded by 2 elements (one bank) against bank conflicts;
// scores, probabilities and every sum are fp32. Threads: kFlashThreads = 128, a quad of 4
// threads per query row (forward, dQ) or per key row (dK, dV); thread `sub` of a quad takes the
// columns d = sub, sub + 4, ... and, for scores, the keys c = sub, sub + 4, ...
constexpr int kBq = 32, kBk = 32, kFlashThreads = 128;
static_assert(kFlashThreads == 4 * kBq && kFlashThreads == 4 * kBk, "a quad of threads per query row and per key row");

__device__ float quad_sum(float x) {  // over the 4 lanes of a quad; every lane of the warp must call
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
__device__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

// Copies rows [row0, row0 + rows) of a [.., Tn, heads, D] tensor at (b, head) into a tile
// [rows][ld] of shared memory, zeros for rows at or past Tn (masked scores multiply them by 0,
// and 0 · garbage could be NaN). Columns D.. of the tile are never read.
__device__ void load_tile(bf16* tile, int ld, const bf16* x, int b, int row0, int rows, int Tn, int heads, int head, int D) {
  for (int i = threadIdx.x; i < rows * D; i += blockDim.x) {
    const int r = i / D, d = i % D, t = row0 + r;
    tile[r * ld + d] = t < Tn ? x[((std::int64_t(b) * Tn + t) * heads + head) * D + d] : __float2bfloat16(0.f);
  }
}

__device__ float dot_rows(const bf16* a, const bf16* b, int D) {
  float s = 0;
  for (int d = 0; d < D; ++d) s += __bfloat162float(a[d]) * __bfloat162float(b[d]);
  return s;
}

// acc[i] += Σ_c w_c · rows[c][sub + 4i] over a tile's kBk rows, where weight w_c is w[c / 4] of
// lane quad0 + c % 4 of this quad (every lane of the warp must call): P·V in the forward, dS·K
// for dQ.
template <int cols>
__device__ void accumulate_rows(float (&acc)[cols], const float* w, const bf16* rows, int ld, int quad0, int sub, int D) {
#pragma unroll
  for (int c = 0; c < kBk; ++c) {
    const float wc = __shfl_sync(0xffffffffu, w[c / 4], quad0 + c % 4);  // row c's weight lives in lane sub = c % 4
    const bf16* row = rows + c * ld;
#pragma unroll
    for (int i = 0; i < cols; ++i)
      if (sub + 4 * i < D) acc[i] += wc * __bfloat162float(row[sub + 4 * i]);
  }
}

// Dynamic shared memory of the kernels below for head dimensions up to Dmax (host and device).
template <int Dmax> __host__ __device__ constexpr int flash_ld() { return Dmax + 2; }
template <int Dmax> constexpr std::size_t flash_forward_shared() {
  return std::size_t(kBq + 2 * kBk) * flash_ld<Dmax>() * sizeof(bf16);  // q, k, v tiles
}
template <int Dmax> constexpr std::size_t flash_dq_shared() {
  return std::size_t(2 * kBq + 2 * kBk) * flash_ld<Dmax>() * sizeof(bf16);  // q, dout, k, v tiles
}
template <int Dmax> __host__ __device__ constexpr int flash_acc_ld() { return Dmax + 4; }  // fp32 rows: quads' lanes on distinct banks
template <int Dmax> constexpr std::size_t flash_backward_shared() {
  return (2 * std::size_t(kBk) * flash_acc_ld<Dmax>()  // dk, dv accumulators
          + 2 * std::size_t(kBq) * (kBk + 1)             // p, ds
          + 2 * std::size_t(kBq)) * sizeof(float)        // lse, delta
         + std::size_t(2 * kBk + 2 * kBq) * flash_ld<Dmax>() * sizeof(bf16);  // k, v, q, dout tiles
}

// A block per (query tile, head h, sequence b). Query row r is held by a quad: running max m,
// running sum l (replicated in the quad's 4 lanes) and Dmax/4 output columns per lane in
// registers. For each key tile: scores s = q·k · scale (masked: -inf), m' = max(m, rowmax s),
// p = exp(s - m'), l = l·exp(m - m') + Σp, o = o·exp(m - m') + p·v. At the end out = o / l in
// bf16 and lse = m + log l (fp32; -inf for a row that sees no key, whose out is 0).
template <int Dmax>
__global__ void __launch_bounds__(kFlashThreads) flash_forward_kernel(bf16* out, float* lse, const bf16* q, const bf16* k,
                                                                      const bf16* v, int Tq, int Tk, int q0, int H, int KH, int D,
                                                                      float scale) {
  constexpr int ld = flash_ld<Dmax>(), cols = Dmax / 4;
  HET_FLASH_SHARED(flash_shared);
  bf16* qs = reinterpret_cast<bf16*>(flash_shared);
  bf16* ks = qs + kBq * ld;
  bf16* vs = ks + kBk * ld;
  const int qstart = blockIdx.x * kBq, h = blockIdx.y, b = blockIdx.z, kh = h / (H / KH);
  const int r = threadIdx.x / 4, sub = threadIdx.x % 4, quad0 = (threadIdx.x % 32) & ~3;
  const int t = qstart + r;  // this quad's query
  const bool row_ok = t < Tq;
  load_tile(qs, ld, q, b, qstart, kBq, Tq, H, h, D);
  float o[cols];
#pragma unroll
  for (int i = 0; i < cols; ++i) o[i] = 0.f;
  float m = -INFINITY, l = 0.f;
  // keys the tile's last query sees: s < q0 + last + 1 (and s < Tk)
  const int keys = max(0, min(Tk, q0 + min(Tq, qstart + kBq)));
  for (int kstart = 0; kstart < keys; kstart += kBk) {  // the same trip count in every thread
    __syncthreads();  // the previous tile's reads of ks, vs are done
    load_tile(ks, ld, k, b, kstart, kBk, Tk, KH, kh, D);
    load_tile(vs, ld, v, b, kstart, kBk, Tk, KH, kh, D);
    __syncthreads();  // qs (first pass), ks, vs visible
    float p[kBk / 4];  // keys c = sub + 4j
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < kBk / 4; ++j) {
      const int s = kstart + sub + 4 * j;
      const bool ok = row_ok && s < Tk && s <= q0 + t;
      p[j] = ok ? dot_rows(qs + r * ld, ks + (sub + 4 * j) * ld, D) * scale : -INFINITY;
      mx = fmaxf(mx, p[j]);
    }
    const float m_new = fmaxf(m, quad_max(mx));
    // m_new = -inf: nothing seen yet (or a row past Tq); p stays 0 and o, l stay 0
    const float alpha = m_new == -INFINITY ? 1.f : expf(m - m_new);  // m = -inf: 0
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < kBk / 4; ++j) {
      p[j] = p[j] == -INFINITY ? 0.f : expf(p[j] - m_new);
      sum += p[j];
    }
    l = l * alpha + quad_sum(sum);
    m = m_new;
#pragma unroll
    for (int i = 0; i < cols; ++i) o[i] *= alpha;
    accumulate_rows(o, p, vs, ld, quad0, sub, D);
  }
  if (row_ok) {
    const float inv = l > 0.f ? 1.f / l : 0.f;
    const std::int64_t row = ((std::int64_t(b) * Tq + t) * H + h) * D;
#pragma unroll
    for (int i = 0; i < cols; ++i)
      if (sub + 4 * i < D) out[row + sub + 4 * i] = __float2bfloat16(o[i] * inv);
    if (sub == 0) lse[(std::int64_t(b) * H + h) * Tq + t] = l > 0.f ? m + logf(l) : -INFINITY;
  }
}

// A block per (key tile, kv head kh, sequence b): it owns rows [kstart, kstart + kBk) of dk and
// dv for kh and loops over the query heads of kh's group and over the query tiles that see the
// tile (from the first query t with q0 + t >= kstart). Per (head, query tile):
//   delta_r = Σ_d dout[r,d]·out[r,d]  (computed here from global memory, a quad per row)
//   p[r,c]  = exp(q_r·k_c·scale - lse_r)  (0 where masked), dp = dout_r·v_c,
//   ds[r,c] = p (dp - delta_r);
//   dv_c += Σ_r p[r,c] dout_r, dk_c += scale Σ_r ds[r,c] q_r  (fp32 in shared memory, each
//   element owned by one thread: no atomics, a fixed order, deterministic);
// dq comes from flash_backward_dq_kernel (below), which recomputes ds by query tile.
template <int Dmax>
__global__ void __launch_bounds__(kFlashThreads) flash_backward_kernel(float* dk, float* dv, const bf16* dout,
                                                                       const bf16* out, const float* lse, const bf16* q, const bf16* k,
                                                                       const bf16* v, int Tq, int Tk, int q0, int H, int KH, int D,
                                                                       float scale) {
  constexpr int ld = flash_ld<Dmax>(), ald = flash_acc_ld<Dmax>(), pld = kBk + 1, cols = Dmax / 4;
  HET_FLASH_SHARED(flash_shared);
  float* dka = reinterpret_cast<float*>(flash_shared);  // [kBk][ald]
  float* dva = dka + kBk * ald;                          // [kBk][ald]
  float* ps = dva + kBk * ald;                           // [kBq][pld]
  float* dss = ps + kBq * pld;                           // [kBq][pld]
  float* lse_s = dss + kBq * pld;                        // [kBq]
  float* delta_s = lse_s + kBq;                          // [kBq]
  bf16* ks = reinterpret_cast<bf16*>(delta_s + kBq);     // [kBk][ld]
  bf16* vs = ks + kBk * ld;
  bf16* qs = vs + kBk * ld;  // [kBq][ld]
  bf16* dos = qs + kBq * ld;
  const int kstart = blockIdx.x * kBk, kh = blockIdx.y, b = blockIdx.z, group = H / KH;
  const int r = threadIdx.x / 4, sub = threadIdx.x % 4;  // r: a query row (p, ds, dq) or a key row (dk, dv)
  // dk, dv accumulators: thread (r, sub) owns rows r, columns sub + 4i; only it touches them
#pragma unroll
  for (int i = 0; i < cols; ++i) dka[r * ald + sub + 4 * i] = 0.f, dva[r * ald + sub + 4 * i] = 0.f;
  load_tile(ks, ld, k, b, kstart, kBk, Tk, KH, kh, D);
  load_tile(vs, ld, v, b, kstart, kBk, Tk, KH, kh, D);
  const int first = max(0, kstart - q0);  // the first query that sees key kstart
  for (int h = kh * group; h < (kh + 1) * group; ++h)
    for (int qstart = first / kBq * kBq; qstart < Tq; qstart += kBq) {  // block-uniform bounds
      __syncthreads();  // the previous pass's reads of qs, dos, ps, dss, lse_s, delta_s are done
      load_tile(qs, ld, q, b, qstart, kBq, Tq, H, h, D);
      load_tile(dos, ld, dout, b, qstart, kBq, Tq, H, h, D);
      {
        const int t = qstart + r;
        float dsum = 0.f;
        if (t < Tq) {
          const std::int64_t row = ((std::int64_t(b) * Tq + t) * H + h) * D;
          for (int d = sub; d < D; d += 4) dsum += __bfloat162float(dout[row + d]) * __bfloat162float(out[row + d]);
        }
        dsum = quad_sum(dsum);  // all lanes call it
        if (sub == 0) {
          lse_s[r] = t < Tq ? lse[(std::int64_t(b) * H + h) * Tq + t] : 0.f;
          delta_s[r] = dsum;
        }
      }
      __syncthreads();  // qs, dos, lse_s, delta_s (and, on the first pass, ks, vs) visible
      {
        const int t = qstart + r;
#pragma unroll
        for (int j = 0; j < kBk / 4; ++j) {
          const int c = sub + 4 * j, s = kstart + c;
          float p = 0.f, ds = 0.f;
          if (t < Tq && s < Tk && s <= q0 + t) {
            p = expf(dot_rows(qs + r * ld, ks + c * ld, D) * scale - lse_s[r]);
            ds = p * (dot_rows(dos + r * ld, vs + c * ld, D) - delta_s[r]);
          }
          ps[r * pld + c] = p;
          dss[r * pld + c] = ds;
        }
      }
      __syncthreads();  // ps, dss visible
      {  // dv, dk of key row c = r
        const int c = r;
#pragma unroll 4
        for (int i = 0; i < cols; ++i) {
          const int d = sub + 4 * i;
          if (d >= D) break;
          float av = 0.f, ak = 0.f;
          for (int rr = 0; rr < kBq; ++rr) {
            av += ps[rr * pld + c] * __bfloat162float(dos[rr * ld + d]);
            ak += dss[rr * pld + c] * __bfloat162float(qs[rr * ld + d]);
          }
          dva[c * ald + d] += av;
          dka[c * ald + d] += ak * scale;
        }
      }
    }
  // dk, dv rows of this tile: one block owns them (+=, no atomics); a thread reads only its own
  // accumulators, so no barrier is needed
  const int s = kstart + r;
  if (s < Tk) {
    const std::int64_t row = ((std::int64_t(b) * Tk + s) * KH + kh) * D;
    for (int d = sub; d < D; d += 4) dk[row + d] += dka[r * ald + d], dv[row + d] += dva[r * ald + d];
  }
}

// dq by query tile, without atomics: a block per (query tile, head h, sequence b), a quad per
// query row as in the forward (delta_r and lse_r held in the quad's lanes, dq_r's columns
// sub, sub + 4, ... in registers). For each key tile the row sees: p = exp(q_r·k_c·scale - lse_r),
// ds = p (dout_r·v_c - delta_r), dq_r += scale Σ_c ds[r,c] k_c; added to dq once at the end.
// It recomputes the scores and dout·vᵀ of the dk/dv kernel (two of the backward's five
// products) in exchange for a deterministic dq.
template <int Dmax>
__global__ void __launch_bounds__(kFlashThreads) flash_backward_dq_kernel(float* dq, const bf16* dout, const bf16* out,
                                                                          const float* lse, const bf16* q, const bf16* k, const bf16* v,
                                                                          int Tq, int Tk, int q0, int H, int KH, int D, float scale) {
  constexpr int ld = flash_ld<Dmax>(), cols = Dmax / 4;
  HET_FLASH_SHARED(flash_shared);
  bf16* qs = reinterpret_cast<bf16*>(flash_shared);  // [kBq][ld]
  bf16* dos = qs + kBq * ld;                         // [kBq][ld]
  bf16* ks = dos + kBq * ld;                         // [kBk][ld]
  bf16* vs = ks + kBk * ld;                          // [kBk][ld]
  const int qstart = blockIdx.x * kBq, h = blockIdx.y, b = blockIdx.z, kh = h / (H / KH);
  const int r = threadIdx.x / 4, sub = threadIdx.x % 4, quad0 = (threadIdx.x % 32) & ~3;
  const int t = qstart + r;
  const bool row_ok = t < Tq;
  const std::int64_t row = ((std::int64_t(b) * Tq + (row_ok ? t : 0)) * H + h) * D;
  load_tile(qs, ld, q, b, qstart, kBq, Tq, H, h, D);
  load_tile(dos, ld, dout, b, qstart, kBq, Tq, H, h, D);
  float delta = 0.f;
  if (row_ok)
    for (int d = sub; d < D; d += 4) delta += __bfloat162float(dout[row + d]) * __bfloat162float(out[row + d]);
  delta = quad_sum(delta);  // all lanes call it
  const float row_lse = row_ok ? lse[(std::int64_t(b) * H + h) * Tq + t] : 0.f;
  float acc[cols];
#pragma unroll
  for (int i = 0; i < cols; ++i) acc[i] = 0.f;
  const int keys = max(0, min(Tk, q0 + min(Tq, qstart + kBq)));  // as in the forward
  for (int kstart = 0; kstart < keys; kstart += kBk) {
    __syncthreads();  // the previous tile's reads of ks, vs are done
    load_tile(ks, ld, k, b, kstart, kBk, Tk, KH, kh, D);
    load_tile(vs, ld, v, b, kstart, kBk, Tk, KH, kh, D);
    __syncthreads();  // qs, dos (first pass), ks, vs visible
    float ds[kBk / 4];  // keys c = sub + 4j
#pragma unroll
    for (int j = 0; j < kBk / 4; ++j) {
      const int c = sub + 4 * j, s = kstart + c;
      ds[j] = 0.f;
      if (row_ok && s < Tk && s <= q0 + t) {
        const float p = expf(dot_rows(qs + r * ld, ks + c * ld, D) * scale - row_lse);
        ds[j] = p * (dot_rows(dos + r * ld, vs + c * ld, D) - delta);
      }
    }
    accumulate_rows(acc, ds, ks, ld, quad0, sub, D);
  }
  if (row_ok) {
#pragma unroll
    for (int i = 0; i < cols; ++i)
      if (sub + 4 * i < D) dq[row + sub + 4 * i] += acc[i] * scale;
  }
}
