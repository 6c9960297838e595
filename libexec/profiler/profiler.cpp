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
  struct Unit {
    UnitKind kind;
    int first, last;
  };
  // A layer is timed inside the model's whole stack of layers and the time divided by their
  // number: one layer alone stays in cache and runs faster than it does in a real stage.
  for (const Unit u : {Unit{UnitKind::embedding, 0, 0}, Unit{UnitKind::layer, 1, L}, Unit{UnitKind::head, L + 1, L + 1}}) {
    const double per = u.kind == UnitKind::layer ? 1.0 / L : 1.0;
    model::StageModel<float> stage(m, u.first, u.last, 0, 1, 1);
    for (int b : o.micro_batch_sizes) {
      std::vector<int> tokens(std::size_t(b) * T), targets(tokens.size());
      for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = int(i * 7 % std::size_t(m.vocab_size)), targets[i] = int(i * 3 % std::size_t(m.vocab_size));
      std::vector<float> x(std::size_t(b) * T * C, 0.01f), dy(x.size(), 0.001f);
      std::vector<double> fwd, bwd;
      for (int r = 0; r < o.repeats + 2; ++r) {  // two warm-up runs
        double loss = 0;
        const auto t0 = std::chrono::steady_clock::now();
        stage.forward(0, b, tokens.data(), x.data(), targets.data(), &loss, none);
        const auto t1 = std::chrono::steady_clock::now();
        stage.backward(0, dy.data(), 1.0 / (double(b) * T), none);
        const auto t2 = std::chrono::steady_clock::now();
        if (r >= 2) {
          fwd.push_back(std::chrono::duration<double>(t1 - t0).count());
          bwd.push_back(std::chrono::duration<double>(t2 - t1).count());
        }
      }
      ProfileRow row;
      row.unit = u.kind;
      row.micro_batch_size = b;
      row.seq_length = T;
      row.forward = median(fwd) * o.slowdown * per;
      row.backward = median(bwd) * o.slowdown * per;
      p.units.push_back(row);
    }
  }
  return p;
}

}  // namespace het::profiler
