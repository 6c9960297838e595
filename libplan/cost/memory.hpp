#pragma once
// Memory per device of a stage (DESIGN.md §6).
//
// bf16/fp16 models are trained by the CUDA backend (libexec/backend/cuda), and the model is
// Megatron's layout as that backend runs it:
// Model state, per parameter on the device (the stage's parameters split over tp, but for
// those every TP shard holds whole):
//   weights (dtype bytes) + gradients (fp32: 4 bytes; the CUDA backend accumulates in fp32, as
//   Megatron's main_grad does) + mixed-precision Adam state (fp32 master copy, m and v: 12
//   bytes; for fp32 training the weights are the master copy: 8), i.e. 18 bytes per parameter
//   for bf16/fp16 (DESIGN.md §6's 16–18), all on the device (the CUDA backend's step is
//   device-resident). ZeRO shards over the data-parallel group: stage 1 the moments (the CUDA
//   backend keeps the masters whole on every rank, unlike Megatron's distributed optimizer:
//   2 + 4 + 4 + 8/dp), 2 also the gradients, 3 also the weights.
// Activations per layer and micro-batch: what the CUDA backend keeps (backend/cuda/stage.cpp
// LayerActs; Korthikanti et al.'s "Reducing Activation Recomputation" layout without dropout
// masks), N = b·s/cp tokens of the context member. Neither backend has sequence parallelism or a
// vocabulary-parallel head yet (DESIGN.md §6 assumes both), so what lies outside the TP-split
// products is whole on every TP shard:
//   none       bf16 x, ln1, x2, ln2 (N·h each, whole), q, att_out (N·h/tp), k, v (N·h·g/(a·tp)), fc,
//              h (and llama's up) N·f/tp; fp32 mean and rstd of both norms (N each, whole) and
//              attention's log-sum-exp (a·N/tp): flash attention (Dao 2023) keeps it in place of
//              Korthikanti's 5as²b; with cp the keys and values seen, b·s·h·g/(a·tp) each (bf16)
//              for the last member.
//   selective  the same without the log-sum-exp (the core recomputed in backward)
//   full       2Nh (the layer's input only)
// times the micro-batches the stage holds in flight (its warm-up count). The head keeps, per
// micro-batch in flight, its input and norm output (N·h each), the norm's statistics and bf16
// logits N·V of the whole vocabulary. The backward's temporaries, once: the larger of the
// head's (the logits' gradient N·V, its input's and norm's gradients) and a layer's (its
// activations' gradients, bf16, attention's dq, dk, dv in fp32, the incoming gradient:
// N·(8h + 4f + 8q + 12kv) bytes, q = h/tp, kv = h·g/(a·tp), f = ffn/tp; with full recomputation
// plus the layer's whole set, recomputed).
//
// fp32 models are trained by the CPU backend (libexec/model; the CUDA backend trains bf16), and
// for them the model is what that backend allocates (issue 17), not Megatron's layout:
//   model state  weights 4 + gradients 4 + AdamW m, v 8 (sharded by ZeRO-1 over dp) and the
//                gradient sync's packed buffers of gradients and values, 8 (runtime/buckets.hpp:
//                the sync and the optimizer work on copies; the CUDA backend keeps them in host
//                memory, so they are not device memory there);
//   activations  per layer and micro-batch, the buffers model::BlockActs keeps (4 bytes each,
//                N = b·s/cp tokens, heads and channels / tp): x, ln1, x2, ln2 N·h each, q and
//                att_out N·h/tp, k and v N·h·g/(a·tp) (and with cp the keys and values seen,
//                b·s·h·g/(a·tp) each, for the last member), att b·(a/tp)·(s/cp)·s, fc and h
//                (and llama's up) N·f/tp, and mean and rstd of both norms 4N; selective drops att
//                and att_out; full keeps only the stage's input (N·h, not on the first stage),
//                and holds one micro-batch's whole set again while it recomputes it in backward;
//   per stage    tokens (first stage) and targets (last) 4N each; the head's input, norm output
//                N·h each, norm statistics 2N, and logits N·V per micro-batch in flight;
//   workspace    the backward's temporaries: one layer's gradients of its activations (as large
//                as the layer's whole set) and the head's gradient of the logits, N·V.
#include "spec/model.hpp"

namespace het::cost {

struct StageMemory {
  double weights = 0, gradients = 0, optimizer = 0;  // bytes per device
  double activations = 0;                            // all in-flight micro-batches
  double stage_buffers = 0;                          // bf16: the head's logits; fp32: tokens, targets, head buffers
  double sync_buffers = 0;                           // fp32 (CPU backend): packed gradients and values
  double recompute = 0;                              // full recompute (fp32): one micro-batch's set again
  double workspace = 0;                              // the backward's temporaries
  double read_ahead = 0;                             // fp32 (CPU backend): frames the transport read ahead
  double total() const {
    return weights + gradients + optimizer + sync_buffers + activations + stage_buffers + recompute + workspace + read_ahead;
  }
};

struct StageShape {
  double parameters = 0;      // parameters of the stage's units, before tp sharding
  double whole_parameters = 0;  // of them, those every TP shard holds whole (norms, embeddings)
  double layers = 0;          // transformer layers in the stage (sublayer units count 1/2)
  bool has_head = false;
  bool has_embedding = false;
  int tp = 1, cp = 1;
  int zero_dp = 1;            // size of the data-parallel group ZeRO shards over
  double sequences = 1;       // sequences per micro-batch on one device (micro_batch_size / dp)
  int in_flight = 1;          // micro-batches held at once (warm-up count)
  // Bytes that reach the rank before it needs them and wait in its transport (host memory) when
  // its memory peaks: the previous stage's activations (predict.cpp, Hop::most_received) and the
  // first chunk of the gradient sync its ring partner sends during its last backward.
  double read_ahead = 0;
  Recompute recompute = Recompute::none;
};

// Activation bytes of one layer for one micro-batch of `sequences` on one device.
double layer_activation_bytes(const ModelSpec& m, double sequences, int tp, int cp, Recompute r);
StageMemory stage_memory(const ModelSpec& m, const StageShape& shape);

}  // namespace het::cost
