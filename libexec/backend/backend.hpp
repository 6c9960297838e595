#pragma once
// A backend runs one rank's share of the model on one device (DESIGN.md §9). The runtime owns
// the schedule, the transports, the gradient sync and the optimizer; a backend owns the
// kernels and the memory they work in. Activations and their gradients cross this interface
// in host memory (what the TCP transport carries), or a device backend's (DeviceTensor: what
// NCCL carries inside a subcluster); parameters are exposed as host-visible buffers for the
// sync and the optimizer, or as device buckets (DeviceOptimizer). The CPU backend (fp32,
// Eigen GEMMs, oneTBB tasks) is always built; the CUDA one (backend/cuda/cuda_backend.hpp: bf16
// with fp32 master weights) implements the same classes in CUDA builds.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "diag/diag.hpp"
#include "model/block.hpp"
#include "model/params.hpp"
#include "program/program.hpp"
#include "spec/model.hpp"

namespace het::backend {

// One stage's share of the model: units [first, last] (0 embedding, 1..L layers, L+1 head)
// as TP shard tp_rank of tp, context member comm.cp_rank of comm.cp.
struct StageSpec {
  ModelSpec model;
  int first = 0, last = 0, tp_rank = 0, tp = 1;
  std::uint64_t seed = 1;
  Recompute recompute = Recompute::none;
  model::Comm<float> comm;
  // tp > 1 on a device backend: sums n floats of this rank's device memory in place across the
  // TP group, returning when done, where the group can (NCCL: collective::Group::on_device).
  // Unset, the backend stages through host memory and comm.tp_all_reduce.
  std::function<void(float* device, std::size_t n)> tp_all_reduce_device;
};

// A micro-batch's activations or their gradients in a device backend's memory (issue 21 step 3):
// bf16[elements] at `data`, alive while a copy of `owner` is. Made by one stage, for that stage.
struct DeviceTensor {
  std::shared_ptr<void> owner;
  void* data = nullptr;
  std::size_t elements = 0;
  bool empty() const { return elements == 0; }
};

// What a device backend's stage moved between host and device memory and how often it made the
// host wait for the device, since it was made (issue 21: inside a subcluster a step moves only
// the tokens, the targets and the losses; no synchronisation inside a forward or backward but
// for a transfer: the output another stream or the host reads, the losses, a host-staged sum).
struct DeviceCounters {
  std::uint64_t to_device_bytes = 0, to_host_bytes = 0;
  std::uint64_t syncs = 0;                // every synchronisation with the device
  std::uint64_t compute_syncs = 0;        // of them, inside forward or backward
  std::uint64_t compute_syncs_other = 0;  // of those, not for a transfer (the goal: none)
  // What happened between two readings (`later - earlier`).
  friend DeviceCounters operator-(const DeviceCounters& a, const DeviceCounters& b) {
    return {a.to_device_bytes - b.to_device_bytes, a.to_host_bytes - b.to_host_bytes, a.syncs - b.syncs,
            a.compute_syncs - b.compute_syncs, a.compute_syncs_other - b.compute_syncs_other};
  }
};

// The contract of model::StageModel (model/stage.hpp): forward and backward of one
// micro-batch at a time, several in flight; backward accumulates parameter gradients.
// A device backend's own memory: bytes of device buffers in use now and the most since the
// stage was made (the CUDA backend's DeviceLedger; its cuBLASLt workspace and the CUDA context
// are not in it: they are the catalog's reserve).
struct DeviceMemory {
  std::size_t in_use = 0, peak = 0;
};

// The optimizer step in a device backend's memory (issue 21 step 2): the runtime's gradient-sync
// buckets (runtime/buckets.hpp) laid out on the device, so that gradients, fp32 masters and
// AdamW's moments never cross to the host; only what a TCP group carries and checkpoints do.
// The runtime keeps the buckets' plan and drives the same moves as on the host.
struct BucketLayout {
  struct Part {
    std::size_t param = 0;                                  // index into Stage::params()
    std::size_t start = 0, run = 0, stride = 0, count = 1;  // its elements (runtime::Elements)
    float weight = 1;                                       // its gradient's weight in the sum
    std::size_t at = 0;                                     // offset in the bucket
  };
  std::vector<Part> parts;
  std::size_t size = 0;    // elements
  std::size_t padded = 0;  // elements its device buffers hold (>= size: the group's equal blocks)
  std::size_t lo = 0, hi = 0;  // the part this rank steps (all, or its ZeRO share)
};

class DeviceOptimizer {
 public:
  virtual ~DeviceOptimizer() = default;
  // Bucket i's gradients and values: `padded` floats of device memory each (the collective
  // works on them in place). Where every part is a whole parameter of weight 1, they ARE the
  // parameters' fp32 gradients and masters (nothing to pack); else packed copies.
  virtual float* gradients(std::size_t i) = 0;
  virtual float* values(std::size_t i) = 0;
  // gradients(i) = the parameters' gradients (summed over the step's backwards) times their
  // weights; returns when the device has them (the collective runs on another stream).
  virtual void pack_gradients(std::size_t i) = 0;
  // AdamW step `step` (from 1) on [lo, hi) of values(i) from gradients(i) (summed by then),
  // each part with its parameter's weight decay; with `unpack` the values go to the
  // parameters (their masters and bf16 copies), else wait in values(i) for the all-gather and
  // unpack_values(i).
  virtual void update(std::size_t i, const model::AdamW& adamw, int step, bool unpack) = 0;
  virtual void unpack_values(std::size_t i) = 0;
  // Bucket i's AdamW moments [hi - lo] each (device memory, zero at first).
  virtual std::pair<float*, float*> moments(std::size_t i) = 0;
  // n floats between device and host memory; return when copied.
  virtual void to_host(float* host, const float* device, std::size_t n) = 0;
  virtual void to_device(float* device, const float* host, std::size_t n) = 0;
  // The fp32 masters into params()' host values (for a checkpoint), or from them (after a load).
  virtual void pull_values() = 0;
  virtual void push_values() = 0;
};

class Stage {
 public:
  virtual ~Stage() = default;
  // Output activations [B, T/cp, C], or nothing on the last stage (token losses summed into
  // *loss_sum). tokens/targets: [B, T/cp]; x: [B, T/cp, C] when not the first stage.
  virtual std::vector<float> forward(int mb, int B, const int* tokens, const float* x, const int* targets, double* loss_sum) = 0;
  // dx [B, T/cp, C] from dy (ignored on the last stage, whose loss gradient is scaled by
  // loss_scale); empty on the first stage.
  virtual std::vector<float> backward(int mb, const float* dy, double loss_scale) = 0;
  // Called once after the step's last backward, before the gradient sync reads params()'
  // grads: a device backend makes the host grads whole here (the sum over the step's
  // micro-batches). Until then the host grads may lag behind.
  virtual void finish_backward() {}
  // Every parameter, in a deterministic order (the same on every rank holding the same units).
  virtual std::vector<model::Param<float>*> params() = 0;
  virtual void zero_grad() = 0;
  // Bytes of activations kept for the micro-batches in flight.
  virtual std::size_t activation_bytes() const = 0;
  // The most activation_bytes() has been since the stage was made, including transients
  // between the calls (a recomputing stage's forward again inside backward).
  virtual std::size_t activation_bytes_peak() const { return activation_bytes(); }
  // The device memory the stage holds; none for a backend whose memory is the host's (the CPU).
  virtual std::optional<DeviceMemory> device_memory() const { return std::nullopt; }
  // The step on the device for these buckets (every parameter in them), owned by the stage;
  // null for a backend whose optimizer state is host memory (the CPU). Called at most once,
  // before the first step; from then on the device holds the masters: finish_backward() and
  // zero_grad() no longer copy gradients or values, and params()' host values are what the
  // last pull_values() left there.
  virtual DeviceOptimizer* device_optimizer(std::vector<BucketLayout>) { return nullptr; }
  // Its counters; none for a backend whose memory is the host's.
  virtual std::optional<DeviceCounters> device_counters() const { return std::nullopt; }

