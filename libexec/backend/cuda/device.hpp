#pragma once
// Device memory and CUDA errors for the CUDA backend. A failing CUDA call becomes a CudaError
// (a std::runtime_error whose what() is a sentence: "CUDA error in <what>: <reason>"); the
// backend's Stage lets it propagate to the runtime, which reports it and stops the rank —
// never an abort inside the library. No global state: buffers own their memory.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

namespace het::cuda {

struct CudaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Throws CudaError when `err` is not cudaSuccess.
inline void check(cudaError_t err, const std::string& what) {
  if (err != cudaSuccess) throw CudaError("CUDA error in " + what + ": " + cudaGetErrorString(err));
}
// After enqueueing kernels: surfaces a launch error (bad configuration, no kernel image).
inline void check_launch(const std::string& what) { check(cudaGetLastError(), what); }

// The device memory an owner's buffers hold (issue 17): bytes in use now and the most at any
// time. Buffers made with a ledger add their bytes when made and take them back when freed.
// Not thread-safe: a stage makes and frees its buffers on its rank's thread.
struct DeviceLedger {
  std::size_t in_use = 0, peak = 0;
  void add(std::size_t n) { in_use += n, peak = in_use > peak ? in_use : peak; }
  void take_back(std::size_t n) { in_use -= n; }
};

// n elements of T in device memory (uninitialised), freed with the buffer. Given a stream, it
// comes from CUDA's stream-ordered allocator (cudaMallocAsync/cudaFreeAsync on that stream):
// freeing it while kernels on that stream still use it is then safe and cheap. Given a ledger
// (which must outlive the buffer), its bytes are counted there.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceLedger& ledger, cudaStream_t stream, std::size_t n) : DeviceBuffer(stream, n) {
    ledger_ = &ledger;
    ledger.add(bytes());
  }
  explicit DeviceBuffer(std::size_t n) : n_(n) {
    if (n > 0) check(cudaMalloc(reinterpret_cast<void**>(&p_), n * sizeof(T)), "cudaMalloc of " + std::to_string(n * sizeof(T)) + " bytes");
  }
  DeviceBuffer(cudaStream_t stream, std::size_t n) : n_(n), stream_(stream), async_(true) {
    if (n > 0)
      check(cudaMallocAsync(reinterpret_cast<void**>(&p_), n * sizeof(T), stream),
            "cudaMallocAsync of " + std::to_string(n * sizeof(T)) + " bytes");
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)), stream_(o.stream_), async_(o.async_),
        ledger_(std::exchange(o.ledger_, nullptr)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(p_, o.p_), std::swap(n_, o.n_), std::swap(stream_, o.stream_), std::swap(async_, o.async_), std::swap(ledger_, o.ledger_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ledger_) ledger_->take_back(bytes());
    if (!p_) return;
    if (async_) cudaFreeAsync(p_, stream_);
    else cudaFree(p_);
  }
  T* get() const { return p_; }
  std::size_t size() const { return n_; }
  std::size_t bytes() const { return n_ * sizeof(T); }

 private:
  T* p_ = nullptr;
  std::size_t n_ = 0;
  cudaStream_t stream_ = nullptr;
  bool async_ = false;
  DeviceLedger* ledger_ = nullptr;
};

// n elements of T in page-locked host memory (cudaMallocHost), so device copies to and from it
// run asynchronously at full bandwidth; freed with the buffer.
template <class T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t n) : n_(n) {
    if (n > 0) check(cudaMallocHost(reinterpret_cast<void**>(&p_), n * sizeof(T)), "cudaMallocHost of " + std::to_string(n * sizeof(T)) + " bytes");
  }
  PinnedBuffer(PinnedBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    std::swap(p_, o.p_), std::swap(n_, o.n_);
    return *this;
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (p_) cudaFreeHost(p_);
  }
  T* get() const { return p_; }
  std::size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

}  // namespace het::cuda

namespace het::cuda {

// A non-blocking CUDA stream on the current device, destroyed with the object.
class Stream {
 public:
  Stream() { check(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "cudaStreamCreate"); }
  ~Stream() {
    if (s_) cudaStreamDestroy(s_);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

}  // namespace het::cuda
