#include "predict/stage_cost.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

#include "cost/comm.hpp"

namespace het::predict {

Placement place(const Stage& s, const ClusterSpec& cluster) {
  Placement p;
  p.sub = cluster.find(s.subcluster);
  std::map<int, int> count;
  for (const auto& d : s.devices) ++count[d.node];
  p.nodes = static_cast<int>(count.size());
  for (auto [node, n] : count) p.per_node = std::max(p.per_node, n);
  for (std::size_t g = 0; g + s.tp <= s.devices.size(); g += s.tp)
    for (int k = 1; k < s.tp; ++k)
      if (s.devices[g + k].node != s.devices[g].node) p.tp_in_node = false;
  return p;
}

Placement place_block(const SubclusterSpec& sub, int offset, int count, int tp) {
  Placement p;
  p.sub = &sub;
  if (count < 1) return p;
  const int M = sub.devices_per_node, last = offset + count - 1;
  p.nodes = last / M - offset / M + 1;
  // The first and the last node hold a part of theirs, every node between them all M.
  p.per_node = p.nodes == 1 ? count : p.nodes > 2 ? M : std::max(M - offset % M, last % M + 1);
  // Groups of tp that start at multiples of tp lie in one node when tp divides M (the loop
  // would find none across; the search looks up a table per stage of every layout).
  if (offset % tp == 0 && M % tp == 0) return p;
  for (int g = 0; g + tp <= count; g += tp)
    if ((offset + g) / M != (offset + g + tp - 1) / M) p.tp_in_node = false;
  return p;
}

LinkSpec group_link(const Placement& p, bool within_node) {
  if (within_node || !p.sub->inter_node) return p.sub->intra_node;
  return cost::shared(*p.sub->inter_node, p.per_node);
}

UnitCounts count_units(const Plan& plan, const Stage& s) {
  UnitCounts c;
  const int last_unit = num_units(plan.model, plan.granularity) - 1;
  for (int u = s.first; u <= s.last; ++u) {
    if (u == 0) c.embedding = true;
    else if (u == last_unit) c.head = true;
    else if (plan.granularity == Granularity::layer) ++c.full_layers;
    else if ((u - 1) % 2 == 0) ++c.attn;
    else ++c.mlp;
  }
  c.layers = c.full_layers + 0.5 * (c.attn + c.mlp);
  return c;
}

double unit_parameters(const ModelSpec& m, UnitKind kind) {
  const double h = m.hidden_size, v = m.vocab_size;
  const double layer = static_cast<double>(layer_parameter_count(m));
  switch (kind) {
    case UnitKind::embedding: return v * h + (m.architecture == Architecture::gpt ? double(m.seq_length) * h : 0);
    case UnitKind::head: return m.architecture == Architecture::gpt ? 2 * h : h + v * h;  // gpt ties wte
    case UnitKind::layer: return layer;
    case UnitKind::attn:
    case UnitKind::mlp: return layer / 2;
  }
  return 0;
}

double stage_parameters(const ModelSpec& m, const UnitCounts& c) {
  double p = c.layers * unit_parameters(m, UnitKind::layer);
  if (c.embedding) p += unit_parameters(m, UnitKind::embedding);
  if (c.head) p += unit_parameters(m, UnitKind::head);
  if (c.head && !c.embedding) p += tied_head_parameters(m);
  return p;
}

double tied_head_parameters(const ModelSpec& m) {
  return m.architecture == Architecture::gpt ? double(m.vocab_size) * m.hidden_size : 0;
}

double whole_parameters(const ModelSpec& m, UnitKind kind) {
  const double C = m.hidden_size;
  const double layer = m.architecture == Architecture::gpt ? 6 * C : 2 * C;  // ln1, ln2 (weights, gpt's biases), gpt's bo, bproj
  switch (kind) {
    case UnitKind::embedding:
    case UnitKind::head: return unit_parameters(m, kind);
    case UnitKind::layer: return layer;
    case UnitKind::attn:
    case UnitKind::mlp: return layer / 2;
  }
  return 0;
}

LinkSpec sync_link(const ClusterSpec& cluster, const std::vector<const Stage*>& members, Rings rings) {
  // Shard 0's ring in rank order (the members' devices in order) as runs of members on one
  // (subcluster, node); the TP shards on every node (the rings sharing its NIC).
  struct Run {
    std::pair<std::string, int> at;  // (subcluster, node)
    int members = 0;
  };
  std::vector<Run> runs;
  std::map<std::pair<std::string, int>, std::set<int>> on_node;
  int p = 0;
  for (const Stage* s : members) {
    // A stage's devices lie node by node: the node's entry is looked up when the node changes
    // (on 10,000 devices the search's lower bound asks for rings of up to 1,250 devices of
    // thousands of shapes, and a lookup per device was most of its time).
    std::set<int>* shards = nullptr;
    int node = -1;
    for (std::size_t k = 0; k < s->devices.size(); ++k) {
      if (!shards || s->devices[k].node != node) node = s->devices[k].node, shards = &on_node[{s->subcluster, node}];
      if (int(shards->size()) < s->tp) shards->insert(int(k) % s->tp);
      if (rings == Rings::per_shard && int(k) % s->tp != 0) continue;
      ++p;
      if (runs.empty() || runs.back().at.second != node || runs.back().at.first != s->subcluster)
        runs.push_back({{s->subcluster, node}, 0});
      ++runs.back().members;
    }
  }
  if (runs.size() > 1 && runs.front().at == runs.back().at)  // the ring closes on the node it started on
    runs.front().members += runs.back().members, runs.pop_back();
  if (runs.size() == 1) return cluster.find(runs.front().at.first)->intra_node;
  std::size_t sharers = 1;
  if (rings == Rings::per_shard)
    for (const auto& [node, shards] : on_node) sharers = std::max(sharers, shards.size());
  // The ring's p hops: members - 1 inside each run's node, and one from each run to the next
  // (a node's NIC, or the link between two subclusters, shared by the rings leaving the node
  // at once). Its bandwidth is the slowest hop's; its latency the mean of its hops': latencies
  // add along a chunk's journey of 2(p-1) hops around the ring (DESIGN.md §6), which crosses
  // each hop about 2(p-1)/p times, not 2(p-1) times the slowest hop's (a ring over two
  // subclusters pays their link's latency about twice per lap).
  double bandwidth = 1e300, latency = 0;
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const std::string& a = runs[r].at.first;
    const std::string& b = runs[(r + 1) % runs.size()].at.first;
    const SubclusterSpec* sa = cluster.find(a);
    const LinkSpec hop = cost::shared(a != b ? cluster.link_between(a, b) : sa->inter_node.value_or(sa->intra_node), double(sharers));
    bandwidth = std::min(bandwidth, hop.bandwidth), latency += hop.latency;
    if (runs[r].members > 1)
      bandwidth = std::min(bandwidth, sa->intra_node.bandwidth), latency += (runs[r].members - 1) * sa->intra_node.latency;
  }
  return {bandwidth, latency / p};
}

