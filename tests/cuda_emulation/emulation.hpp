// The CUDA execution model on CPU threads, so that libexec/backend/cuda/kernels.cu — compiled
// as C++ against this directory's cuda_runtime_api.h and cuda_bf16.h — runs its very kernels
// here, under AddressSanitizer or ThreadSanitizer, driven by the [kernels] part of
// tests/gpu_test.cpp (no GPU needed), and in a hetexec built with -DHET_CUDA=EMULATION.
//  * A launch runs its blocks one after another, each on blockDim.x CUDA threads: OS threads of
//    a pool (what the sanitizers watch for races), or with HET_EMULATION_FIBERS (x86-64; the
//    emulated hetexec) fibers on the launching thread, each run until it waits at a barrier or
//    ends, then the next: the same semantics some hundred times faster than 256 OS threads
//    meeting at futex barriers on two cores (155 s per tiny-gpt step).
//  * __syncthreads is a barrier of the block; __shfl_*_sync a barrier of the warp with a slot
//    per lane (every lane must call it, as on the device, or the test hangs and times out; with
//    fibers the launch aborts, naming the deadlock).
//  * Static __shared__ arrays are function statics (one block runs at a time, so they are the
//    block's); the dynamic shared memory is a buffer filled with NaN (a read before a write
//    shows); more than 48 KiB of it needs the kernel's cudaFuncSetAttribute opt-in and at most
//    the device's 227 KiB, else the launch fails as on an H100.
//  * Device memory is host memory from malloc. Kernels, copies and memsets run at once on the
//    calling thread; what runs off it (an emulated NCCL operation, nccl.h) is a stream's pending
//    work, which every later operation on that stream waits for (stream order), and which
//    cudaStreamQuery reports as not ready. Devices: HET_CUDA_EMULATION_DEVICES of them (default
//    8), all sharing the host's memory; each process picks its own with cudaSetDevice.
// What it does not show: speed, the device's rounding of transcendental functions, memory
// coalescing, bank conflicts, warp-divergence rules beyond "every lane calls the shuffle".
#pragma once
#include <math.h>
#ifdef HET_EMULATION_FIBERS
#include <sys/mman.h>
#endif

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "cuda_bf16.h"

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct float4 {
  float x, y, z, w;
};

#define __global__
#define __device__
#define __host__
#define __launch_bounds__(n)
#define __shared__ static
#define HET_FLASH_SHARED(name) float4* name = emu::self.shared

inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
using std::max;  // CUDA's device min/max
using std::min;

namespace emu {
#ifdef HET_EMULATION_FIBERS
struct Barrier {  // of a block or a warp, whose fibers run on one OS thread
  unsigned expected = 0, arrived = 0;
  std::uint64_t generation = 0;
};
#else
using Barrier = std::barrier<>;
#endif
struct Thread {  // what a CUDA thread knows of itself
  dim3 thread, block;
  float4* shared = nullptr;
  Barrier* block_barrier = nullptr;
  Barrier* warp_barrier = nullptr;
  float* warp_slots = nullptr;
};
inline thread_local Thread self;
inline dim3 block_dim, grid_dim;  // of the launch running now (launches do not overlap: launch_mutex)
inline std::mutex launch_mutex;

struct Device {  // the one emulated device's state
  std::mutex mutex;
  int last_error = 0;                          // a cudaError_t
  std::map<void (*)(), int> dynamic_shared;    // cudaFuncAttributeMaxDynamicSharedMemorySize per kernel
  static constexpr int kOptinLimit = 227 * 1024, kDefaultLimit = 48 * 1024;
};
inline Device& device() {
  static Device d;
  return d;
}

// A stream's work running off the calling thread, in the order it was enqueued.
struct Stream {
  std::mutex mutex;
  std::vector<std::shared_future<void>> pending;
  void enqueue(std::shared_future<void> f) {
    std::lock_guard<std::mutex> lock(mutex);
    std::erase_if(pending, [](const std::shared_future<void>& p) { return p.wait_for(std::chrono::seconds(0)) == std::future_status::ready; });
    pending.push_back(std::move(f));
  }
  std::vector<std::shared_future<void>> snapshot() {
    std::lock_guard<std::mutex> lock(mutex);
    return pending;
  }
  void drain() {  // before anything else runs on this stream
    for (auto& f : snapshot()) f.wait();
  }
  bool idle() {
    for (auto& f : snapshot())
      if (f.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return false;
    return true;
  }
};
inline Stream& legacy_stream() {  // stream 0
  static Stream s;
  return s;
}
inline Stream& stream(Stream* s) { return s != nullptr ? *s : legacy_stream(); }
template <class S>
Stream& stream(S s) {  // a literal 0 or nullptr: the legacy stream
  if constexpr (std::is_convertible_v<S, Stream*>) return stream(static_cast<Stream*>(s));
  return legacy_stream();
}

// The CPU threads that play CUDA threads, kept across launches (creating 256 threads per launch
// cost most of the emulation's time): run(n, body) runs body(i) on workers 0..n-1 and returns
// when all are done.
class Pool {
 public:
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    start_.notify_all();
    for (auto& t : workers_) t.join();
  }
  void run(unsigned n, const std::function<void(unsigned)>& body) {
    std::unique_lock<std::mutex> lock(mutex_);
    while (workers_.size() < n) {
      const unsigned index = unsigned(workers_.size());
      workers_.emplace_back([this, index] { work(index); });
    }
    job_ = &body, active_ = n, pending_ = n, ++generation_;
    start_.notify_all();
    done_.wait(lock, [&] { return pending_ == 0; });
  }

