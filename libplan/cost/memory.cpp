#include "cost/memory.hpp"

namespace het::cost {

double layer_activation_bytes(const ModelSpec& m, double b, int tp, int cp, Recompute r) {
  const double s = m.seq_length, h = m.hidden_size, f = m.ffn_hidden_size, a = m.num_attention_heads;
  const double sbh = s * b * h;
  if (r == Recompute::full) return 2 * sbh / (tp * cp);
  const double mlp = m.architecture == Architecture::gpt ? 3 * sbh + 4 * s * b * f : 2 * sbh + 8 * s * b * f;
  double bytes = 11 * sbh + 4 * sbh + mlp;  // attention (without the core), LayerNorms, MLP
  // The core's softmax, its dropout mask and the attention over values: 5as²b (per cp
  // rank it holds its s/cp queries against all keys, so it divides by cp like the rest).
  if (r == Recompute::none) bytes += 5 * a * s * s * b;
  return bytes / (tp * cp);
}

StageMemory stage_memory(const ModelSpec& m, const StageShape& st) {
  StageMemory mem;
  const double params = st.parameters / st.tp;
  const double wbytes = dtype_bytes(m.dtype);
  const double opt_bytes = m.dtype == DType::fp32 ? 8 : 12;
  const int z = m.training.zero_stage;
  const double dp = st.zero_dp > 0 ? st.zero_dp : 1;
  mem.weights = params * wbytes / (z >= 3 ? dp : 1);
  mem.gradients = params * wbytes / (z >= 2 ? dp : 1);
  mem.optimizer = params * opt_bytes / (z >= 1 ? dp : 1);
  mem.activations = st.in_flight * st.layers * layer_activation_bytes(m, st.sequences, st.tp, st.cp, st.recompute);
  if (st.has_head) mem.logits = 4 * st.sequences * m.seq_length * double(m.vocab_size) / (st.tp * st.cp);
  return mem;
}

}  // namespace het::cost