namespace {

// A family of parameters synced alike: `count` elements (whole, before TP) of a unit, split
// over TP shards or held whole by each, and the units whose stages hold them.
struct Family {
  double count = 0;
  bool sharded = false;
  std::vector<int> units;  // a stage holds the family when it holds one of these units
};

// The model's parameters by family (libexec/model's tensors: tp_sharded() in
// runtime/sync_plan.cpp says which are split): per layer its matrices and the biases of
// the heads and MLP channels (split), its norms and output biases (whole: gpt ln1/ln2 weight
// and bias, bo, bproj; llama the two norm weights); the token embedding (with gpt's head,
// which reuses it); gpt's position embedding; the head's norm (and llama's output projection).
std::vector<Family> families(const ModelSpec& m, int last_unit, Granularity g) {
  const double C = m.hidden_size, V = m.vocab_size, T = m.seq_length;
  const bool gpt = m.architecture == Architecture::gpt;
  const double whole = whole_parameters(m, UnitKind::layer), layer = unit_parameters(m, UnitKind::layer);
  std::vector<Family> out;
  for (int u = 1; u < last_unit; ++u) {
    // A sublayer-granular plan holds a layer as two units; the runtime refuses those plans
    // (runtime::unsupported), the families follow the layer's first unit.
    if (g == Granularity::sublayer && (u - 1) % 2) continue;
    const std::vector<int> units = g == Granularity::sublayer ? std::vector<int>{u, u + 1} : std::vector<int>{u};
    out.push_back({layer - whole, true, units});
    out.push_back({whole, false, units});
  }
  out.push_back({V * C, false, gpt ? std::vector<int>{0, last_unit} : std::vector<int>{0}});
  if (gpt) out.push_back({T * C, false, {0}});
  out.push_back({whole_parameters(m, UnitKind::head), false, {last_unit}});
  return out;
}

}  // namespace

