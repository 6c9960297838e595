#include "profiler/profiler.hpp"

#include <algorithm>
#include <chrono>


namespace het::profiler {

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

Result<ProfileSpec> profile(backend::Backend& backend, const ModelSpec& m, const Options& o,
                            const std::function<void(const ProfileRow&)>& on_row) {
  for (int tp : o.tp)
    if (tp < 1 || m.num_attention_heads % tp || m.num_kv_heads % tp || m.ffn_hidden_size % tp)
      return Diagnostic{"", 0, 0, "tp", "tp " + std::to_string(tp) + " does not divide the model's " +
                                            std::to_string(m.num_attention_heads) + " heads, " + std::to_string(m.num_kv_heads) +
                                            " kv heads and " + std::to_string(m.ffn_hidden_size) + " MLP channels"};
  ProfileSpec p;
  p.device = o.device;
  p.model = profile_model(m);
  p.collectives_included = false;  // one shard's compute: comm is {} below
  const int L = m.num_layers, T = m.seq_length, C = m.hidden_size;
  struct Point {
    double forward, backward;
    std::size_t activations, parameters;
  };
  // Times one forward and backward of units [first, last] for b sequences (medians).
  auto measure = [&](int first, int last, int tp, int b) {
    backend::StageSpec spec{m, first, last, 0, tp, 1, Recompute::none, {}};
    const auto stage = backend.make_stage(spec);
    std::vector<int> tokens(std::size_t(b) * T), targets(tokens.size());
    std::vector<float> x(std::size_t(b) * T * C), dy(x.size());
    std::vector<double> fwd, bwd;
    std::size_t activations = 0, parameters = 0;
    for (auto* param : stage->params()) parameters += param->value.size() * sizeof(float);
    for (int r = 0; r < o.repeats + 2; ++r) {  // two warm-up runs; fresh data every run
      for (std::size_t i = 0; i < tokens.size(); ++i)
        tokens[i] = int((i * 7 + std::size_t(r) * 13) % std::size_t(m.vocab_size)), targets[i] = int((i * 3 + std::size_t(r)) % std::size_t(m.vocab_size));
      for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * float((i + std::size_t(r)) % 17) - 0.08f, dy[i] = 1e-4f * float(i % 5);
      double loss = 0;
      const auto t0 = std::chrono::steady_clock::now();
      stage->forward(r, b, tokens.data(), x.data(), targets.data(), &loss);
      const auto t1 = std::chrono::steady_clock::now();
      activations = stage->activation_bytes();
      stage->backward(r, dy.data(), 1.0 / (double(b) * T));
      const auto t2 = std::chrono::steady_clock::now();
      if (r >= 2) {
        fwd.push_back(std::chrono::duration<double>(t1 - t0).count());
        bwd.push_back(std::chrono::duration<double>(t2 - t1).count());
      }
    }
    return Point{median(fwd), median(bwd), activations, parameters};
  };
  auto row = [&](UnitKind kind, int tp, int b, double f, double bw, double act, double par) {
    ProfileRow r;
    r.unit = kind;
    r.tp = tp;
    r.micro_batch_size = b;
    r.seq_length = T;
    r.forward = std::max(0.0, f) * o.slowdown;
    r.backward = std::max(0.0, bw) * o.slowdown;
    r.recompute = r.forward;
    r.activation_memory = std::max(0.0, act);
    r.parameter_memory = std::max(0.0, par);
    p.units.push_back(r);
    if (on_row) on_row(r);
  };
  for (int tp : o.tp)
    for (int b : o.micro_batch_sizes) {
      const Point emb = measure(0, 0, tp, b), head = measure(L + 1, L + 1, tp, b), whole = measure(0, L + 1, tp, b);
      row(UnitKind::embedding, tp, b, emb.forward, emb.backward, double(emb.activations), double(emb.parameters));
      row(UnitKind::head, tp, b, head.forward, head.backward, double(head.activations), double(head.parameters));
      auto per_layer = [&](double w, double e, double h) { return (w - e - h) / L; };
      row(UnitKind::layer, tp, b, per_layer(whole.forward, emb.forward, head.forward),
          per_layer(whole.backward, emb.backward, head.backward),
          per_layer(double(whole.activations), double(emb.activations), double(head.activations)),
          per_layer(double(whole.parameters), double(emb.parameters), double(head.parameters)));
    }
  // The optimizer step per layer's parameters, as the runtime takes it once per step: the
  // gradients made whole on the host (a device backend copies them there), AdamW, and the
  // values back for the next step (zero_grad: a device backend uploads them).
  {
    backend::StageSpec spec{m, 1, L, 0, 1, 1, Recompute::none, {}};
    const auto stage = backend.make_stage(spec);
    std::vector<double> t;
    for (int r = 0; r < o.repeats + 2; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      stage->finish_backward();
      for (auto* param : stage->params()) model::adamw_step(*param, model::AdamW{}, r + 1);
      stage->zero_grad();
      if (r >= 2) t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / L);
    }
    p.optimizer_step = {{1, std::nullopt, median(t) * o.slowdown}};  // a tp-1 stage's: its scaling is the cost model's
  }
  return p;
}

}  // namespace het::profiler
