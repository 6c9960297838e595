#pragma once
// Model FLOPs of the units (DESIGN.md §6), for b sequences of s tokens, before sharding.
// Per layer forward, with h hidden, f ffn, a heads, g kv-heads:
//   QKV 2bsh(h + 2hg/a), attention scores and values 4bs²h, output 2bsh²,
//   MLP 4bshf (gpt: up and down) or 6bshf (llama: gate, up, down).
// Head: 2bshV (logits). Backward is twice the forward. Embedding lookups cost no FLOPs.
// These are model FLOPs, as in MFU: recomputation is not counted here.
#include "spec/model.hpp"

namespace het::cost {

double attention_core_flops(const ModelSpec& m, double b, double s);  // 4bs²h
double layer_forward_flops(const ModelSpec& m, double b, double s);
double attn_forward_flops(const ModelSpec& m, double b, double s);     // sublayer unit: QKV + core + output
double mlp_forward_flops(const ModelSpec& m, double b, double s);      // sublayer unit
double head_forward_flops(const ModelSpec& m, double b, double s);
// Forward + backward model FLOPs of one training iteration's global batch (each bucket of
// model.seq_lengths at its length).
double iteration_model_flops(const ModelSpec& m);

}  // namespace het::cost
