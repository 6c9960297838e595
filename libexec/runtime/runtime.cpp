#include "runtime/runtime.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <numeric>
#include <set>
#include <stdexcept>
#include <thread>

#include "model/stage.hpp"
#include "schedule/schedule.hpp"

namespace het::runtime {

namespace {

enum Tag : std::uint32_t { kActivation = 1, kGradient = 2, kTensorParallel = 3, kSync = 4, kLoss = 5, kContext = 6 };

// Parameters split across TP shards; the others are whole on every shard.
bool sharded(const std::string& name) {
  const auto dot = name.rfind('.');
  const std::string base = dot == std::string::npos ? name : name.substr(dot + 1);
  static const std::set<std::string> names = {"wq", "wk", "wv", "wo", "bq", "bk", "bv", "wfc", "bfc", "wproj",
                                              "wgate", "wup", "wdown"};
  return names.count(base) > 0;
}

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void check(const std::string& err) {
  if (!err.empty()) throw Failure(err);
}

}  // namespace

std::vector<RankPlace> ranks_of(const Plan& plan) {
  std::vector<RankPlace> out;
  for (std::size_t p = 0; p < plan.pipelines.size(); ++p)
    for (std::size_t s = 0; s < plan.pipelines[p].stages.size(); ++s) {
      const Stage& st = plan.pipelines[p].stages[s];
      for (int d = 0; d < st.dp; ++d)
        for (int c = 0; c < st.cp; ++c)
          for (int t = 0; t < st.tp; ++t) out.push_back({int(p), int(s), d, c, t});
    }
  return out;
}

std::string unsupported(const Plan& plan) {
  if (plan.granularity != Granularity::layer) return "the CPU runtime runs layer-granular plans only";
  if (plan.model.training.zero_stage >= 3)
    return "ZeRO stage 3 (parameter partitioning) is not supported by the runtime; use zero_stage 0, 1 or 2";
  // Units held with different TP are synced in chunks of the finest sharding: its degree (the
  // lcm of the TP degrees) must split the heads, kv heads and MLP channels.
  std::map<int, int> finest;
  for (const auto& p : plan.pipelines)
    for (const auto& s : p.stages)
      for (int u = s.first; u <= s.last; ++u) finest[u] = std::lcm(finest.count(u) ? finest[u] : 1, s.tp);
  const ModelSpec& m = plan.model;
  for (auto [u, f] : finest)
    if (m.num_attention_heads % f || m.num_kv_heads % f || m.ffn_hidden_size % f)
      return "unit " + std::to_string(u) + " is held with TP degrees whose lcm " + std::to_string(f) +
             " does not divide the heads, kv heads and MLP channels; the gradient sync cannot chunk it";
  return "";
}

Result<std::vector<StepReport>> run_rank(const Plan& plan, transport::Peers& peers, backend::Backend& backend,
                                         const data::Batches& batches, const Options& opt,
                                         const std::function<void(const StepReport&)>& on_step) {
  const auto places = ranks_of(plan);
  const int me = peers.rank();
  const RankPlace here = places[std::size_t(me)];
  std::map<std::tuple<int, int, int, int, int>, int> rank_at;
  for (std::size_t r = 0; r < places.size(); ++r)
    rank_at[{places[r].pipeline, places[r].stage, places[r].replica, places[r].context, places[r].shard}] = int(r);
  auto rank = [&](int p, int s, int d, int c, int t) { return rank_at.at({p, s, d, c, t}); };
  auto stage_of = [&](int r) -> const Stage& {
    return plan.pipelines[std::size_t(places[std::size_t(r)].pipeline)].stages[std::size_t(places[std::size_t(r)].stage)];
  };

  const Pipeline& pipe = plan.pipelines[std::size_t(here.pipeline)];
  const Stage& st = pipe.stages[std::size_t(here.stage)];
  const int S = static_cast<int>(pipe.stages.size());
  const int Tn = plan.model.seq_length, C = plan.model.hidden_size;
  const int G = plan.model.training.global_batch_size;
  const int m = pipe.num_microbatches, mbs = pipe.micro_batch_size;
  int offset = 0;  // first sequence of this pipeline in the global batch
  for (int q = 0; q < here.pipeline; ++q) offset += plan.pipelines[std::size_t(q)].micro_batch_size * plan.pipelines[std::size_t(q)].num_microbatches;
  const int b = mbs / st.dp, Tl = Tn / st.cp;
  const int row0 = here.replica * b, t0 = here.context * Tl;  // my block: sequences [row0, row0 + b) × time [t0, t0 + Tl)
  const bool first = here.stage == 0, last = here.stage == S - 1;

  // The stage's groups: TP shards of my (replica, member); context members of my (replica,
  // shard), ordered so that after a reduce-scatter member c owns chunk c (transport::owned_chunk).
  std::vector<int> tp_group, cp_ring;
  for (int t = 0; t < st.tp; ++t) tp_group.push_back(rank(here.pipeline, here.stage, here.replica, here.context, t));
  for (int k = 1; k <= st.cp; ++k) cp_ring.push_back(rank(here.pipeline, here.stage, here.replica, k % st.cp, here.shard));
  std::unique_ptr<collective::Fabric> own_fabric;
  collective::Fabric* fabric = opt.fabric;
  if (fabric == nullptr) fabric = (own_fabric = std::make_unique<collective::Fabric>(peers)).get();
  auto tp_comm = fabric->group(tp_group, kTensorParallel);
  if (!tp_comm) return tp_comm.errors();
  backend::StageSpec spec{plan.model, st.first, st.last, here.shard, st.tp, opt.seed, st.recompute, {}};
  spec.comm.tp_all_reduce = [&, tp = *tp_comm](float* data, std::size_t n) { check(tp->all_reduce_sum(data, n)); };
  spec.comm.cp_rank = here.context, spec.comm.cp = st.cp;
  spec.comm.cp_all_gather = [&](const float* mine, float* all, std::size_t n) {
    std::copy_n(mine, n, all + std::size_t(here.context) * n);
    check(transport::all_gather(peers, cp_ring, all, n * std::size_t(st.cp), kContext));
  };
  spec.comm.cp_reduce_scatter = [&](const float* all, float* mine, std::size_t n) {
    std::vector<float> buf(all, all + n * std::size_t(st.cp));
    check(transport::reduce_scatter_sum(peers, cp_ring, buf.data(), buf.size(), kContext));
    std::copy_n(buf.data() + std::size_t(here.context) * n, n, mine);
  };
  const std::unique_ptr<backend::Stage> model = backend.make_stage(spec);

  // The blocks of a neighbouring stage overlapping mine: sequences [lo, hi) × time [tlo, thi).
  struct Overlap {
    int replica, context, lo, hi, tlo, thi;
  };
  auto overlaps = [&](int other_stage) {
    std::vector<Overlap> out;
    const Stage& o = pipe.stages[std::size_t(other_stage)];
    const int ob = mbs / o.dp, oT = Tn / o.cp;
    for (int d = 0; d < o.dp; ++d)
      for (int c = 0; c < o.cp; ++c) {
        const int lo = std::max(row0, d * ob), hi = std::min(row0 + b, (d + 1) * ob);
        const int tlo = std::max(t0, c * oT), thi = std::min(t0 + Tl, (c + 1) * oT);
        if (lo < hi && tlo < thi) out.push_back({d, c, lo, hi, tlo, thi});
      }
    return out;
  };
  // An overlap's elements of my [b, Tl, C] tensor, packed row by row, and back.
  auto pack = [&](const std::vector<float>& y, const Overlap& o) {
    std::vector<float> out;
    out.reserve(std::size_t(o.hi - o.lo) * std::size_t(o.thi - o.tlo) * C);
    for (int r = o.lo; r < o.hi; ++r) {
      const float* src = y.data() + (std::size_t(r - row0) * Tl + std::size_t(o.tlo - t0)) * C;
      out.insert(out.end(), src, src + std::size_t(o.thi - o.tlo) * C);
    }
    return out;
  };
  auto unpack = [&](const std::vector<float>& in, const Overlap& o, std::vector<float>& x) {
    const std::size_t run = std::size_t(o.thi - o.tlo) * C;
    for (int r = o.lo; r < o.hi; ++r)
      std::copy_n(in.data() + std::size_t(r - o.lo) * run, run, x.data() + (std::size_t(r - row0) * Tl + std::size_t(o.tlo - t0)) * C);
  };
  auto elements = [&](const Overlap& o) { return std::size_t(o.hi - o.lo) * std::size_t(o.thi - o.tlo) * C; };
  // Receives every overlapping block of `other_stage` into a [b, Tl, C] tensor.
  auto receive = [&](int other_stage, std::uint32_t tag) {
    std::vector<float> x(std::size_t(b) * Tl * C);
    const int otp = pipe.stages[std::size_t(other_stage)].tp;
    std::vector<float> buf;
    for (const auto& o : overlaps(other_stage)) {
      buf.resize(elements(o));
      check(peers.recv(rank(here.pipeline, other_stage, o.replica, o.context, here.shard % otp), tag, buf.data(), buf.size() * sizeof(float)));
      unpack(buf, o, x);
    }
    return x;
  };
  // Sends my blocks to every overlapping rank of `other_stage` whose TP shard reads from mine.
  auto send = [&](int other_stage, std::uint32_t tag, const std::vector<float>& y) {
    const int otp = pipe.stages[std::size_t(other_stage)].tp;
    for (const auto& o : overlaps(other_stage)) {
      const std::vector<float> block = pack(y, o);
      for (int t = 0; t < otp; ++t)
        if (t % st.tp == here.shard)
          peers.send(rank(here.pipeline, other_stage, o.replica, o.context, t), tag, block.data(), block.size() * sizeof(float));
    }
  };

  // Warm-ups: the plan's, else the schedule's own (1f1b).
  std::vector<int> warmup(static_cast<std::size_t>(S));
  for (int s = 0; s < S; ++s) warmup[std::size_t(s)] = pipe.stages[std::size_t(s)].warmup.value_or(S - s);
  const auto ops = schedule::stage_ops(warmup[std::size_t(here.stage)], m);

  // Gradient sync: each parameter is summed over all ranks holding the same part of it. A
  // TP-sharded parameter held with different TP degrees (pipelines of different TP) is synced
  // in chunks of the finest sharding, F = lcm of the holders' tp (HexiScale §3.2; Hetu's
  // SplitAR): chunk c is held by the shard c / (F / tp) of every holder. The optimizer runs
  // per chunk on the part of it this rank owns: all of it, or with ZeRO its 1/|group|.
  struct SyncChunk {
    std::vector<int> group;
    model::Param<float>* param;
    collective::Group* comm = nullptr;  // over `group`, set once the chunks are sorted
    int chunk;
    std::vector<std::size_t> elements;  // local indices of the chunk in param->value
    float weight = 1;                   // 1/tp for a copy every TP shard holds whole
    std::size_t lo = 0, hi = 0;         // the owned part: elements[lo, hi)
    std::vector<float> m, v;            // AdamW moments of the owned part
  };
  std::vector<SyncChunk> sync;
  auto holds = [&](const Stage& o, const std::string& n) {
    if (n.rfind("layer", 0) == 0) {
      const int layer = std::stoi(n.substr(5, n.find('.') - 5));
      return o.first <= layer + 1 && layer + 1 <= o.last;
    }
    if (n == "wte") return o.first == 0 || (o.last == plan.model.num_layers + 1 && plan.model.architecture == Architecture::gpt);
    if (n == "wpe") return o.first == 0;
    return o.last == plan.model.num_layers + 1;  // lnf_w, lnf_b, wout
  };
  for (auto* param : model->params()) {
    const std::string& n = param->name;
    std::vector<int> holders;
    int F = 1;
    for (std::size_t r = 0; r < places.size(); ++r) {
      const Stage& o = stage_of(int(r));
      if (!holds(o, n)) continue;
      holders.push_back(int(r));
      F = std::lcm(F, o.tp);
    }
    std::vector<std::size_t> all(param->value.size());
    std::iota(all.begin(), all.end(), std::size_t(0));
    if (!sharded(n)) {
      sync.push_back({holders, param, nullptr, 0, std::move(all), 1.0f / float(st.tp), 0, 0, {}, {}});
      continue;
    }
    const int per = F / st.tp;  // my chunks: [shard·per, (shard+1)·per)
    const std::string base = n.substr(n.rfind('.') + 1);
    const bool columns = base == "wo" || base == "wproj" || base == "wdown";  // [C, local cols]
    const std::size_t local = param->value.size();
    for (int k = 0; k < per; ++k) {
      const int c = here.shard * per + k;
      SyncChunk chunk{{}, param, nullptr, c, {}, 1.0f, 0, 0, {}, {}};
      for (int r : holders)
        if (places[std::size_t(r)].shard == c / (F / stage_of(r).tp)) chunk.group.push_back(r);
      if (columns) {
        const std::size_t rows = std::size_t(C), cols = local / rows, w = cols / std::size_t(per);
        for (std::size_t i = 0; i < rows; ++i)
          for (std::size_t j = 0; j < w; ++j) chunk.elements.push_back(i * cols + std::size_t(k) * w + j);
      } else {
        const std::size_t w = local / std::size_t(per);
        for (std::size_t j = 0; j < w; ++j) chunk.elements.push_back(std::size_t(k) * w + j);
      }
      sync.push_back(std::move(chunk));
    }
  }
  std::sort(sync.begin(), sync.end(), [](const SyncChunk& a, const SyncChunk& b2) {
    if (a.group != b2.group) return a.group < b2.group;
    if (a.param->name != b2.param->name) return a.param->name < b2.param->name;
    return a.chunk < b2.chunk;
  });
  const bool zero = plan.model.training.zero_stage >= 1;
  std::size_t optimizer_state = 0;
  for (auto& chunk : sync) {  // in (group, name) order: the order groups must be made in
    auto comm = fabric->group(chunk.group, kSync);
    if (!comm) return comm.errors();
    chunk.comm = *comm;
    const std::size_t n = chunk.elements.size();
    const collective::Range own = zero ? chunk.comm->owned(n) : collective::Range{0, n};
    chunk.lo = own.lo, chunk.hi = own.hi;
    chunk.m.assign(chunk.hi - chunk.lo, 0.0f), chunk.v.assign(chunk.hi - chunk.lo, 0.0f);
    optimizer_state += 2 * (chunk.hi - chunk.lo);
  }
  // Ranks that report loss partials to rank 0: TP shard 0 of every last-stage block.
  std::vector<int> loss_ranks;
  for (std::size_t r = 0; r < places.size(); ++r) {
    const auto& pl = places[r];
    if (pl.shard == 0 && pl.stage == int(plan.pipelines[std::size_t(pl.pipeline)].stages.size()) - 1) loss_ranks.push_back(int(r));
  }

  // Emulation of the plan's cluster on this machine.
  auto device_of = [&](int r) {
    const auto& pl = places[std::size_t(r)];
    const Stage& o = stage_of(r);
    return std::pair<const Stage*, DeviceRef>{&o, o.devices[std::size_t((pl.replica * o.cp + pl.context) * o.tp + pl.shard)]};
  };
  if (opt.emulate_links)
    for (int r = 0; r < peers.world(); ++r) {
      if (r == me) continue;
      auto [sa, da] = device_of(me);
      auto [sb, db] = device_of(r);
      const SubclusterSpec* sub = plan.cluster.find(sa->subcluster);
      LinkSpec link = sa->subcluster != sb->subcluster ? plan.cluster.link_between(sa->subcluster, sb->subcluster)
                      : da.node == db.node             ? sub->intra_node
                                                       : sub->inter_node.value_or(sub->intra_node);
      peers.shape(r, link.bandwidth, link.latency);
    }
  double slowdown = std::max(1.0, opt.slowdown);
  if (opt.emulate_devices) {
    double fastest = 0;
    for (const auto& sc : plan.cluster.subclusters) fastest = std::max(fastest, sc.device.peak);
    slowdown *= fastest / plan.cluster.find(st.subcluster)->device.peak;
  }
  // The rank's track in traces: the simulator's "p0 s1 compute" for the first shard of the
  // first replica, with the replica, member and shard otherwise.
  const std::string track = "p" + std::to_string(here.pipeline) + " s" + std::to_string(here.stage) +
                            (here.replica || here.context || here.shard
                                 ? " d" + std::to_string(here.replica) + (st.cp > 1 ? " c" + std::to_string(here.context) : "") +
                                       " t" + std::to_string(here.shard)
                                 : "") +
                            " compute";
  auto now_s = [] { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); };
  auto record = [&](const std::string& name, double start) {
    if (opt.trace) opt.trace->push_back({track, name, start, now_s() - start});
  };
  // Runs a compute step, stretched to the emulated device's speed, and records it.
  auto emulate = [&](const std::string& name, auto&& compute) {
    const double start = now_s();
    const auto c0 = std::chrono::steady_clock::now();
    compute();
    if (slowdown > 1)
      std::this_thread::sleep_for(std::chrono::duration<double>((slowdown - 1) *
                                                                std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count()));
    record(name, start);
  };

