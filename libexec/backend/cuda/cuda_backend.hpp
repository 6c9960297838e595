#pragma once
// The CUDA backend (DESIGN.md §9): bf16 compute with fp32 master weights and fp32
// accumulation, cuBLASLt GEMMs and the kernels of kernels.hpp, one stage per process on the
// current CUDA device. Built only with CUDA (HET_HAVE_CUDA); backend::open("cuda") reaches it.
//
// Contract with the runtime (backend.hpp), beyond the CPU backend's:
//  * Activations and their gradients stay on the device (device_activations(): bf16
//    DeviceTensors, forward_device / backward_device), which the runtime moves by NCCL inside a
//    subcluster and uploads or downloads elsewhere; forward and backward (tools, tests) take and
//    give host fp32 through them. Inside forward_device and backward_device the host waits for
//    the device only for a transfer (the output another stream reads, the losses, a TP sum, a
//    host-staged CP exchange); device_counters() counts every copy between host and device and
//    every synchronisation.
//  * The step is on the device once the runtime asks for device_optimizer() (it always does;
//    backend.hpp's DeviceOptimizer): the fp32 masters, gradients and AdamW's moments live there,
//    a bucket of whole parameters holding their gradients and masters in place (18 bytes per
//    parameter with the bf16 value; ZeRO-1 shards the 8 of the moments), AdamW runs as a kernel
//    and the new masters become the bf16 values on the device; nothing crosses to the host but
//    the losses, the activations between subclusters and what a TCP group carries. params()' host
//    values are then what the last pull_values() left (a checkpoint's), push_values() brings
//    them back (a load).
//  * Until then (tools, tests) params() are the fp32 MASTER weights in host memory; the device
//    keeps a bf16 copy of each value and an fp32 gradient. Values written on the host reach the
//    device at the next zero_grad() or at construction; gradients accumulate on the device over
//    the step's backward() calls and reach the host grad vectors only in finish_backward(),
//    which copies them all (through one pinned buffer, one synchronisation per 128 MiB).
//  * Tensor parallelism as the CPU backend's (model/block.hpp: Megatron's column- and row-parallel
//    shards); the TP sums in fp32, on the device through StageSpec::tp_all_reduce_device where the
//    group is NCCL, else staged through the host. Context parallelism as the CPU backend's (each
//    member's T/cp time steps; the keys and values seen all-gathered and their gradients
//    reduce-scattered through host memory, model::gather_seen). Head dimension <= 256
//    (the flash-style attention of kernels.hpp keeps O(B·H·T) per layer, any sequence length;
//    D > 128 needs ~138 KiB of shared memory per block in the backward: H100 and A100 have it).
//    Recomputation: `full` keeps each layer's input only and runs the layer's forward again
//    just before its backward (one layer's activations at a time); `selective` keeps all but
//    attention's log-sum-exp and runs the attention forward again. Either gives the gradients
//    of a run that keeps everything (the kernels are deterministic).
//  * Errors (an unsupported spec, a failing CUDA or cuBLASLt call, out of device memory) are
//    thrown as std::runtime_error with a sentence; the interface has no other error channel.
#include <memory>

#include "backend/backend.hpp"

namespace het::backend {

// The CUDA backend on device ordinal `device` (-1: the process's current device). Errors:
// "no CUDA device: <reason>" (none present, no such ordinal, compute capability below 8.0).
Result<std::unique_ptr<Backend>> open_cuda(int device);

}  // namespace het::backend
