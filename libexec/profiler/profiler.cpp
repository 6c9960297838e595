#include "profiler/profiler.hpp"

#include <algorithm>
#include <cmath>

namespace het::profiler {

Result<Profile> profile(backend::Backend& backend, const ModelSpec& m, const Options& o,
                        const std::function<void(const ProfileRow&, const Spread&)>& on_row) {
  for (int tp : o.tp)
    if (tp < 1 || m.num_attention_heads % tp || m.num_kv_heads % tp || m.ffn_hidden_size % tp)
      return Diagnostic{"", 0, 0, "tp", "tp " + std::to_string(tp) + " does not divide the model's " +
                                            std::to_string(m.num_attention_heads) + " heads, " + std::to_string(m.num_kv_heads) +
                                            " kv heads and " + std::to_string(m.ffn_hidden_size) + " MLP channels"};
  Profile out;
  ProfileSpec& p = out.spec;
  p.device = o.device;
  p.model = profile_model(m);
  const int L = m.num_layers, T = m.seq_length, C = m.hidden_size;
  // An interval's seconds without what reading the clock adds (a thread's CPU time costs a
  // system call: a third of an embedding's microsecond).
  const std::int64_t overhead = clock_overhead_ns(o.clock);
  auto seconds = [&](std::int64_t from, std::int64_t to) { return 1e-9 * double(std::max<std::int64_t>(0, to - from - overhead)); };
  struct Point {
    MedianEstimate forward, backward;
    std::size_t activations, parameters;
  };
  // Times forward and backward of units [first, last] for b sequences until their medians are
  // known (o.stop).
  auto measure_point = [&](int first, int last, int tp, int b) {
    backend::StageSpec spec{m, first, last, 0, tp, 1, Recompute::none, {}};
    const auto stage = backend.make_stage(spec);
    std::vector<int> tokens(std::size_t(b) * T), targets(tokens.size());
    std::vector<float> x(std::size_t(b) * T * C), dy(x.size());
    std::size_t activations = 0, parameters = 0;
    for (auto* param : stage->params()) parameters += param->value.size() * sizeof(float);
    int r = 0;
    auto once = [&]() -> std::vector<double> {  // fresh data every run
      for (std::size_t i = 0; i < tokens.size(); ++i)
        tokens[i] = int((i * 7 + std::size_t(r) * 13) % std::size_t(m.vocab_size)), targets[i] = int((i * 3 + std::size_t(r)) % std::size_t(m.vocab_size));
      for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * float((i + std::size_t(r)) % 17) - 0.08f, dy[i] = 1e-4f * float(i % 5);
      double loss = 0;
      const std::int64_t t0 = nanoseconds_now(o.clock);
      stage->forward(r, b, tokens.data(), x.data(), targets.data(), &loss);
      const std::int64_t t1 = nanoseconds_now(o.clock);
      if (r == 0) activations = stage->activation_bytes();  // held from the forward to the backward; in a warm-up run
      stage->backward(r, dy.data(), 1.0 / (double(b) * T));
      const std::int64_t t2 = nanoseconds_now(o.clock);
      ++r;  // gradients accumulate over the runs, as over a step's micro-batches
      return {seconds(t0, t1), seconds(t1, t2)};
    };
    const auto e = measure(once, o.stop);
    return Point{e[0], e[1], activations, parameters};
  };
  auto row = [&](UnitKind kind, int tp, int b, double f, double bw, double act, double par, const Spread& spread) {
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
    out.spread.push_back(spread);
    if (on_row) on_row(r, spread);
  };
  auto spread_of = [](const Point& point) {
    return Spread{point.forward.spread, point.backward.spread, std::min(point.forward.runs, point.backward.runs)};
  };
  for (int tp : o.tp)
    for (int b : o.micro_batch_sizes) {
      const Point emb = measure_point(0, 0, tp, b), head = measure_point(L + 1, L + 1, tp, b), whole = measure_point(0, L + 1, tp, b);
      row(UnitKind::embedding, tp, b, emb.forward.median, emb.backward.median, double(emb.activations), double(emb.parameters),
          spread_of(emb));
      row(UnitKind::head, tp, b, head.forward.median, head.backward.median, double(head.activations), double(head.parameters),
          spread_of(head));
      // A layer is (whole - embedding - head) / L: the three medians' uncertainties (half-widths)
      // are independent and add in quadrature.
      auto per_layer = [&](double w, double e, double h) { return (w - e - h) / L; };
      auto layer_spread = [&](const MedianEstimate& w, const MedianEstimate& e, const MedianEstimate& h) {
        const double layer = per_layer(w.median, e.median, h.median);
        const double half_width = std::hypot(w.spread * w.median, e.spread * e.median, h.spread * h.median) / L;
        return layer > 0 ? half_width / layer : std::numeric_limits<double>::infinity();
      };
      row(UnitKind::layer, tp, b, per_layer(whole.forward.median, emb.forward.median, head.forward.median),
          per_layer(whole.backward.median, emb.backward.median, head.backward.median),
          per_layer(double(whole.activations), double(emb.activations), double(head.activations)),
          per_layer(double(whole.parameters), double(emb.parameters), double(head.parameters)),
          Spread{layer_spread(whole.forward, emb.forward, head.forward), layer_spread(whole.backward, emb.backward, head.backward),
                 std::min({whole.forward.runs, emb.forward.runs, head.forward.runs})});
    }
  // The optimizer step per layer's parameters, as the runtime takes it once per step: the
  // gradients made whole on the host (a device backend copies them there), AdamW, and the
  // values back for the next step (zero_grad: a device backend uploads them).
  {
    backend::StageSpec spec{m, 1, L, 0, 1, 1, Recompute::none, {}};
    const auto stage = backend.make_stage(spec);
    int step = 0;
    const auto e = measure(
        [&]() -> std::vector<double> {
          const std::int64_t t0 = nanoseconds_now(o.clock);
          stage->finish_backward();
          for (auto* param : stage->params()) model::adamw_step(*param, model::AdamW{}, ++step);
          stage->zero_grad();
          return {seconds(t0, nanoseconds_now(o.clock)) / L};
        },
        o.stop);
    p.optimizer_step = {{1, std::nullopt, e[0].median * o.slowdown}};  // a tp-1 stage's: its scaling is the cost model's
    out.optimizer_step = Spread{e[0].spread, e[0].spread, e[0].runs};
  }
  return out;
}

}  // namespace het::profiler
