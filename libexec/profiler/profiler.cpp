#include "profiler/profiler.hpp"

#include <chrono>
#include <thread>

#include "runtime/buckets.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>

namespace het::profiler {

Result<Profile> profile(backend::Backend& backend, const ModelSpec& m, const Options& o,
                        const std::function<void(const ProfileRow&, const Spread&)>& on_row) {
  for (int cp : o.cp)
    if (cp < 1 || m.seq_length % cp)
      return Diagnostic{"", 0, 0, "cp", "cp " + std::to_string(cp) + " does not divide the model's " + std::to_string(m.seq_length) + " time steps"};
  for (int tp : o.tp)
    if (tp < 1 || m.num_attention_heads % tp || m.num_kv_heads % tp || m.ffn_hidden_size % tp)
      return Diagnostic{"", 0, 0, "tp", "tp " + std::to_string(tp) + " does not divide the model's " +
                                            std::to_string(m.num_attention_heads) + " heads, " + std::to_string(m.num_kv_heads) +
                                            " kv heads and " + std::to_string(m.ffn_hidden_size) + " MLP channels"};
  Profile out;
  ProfileSpec& p = out.spec;
  p.device = o.device;
  p.model = profile_model(m);
  p.collectives_included = false;  // one shard's compute: comm is {} below
  const int L = m.num_layers, T = m.seq_length, C = m.hidden_size;
  // An interval's seconds without what reading the clock adds (a thread's CPU time costs a
  // system call: a third of an embedding's microsecond).
  const std::int64_t overhead = clock_overhead_ns(o.clock);
  auto seconds = [&](std::int64_t from, std::int64_t to) { return 1e-9 * double(std::max<std::int64_t>(0, to - from - overhead)); };

  // The points: per (tp, micro-batch) the embedding, the head and the whole model (units
  // [first, last]; forward and backward of b sequences), and the optimizer step.
  struct Point {
    int first = 0, last = 0, tp = 1, b = 0;
    bool optimizer = false;
    std::size_t activations = 0, parameters = 0;
    int cp = 1;
  };
  std::vector<Point> points;
  for (int tp : o.tp)
    for (int cp : o.cp)
      for (int b : o.micro_batch_sizes)
        for (auto [first, last] : {std::pair{0, 0}, std::pair{L + 1, L + 1}, std::pair{0, L + 1}})
          points.push_back({first, last, tp, b, false, 0, 0, cp});
  points.push_back({1, L, 1, 0, true});
  int optimizer_steps = 0;  // AdamW's step count, on over the rounds
  // Under time dilation, the pause after each timed operation that a dilated run takes after it
  // (runtime/pace.hpp: the operation stretched to X times its compute).
  auto dilate = [&](double compute_s) {
    if (o.time_dilation > 1) std::this_thread::sleep_for(std::chrono::duration<double>((o.time_dilation - 1) * compute_s));
  };
  // A dilated run also pauses inside an operation, at every TP or CP collective (the runtime's
  // Pace settles the compute before it: a TP stage's forward is as many stretches as it has
  // collectives), and each stretch starts as cold as after an operation's pause. The profile
  // pauses there too and leaves the pauses out of the operation's time (they are in it on the
  // wall clock): the mark of the stretch under way, the pauses since the operation began.
  std::int64_t mark = 0, paused = 0;
  auto begin_op = [&](std::int64_t t0) { mark = t0, paused = 0; };
  auto pause_inside = [&] {
    if (o.time_dilation <= 1) return;
    const std::int64_t now = nanoseconds_now(o.clock);
    dilate(seconds(mark, now));
    mark = nanoseconds_now(o.clock);
    paused += mark - now;
  };
  // An operation that began at t0 and ended at t1: its compute, after the last stretch's pause.
  auto end_op = [&](std::int64_t t0, std::int64_t t1) {
    dilate(seconds(mark, t1));
    return seconds(t0, t1 - paused);
  };
  // One round of a point: a fresh stage and the run that times it.
  auto start = [&](int index) -> std::function<std::vector<double>()> {
    Point& pt = points[std::size_t(index)];
    backend::StageSpec spec{m, pt.first, pt.last, 0, pt.tp, 1, Recompute::none, {}, {}};
    // CP: the last member (the most keys: its time steps see all before them); its K/V
    // exchanges copy its own part into every member's place (they are the cost model's).
    const int Tl = T / pt.cp;
    spec.comm.cp = pt.cp, spec.comm.cp_rank = pt.cp - 1;
    if (pt.tp > 1) spec.comm.tp_all_reduce = [&](float*, std::size_t) { pause_inside(); };
    spec.comm.cp_all_gather = [cp = pt.cp, &pause_inside](const float* mine, float* all, std::size_t n) {
      for (int c = 0; c < cp; ++c) std::copy_n(mine, n, all + std::size_t(c) * n);
      pause_inside();
    };
    spec.comm.cp_reduce_scatter = [cp = pt.cp, &pause_inside](const float* all, float* mine, std::size_t n) {
      pause_inside();
      std::copy_n(all + std::size_t(cp - 1) * n, n, mine);
    };
    std::shared_ptr<backend::Stage> stage = backend.make_stage(spec);
    pt.parameters = 0;
    for (auto* param : stage->params()) pt.parameters += param->value.size() * sizeof(float);
    if (pt.optimizer) {
      // Per layer's parameters, as the runtime takes it once per step (runtime/buckets.hpp, the
      // same code): the gradients made whole (on the host; a device backend keeps the step on
      // the device) and packed, AdamW, the values back, and zero_grad for the next step.
      auto buckets = std::make_shared<std::vector<runtime::Bucket>>();
      buckets->push_back(runtime::whole_bucket(stage->params()));
      if (auto moved = runtime::on_device(*buckets, *stage); !moved) throw std::runtime_error(moved.errors().front().message);
      return [&, stage, buckets]() -> std::vector<double> {
        runtime::Bucket* bucket = &buckets->front();
        const std::int64_t t0 = nanoseconds_now(o.clock);
        stage->finish_backward();
        const std::int64_t t1 = nanoseconds_now(o.clock);
        runtime::pack_gradients(*bucket);
        const std::int64_t t2 = nanoseconds_now(o.clock);
        runtime::update(*bucket, model::AdamW{}, ++optimizer_steps, false);
        const std::int64_t t3 = nanoseconds_now(o.clock);
        stage->zero_grad();
        const double t = seconds(t0, nanoseconds_now(o.clock));
        auto& parts = out.optimizer_parts;
        parts.to_host += seconds(t0, t1), parts.pack += seconds(t1, t2), parts.adamw += seconds(t2, t3), parts.zero_grad += t - seconds(t0, t3);
        dilate(t);
        return {t / L};
      };
    }
    struct Data {
      std::vector<int> tokens, targets;
      std::vector<float> x, dy;
      int r = 0;
    };
    auto d = std::make_shared<Data>();
    d->tokens.resize(std::size_t(pt.b) * Tl), d->targets.resize(d->tokens.size());
    d->x.resize(std::size_t(pt.b) * Tl * C), d->dy.resize(d->x.size());
    return [&, stage, d]() -> std::vector<double> {  // fresh data every run
      const std::size_t r = std::size_t(d->r);
      for (std::size_t i = 0; i < d->tokens.size(); ++i)
        d->tokens[i] = int((i * 7 + r * 13) % std::size_t(m.vocab_size)), d->targets[i] = int((i * 3 + r) % std::size_t(m.vocab_size));
      for (std::size_t i = 0; i < d->x.size(); ++i) d->x[i] = 0.01f * float((i + r) % 17) - 0.08f, d->dy[i] = 1e-4f * float(i % 5);
      double loss = 0;
      const std::int64_t t0 = nanoseconds_now(o.clock);
      begin_op(t0);
      stage->forward(d->r, pt.b, d->tokens.data(), d->x.data(), d->targets.data(), &loss);
      const double forward = end_op(t0, nanoseconds_now(o.clock));
      if (d->r == 0) pt.activations = stage->activation_bytes();  // held from the forward to the backward; in a warm-up run
      const std::int64_t t2 = nanoseconds_now(o.clock);
      begin_op(t2);
      stage->backward(d->r, d->dy.data(), 1.0 / (double(pt.b) * T));
      const double backward = end_op(t2, nanoseconds_now(o.clock));
      ++d->r;  // gradients accumulate over the runs, as over a step's micro-batches
      return {forward, backward};
    };
  };
  // The time cap is of this machine's time: under dilation X a point's runs take X times as long
  // on the wall clock, and a cap on that would leave a dilated point a few runs (the 18% spreads
  // of a tiny-gpt layer at micro-batch 4 under X = 16, where undilated it settles within 1%).
  StopRule rule = o.stop;
  rule.max_seconds *= std::max(1.0, o.time_dilation);
  const auto estimates = measure_in_rounds(int(points.size()), start, rule);

  int row_cp = 1;  // the cp of the rows being written
  auto row = [&](UnitKind kind, int tp, int b, double f, double bw, double act, double par, const Spread& spread) {
    ProfileRow r;
    r.unit = kind;
    r.tp = tp;
    r.cp = row_cp;
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
  auto spread_of = [](const std::vector<MedianEstimate>& e) { return Spread{e[0].spread, e[1].spread, std::min(e[0].runs, e[1].runs)}; };
  for (std::size_t i = 0; i + 1 < points.size(); i += 3) {
    const Point &emb = points[i], &head = points[i + 1], &whole = points[i + 2];
    const auto &e = estimates[i], &h = estimates[i + 1], &w = estimates[i + 2];
    const int tp = emb.tp, b = emb.b;
    row_cp = emb.cp;
    row(UnitKind::embedding, tp, b, e[0].median, e[1].median, double(emb.activations), double(emb.parameters), spread_of(e));
    row(UnitKind::head, tp, b, h[0].median, h[1].median, double(head.activations), double(head.parameters), spread_of(h));
    // A layer is (whole - embedding - head) / L: the three medians' uncertainties (half-widths)
    // are independent and add in quadrature.
    auto per_layer = [&](double whole_value, double emb_value, double head_value) { return (whole_value - emb_value - head_value) / L; };
    auto layer_spread = [&](int q) {
      const double layer = per_layer(w[q].median, e[q].median, h[q].median);
      const double half_width = std::hypot(w[q].spread * w[q].median, e[q].spread * e[q].median, h[q].spread * h[q].median) / L;
      return layer > 0 ? half_width / layer : std::numeric_limits<double>::infinity();
    };
    row(UnitKind::layer, tp, b, per_layer(w[0].median, e[0].median, h[0].median), per_layer(w[1].median, e[1].median, h[1].median),
        per_layer(double(whole.activations), double(emb.activations), double(head.activations)),
        per_layer(double(whole.parameters), double(emb.parameters), double(head.parameters)),
        Spread{layer_spread(0), layer_spread(1), std::min({w[0].runs, e[0].runs, h[0].runs})});
  }
  const auto& step = estimates.back()[0];
  p.optimizer_step = {{1, std::nullopt, step.median * o.slowdown}};  // a tp-1 stage's: its scaling is the cost model's
  out.optimizer_step = Spread{step.spread, step.spread, step.runs};
  return out;
}

}  // namespace het::profiler
