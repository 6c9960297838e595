#include "cost/memory.hpp"

#include <algorithm>

namespace het::cost {

namespace {

// fp32: the CPU backend's buffers (memory.hpp), in bytes.
struct CpuLayout {
  double layer = 0;      // per layer and micro-batch, as kept between forward and backward
  double layer_all = 0;  // the same without recomputation (what a recomputing backward holds)
};

CpuLayout cpu_layer(const ModelSpec& m, double b, int tp, int cp, Recompute r) {
  const double s = m.seq_length, h = m.hidden_size, f = m.ffn_hidden_size, a = m.num_attention_heads;
  const double g = m.num_kv_heads > 0 ? m.num_kv_heads : a;
  const double N = b * s / cp, kv = h * g / a / tp;
  double keep = 4 * N * h + N * h / tp + 2 * N * kv + 4 * N;  // x, ln1, x2, ln2; q; k, v; norm statistics
  keep += (m.architecture == Architecture::gpt ? 2 : 3) * N * f / tp;  // fc, h (and up)
  if (cp > 1) keep += 2 * b * s * kv;                                  // keys and values seen (last member)
  const double core = b * (a / tp) * (s / cp) * s + N * h / tp;        // att, att_out
  CpuLayout out;
  out.layer_all = 4 * (keep + core);
  out.layer = r == Recompute::none ? out.layer_all : r == Recompute::selective ? 4 * keep : 0;
  return out;
}

}  // namespace

double layer_activation_bytes(const ModelSpec& m, double b, int tp, int cp, Recompute r) {
  if (m.dtype == DType::fp32) return cpu_layer(m, b, tp, cp, r).layer;
  // bf16: the CUDA backend's LayerActs (backend/cuda/stage.cpp) per layer and micro-batch, of
  // the context member's N = b·s/cp tokens, 2 bytes each but the fp32 norm statistics and
  // log-sum-exp. Without sequence parallelism (neither backend has it yet) x, ln1, x2, ln2 and
  // the norm statistics are whole on every TP shard; q, att_out, k, v and the MLP's channels
  // are the shard's.
  const double s = m.seq_length, h = m.hidden_size, f = m.ffn_hidden_size, a = m.num_attention_heads;
  const double g = m.num_kv_heads > 0 ? m.num_kv_heads : a;
  const double N = s * b / cp, q = h / tp, kv = h * g / a / tp;
  if (r == Recompute::full) return 2 * N * h;  // the layer's input only
  double bytes = 2 * N * (4 * h + 2 * q + 2 * kv);                       // x, ln1, x2, ln2; q, att_out; k, v
  bytes += 2 * (m.architecture == Architecture::gpt ? 2 : 3) * N * f / tp;  // fc, h (and llama's up)
  bytes += 4 * 4 * N;                                                       // mean and rstd of both norms
  if (cp > 1) bytes += 2 * 2 * b * s * kv;  // the keys and values seen (the last member sees all s)
  // The attention core is flash attention (backend/cuda/flash_attention.cuh; Dao 2023): it
  // keeps its softmax's log-sum-exp, [b, a/tp, s/cp] fp32, in place of Korthikanti's 5as²b
  // (softmax, dropout mask, attention over values), and recomputes the rest in the backward.
  if (r == Recompute::none) bytes += 4 * N * a / tp;
  return bytes;
}

StageMemory stage_memory(const ModelSpec& m, const StageShape& st) {
  StageMemory mem;
  const double params = (st.parameters - st.whole_parameters) / st.tp + st.whole_parameters;
  const double wbytes = dtype_bytes(m.dtype);
  const bool cpu = m.dtype == DType::fp32;
  const int z = m.training.zero_stage;
  const double dp = st.zero_dp > 0 ? st.zero_dp : 1;
  mem.weights = params * wbytes / (z >= 3 ? dp : 1);
  mem.gradients = params * 4 / (z >= 2 ? dp : 1);  // fp32 for every dtype (the CUDA backend's, Megatron's main_grad)
  // AdamW's m and v, sharded by ZeRO-1; bf16: and the fp32 masters, which the CUDA backend keeps
  // whole on every rank (its sync buckets: the all-gather moves fp32 values into them).
  mem.optimizer = params * 8 / (z >= 1 ? dp : 1) + (cpu ? 0 : params * 4);
  mem.activations = st.in_flight * st.layers * layer_activation_bytes(m, st.sequences, st.tp, st.cp, st.recompute);
  if (!cpu) {
    // The head (backend/cuda/stage.cpp Acts): per micro-batch in flight its input and norm output,
    // the norm's statistics and the bf16 logits, of the whole vocabulary on every TP shard.
    const double N = st.sequences * m.seq_length / st.cp, h = m.hidden_size, V = double(m.vocab_size);
    if (st.has_head) mem.stage_buffers = st.in_flight * (2 * N * V + 4 * N * h + 8 * N);
    // The backward's temporaries (CudaStage::backward), the larger of the head's — the logits'
    // gradient, the losses, the gradients of the norm's output and input — and a layer's
    // (layer_backward): the bf16 gradients of x2, h, fc, ln2, att_out, q, k, v and ln1 (llama's
    // up is freed before the attention's part), attention's fp32 dq, dk, dv, and the incoming
    // gradient; a fully recomputing layer holds its whole set again meanwhile (recall).
    const double head = st.has_head ? 2 * N * V + 4 * N + 4 * N * h : 0;
    double layer = 0;
    if (st.layers > 0) {
      const double a = m.num_attention_heads, g = m.num_kv_heads > 0 ? m.num_kv_heads : a;
      const double q = h / st.tp, kv = h * g / a / st.tp, f = double(m.ffn_hidden_size) / st.tp;
      layer = N * (2 * (3 * h + 2 * f + 2 * q + 2 * kv) + 4 * (q + 2 * kv) + 2 * h);
      if (st.recompute == Recompute::full)  // the set again, but its input x, which is the kept one moved
        layer += layer_activation_bytes(m, st.sequences, st.tp, st.cp, Recompute::none) -
                 layer_activation_bytes(m, st.sequences, st.tp, st.cp, Recompute::full);
    }
    mem.workspace = std::max(head, layer);
    return mem;
  }
  mem.sync_buffers = params * 8;
  const double N = st.sequences * m.seq_length / st.cp, h = m.hidden_size;
  double per_mb = 0;  // the stage's own buffers per micro-batch in flight
  if (st.has_embedding) per_mb += 4 * N;                                               // tokens
  if (st.has_head) per_mb += 4 * N + 4 * (2 * N * h + 2 * N + N * double(m.vocab_size));  // targets; head
  if (st.recompute == Recompute::full && !st.has_embedding) per_mb += 4 * N * h;       // the kept input
  mem.stage_buffers = st.in_flight * per_mb;
  const double layer_all = cpu_layer(m, st.sequences, st.tp, st.cp, st.recompute).layer_all;
  if (st.recompute == Recompute::full && st.in_flight > 0) mem.recompute = st.layers * layer_all;
  // The backward's temporaries: a layer's gradients of its activations (one set, as large as
  // what the layer keeps without recomputation), and the head's gradient of its logits.
  mem.workspace = (st.layers > 0 ? layer_all : 0) + (st.has_head ? 4 * N * double(m.vocab_size) : 0);
  mem.read_ahead = st.read_ahead;
  return mem;
}

}  // namespace het::cost