  std::vector<StepReport> reports;
  try {
    std::vector<int> in(std::size_t(b) * Tl), tg(in.size()), seq_in(static_cast<std::size_t>(Tn)), seq_tg(seq_in.size());
    for (int step = 0; step < opt.steps; ++step) {
      const auto step_start = std::chrono::steady_clock::now();
      model->zero_grad();
      double loss_sum = 0;
      const double scale = 1.0 / (double(G) * Tn);
      for (const auto& op : ops) {
        const int j = op.microbatch;
        if (op.kind == schedule::OpKind::forward) {
          for (int k = 0; k < b; ++k) {
            batches.sequence(step, G, offset + j * mbs + row0 + k, seq_in.data(), seq_tg.data());
            std::copy_n(seq_in.data() + t0, Tl, &in[std::size_t(k) * Tl]);
            std::copy_n(seq_tg.data() + t0, Tl, &tg[std::size_t(k) * Tl]);
          }
          std::vector<float> x;
          if (!first) x = receive(here.stage - 1, kActivation);
          double loss = 0;
          std::vector<float> y;
          emulate("F" + std::to_string(j), [&] { y = model->forward(j, b, in.data(), x.data(), tg.data(), &loss); });
          loss_sum += loss;
          if (!last) send(here.stage + 1, kActivation, y);
        } else {
          std::vector<float> dy;
          if (!last) dy = receive(here.stage + 1, kGradient);
          std::vector<float> dx;
          emulate("B" + std::to_string(j), [&] { dx = model->backward(j, dy.data(), scale); });
          if (!first) send(here.stage - 1, kGradient, dx);
        }
      }
      model->finish_backward();
      // Gradient sync (a TP-replicated copy counts 1/tp; powers of two divide exactly) and
      // AdamW on the owned part of every chunk; with ZeRO the updated parts are all-gathered.
      const double sync_start = now_s();
      std::vector<float> grads, values;
      for (auto& chunk : sync) {
        auto& grad = chunk.param->grad;
        grads.resize(chunk.elements.size());
        for (std::size_t i = 0; i < grads.size(); ++i) grads[i] = grad[chunk.elements[i]] * chunk.weight;
        if (chunk.group.size() > 1) {
          if (zero) check(chunk.comm->reduce_scatter_sum(grads.data(), grads.size()));
          else check(chunk.comm->all_reduce_sum(grads.data(), grads.size()));
        }
        for (std::size_t i = 0; i < grads.size(); ++i) grad[chunk.elements[i]] = grads[i];
      }
      record("sync", sync_start);
      const double opt_start = now_s();
      for (auto& chunk : sync) {
        auto& value = chunk.param->value;
        const auto& grad = chunk.param->grad;
        const std::size_t n = chunk.hi - chunk.lo;
        grads.resize(n), values.resize(n);
        for (std::size_t i = 0; i < n; ++i) grads[i] = grad[chunk.elements[chunk.lo + i]], values[i] = value[chunk.elements[chunk.lo + i]];
        model::adamw_update(values.data(), grads.data(), chunk.m.data(), chunk.v.data(), n, opt.optimizer, step + 1,
                            model::decays(chunk.param->name));
        for (std::size_t i = 0; i < n; ++i) value[chunk.elements[chunk.lo + i]] = values[i];
      }
      record("optimizer", opt_start);
      if (zero) {
        const double gather_start = now_s();
        for (auto& chunk : sync) {
          if (chunk.group.size() <= 1) continue;
          auto& value = chunk.param->value;
          values.resize(chunk.elements.size());
          for (std::size_t i = 0; i < values.size(); ++i) values[i] = value[chunk.elements[i]];
          check(chunk.comm->all_gather(values.data(), values.size()));
          for (std::size_t i = 0; i < values.size(); ++i) value[chunk.elements[i]] = values[i];
        }
        record("gather", gather_start);
      }
      // Loss partials to rank 0.
      StepReport report{step, 0, 0, optimizer_state};
      const bool reports_loss = std::find(loss_ranks.begin(), loss_ranks.end(), me) != loss_ranks.end();
      if (me == 0) {
        double total = reports_loss ? loss_sum : 0;
        for (int r : loss_ranks) {
          if (r == 0) continue;
          double part = 0;
          check(peers.recv(r, kLoss, &part, sizeof part));
          total += part;
        }
        report.loss = total * scale;
      } else if (reports_loss) {
        peers.send(0, kLoss, &loss_sum, sizeof loss_sum);
      }
      check(peers.flush());
      report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
      reports.push_back(report);
      if (on_step) on_step(report);
    }
  } catch (const Failure& f) {
    return Diagnostic{"", 0, 0, "rank " + std::to_string(me), f.what()};
  }
  return reports;
}

}  // namespace het::runtime
