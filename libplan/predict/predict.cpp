#include "predict/predict.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <cmath>
#include <numeric>
#include <set>

#include "cost/comm.hpp"
#include "cost/flops.hpp"
#include "plan/buckets.hpp"
#include "plan/validate.hpp"
#include "predict/stage_cost.hpp"
#include "schedule/schedule.hpp"

namespace het::predict {

Result<Outcome> predict(const Plan& input_plan, const cost::ComputeModel& compute, const Options& opt) {
  if (auto steps = too_many_schedule_steps(input_plan, "")) return *steps;  // a search's candidate: skipped
  Outcome out;
  out.plan = input_plan;
  Plan& plan = out.plan;
  if (opt.schedule) plan.schedule = *opt.schedule;
  const ModelSpec& m = plan.model;
  const double grad_bytes = dtype_bytes(m.dtype);

  // Sync groups: stages whose unit ranges overlap, across all pipelines (union-find).
  std::vector<std::pair<int, int>> index;  // flat id -> (pipeline, stage)
  for (std::size_t p = 0; p < plan.pipelines.size(); ++p)
    for (std::size_t s = 0; s < plan.pipelines[p].stages.size(); ++s) index.push_back({int(p), int(s)});
  std::vector<int> parent(index.size());
  std::iota(parent.begin(), parent.end(), 0);
  auto find = [&](int x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  for (std::size_t i = 0; i < index.size(); ++i)
    for (std::size_t j = i + 1; j < index.size(); ++j) {
      const Stage& a = plan.pipelines[index[i].first].stages[index[i].second];
      const Stage& b = plan.pipelines[index[j].first].stages[index[j].second];
      if (index[i].first != index[j].first && a.first <= b.last && b.first <= a.last) parent[find(int(i))] = find(int(j));
    }

  // Replicas of each stage's parameters in its sync group: ZeRO shards over them.
  std::map<int, std::vector<int>> groups;
  for (std::size_t i = 0; i < index.size(); ++i) groups[find(int(i))].push_back(int(i));
  std::vector<std::vector<int>> replicas_of(plan.pipelines.size());
  for (std::size_t pi = 0; pi < plan.pipelines.size(); ++pi) replicas_of[pi].resize(plan.pipelines[pi].stages.size());
  for (const auto& [root, members] : groups) {
    int replicas = 0;
    for (int id : members) {
      const Stage& s = plan.pipelines[index[id].first].stages[index[id].second];
      replicas += s.dp * s.cp;
    }
    for (int id : members) replicas_of[index[id].first][index[id].second] = replicas;
  }

  // Pipelines whose stages send off a node at the same time share its NIC: count, per
  // (subcluster, node), the pipelines with a stage there whose next stage is elsewhere.
  std::map<std::pair<std::string, int>, std::set<std::size_t>> senders;
  for (std::size_t pi = 0; pi < plan.pipelines.size(); ++pi) {
    const auto& st = plan.pipelines[pi].stages;
    for (std::size_t si = 0; si + 1 < st.size(); ++si) {
      const bool leaves = st[si].subcluster != st[si + 1].subcluster || place(st[si], plan.cluster).nodes > 1 ||
                          place(st[si + 1], plan.cluster).nodes > 1 || st[si].devices[0].node != st[si + 1].devices[0].node;
      if (!leaves) continue;
      for (const auto& d : st[si].devices) senders[{st[si].subcluster, d.node}].insert(pi);
    }
  }
  auto sharers_of = [&](const Stage& s) {
    std::size_t n = 1;
    for (const auto& d : s.devices)
      if (auto it = senders.find({s.subcluster, d.node}); it != senders.end()) n = std::max(n, it->second.size());
    return double(n);
  };

  sim::SimInput sin;
  sin.overlap_sync = opt.overlap_sync;
  sin.trace = opt.trace;
  out.stages.resize(plan.pipelines.size());
  double cross_bytes = 0;
  std::vector<std::vector<double>> most_received;  // [pipeline][stage]: Hop::most_received from the stage before

  // Sequence-length buckets (model.seq_lengths; without, one bucket: the model itself): each
  // costed as the model with all its sequences of that length.
  std::vector<ModelSpec> at_models;
  std::vector<cost::ComputeModel> at_computes;
  for (const auto& b : m.seq_lengths) at_models.push_back(at_length(m, b.length)), at_computes.push_back(compute.at_length(b.length));
  const std::size_t buckets = std::max<std::size_t>(1, m.seq_lengths.size());
  auto bucket_model = [&](std::size_t k) -> const ModelSpec& { return at_models.empty() ? m : at_models[k]; };
  auto bucket_compute = [&](std::size_t k) -> const cost::ComputeModel& { return at_computes.empty() ? compute : at_computes[k]; };
  std::vector<int> longest(plan.pipelines.size(), 0);  // [pipeline]: its longest bucket (activation memory)

  for (std::size_t pi = 0; pi < plan.pipelines.size(); ++pi) {
    Pipeline& p = plan.pipelines[pi];
    const int S = static_cast<int>(p.stages.size());
    auto& details = out.stages[pi];
    details.resize(S);
    most_received.emplace_back(std::size_t(S), 0.0);
    std::vector<Placement> places;
    for (const auto& s : p.stages) places.push_back(place(s, plan.cluster));
    // Micro-batches per bucket, and the buckets this pipeline runs.
    const std::vector<int> count = p.bucket_microbatches.empty() ? std::vector<int>{p.num_microbatches} : p.bucket_microbatches;
    std::vector<std::size_t> used;
    for (std::size_t k = 0; k < count.size(); ++k)
      if (count[k] > 0) used.push_back(k);
    if (used.empty() || count.size() != buckets)
      return Diagnostic{"", 0, 0, "pipelines[" + std::to_string(pi) + "].seq_lengths",
                        "expected micro-batch counts of the model's sequence lengths"};
    longest[pi] = static_cast<int>(used.back());
    const ModelSpec& m_long = bucket_model(used.back());
    auto share = [&](std::size_t k) { return double(count[k]) / p.num_microbatches; };

    schedule::WarmupInput w;
    w.kind = plan.schedule;
    w.num_microbatches = p.num_microbatches;
    w.epsilon = opt.epsilon;
    sim::PipelineInput pin;
    pin.num_microbatches = p.num_microbatches;
    if (used.size() > 1) {
      pin.kind = microbatch_buckets(p);
      pin.by_kind.resize(count.size());  // filled for the buckets used
    }

    for (int si = 0; si < S; ++si) {
      const Stage& s = p.stages[si];
      const Placement& pl = places[si];
      StageDetail& d = details[si];
      const DeviceSpec& dev = pl.sub->device;
      const double b = double(p.micro_batch_size) / s.dp;  // sequences per device
      const UnitCounts units = count_units(plan, s);
      const std::string name = "p" + std::to_string(pi) + " s" + std::to_string(si) + " " + s.subcluster;
      if (si + 1 < S) d.crosses_subcluster = s.subcluster != p.stages[si + 1].subcluster;
      int worst = 0;
      // Per bucket: compute and the hop to the next stage; the stage's detail holds their mean
      // over the pipeline's micro-batches. Longest first: it picks the resharding strategy.
      for (auto it = used.rbegin(); it != used.rend(); ++it) {
        const std::size_t k = *it;
        sim::StageCosts c;
        c.name = name;
        double collectives = 0;
        c.cross_to_next = d.crosses_subcluster;
        auto add = [&](UnitKind kind, double n) {
          if (n <= 0) return;
          const UnitTimes u = unit_times(bucket_model(k), bucket_compute(k), kind, pl, s.tp, s.cp, s.recompute, b);
          c.forward_s += n * u.forward_s;
          c.backward_s += n * u.backward_s;
          collectives += n * u.collectives_s;
          worst = std::max(worst, source_rank(u.source));
        };
        add(UnitKind::embedding, units.embedding);
        add(UnitKind::layer, units.full_layers);
        add(UnitKind::attn, units.attn);
        add(UnitKind::mlp, units.mlp);
        add(UnitKind::head, units.head);
        if (si + 1 < S) {
          const Hop h = hop(s, p.stages[si + 1], bucket_model(k), p.micro_batch_size, plan.cluster, opt, sharers_of(s));
          c.send_forward_s = h.forward_s;
          c.send_backward_s = h.backward_s;
          p.stages[si].resharding = h.strategy;  // the longest bucket's: the ones after it keep it
          d.send_bytes += share(k) * h.cross_bytes;
          if (k == used.back()) most_received[pi][si + 1] = h.most_received;
          if (d.crosses_subcluster) cross_bytes += 2.0 * count[k] * h.cross_bytes;
        }
        d.forward_s += share(k) * c.forward_s;
        d.backward_s += share(k) * c.backward_s;
        d.collectives_s += share(k) * collectives;
        d.send_forward_s += share(k) * c.send_forward_s;
        d.send_backward_s += share(k) * c.send_backward_s;
        if (!pin.by_kind.empty()) pin.by_kind[k].push_back(c);
      }
      d.source = static_cast<cost::Source>(std::array{cost::Source::profile, cost::Source::interpolated,
                                                      cost::Source::extrapolated, cost::Source::analytic}[worst]);
      // The warm-up cap: the stage's memory with one micro-batch in flight, then what each more
      // adds (memory is linear in them: activations, and the stage's own buffers such as the
      // head's logits), of the longest bucket (any micro-batches in flight may be of it).
      d.capacity = dev.usable_memory();
      d.limit = d.capacity * (1 - opt.memory_headroom);
      const double one = cost::stage_memory(m_long, shape_of(plan, p, s, replicas_of[pi][si], 1)).total();
      const double per_mb = cost::stage_memory(m_long, shape_of(plan, p, s, replicas_of[pi][si], 2)).total() - one;
      w.memory_limit.push_back(schedule::held_in_flight(d.limit, one, per_mb, p.num_microbatches));
      w.stage_s.push_back(d.forward_s + d.backward_s);
      if (si + 1 < S) {
        w.transfer_s.push_back(d.send_forward_s);
        w.crosses_subcluster.push_back(d.crosses_subcluster);
      }
      pin.stages.push_back({d.forward_s, d.backward_s, d.send_forward_s, d.send_backward_s, 0, name, d.crosses_subcluster});
    }
    pin.warmup = schedule::warmup_counts(w);
    for (int si = 0; si < S; ++si) details[si].warmup = pin.warmup[si];
    sin.pipelines.push_back(std::move(pin));
  }

  // The gradient sync: the runtime's buckets, in its order (stage_cost.hpp).
  // The first chunk a stage's ring partner sends it (the first bucket it reduces): the partner
  // that ends its backward first sends it while the stage is still in its last backward, at its
  // peak, and the transport reads it ahead (runtime.cpp sync_and_update; transport/tcp.hpp).
  std::map<std::pair<int, int>, double> first_chunk;  // (pipeline, stage) -> elements
  for (const SyncBucket& b : sync_buckets(plan)) {
    if (b.ring > 1)
      for (auto member : b.members) first_chunk.emplace(member, b.elements / b.ring);
    sim::SyncGroup g{b.members, bucket_sync_s(m, b)};
    for (auto [pi, si] : b.members) out.stages[pi][si].sync_s += g.time_s;
    if (g.time_s > 0) sin.sync_groups.push_back(std::move(g));
  }
  // Memory (now that warm-ups are known), optimizer steps.
  for (const auto& [root, members] : groups) {
    int replicas = 0;
    std::set<std::string> subclusters;
    for (int id : members) {
      const Stage& s = plan.pipelines[index[id].first].stages[index[id].second];
      replicas += s.dp * s.cp;
      subclusters.insert(s.subcluster);
    }
    for (int id : members) {
      auto [pi, si] = index[id];
      const Stage& s = plan.pipelines[pi].stages[si];
      const Placement pl = place(s, plan.cluster);
      StageDetail& d = out.stages[pi][si];
      const UnitCounts units = count_units(plan, s);
      const double params = stage_parameters(m, units) / s.tp;
      if (subclusters.size() > 1 && replicas > 1)
        cross_bytes += 2.0 * 2.0 * (replicas - 1) / replicas * params * grad_bytes * s.tp * s.cp;

      cost::StageShape shape = shape_of(plan, plan.pipelines[pi], s, replicas, d.warmup);
      // When the stage ends its warm-up of w forwards (its peak), the stage before, whose
      // warm-up w_before is longer along a 1F1B pipeline, has sent up to w_before − w
      // micro-batches more than it took, read ahead by the transport (an upper bound: a slower
      // stage before sends later).
      if (si > 0) shape.read_ahead = std::max(0, out.stages[pi][si - 1].warmup - d.warmup) * most_received[pi][si];
      if (auto it = first_chunk.find({pi, si}); it != first_chunk.end()) shape.read_ahead += it->second * grad_bytes;
      d.memory = cost::stage_memory(bucket_model(longest[pi]), shape);
      const double shard = m.training.zero_stage >= 1 ? replicas : 1;
      d.optimizer_s = optimizer_s(compute, m, pl.sub->device, s.tp, shape.parameters, shape.whole_parameters, shard);
      sin.pipelines[pi].stages[si].optimizer_s = d.optimizer_s;
      if (d.memory.total() > d.limit)
        out.notes.push_back("pipelines[" + std::to_string(pi) + "].stages[" + std::to_string(si) + "] on " + s.subcluster +
                            " needs " + std::to_string(d.memory.total() / (1 << 30)).substr(0, 5) + " GiB per device but may use " +
                            std::to_string(d.limit / (1 << 30)).substr(0, 5) + " GiB (" +
                            std::to_string(pl.sub->device.memory / (1 << 30)).substr(0, 5) + " GiB less a reserve of " +
                            std::to_string(pl.sub->device.reserve / (1 << 30)).substr(0, 5) + " GiB" +
                            (opt.memory_headroom > 0 ? " and a headroom of " + std::to_string(int(opt.memory_headroom * 100 + 0.5)) + "%" : "") +
                            ")");
    }
  }

  auto simulated = sim::simulate(sin);
  if (!simulated) return simulated.errors();
  out.sim = std::move(*simulated);

  // Fill the plan's derived fields.
  double peak = 0;
  double td_max = 0;
  struct DeviceLoad {
    double busy, peak;
  };
  std::vector<DeviceLoad> loads;
  nlohmann::ordered_json per_stage = nlohmann::ordered_json::array();
  for (std::size_t pi = 0; pi < plan.pipelines.size(); ++pi) {
    for (std::size_t si = 0; si < plan.pipelines[pi].stages.size(); ++si) {
      Stage& s = plan.pipelines[pi].stages[si];
      const StageDetail& d = out.stages[pi][si];
      const sim::StageReport& r = out.sim.pipelines[pi].stages[si];
      const DeviceSpec& dev = plan.cluster.find(s.subcluster)->device;
      s.warmup = d.warmup;
      s.predicted = StagePrediction{d.forward_s, d.backward_s, d.memory.total()};
      peak += dev.peak * s.devices.size();
      for (std::size_t k = 0; k < s.devices.size(); ++k) loads.push_back({r.compute_s, dev.peak});
      td_max = std::max(td_max, r.compute_s);
      if (opt.per_stage)
        per_stage.push_back({{"pipeline", pi},
                             {"stage", si},
                             {"subcluster", s.subcluster},
                             {"compute_s", r.compute_s},
                             {"send_busy_s", r.send_busy_s},
                             {"idle_s", r.idle_s},
                             {"send_forward_s", d.send_forward_s},
                             {"resharding", s.resharding ? to_string(*s.resharding) : "none"},
                             {"sync_s", d.sync_s},
                             {"optimizer_s", d.optimizer_s},
                             {"memory_bytes", d.memory.total()},
                             {"capacity_bytes", d.capacity},
                             {"memory_margin", d.capacity > 0 ? 1 - d.memory.total() / d.capacity : 0},
                             {"activation_bytes", d.memory.activations},
                             {"memory", {{"weights", d.memory.weights}, {"gradients", d.memory.gradients},
                                         {"optimizer", d.memory.optimizer}, {"sync_buffers", d.memory.sync_buffers},
                                         {"activations", d.memory.activations}, {"stage_buffers", d.memory.stage_buffers},
                                         {"recompute", d.memory.recompute}, {"workspace", d.memory.workspace},
                                         {"read_ahead", d.memory.read_ahead}}},
                             {"max_in_flight", r.max_in_flight},
                             {"source", cost::to_string(d.source)}});
    }
  }
  double imbalance = 0, total_peak = 0;
  for (const auto& l : loads) imbalance += (td_max - l.busy) * l.peak, total_peak += l.peak;
  out.load_balance_eta = td_max > 0 && total_peak > 0 ? 1 - imbalance / (td_max * total_peak) : 1;  // HAPT eq. 25

  Prediction pr;
  pr.iteration_s = out.sim.iteration_s;
  pr.tokens_per_s = tokens_per_iteration(m) / pr.iteration_s;
  pr.mfu = cost::iteration_model_flops(m) / (pr.iteration_s * peak);
  pr.bubble_fraction = out.sim.bubble_fraction;
  pr.load_balance_eta = out.load_balance_eta;
  pr.cross_cluster_bytes = cross_bytes;
  pr.cross_overlap = out.sim.cross_overlap;
  pr.per_stage = std::move(per_stage);
  // The rent of the devices the plan uses, when every one of them has a price.
  double rent = 0;  // USD per second
  bool priced = true;
  for (const Pipeline& p : plan.pipelines)
    for (const Stage& st : p.stages) {
      const SubclusterSpec* sc = plan.cluster.find(st.subcluster);
      priced = priced && sc && sc->device.price > 0;
      if (sc) rent += sc->device.price * static_cast<double>(st.devices.size());
    }
  if (priced && rent > 0) {
    pr.cost_usd_per_hour = rent * 3600;
    pr.usd_per_million_tokens = rent / pr.tokens_per_s * 1e6;
  }
  plan.predicted = pr;
  for (const auto& n : compute.notes()) out.notes.push_back(n);
  return out;
}

}  // namespace het::predict
