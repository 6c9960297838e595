#pragma once
// Memory per device of a stage (DESIGN.md §6).
//
// Model state, per parameter on the device (the stage's parameters split over tp, but for
// those every TP shard holds whole):
//   weights (dtype bytes) + gradients (dtype bytes) + mixed-precision Adam state (fp32
//   master copy, m and v: 12 bytes; for fp32 training the weights are the master copy: 8),
//   i.e. 16 bytes per parameter for bf16/fp16. ZeRO shards over the data-parallel group:
//   stage 1 the optimizer state, 2 also the gradients, 3 also the weights.
// Activations per layer and micro-batch (Korthikanti et al., "Reducing Activation
// Recomputation", with sequence parallelism so everything divides by tp; and by cp):
//   none       sbh(34 + 5as/h) bytes for a gpt layer (attention 11sbh + 5as²b, LayerNorms
//              4sbh, MLP 19sbh); for other MLPs the MLP term is 3sbh + 4sbf (gpt) or
//              2sbh + 8sbf (llama SwiGLU)
//   selective  the same without the attention core's 5as²b (recomputed in backward)
//   full       2sbh (the layer's input only)
// times the micro-batches the stage holds in flight (its warm-up count). The head keeps
// fp32 logits, 4·b·s·V/tp bytes, for one micro-batch.
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
  double workspace = 0;                              // fp32 (CPU backend): the backward's temporaries
  double read_ahead = 0;                             // fp32 (CPU backend): activations the transport read ahead
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
  // Bytes of the previous stage's activations that reach the rank before it needs them and wait
  // in its transport (host memory) when the rank's memory peaks: see predict::read_ahead_bytes.
  double read_ahead = 0;
  Recompute recompute = Recompute::none;
};

// Activation bytes of one layer for one micro-batch of `sequences` on one device.
double layer_activation_bytes(const ModelSpec& m, double sequences, int tp, int cp, Recompute r);
StageMemory stage_memory(const ModelSpec& m, const StageShape& shape);

}  // namespace het::cost