  // ---- Activations on the device (issue 21 step 3) ----
  // A device backend whose stage takes a micro-batch's input and gives its output in its own
  // memory says so; the runtime then calls forward_device and backward_device instead of
  // forward and backward, and moves the tensors between the ranks of one subcluster itself
  // (NCCL point-to-point, no host copy), through the host elsewhere (upload, download).
  // Tensors are bf16 [B, T/cp, C], made by this stage; x and dy are empty where forward and
  // backward take nothing, and the stage may take their memory over. They return when the
  // device has done their work (another stream may read the output, and a trace of the calls
  // times the device, not the launches); the output is empty where forward and backward give
  // nothing. device_tensor(n): n elements, uninitialised, that any stream may write on
  // return (a receive's buffer); copy_device: `region` of src, laid out as box `from`, into dst,
  // laid out as box `to` (program::Block: rows, time, channels), done on return.
  // A stage without them (the CPU's) is never asked for the rest: they throw std::logic_error.
  virtual bool device_activations() const { return false; }
  virtual DeviceTensor forward_device(int, int, const int*, DeviceTensor, const int*, double*) { no_device("forward_device"); }
  virtual DeviceTensor backward_device(int, DeviceTensor, double) { no_device("backward_device"); }
  virtual DeviceTensor device_tensor(std::size_t) { no_device("device_tensor"); }
  virtual void copy_device(const DeviceTensor& /*src*/, const program::Block& /*from*/, DeviceTensor& /*dst*/,
                           const program::Block& /*to*/, const program::Block& /*region*/) {
    no_device("copy_device");
  }
  virtual DeviceTensor upload(const float*, std::size_t) { no_device("upload"); }  // host fp32 -> bf16 on the device
  virtual std::vector<float> download(const DeviceTensor&) { no_device("download"); }  // and back, done on return

 private:
  [[noreturn]] static void no_device(const char* what) {
    throw std::logic_error(std::string("Stage::") + what + " on a stage without device activations");
  }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // What it runs on, for logs: "cpu (8 threads)".
  virtual std::string describe() const = 0;
  virtual std::unique_ptr<Stage> make_stage(const StageSpec& spec) = 0;
};

// The backends compiled into this build: "cpu", and "cuda" when built with CUDA (whether a GPU
// is present is open()'s question).
std::vector<std::string> available();

// Opens backend `name` for this process. threads: CPU worker threads (0: every core); the
// CPU backend holds this limit for its lifetime (the CUDA backend ignores it). device: the CUDA
// device ordinal (as CUDA_VISIBLE_DEVICES numbers them) for "cuda"; -1 keeps the current one;
// the CPU backend ignores it. Errors: an unknown backend, "cuda" in a build without CUDA ("not
// built with CUDA: ...") or on a machine without a usable GPU or without device `device` ("no
// CUDA device: ..."); each names the backends available.
Result<std::unique_ptr<Backend>> open(const std::string& name, int threads, int device = -1);

}  // namespace het::backend
