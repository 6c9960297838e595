#include "profiler/profiler.hpp"

#include <algorithm>
#include <chrono>

#include "model/stage.hpp"

namespace het::profiler {

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

ProfileSpec profile_cpu(const ModelSpec& m, const Options& o) {
  ProfileSpec p;
  p.device = o.device;
  p.model = {m.architecture, m.hidden_size, m.num_attention_heads, m.seq_length};
  const model::AllReduce<float> none = [](float*, std::size_t) {};
  const int L = m.num_layers, T = m.seq_length, C = m.hidden_size;
  // Times one forward and backward of units [first, last] for b sequences (medians).
  auto measure = [&](int first, int last, int b) {
    model::StageModel<float> stage(m, first, last, 0, 1, 1);
    std::vector<int> tokens(std::size_t(b) * T), targets(tokens.size());
    std::vector<float> x(std::size_t(b) * T * C), dy(x.size());
    std::vector<double> fwd, bwd;
    for (int r = 0; r < o.repeats + 2; ++r) {  // two warm-up runs; fresh data every run
      for (std::size_t i = 0; i < tokens.size(); ++i)
        tokens[i] = int((i * 7 + std::size_t(r) * 13) % std::size_t(m.vocab_size)), targets[i] = int((i * 3 + std::size_t(r)) % std::size_t(m.vocab_size));
      for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * float((i + std::size_t(r)) % 17) - 0.08f, dy[i] = 1e-4f * float(i % 5);
      double loss = 0;
      const auto t0 = std::chrono::steady_clock::now();
      stage.forward(r, b, tokens.data(), x.data(), targets.data(), &loss, none);
      const auto t1 = std::chrono::steady_clock::now();
      stage.backward(r, dy.data(), 1.0 / (double(b) * T), none);
      const auto t2 = std::chrono::steady_clock::now();
      if (r >= 2) {
        fwd.push_back(std::chrono::duration<double>(t1 - t0).count());
        bwd.push_back(std::chrono::duration<double>(t2 - t1).count());
      }
    }
    return std::pair<double, double>{median(fwd), median(bwd)};
  };
  auto row = [&](UnitKind kind, int b, double f, double bw) {
    ProfileRow r;
    r.unit = kind;
    r.micro_batch_size = b;
    r.seq_length = T;
    r.forward = std::max(0.0, f) * o.slowdown;
    r.backward = std::max(0.0, bw) * o.slowdown;
    p.units.push_back(r);
  };
  for (int b : o.micro_batch_sizes) {
    // The embedding and the head alone; a layer as the whole model minus them, over L: a layer
    // alone stays in cache and runs faster than it does among the others.
    const auto emb = measure(0, 0, b), head = measure(L + 1, L + 1, b), whole = measure(0, L + 1, b);
    row(UnitKind::embedding, b, emb.first, emb.second);
    row(UnitKind::head, b, head.first, head.second);
    row(UnitKind::layer, b, (whole.first - emb.first - head.first) / L, (whole.second - emb.second - head.second) / L);
  }
  // The optimizer step per layer's parameters.
  {
    model::StageModel<float> stage(m, 1, L, 0, 1, 1);
    std::vector<double> t;
    for (int r = 0; r < o.repeats + 2; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      for (auto* param : stage.params()) model::adamw_step(*param, model::AdamW{}, r + 1);
      if (r >= 2) t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / L);
    }
    p.optimizer_step = median(t) * o.slowdown;
  }
  return p;
}

}  // namespace het::profiler
