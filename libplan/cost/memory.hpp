#pragma once
// Memory per device of a stage (DESIGN.md §6).
//
// Model state, per parameter on the device (the stage's parameters / tp):
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
#include "spec/model.hpp"

namespace het::cost {

struct StageMemory {
  double weights = 0, gradients = 0, optimizer = 0;  // bytes per device
  double activations = 0;                            // all in-flight micro-batches
  double logits = 0;                                 // head stage only
  double total() const { return weights + gradients + optimizer + activations + logits; }
};

struct StageShape {
  double parameters = 0;      // parameters of the stage's units, before tp sharding
  double layers = 0;          // transformer layers in the stage (sublayer units count 1/2)
  bool has_head = false;
  int tp = 1, cp = 1;
  int zero_dp = 1;            // size of the data-parallel group ZeRO shards over
  double sequences = 1;       // sequences per micro-batch on one device (micro_batch_size / dp)
  int in_flight = 1;          // micro-batches held at once (warm-up count)
  Recompute recompute = Recompute::none;
};

// Activation bytes of one layer for one micro-batch of `sequences` on one device.
double layer_activation_bytes(const ModelSpec& m, double sequences, int tp, int cp, Recompute r);
StageMemory stage_memory(const ModelSpec& m, const StageShape& shape);

}  // namespace het::cost