std::vector<SyncBucket> sync_buckets(const Plan& plan) {
  const program::Topology topo(plan);
  const int last_unit = num_units(plan.model, plan.granularity) - 1;
  // Stage-level buckets by the ranks of shard 0's group (the runtime's buckets are by group:
  // with tp 1 a layer's split and whole parameters share one).
  std::map<std::vector<int>, SyncBucket> by_group;
  for (const Family& f : families(plan.model, last_unit, plan.granularity)) {
    std::vector<std::pair<int, int>> holders;
    std::vector<int> group;
    std::vector<const Stage*> stages;
    int F = 1, ring = 0;
    for (std::size_t p = 0; p < plan.pipelines.size(); ++p)
      for (std::size_t s = 0; s < plan.pipelines[p].stages.size(); ++s) {
        const Stage& st = plan.pipelines[p].stages[s];
        if (std::none_of(f.units.begin(), f.units.end(), [&](int u) { return st.first <= u && u <= st.last; })) continue;
        holders.push_back({int(p), int(s)});
        stages.push_back(&st);
        F = std::lcm(F, st.tp);
        ring += st.dp * st.cp * (f.sharded ? 1 : st.tp);
        for (std::size_t k = 0; k < st.devices.size(); ++k) {
          const int r = topo.rank(int(p), int(s), int(k));
          if (!f.sharded || topo.place(r).shard == 0) group.push_back(r);
        }
      }
    if (ring <= 1) continue;
    std::sort(group.begin(), group.end());
    const auto [at, fresh] = by_group.try_emplace(group);
    SyncBucket& b = at->second;
    const auto [lo, hi] = std::minmax_element(f.units.begin(), f.units.end());
    b.lowest = fresh ? *lo : std::min(b.lowest, *lo), b.highest = fresh ? *hi : std::max(b.highest, *hi);
    b.members = holders, b.order = group, b.ring = ring, b.link = sync_link(plan.cluster, stages, f.sharded ? Rings::per_shard : Rings::one);
    // Per rank: a split family in F chunks (the finest TP of its holders), F / tp of them on
    // each rank, each its own ring; a whole one in one piece.
    int most = 1;
    for (const Stage* st : stages) most = std::max(most, F / st->tp);
    b.collectives = f.sharded ? most : 1;
    b.elements += f.sharded ? f.count / F : f.count;
  }
  std::vector<SyncBucket> out;
  for (auto& [key, b] : by_group) out.push_back(std::move(b));
  std::sort(out.begin(), out.end(), [](const SyncBucket& a, const SyncBucket& b) {
    return std::make_tuple(-a.lowest, a.highest, std::cref(a.order)) < std::make_tuple(-b.lowest, b.highest, std::cref(b.order));
  });
  return out;
}

double stage_sync_s(const ModelSpec& m, double params, double whole, int tp, int replicas, const LinkSpec& link,
                    const LinkSpec& whole_link) {
  const double split = (params - whole) / tp, rest = whole, bytes = dtype_bytes(m.dtype);
  return tp == 1 ? cost::allreduce_s((split + rest) * bytes, replicas, link)
                 : cost::allreduce_s(split * bytes, replicas, link) + cost::allreduce_s(rest * bytes, replicas * tp, whole_link);
}

double tied_sync_s(const ModelSpec& m, double tied, int ring, const LinkSpec& link) {
  return cost::allreduce_s(tied * dtype_bytes(m.dtype), ring, link);
}

double bucket_sync_s(const ModelSpec& m, const SyncBucket& b) {
  return b.collectives * cost::allreduce_s(b.elements * dtype_bytes(m.dtype), b.ring, b.link);
}

double optimizer_s(const cost::ComputeModel& compute, const ModelSpec& m, const DeviceSpec& device, int tp, double params,
                   double whole, double shard) {
  const double per_device = (params - whole) / tp + whole;
  if (auto per_layer = compute.optimizer_step(device.type, tp))  // per parameter: the layer's over its parameters
    return *per_layer / (unit_parameters(m, UnitKind::layer) / tp) * per_device / shard;
  return per_device / shard * kAdamBytesPerParameter / device.mem_bandwidth;
}