 private:
  void work(unsigned index) {
    std::uint64_t seen = 0;
    for (;;) {
      const std::function<void(unsigned)>* job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        start_.wait(lock, [&] { return stop_ || (generation_ != seen && index < active_); });
        if (stop_) return;
        seen = generation_, job = job_;
      }
      (*job)(index);
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) done_.notify_all();
    }
  }
  std::mutex mutex_;
  std::condition_variable start_, done_;
  std::vector<std::thread> workers_;
  const std::function<void(unsigned)>* job_ = nullptr;
  unsigned active_ = 0, pending_ = 0;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
};
inline Pool& pool() {
  static Pool p;
  return p;
}

#ifdef HET_EMULATION_FIBERS
#if !defined(__x86_64__)
#error "HET_EMULATION_FIBERS switches stacks on x86-64 only"
#endif
// Saves the callee-saved registers and the stack pointer in *save_sp, loads load_sp's (the
// System V ABI: the rest are the caller's to save). Weak: every file that includes this has it.
extern "C" void het_emu_switch(void** save_sp, void* load_sp);
asm(R"(
  .text
  .weak het_emu_switch
  .type het_emu_switch, @function
het_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size het_emu_switch, .-het_emu_switch
)");

struct Fiber {
  // The kernels' locals are a few KiB; below the stack a page no access is allowed to, so that
  // an overflow faults instead of writing over the next fiber's.
  static constexpr std::size_t kStack = 256 * 1024, kGuard = 4096;
  char* base = nullptr;  // the guard page, then the stack
  void* sp = nullptr;
  bool done = false;
  Thread self;
  Fiber() {
    void* p = ::mmap(nullptr, kGuard + kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED || ::mprotect(p, kGuard, PROT_NONE) != 0) {
      std::fprintf(stderr, "CUDA emulation: cannot map a fiber's stack\n");
      std::abort();
    }
    base = static_cast<char*>(p);
  }
  ~Fiber() { ::munmap(base, kGuard + kStack); }
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;
  char* stack_top() const { return base + kGuard + kStack; }
};
struct Scheduler {  // of this OS thread: the block running now
  void* main_sp = nullptr;
  Fiber* current = nullptr;
  const std::function<void()>* body = nullptr;
  std::uint64_t events = 0;  // barrier arrivals and fibers ended: a pass without any is a deadlock
  std::vector<std::unique_ptr<Fiber>> fibers;
};
inline thread_local Scheduler scheduler;

[[noreturn]] inline void fiber_main() {
  Fiber* f = scheduler.current;
  (*scheduler.body)();
  f->done = true, ++scheduler.events;
  het_emu_switch(&f->sp, scheduler.main_sp);
  __builtin_unreachable();
}

inline void wait(Barrier& b) {
  ++scheduler.events;
  const std::uint64_t generation = b.generation;
  if (++b.arrived == b.expected) {  // the last one in opens it
    b.arrived = 0, ++b.generation;
    return;
  }
  Fiber* f = scheduler.current;
  while (b.generation == generation) het_emu_switch(&f->sp, scheduler.main_sp);
}

// Runs body as `threads` CUDA threads, as made by who(t), until all have ended.
template <class Who>
void run_fibers(unsigned threads, const std::function<void()>& body, Who who) {
  Scheduler& s = scheduler;
  while (s.fibers.size() < threads) s.fibers.push_back(std::make_unique<Fiber>());
  for (unsigned t = 0; t < threads; ++t) {
    Fiber& f = *s.fibers[t];
    // A fresh stack whose first switch "returns" into fiber_main with the ABI's alignment:
    // 6 saved registers, then fiber_main's address, then a null return address for it.
    auto top = reinterpret_cast<std::uintptr_t>(f.stack_top()) & ~std::uintptr_t(15);
    auto* sp = reinterpret_cast<void**>(top);
    *--sp = nullptr;
    *--sp = reinterpret_cast<void*>(&fiber_main);
    for (int r = 0; r < 6; ++r) *--sp = nullptr;
    f.sp = sp, f.done = false, f.self = who(t);
  }
  s.body = &body;
  for (unsigned left = threads; left > 0;) {
    const std::uint64_t before = s.events;
    left = 0;
    for (unsigned t = 0; t < threads; ++t) {
      Fiber& f = *s.fibers[t];
      if (f.done) continue;
      self = f.self, s.current = &f;
      het_emu_switch(&s.main_sp, f.sp);
      left += f.done ? 0 : 1;
    }
    if (left > 0 && s.events == before) {
      std::fprintf(stderr, "CUDA emulation: a deadlock in a kernel: %u of %u threads wait at a barrier the others never reach\n", left,
                   threads);
      std::abort();
    }
  }
}

