#include "cost/flops.hpp"

namespace het::cost {

double attention_core_flops(const ModelSpec& m, double b, double s) { return 4 * b * s * s * m.hidden_size; }

double attn_forward_flops(const ModelSpec& m, double b, double s) {
  const double h = m.hidden_size, kv = h * m.num_kv_heads / m.num_attention_heads;
  return 2 * b * s * h * (h + 2 * kv) + attention_core_flops(m, b, s) + 2 * b * s * h * h;
}

double mlp_forward_flops(const ModelSpec& m, double b, double s) {
  const double matrices = m.architecture == Architecture::gpt ? 2 : 3;
  return 2 * matrices * b * s * m.hidden_size * double(m.ffn_hidden_size);
}

double layer_forward_flops(const ModelSpec& m, double b, double s) {
  return attn_forward_flops(m, b, s) + mlp_forward_flops(m, b, s);
}

double head_forward_flops(const ModelSpec& m, double b, double s) {
  return 2 * b * s * m.hidden_size * double(m.vocab_size);
}

double iteration_model_flops(const ModelSpec& m) {
  const auto buckets = length_buckets(m);
  double flops = 0;
  for (std::size_t k = 0; k < buckets.size(); ++k) {
    const double b = bucket_sequences(m, k), s = buckets[k].length;
    flops += 3 * (m.num_layers * layer_forward_flops(m, b, s) + head_forward_flops(m, b, s));
  }
  return flops;
}

}  // namespace het::cost
