// Emulation of <cuda_bf16.h> for tests/cuda_emulation (see emulation.hpp): the bf16 type and
// its conversions, rounding to the nearest even as the device does.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

struct __nv_bfloat16 {
  std::uint16_t bits;
};
inline float __bfloat162float(__nv_bfloat16 b) {
  const std::uint32_t x = std::uint32_t(b.bits) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
inline __nv_bfloat16 __float2bfloat16(float f) {
  if (std::isnan(f)) return {0x7fc0};
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return {std::uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16)};
}