// Runs f() as every thread of every block, a block at a time, its threads as fibers.
template <class F>
void run_blocks(dim3 grid, unsigned threads, std::size_t shared_bytes, F f) {
  block_dim = dim3(threads), grid_dim = grid;
  std::vector<float4> shared((shared_bytes + sizeof(float4) - 1) / sizeof(float4));
  Barrier block{threads};
  std::vector<Barrier> warps;
  for (unsigned w = 0; w < (threads + 31) / 32; ++w) warps.push_back(Barrier{std::min(32u, threads - 32 * w)});
  std::vector<float> slots((threads + 31) / 32 * 32);
  const std::function<void()> body = [&] { f(); };
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        std::fill(shared.begin(), shared.end(), float4{NAN, NAN, NAN, NAN});
        run_fibers(threads, body, [&](unsigned t) {
          return Thread{dim3(t), dim3(x, y, z), shared.data(), &block, &warps[t / 32], slots.data() + t / 32 * 32};
        });
      }
}
#else
inline void wait(Barrier& b) { b.arrive_and_wait(); }

// Runs f() as every thread of every block: blockDim.x pool threads take the blocks one after
// another (between blocks they meet at a barrier and the shared memory is poisoned again).
template <class F>
void run_blocks(dim3 grid, unsigned threads, std::size_t shared_bytes, F f) {
  block_dim = dim3(threads), grid_dim = grid;
  std::vector<float4> shared((shared_bytes + sizeof(float4) - 1) / sizeof(float4));
  std::barrier<> block(threads);
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  for (unsigned w = 0; w < (threads + 31) / 32; ++w) warps.push_back(std::make_unique<std::barrier<>>(std::min(32u, threads - 32 * w)));
  std::vector<float> slots((threads + 31) / 32 * 32);
  pool().run(threads, [&](unsigned t) {
      self = {dim3(t), dim3(), shared.data(), &block, warps[t / 32].get(), slots.data() + t / 32 * 32};
      for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
          for (unsigned x = 0; x < grid.x; ++x) {
            if (t == 0) std::fill(shared.begin(), shared.end(), float4{NAN, NAN, NAN, NAN});
            block.arrive_and_wait();  // the previous block is done everywhere, the shared memory poisoned
            self.block = dim3(x, y, z);
            f();
            block.arrive_and_wait();
          }
  });
}
#endif

// kernel<<<grid, block, shared, stream>>>(args...)
template <class... P>
struct Launch {
  void (*kernel)(P...);
  dim3 grid, block;
  std::size_t shared;
  template <class... A>
  void operator()(A&&... a) const {
    Device& d = device();
    {
      std::lock_guard<std::mutex> lock(d.mutex);
      const auto it = d.dynamic_shared.find(reinterpret_cast<void (*)()>(kernel));
      const int limit = it == d.dynamic_shared.end() ? Device::kDefaultLimit : it->second;
      if (block.x == 0 || block.x > 1024 || grid.x == 0 || grid.y > 65535 || grid.z > 65535 || shared > std::size_t(limit)) {
        d.last_error = 9;  // cudaErrorInvalidConfiguration
        return;
      }
    }
    std::tuple<P...> args(std::forward<A>(a)...);
    std::lock_guard<std::mutex> one_at_a_time(launch_mutex);
    run_blocks(grid, block.x, shared, [&] { std::apply(kernel, args); });
  }
};
template <class S, class... P>
Launch<P...> launch(void (*kernel)(P...), dim3 grid, dim3 block, std::size_t shared, S s) {  // after the stream's pending work
  stream(s).drain();
  return {kernel, grid, block, shared};
}
}  // namespace emu

#define threadIdx (emu::self.thread)
#define blockIdx (emu::self.block)
#define blockDim (emu::block_dim)
#define gridDim (emu::grid_dim)
#define HET_LAUNCH(kernel, grid, block, shared, stream) emu::launch(kernel, dim3(grid), dim3(block), std::size_t(shared), stream)

inline void __syncthreads() { emu::wait(*emu::self.block_barrier); }
inline float __shfl_sync(unsigned, float v, int src_lane) {
  emu::self.warp_slots[threadIdx.x % 32] = v;
  emu::wait(*emu::self.warp_barrier);
  const float r = emu::self.warp_slots[unsigned(src_lane) % 32];
  emu::wait(*emu::self.warp_barrier);
  return r;
}
inline float __shfl_xor_sync(unsigned mask, float v, int lane_mask) { return __shfl_sync(mask, v, int(threadIdx.x % 32) ^ lane_mask); }
inline float atomicAdd(float* p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }
