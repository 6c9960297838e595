// Emulation of <cuda_runtime_api.h> for tests/cuda_emulation: the runtime calls the CUDA
// backend's kernels.cu, device.hpp and tests/gpu_test.cpp make, on one emulated device whose
// memory is host memory (emulation.hpp has the execution model).
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "emulation.hpp"

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevice = 101,
  cudaErrorNotReady = 600
};
inline const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNotReady: return "device not ready";
  }
  return "unknown error";
}
inline cudaError_t cudaGetLastError() {
  std::lock_guard<std::mutex> lock(emu::device().mutex);
  return cudaError_t(std::exchange(emu::device().last_error, 0));
}

struct CUstream_st : emu::Stream {};
using cudaStream_t = CUstream_st*;
constexpr unsigned cudaStreamNonBlocking = 1;
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) { return *s = new CUstream_st, cudaSuccess; }
inline cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, 0); }
inline cudaError_t cudaStreamDestroy(cudaStream_t s) { return s->drain(), delete s, cudaSuccess; }
inline cudaError_t cudaStreamSynchronize(cudaStream_t s) { return emu::stream(s).drain(), cudaSuccess; }
inline cudaError_t cudaStreamQuery(cudaStream_t s) { return emu::stream(s).idle() ? cudaSuccess : cudaErrorNotReady; }

inline cudaError_t cudaMalloc(void** p, std::size_t n) { return (*p = std::malloc(n ? n : 1)) ? cudaSuccess : cudaErrorMemoryAllocation; }
inline cudaError_t cudaFree(void* p) { return std::free(p), cudaSuccess; }
inline cudaError_t cudaMallocAsync(void** p, std::size_t n, cudaStream_t s) { return emu::stream(s).drain(), cudaMalloc(p, n); }
inline cudaError_t cudaFreeAsync(void* p, cudaStream_t s) { return emu::stream(s).drain(), cudaFree(p); }
inline cudaError_t cudaMallocHost(void** p, std::size_t n) { return cudaMalloc(p, n); }
inline cudaError_t cudaFreeHost(void* p) { return cudaFree(p); }

enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice, cudaMemcpyDefault };
inline cudaError_t cudaMemcpy(void* to, const void* from, std::size_t n, cudaMemcpyKind) { return std::memmove(to, from, n), cudaSuccess; }
inline cudaError_t cudaMemcpyAsync(void* to, const void* from, std::size_t n, cudaMemcpyKind k, cudaStream_t s = nullptr) {
  return emu::stream(s).drain(), cudaMemcpy(to, from, n, k);
}
// height rows of width bytes, rows dpitch and spitch bytes apart (pitches at least the width).
inline cudaError_t cudaMemcpy2DAsync(void* to, std::size_t dpitch, const void* from, std::size_t spitch, std::size_t width,
                                     std::size_t height, cudaMemcpyKind, cudaStream_t s = nullptr) {
  if (width > dpitch || width > spitch) return cudaErrorInvalidValue;
  emu::stream(s).drain();
  for (std::size_t r = 0; r < height; ++r) std::memmove(static_cast<char*>(to) + r * dpitch, static_cast<const char*>(from) + r * spitch, width);
  return cudaSuccess;
}
inline cudaError_t cudaMemset(void* p, int v, std::size_t n) { return std::memset(p, v, n), cudaSuccess; }
inline cudaError_t cudaMemsetAsync(void* p, int v, std::size_t n, cudaStream_t s = nullptr) {
  return emu::stream(s).drain(), cudaMemset(p, v, n);
}

namespace emu {
inline int device_count() {  // HET_CUDA_EMULATION_DEVICES (1-64), else 8
  const char* v = std::getenv("HET_CUDA_EMULATION_DEVICES");
  const int n = v != nullptr ? std::atoi(v) : 8;
  return n >= 1 && n <= 64 ? n : 8;
}
inline thread_local int current_device = 0;
inline bool valid_device(int d) { return d >= 0 && d < device_count(); }
}  // namespace emu
inline cudaError_t cudaGetDeviceCount(int* n) { return *n = emu::device_count(), cudaSuccess; }
inline cudaError_t cudaGetDevice(int* d) { return *d = emu::current_device, cudaSuccess; }
inline cudaError_t cudaSetDevice(int d) { return emu::valid_device(d) ? (emu::current_device = d, cudaSuccess) : cudaErrorInvalidDevice; }
inline cudaError_t cudaRuntimeGetVersion(int* v) { return *v = 13000, cudaSuccess; }  // the toolkit the emulation follows
inline cudaError_t cudaDriverGetVersion(int* v) { return *v = 0, cudaSuccess; }       // no driver
inline cudaError_t cudaDeviceGetPCIBusId(char* bus, int n, int device) {
  if (!emu::valid_device(device)) return cudaErrorInvalidDevice;
  return std::snprintf(bus, std::size_t(n), "emulated:%02x", device), cudaSuccess;
}
enum cudaDeviceAttr { cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr, int device) {
  if (!emu::valid_device(device)) return cudaErrorInvalidDevice;
  return *v = emu::Device::kOptinLimit, cudaSuccess;
}
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
template <class... P>
cudaError_t cudaFuncSetAttribute(void (*kernel)(P...), cudaFuncAttribute, int value) {
  if (value < 0 || value > emu::Device::kOptinLimit) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(emu::device().mutex);
  emu::device().dynamic_shared[reinterpret_cast<void (*)()>(kernel)] = value;
  return cudaSuccess;
}

struct cudaDeviceProp {
  char name[256];
  int major, minor;
  std::size_t totalGlobalMem, sharedMemPerBlockOptin;
  int multiProcessorCount;
};
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (!emu::valid_device(device)) return cudaErrorInvalidDevice;
  *p = cudaDeviceProp{};
  std::snprintf(p->name, sizeof p->name, "CUDA emulation on CPU threads");
  p->major = 9, p->minor = 0, p->totalGlobalMem = std::size_t(80) << 30, p->sharedMemPerBlockOptin = emu::Device::kOptinLimit;
  p->multiProcessorCount = 132;
  return cudaSuccess;
}
struct CUmemPoolHandle_st {};
using cudaMemPool_t = CUmemPoolHandle_st*;
enum cudaMemPoolAttr { cudaMemPoolAttrReleaseThreshold = 4 };
inline cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  static CUmemPoolHandle_st the_pool;
  if (!emu::valid_device(device)) return cudaErrorInvalidDevice;
  return *pool = &the_pool, cudaSuccess;
}
inline cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, cudaMemPoolAttr, void*) { return cudaSuccess; }

// library_types.h
enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16BF = 14 };
