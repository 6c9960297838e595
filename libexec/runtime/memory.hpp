#pragma once
// What a rank holds in memory during a run (issue 17), measured two ways at the same points
// (after every forward, backward and optimizer step):
//   accounted  the bytes of the buffers the runtime and the backend keep, by what they are
//              for: parameters and gradients (Stage::params()), the AdamW moments and the
//              sync's packed buffers (runtime/buckets.hpp), the activations of the
//              micro-batches in flight (Stage::activation_bytes());
//   heap       the high-water mark of the process's C++ heap (every operator new, counted by
//              its block's usable size; memory.cpp replaces the global operator new/delete)
//              over its level when the meter was made: exact, between samples too, and it
//              also holds what is not accounted — frames queued and received by the
//              transport, the backend's temporaries (workspace), the allocator's rounding.
// The accounted split is the one at the sample where its total peaked (the activations at
// the backend's own high-water mark). One meter per process at a time (the heap's mark is
// the process's).
// A device backend's accounting of device memory is its own (the CUDA backend's pool); this
// meter is of the host process, which is the device memory of the CPU backend.
#include <cstddef>

#include <nlohmann/json.hpp>

namespace het::runtime {

struct MemoryUse {
  double parameters = 0, gradients = 0;  // bytes of the stage's parameter values and gradients
  double optimizer = 0;                  // AdamW moments m and v of the owned part
  double sync_buffers = 0;               // the buckets' packed gradients and values
  double activations = 0;                // kept for the micro-batches in flight
  double total() const { return parameters + gradients + optimizer + sync_buffers + activations; }
};

struct MemoryPeak {
  MemoryUse accounted;  // at the sample where accounted.total() was largest
  double heap = 0;      // the largest heap growth sampled, bytes
  double device = 0;    // a device backend's peak device bytes (Stage::device_memory); 0 on the CPU
};

nlohmann::json to_json(const MemoryPeak& peak);

class MemoryMeter {
 public:
  MemoryMeter();  // the heap's baseline: now; restarts the process's high-water mark
  // `device_peak`: the backend's device high-water mark, when it has one.
  void sample(const MemoryUse& now, double device_peak = 0);
  const MemoryPeak& peak() const { return peak_; }

 private:
  double baseline_ = 0;
  MemoryPeak peak_;
};

}  // namespace het::runtime