cost::StageShape shape_of(const Plan& plan, const Pipeline& p, const Stage& s, int zero_dp, int in_flight) {
  const UnitCounts units = count_units(plan, s);
  cost::StageShape shape;
  shape.parameters = stage_parameters(plan.model, units);
  shape.whole_parameters = units.full_layers * whole_parameters(plan.model, UnitKind::layer) +
                           (units.attn + units.mlp) * whole_parameters(plan.model, UnitKind::attn) +
                           (units.embedding ? whole_parameters(plan.model, UnitKind::embedding) : 0) +
                           (units.head ? whole_parameters(plan.model, UnitKind::head) : 0) +
                           (units.head && !units.embedding ? tied_head_parameters(plan.model) : 0);
  shape.layers = units.layers;
  shape.has_head = units.head;
  shape.has_embedding = units.embedding;
  shape.tp = s.tp;
  shape.cp = s.cp;
  shape.zero_dp = zero_dp;
  shape.sequences = double(p.micro_batch_size) / s.dp;
  shape.in_flight = in_flight;
  shape.recompute = s.recompute;
  return shape;
}

namespace {

// Seconds of one direction of a hop: the messages' phases one after the other.
double seconds(const std::vector<program::Message>& messages, const Stage& a, const Stage& b, const ClusterSpec& cluster,
               double element_bytes, const Options& opt, double sharers) {
  const Stage* stage[2] = {&a, &b};
  const SubclusterSpec* sub[2] = {cluster.find(a.subcluster), cluster.find(b.subcluster)};
  const bool across = a.subcluster != b.subcluster;
  const LinkSpec cross = across ? cost::shared(cluster.link_between(a.subcluster, b.subcluster), sharers) : LinkSpec{};
  LinkSpec nic[2];
  for (int s = 0; s < 2; ++s) nic[s] = cost::shared(sub[s]->inter_node.value_or(sub[s]->intra_node), sharers);
  // Bytes per resource in one phase, by side: out of and into each device (its intra-node link;
  // D2H and H2D when crossing), out of and into each node (its NIC, or its share of the link
  // between subclusters).
  struct Load {
    std::vector<double> dev_out, dev_in, node_out, node_in;
  } load[2];
  for (int s = 0; s < 2; ++s) {
    int nodes = 0;
    for (const auto& d : stage[s]->devices) nodes = std::max(nodes, d.node + 1);
    load[s] = {std::vector<double>(stage[s]->devices.size()), std::vector<double>(stage[s]->devices.size()),
               std::vector<double>(std::size_t(nodes)), std::vector<double>(std::size_t(nodes))};
  }
  auto busiest = [](const std::vector<double>& v) { return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()); };
  double total = 0, latency = 0;
  // Phases of program::reshard either cross between the stages or stay inside one of them, so
  // a phase between subclusters loads devices with D2H/H2D copies only.
  bool crossed = false;  // this phase has messages between the subclusters
  auto finish_phase = [&] {
    double net = 0, d2h = 0, h2d = 0;
    for (int s = 0; s < 2; ++s) {
      Load& l = load[s];
      const double node = std::max(busiest(l.node_out), busiest(l.node_in));
      net = std::max(net, node / (across && crossed ? std::min(cross.bandwidth, nic[s].bandwidth) : nic[s].bandwidth));
      if (across && crossed) {  // a crossing phase: devices copy out (sending side) and in (receiving side)
        (s == 0 ? d2h : h2d) = std::max(s == 0 ? d2h : h2d, busiest(s == 0 ? l.dev_out : l.dev_in) / opt.host_bandwidth);
      } else {
        net = std::max(net, std::max(busiest(l.dev_out), busiest(l.dev_in)) / sub[s]->intra_node.bandwidth);
      }
      for (auto* v : {&l.dev_out, &l.dev_in, &l.node_out, &l.node_in}) std::fill(v->begin(), v->end(), 0.0);
    }
    total += latency + d2h + net + h2d;
    latency = 0, crossed = false;
  };
  int phase = messages.empty() ? 0 : messages.front().phase;
  for (const auto& m : messages) {
    if (m.phase != phase) finish_phase(), phase = m.phase;
    const int fs = m.from.side, ts = m.to.side;
    const DeviceRef& f = stage[fs]->devices[std::size_t(m.from.index)];
    const DeviceRef& t = stage[ts]->devices[std::size_t(m.to.index)];
    const double bytes = double(m.block.elements()) * element_bytes;
    if (sub[fs] != sub[ts]) {
      crossed = true;
      load[fs].node_out[std::size_t(f.node)] += bytes, load[ts].node_in[std::size_t(t.node)] += bytes;
      load[fs].dev_out[std::size_t(m.from.index)] += bytes, load[ts].dev_in[std::size_t(m.to.index)] += bytes;
      latency = std::max(latency, cross.latency);
    } else if (f.node != t.node) {
      load[fs].node_out[std::size_t(f.node)] += bytes, load[ts].node_in[std::size_t(t.node)] += bytes;
      latency = std::max(latency, nic[fs].latency);
    } else {
      load[fs].dev_out[std::size_t(m.from.index)] += bytes, load[ts].dev_in[std::size_t(m.to.index)] += bytes;
      latency = std::max(latency, sub[fs]->intra_node.latency);
    }
  }
  if (!messages.empty()) finish_phase();
  return total;
}

}  // namespace

