#pragma once
// The few CUDA features the flash attention kernels (libexec/backend/cuda/flash_attention.cuh)
// use, emulated on the CPU so that their very source runs here: a block is `blockDim.x`
// std::threads, __syncthreads a barrier of the block, __shfl_*_sync a barrier of the warp with
// a slot per lane, the dynamic shared memory a NaN-filled buffer (reading it before writing
// shows), bf16 rounded to nearest even as on the device. Blocks run one after another.
// Not emulated: anything the kernels do not use (atomics, warp divergence rules beyond
// "every lane calls the shuffle", memory coalescing, timing).
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};
struct float4 {
  float x, y, z, w;
};
struct __nv_bfloat16 {
  std::uint16_t bits;
};
using bf16 = __nv_bfloat16;

inline float __bfloat162float(bf16 b) {
  const std::uint32_t x = std::uint32_t(b.bits) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
inline bf16 __float2bfloat16(float f) {
  if (std::isnan(f)) return {0x7fc0};
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return {std::uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16)};
}
inline float fmaxf(float a, float b) { return std::fmax(a, b); }
using std::max;  // CUDA's device min/max of ints
using std::min;
inline float expf(float x) { return std::exp(x); }
inline float logf(float x) { return std::log(x); }

#define __global__
#define __device__
#define __host__
#define __launch_bounds__(n)

namespace emu {
struct Thread {  // what a CUDA thread knows of itself
  dim3 thread, block;
  float4* shared;
  std::barrier<>* block_barrier;
  std::barrier<>* warp_barrier;
  float* warp_slots;
};
inline thread_local Thread self;
inline dim3 block_dim, grid_dim;  // of the launch running now (launches do not overlap)
}  // namespace emu

#define threadIdx (emu::self.thread)
#define blockIdx (emu::self.block)
#define blockDim (emu::block_dim)
#define gridDim (emu::grid_dim)
#define HET_FLASH_SHARED(name) float4* name = emu::self.shared

inline void __syncthreads() { emu::self.block_barrier->arrive_and_wait(); }
inline float __shfl_sync(unsigned, float v, int src_lane) {
  const unsigned lane = threadIdx.x % 32;
  emu::self.warp_slots[lane] = v;
  emu::self.warp_barrier->arrive_and_wait();
  const float r = emu::self.warp_slots[src_lane % 32];
  emu::self.warp_barrier->arrive_and_wait();
  return r;
}
inline float __shfl_xor_sync(unsigned mask, float v, int lane_mask) {
  return __shfl_sync(mask, v, int(threadIdx.x % 32) ^ lane_mask);
}

namespace emu {
// kernel<<<grid, threads, shared>>>(): f() runs as every thread of every block.
template <class F>
void launch(dim3 grid, int threads, std::size_t shared_bytes, F f) {
  block_dim = {unsigned(threads), 1, 1}, grid_dim = grid;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        std::vector<float4> shared((shared_bytes + sizeof(float4) - 1) / sizeof(float4), float4{NAN, NAN, NAN, NAN});
        std::barrier<> block(threads);
        std::vector<std::unique_ptr<std::barrier<>>> warps;
        for (int w = 0; w < (threads + 31) / 32; ++w) warps.push_back(std::make_unique<std::barrier<>>(std::min(32, threads - 32 * w)));
        std::vector<float> slots(std::size_t((threads + 31) / 32 * 32));
        std::vector<std::thread> run;
        for (int t = 0; t < threads; ++t)
          run.emplace_back([&, t] {
            self = {{unsigned(t), 0, 0}, {x, y, z}, shared.data(), &block, warps[std::size_t(t / 32)].get(), slots.data() + (t / 32) * 32};
            f();
          });
        for (auto& t : run) t.join();
      }
}
}  // namespace emu
