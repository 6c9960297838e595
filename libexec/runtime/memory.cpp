#include "runtime/memory.hpp"

#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>

// The process's C++ heap, counted: the replaceable global operator new / delete ([new.delete])
// add and subtract each block's usable size, and keep the high-water mark. Every std::vector
// of the runtime, the backends and the transport allocates through them. Process-wide by
// nature (one heap per process); nothing else is global.
namespace {

std::atomic<std::int64_t> g_in_use{0}, g_peak{0};

void* counted(std::size_t n, std::size_t align) {
  void* p = align <= alignof(std::max_align_t) ? std::malloc(n ? n : 1) : std::aligned_alloc(align, (n + align - 1) / align * align);
  if (!p) throw std::bad_alloc();
  const std::int64_t now = g_in_use.fetch_add(std::int64_t(malloc_usable_size(p)), std::memory_order_relaxed) +
                           std::int64_t(malloc_usable_size(p));
  std::int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
  return p;
}

void uncounted(void* p) {
  if (!p) return;
  g_in_use.fetch_sub(std::int64_t(malloc_usable_size(p)), std::memory_order_relaxed);
  std::free(p);
}

}  // namespace

void* operator new(std::size_t n) { return counted(n, 0); }
void* operator new[](std::size_t n) { return counted(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) { return counted(n, std::size_t(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return counted(n, std::size_t(a)); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted(n, 0);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted(n, 0);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept { uncounted(p); }
void operator delete[](void* p) noexcept { uncounted(p); }
void operator delete(void* p, std::size_t) noexcept { uncounted(p); }
void operator delete[](void* p, std::size_t) noexcept { uncounted(p); }
void operator delete(void* p, std::align_val_t) noexcept { uncounted(p); }
void operator delete[](void* p, std::align_val_t) noexcept { uncounted(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { uncounted(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { uncounted(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { uncounted(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { uncounted(p); }

namespace het::runtime {

namespace {
// Bytes of the C++ heap in use now (usable sizes of the blocks operator new handed out).
double heap_in_use() { return double(g_in_use.load(std::memory_order_relaxed)); }
}  // namespace

MemoryMeter::MemoryMeter() : baseline_(heap_in_use()) { g_peak.store(g_in_use.load()); }

void MemoryMeter::sample(const MemoryUse& now, double device_peak) {
  if (now.total() > peak_.accounted.total()) peak_.accounted = now;
  peak_.device = std::max(peak_.device, device_peak);
  peak_.heap = std::max(peak_.heap, double(g_peak.load(std::memory_order_relaxed)) - baseline_);
}

nlohmann::json to_json(const MemoryPeak& p) {
  const MemoryUse& a = p.accounted;
  return {{"parameters", a.parameters}, {"gradients", a.gradients}, {"optimizer", a.optimizer},
          {"sync_buffers", a.sync_buffers}, {"activations", a.activations}, {"accounted", a.total()}, {"heap", p.heap}, {"device", p.device}};
}

}  // namespace het::runtime