Hop hop(const Stage& a, const Stage& b, const ModelSpec& model, int micro_batch_size, const ClusterSpec& cluster,
        const Options& opt, double sharers) {
  const program::Dims dims{micro_batch_size, model.seq_length, model.hidden_size};
  const double element_bytes = dtype_bytes(model.dtype);
  const program::Shape sa = program::shape_of(a), sb = program::shape_of(b);
  // `beat`: a strategy whose forward alone takes that long cannot be the fastest: its backward
  // is left uncounted (the search asks for thousands of hops a second on 10,000 devices).
  auto make = [&](Resharding r, double beat = 1e300) {
    Hop h;
    h.strategy = r;
    const auto forward = program::reshard(sa, sb, dims, r);
    h.forward_s = seconds(forward, a, b, cluster, element_bytes, opt, sharers);
    if (h.forward_s >= beat) return h;
    h.backward_s = seconds(program::reshard(sb, sa, dims, r), b, a, cluster, element_bytes, opt, sharers);
    std::vector<double> received(b.devices.size(), 0.0);  // per rank of b: bytes from a
    for (const auto& m : forward)
      if (m.from.side != m.to.side) received[std::size_t(m.to.index)] += double(m.block.elements()) * element_bytes;
    if (!received.empty()) h.most_received = *std::max_element(received.begin(), received.end());
    if (a.subcluster != b.subcluster) h.cross_bytes = std::accumulate(received.begin(), received.end(), 0.0);
    return h;
  };
  if (opt.resharding) return make(*opt.resharding);
  if (a.resharding) return make(*a.resharding);
  Hop best;
  best.forward_s = best.backward_s = 1e300;
  for (Resharding r : kReshardings) {
    Hop h = make(r, best.forward_s + best.backward_s);
    if (h.forward_s + h.backward_s < best.forward_s + best.backward_s) best = h;
  }
  return best;
}

int source_rank(cost::Source s) {
  switch (s) {
    case cost::Source::profile: return 0;
    case cost::Source::interpolated: return 1;
    case cost::Source::extrapolated: return 2;
    case cost::Source::analytic: return 3;
  }
  return 3;
}

UnitTimes unit_times(const ModelSpec& m, const cost::ComputeModel& compute, UnitKind kind, const Placement& pl, int tp,
                     int cp, Recompute recompute, double b) {
  const cost::UnitCost u = compute.unit(kind, pl.sub->device, tp, cp, b);
  UnitTimes t{u.forward_s, u.backward_s, u.source};
  const bool block = kind != UnitKind::embedding && kind != UnitKind::head;
  if (block && recompute == Recompute::full) t.backward_s += u.recompute_full_s;
  if (block && recompute == Recompute::selective) t.backward_s += u.recompute_selective_s;
  if (block) {
    const double share = kind == UnitKind::layer ? 1.0 : 0.5;  // attn and mlp each carry half a layer's
    // TP: 2 all-reduces of the activation per layer forward, 2 backward (Megatron; with
    // sequence parallelism the all-gather/reduce-scatter pairs move the same bytes).
    const double act = b * double(m.seq_length) * m.hidden_size * dtype_bytes(m.dtype) / cp;
    const double tp_s = u.includes_tp_comm ? 0 : share * 2 * cost::allreduce_s(act, tp, group_link(pl, pl.tp_in_node));
    // CP: K/V all-gather per layer forward, reduce-scatter of their gradients backward.
    const double kv = 2 * b * m.seq_length * double(m.hidden_size) * m.num_kv_heads / m.num_attention_heads *
                      dtype_bytes(m.dtype) / tp;
    const double cp_s = u.includes_cp_comm ? 0 : share * cost::allgather_s(kv, cp, group_link(pl, pl.nodes == 1));
    t.forward_s += tp_s + cp_s;
    t.backward_s += tp_s + cp_s;
    t.collectives_s = 2 * (tp_s + cp_s);
  }
  return t;
}

}  // namespace het::predict
