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

enum Tag : std::uint32_t { kActivation = 1, kGradient = 2, kTensorParallel = 3, kSync = 4, kLoss = 5 };

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
        for (int t = 0; t < st.tp; ++t) out.push_back({int(p), int(s), d, t});
    }
  return out;
}

std::string unsupported(const Plan& plan) {
  if (plan.granularity != Granularity::layer) return "the CPU runtime runs layer-granular plans only";
  for (const auto& p : plan.pipelines)
    for (const auto& s : p.stages)
      if (s.cp != 1) return "context parallelism (cp > 1) is not supported by the CPU runtime yet";
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

Result<std::vector<StepReport>> run_rank(const Plan& plan, transport::Peers& peers, const data::Batches& batches,
                                         const Options& opt, const std::function<void(const StepReport&)>& on_step) {
  const auto places = ranks_of(plan);
  const int me = peers.rank();
  const RankPlace here = places[std::size_t(me)];
  std::map<std::tuple<int, int, int, int>, int> rank_at;
  for (std::size_t r = 0; r < places.size(); ++r)
    rank_at[{places[r].pipeline, places[r].stage, places[r].replica, places[r].shard}] = int(r);
  auto rank = [&](int p, int s, int d, int t) { return rank_at.at({p, s, d, t}); };

  const Pipeline& pipe = plan.pipelines[std::size_t(here.pipeline)];
  const Stage& st = pipe.stages[std::size_t(here.stage)];
  const int S = static_cast<int>(pipe.stages.size());
  const int Tn = plan.model.seq_length, C = plan.model.hidden_size;
  const int G = plan.model.training.global_batch_size;
  const int m = pipe.num_microbatches, mbs = pipe.micro_batch_size;
  int offset = 0;  // first sequence of this pipeline in the global batch
  for (int q = 0; q < here.pipeline; ++q) offset += plan.pipelines[std::size_t(q)].micro_batch_size * plan.pipelines[std::size_t(q)].num_microbatches;
  const int b = mbs / st.dp;
  const int row0 = here.replica * b;  // my sequences within a micro-batch: [row0, row0 + b)
  const bool first = here.stage == 0, last = here.stage == S - 1;

  model::StageModel<float> model(plan.model, st.first, st.last, here.shard, st.tp, opt.seed);
  model.set_recompute(st.recompute);
  std::vector<int> tp_group;
  for (int t = 0; t < st.tp; ++t) tp_group.push_back(rank(here.pipeline, here.stage, here.replica, t));
  const model::AllReduce<float> tp_reduce = [&](float* data, std::size_t n) {
    check(transport::all_reduce_sum(peers, tp_group, data, n, kTensorParallel));
  };

  // Neighbours' replicas overlapping my rows, and the rows of the overlap.
  struct Overlap {
    int replica, lo, hi;  // rows [lo, hi) of the micro-batch
  };
  auto overlaps = [&](int other_stage) {
    std::vector<Overlap> out;
    const Stage& o = pipe.stages[std::size_t(other_stage)];
    const int ob = mbs / o.dp;
    for (int d = 0; d < o.dp; ++d) {
      const int lo = std::max(row0, d * ob), hi = std::min(row0 + b, (d + 1) * ob);
      if (lo < hi) out.push_back({d, lo, hi});
    }
    return out;
  };
  const std::size_t row = std::size_t(Tn) * C;  // floats per sequence of activations

  // Warm-ups: the plan's, else the schedule's own (1f1b).
  std::vector<int> warmup(static_cast<std::size_t>(S));
  for (int s = 0; s < S; ++s) warmup[std::size_t(s)] = pipe.stages[std::size_t(s)].warmup.value_or(S - s);
  const auto ops = schedule::stage_ops(warmup[std::size_t(here.stage)], m);

  // Gradient sync: each parameter is summed over all ranks holding the same part of it. A
  // TP-sharded parameter held with different TP degrees (pipelines of different TP) is synced
  // in chunks of the finest sharding, F = lcm of the holders' tp (HexiScale §3.2; Hetu's
  // SplitAR): chunk c is held by the shard c / (F / tp) of every holder.
  struct SyncChunk {
    std::vector<int> group;
    model::Param<float>* param;
    int chunk;
    std::vector<std::size_t> elements;  // local indices of the chunk in param->value
    float weight = 1;                   // 1/tp for a copy every TP shard holds whole
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
  for (auto* param : model.params()) {
    const std::string& n = param->name;
    std::vector<int> holders;
    int F = 1;
    for (std::size_t r = 0; r < places.size(); ++r) {
      const Stage& o = plan.pipelines[std::size_t(places[r].pipeline)].stages[std::size_t(places[r].stage)];
      if (!holds(o, n)) continue;
      holders.push_back(int(r));
      F = std::lcm(F, o.tp);
    }
    std::vector<std::size_t> all(param->value.size());
    std::iota(all.begin(), all.end(), std::size_t(0));
    if (!sharded(n)) {
      sync.push_back({holders, param, 0, std::move(all), 1.0f / float(st.tp)});
      continue;
    }
    const int per = F / st.tp;  // my chunks: [shard·per, (shard+1)·per)
    const std::string base = n.substr(n.rfind('.') + 1);
    const bool columns = base == "wo" || base == "wproj" || base == "wdown";  // [C, local cols]
    const std::size_t local = param->value.size();
    for (int k = 0; k < per; ++k) {
      const int c = here.shard * per + k;
      SyncChunk chunk{{}, param, c, {}, 1.0f};
      for (int r : holders) {
        const Stage& o = plan.pipelines[std::size_t(places[std::size_t(r)].pipeline)].stages[std::size_t(places[std::size_t(r)].stage)];
        if (places[std::size_t(r)].shard == c / (F / o.tp)) chunk.group.push_back(r);
      }
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
  // Ranks that report loss partials to rank 0: TP shard 0 of every last-stage replica.
  std::vector<int> loss_ranks;
  for (std::size_t r = 0; r < places.size(); ++r) {
    const auto& pl = places[r];
    if (pl.shard == 0 && pl.stage == int(plan.pipelines[std::size_t(pl.pipeline)].stages.size()) - 1) loss_ranks.push_back(int(r));
  }

  // Emulation of the plan's cluster on this machine.
  auto device_of = [&](int r) {
    const auto& pl = places[std::size_t(r)];
    const Stage& o = plan.pipelines[std::size_t(pl.pipeline)].stages[std::size_t(pl.stage)];
    return std::pair<const Stage*, DeviceRef>{&o, o.devices[std::size_t(pl.replica * o.tp + pl.shard)]};
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
  double slowdown = 1;
  if (opt.emulate_devices) {
    double fastest = 0;
    for (const auto& sc : plan.cluster.subclusters) fastest = std::max(fastest, sc.device.peak);
    slowdown = fastest / plan.cluster.find(st.subcluster)->device.peak;
  }
  // The rank's track in traces: the simulator's "p0 s1 compute" for the first shard of the
  // first replica, with the replica and shard otherwise.
  const std::string track = "p" + std::to_string(here.pipeline) + " s" + std::to_string(here.stage) +
                            (here.replica || here.shard ? " d" + std::to_string(here.replica) + " t" + std::to_string(here.shard) : "") +
                            " compute";
  auto now_s = [] { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); };
  auto record = [&](const std::string& name, double start) {
    if (opt.trace) opt.trace->push_back({track, name, start, now_s() - start});
  };
  // Runs a compute step, stretched to the emulated device's speed, and records it.
  auto emulate = [&](const std::string& name, auto&& compute) {
    const double start = now_s();
    const auto t0 = std::chrono::steady_clock::now();
    compute();
    if (slowdown > 1)
      std::this_thread::sleep_for(std::chrono::duration<double>((slowdown - 1) *
                                                                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
    record(name, start);
  };

  std::vector<StepReport> reports;
  try {
    std::vector<int> in(std::size_t(b) * Tn), tg(in.size());
    for (int step = 0; step < opt.steps; ++step) {
      const auto t0 = std::chrono::steady_clock::now();
      model.zero_grad();
      double loss_sum = 0;
      const double scale = 1.0 / (double(G) * Tn);
      for (const auto& op : ops) {
        const int j = op.microbatch;
        if (op.kind == schedule::OpKind::forward) {
          for (int k = 0; k < b; ++k)
            batches.sequence(step, G, offset + j * mbs + row0 + k, &in[std::size_t(k) * Tn], &tg[std::size_t(k) * Tn]);
          std::vector<float> x;
          if (!first) {
            x.resize(std::size_t(b) * row);
            const int ptp = pipe.stages[std::size_t(here.stage - 1)].tp;
            for (const auto& o : overlaps(here.stage - 1))
              check(peers.recv(rank(here.pipeline, here.stage - 1, o.replica, here.shard % ptp), kActivation,
                               x.data() + std::size_t(o.lo - row0) * row, std::size_t(o.hi - o.lo) * row * sizeof(float)));
          }
          double loss = 0;
          std::vector<float> y;
          emulate("F" + std::to_string(j), [&] { y = model.forward(j, b, in.data(), x.data(), tg.data(), &loss, tp_reduce); });
          loss_sum += loss;
          if (!last) {
            const Stage& next = pipe.stages[std::size_t(here.stage + 1)];
            for (const auto& o : overlaps(here.stage + 1))
              for (int t = 0; t < next.tp; ++t)
                if (t % st.tp == here.shard)
                  peers.send(rank(here.pipeline, here.stage + 1, o.replica, t), kActivation,
                             y.data() + std::size_t(o.lo - row0) * row, std::size_t(o.hi - o.lo) * row * sizeof(float));
          }
        } else {
          std::vector<float> dy;
          if (!last) {
            dy.resize(std::size_t(b) * row);
            const int ntp = pipe.stages[std::size_t(here.stage + 1)].tp;
            for (const auto& o : overlaps(here.stage + 1))
              check(peers.recv(rank(here.pipeline, here.stage + 1, o.replica, here.shard % ntp), kGradient,
                               dy.data() + std::size_t(o.lo - row0) * row, std::size_t(o.hi - o.lo) * row * sizeof(float)));
          }
          std::vector<float> dx;
          emulate("B" + std::to_string(j), [&] { dx = model.backward(j, dy.data(), scale, tp_reduce); });
          if (!first) {
            const Stage& prev = pipe.stages[std::size_t(here.stage - 1)];
            for (const auto& o : overlaps(here.stage - 1))
              for (int t = 0; t < prev.tp; ++t)
                if (t % st.tp == here.shard)
                  peers.send(rank(here.pipeline, here.stage - 1, o.replica, t), kGradient,
                             dx.data() + std::size_t(o.lo - row0) * row, std::size_t(o.hi - o.lo) * row * sizeof(float));
          }
        }
      }
      // Gradient sync; a TP-replicated copy counts 1/tp (powers of two divide exactly).
      const double sync_start = now_s();
      std::vector<float> buffer;
      for (auto& chunk : sync) {
        if (chunk.group.size() <= 1) continue;
        auto& grad = chunk.param->grad;
        buffer.resize(chunk.elements.size());
        for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = grad[chunk.elements[i]] * chunk.weight;
        check(transport::all_reduce_sum(peers, chunk.group, buffer.data(), buffer.size(), kSync));
        for (std::size_t i = 0; i < buffer.size(); ++i) grad[chunk.elements[i]] = buffer[i];
      }
      record("sync", sync_start);
      const double opt_start = now_s();
      for (auto* param : model.params()) model::adamw_step(*param, opt.optimizer, step + 1);
      record("optimizer", opt_start);
      // Loss partials to rank 0.
      StepReport report{step, 0, 0};
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
      report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      reports.push_back(report);
      if (on_step) on_step(report);
    }
  } catch (const Failure& f) {
    return Diagnostic{"", 0, 0, "rank " + std::to_string(me), f.what()};
  }
  return reports;
}

}  // namespace het::runtime
